"""distspec.snapshot.policy through the Runner: when a run takes a snapshot, how the job
is rewritten to run it, and what submit records (real git repositories; local runs)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from distspec.components.dist import ddp
from distspec.errors import SnapshotError
from distspec.runner import Runner
from distspec.snapshot.policy import SNAPSHOT_ENV
from distspec.specs.app import SCRIPT_METADATA

from ._repo import git, make_repo, write

TRAIN = 'import helper\nprint("VERSION", helper.V)\n'


@pytest.fixture
def repo(tmp_path: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A committed repository holding a script, a module it imports and a config,
    with an ignored data folder; the working directory."""
    root = make_repo(
        tmp_path / "repo",
        {
            ".gitignore": "data/\nout/\n",
            "train.py": TRAIN,
            "helper.py": "V = 1\n",
            "conf/a.yaml": "lr: 0.1\n",
            "pkg/__init__.py": "",
            "pkg/main.py": "print('module')\n",
        },
    )
    write(root, {"data/input.txt": "data\n"})
    monkeypatch.chdir(root)
    return root


def _role(request):  # type: ignore[no-untyped-def]
    return request.app.roles[0]


def test_slurm_dry_run_runs_the_snapshot_and_copies_nothing(repo: Path, state_dir: Path) -> None:
    runner = Runner()
    app = ddp("--config=conf/a.yaml", "--data", "data/input.txt", "--out", "out", script="train.py")
    request = runner.dryrun(app, "slurm")
    snap = request.snapshot
    assert snap is not None and snap.base == str(repo) and snap.git
    role = _role(request)
    tree = snap.tree
    assert tree.startswith(str(state_dir / "snapshots" / "trees"))
    # The script and the config come from the snapshot; the ignored data file and the
    # output folder keep their relative paths (the working directory stays put).
    assert f"{tree}/train.py" in role.args
    assert f"--config={tree}/conf/a.yaml" in role.args
    assert "data/input.txt" in role.args and "out" in role.args
    assert role.env[SNAPSHOT_ENV] == tree
    assert role.metadata[SCRIPT_METADATA] == f"{tree}/train.py"
    assert f"{tree}/train.py" in request.render()
    assert not os.path.exists(tree)  # a dry run plans; it copies nothing
    assert not (state_dir / "snapshots").exists()  # nor writes anything (no stat cache)
    # The AppDef as the component built it is kept for the provenance record.
    assert "train.py" in request.origin.app.roles[0].args


def test_local_takes_no_snapshot_unless_asked(repo: Path) -> None:
    runner = Runner()
    app = ddp(script="train.py")
    assert runner.dryrun(app, "local_cwd").snapshot is None
    assert runner.dryrun(app, "slurm", {"snapshot": "off"}).snapshot is None
    assert runner.dryrun(app, "local_cwd", {"snapshot": "on"}).snapshot is not None


def test_a_module_role_gets_the_snapshot_first_on_its_path(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", ".")
    request = Runner().dryrun(ddp(m="pkg.main"), "slurm")
    tree = request.snapshot.tree
    env = _role(request).env
    assert env["PYTHONSAFEPATH"] == "1"  # the live working directory must not shadow it
    assert env["PYTHONPATH"].split(os.pathsep)[0] == tree


def test_a_script_role_keeps_python_s_own_path_rules(repo: Path) -> None:
    env = _role(Runner().dryrun(ddp(script="train.py"), "slurm")).env
    assert "PYTHONSAFEPATH" not in env


def _run_local(runner: Runner, app, cfg):  # type: ignore[no-untyped-def]
    handle = runner.run(app, "local_cwd", cfg)
    status = runner.wait(handle, timeout=120)
    lines = [ln.text for ln in runner.log_lines(handle)]
    return handle, status, lines


def test_a_file_edited_between_dry_run_and_submit_is_refused(repo: Path, state_dir: Path) -> None:
    runner = Runner()
    request = runner.dryrun(ddp(script="train.py", j="1x1"), "local_cwd", {"snapshot": "on"})
    (repo / "helper.py").write_text("V = 2\n")  # edited after the dry run, before submit
    # The request names the tree planned with V = 1: submit never runs a mix of the two.
    with pytest.raises(SnapshotError, match="helper.py changed while it was snapshotted"):
        runner.submit(request)
    assert not os.path.exists(request.snapshot.tree)
    assert not (state_dir / "local_cwd").exists() or not os.listdir(state_dir / "local_cwd")


def test_the_job_runs_the_code_submitted_even_when_edited_at_once(repo: Path) -> None:
    runner = Runner()
    handle = runner.run(ddp(script="train.py", j="1x1"), "local_cwd", {"snapshot": "on"})
    (repo / "helper.py").write_text("V = 3\n")
    (repo / "train.py").write_text('print("VERSION edited")\n')
    runner.wait(handle, timeout=120)
    out = [ln.text for ln in runner.log_lines(handle) if "VERSION" in ln.text]
    assert out == ["VERSION 1"]


def test_provenance_record(repo: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "helper.py").write_text("V = 5\n")  # dirty
    monkeypatch.setattr(sys, "argv", ["distspec", "run", "--env", "HF_TOKEN=hunter2"])
    runner = Runner()
    app = ddp(script="train.py", j="1x1", env={"HF_TOKEN": "hunter2", "MODE": "fast"})
    handle, status, lines = _run_local(runner, app, {"snapshot": "on", "snapshot_dirty": "allow"})
    assert "VERSION 5" in lines
    record = runner.provenance(handle)
    assert record is not None
    head = git(repo, "rev-parse", "HEAD").strip()
    assert record["git"]["commit"] == head and record["git"]["branch"] == "main"
    assert record["git"]["dirty"] is True and record["git"]["changed"] == ["helper.py"]
    folder = Path(status.location)
    patch = (folder / "snapshot.patch").read_text()
    assert "+V = 5" in patch and "-V = 1" in patch
    snap = record["snapshot"]
    assert snap["base"] == str(repo) and snap["files"] == 6 and snap["git"] is True
    assert os.path.isdir(snap["path"])
    assert record["options"]["snapshot"] == {"value": "on", "source": "-cfg"}
    assert record["options"]["grace_period"]["source"] == "default"
    assert record["versions"]["python"] and "torch" in record["versions"]
    assert record["cwd"] == str(repo) and record["user"] and record["host"]
    # Secrets never appear: not in the AppDef's env, not in the command line.
    text = (folder / "provenance.json").read_text()
    assert "hunter2" not in text
    assert record["app"]["roles"][0]["env"]["MODE"] == "fast"
    assert record["argv"][-1] == "HF_TOKEN=***"


def test_a_run_without_a_snapshot_still_records_its_commit(repo: Path) -> None:
    runner = Runner()
    handle, _, _ = _run_local(runner, ddp(script="train.py", j="1x1"), {})
    record = runner.provenance(handle)
    assert record is not None and record["snapshot"] is None
    assert record["git"]["commit"] == git(repo, "rev-parse", "HEAD").strip()


def test_dirty_refuse_submits_nothing(repo: Path, state_dir: Path) -> None:
    (repo / "helper.py").write_text("V = 9\n")
    runner = Runner()
    request = runner.dryrun(
        ddp(script="train.py"), "local_cwd", {"snapshot": "on", "snapshot_dirty": "refuse"}
    )
    with pytest.raises(SnapshotError, match=r"1 file \(helper.py\) differs from HEAD"):
        runner.submit(request)
    assert not (state_dir / "local_cwd").exists() or not os.listdir(state_dir / "local_cwd")
    assert not os.path.exists(request.snapshot.tree)


def test_dirty_warn_says_one_line(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "helper.py").write_text("V = 9\n")
    (repo / "conf/a.yaml").write_text("lr: 1\n")
    runner = Runner()
    handle = runner.run(ddp(script="train.py", j="1x1"), "local_cwd", {"snapshot": "on"})
    runner.wait(handle, timeout=120)
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1 and "2 files (conf/a.yaml, helper.py) differ from HEAD" in err[0]


def test_describe_shows_the_provenance(repo: Path, state_dir: Path) -> None:
    import subprocess

    runner = Runner()
    handle, _, _ = _run_local(runner, ddp(script="train.py", j="1x1"), {"snapshot": "on"})
    env = {**os.environ, "DISTSPEC_STATE_DIR": str(state_dir)}
    cli = [sys.executable, "-m", "distspec"]
    text = subprocess.run(
        [*cli, "describe", str(handle)], capture_output=True, text=True, env=env, check=True
    ).stdout
    head = git(repo, "rev-parse", "HEAD").strip()
    assert f"git:       {head} on main" in text
    assert "dirty:     no" in text and "snapshot:  " in text
    data = json.loads(
        subprocess.run(
            [*cli, "describe", "--json", str(handle)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
    )
    assert data["provenance"]["git"]["commit"] == head


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_size_cap_below_one_mb_is_refused(repo: Path, value: str) -> None:
    from distspec.errors import UsageError

    with pytest.raises(UsageError, match=f"snapshot_max_mb={value}: give the largest"):
        Runner().dryrun(ddp(script="train.py"), "slurm", {"snapshot_max_mb": value})


def test_a_script_the_snapshot_leaves_out_is_refused(repo: Path) -> None:
    write(repo, {"scratch/try.py": "print(1)\n"})
    (repo / ".gitignore").write_text("data/\nout/\nscratch/\n")
    with pytest.raises(SnapshotError, match=r"its script scratch/try.py is not in the snapshot"):
        Runner().dryrun(ddp(script="scratch/try.py"), "slurm")
    with pytest.raises(SnapshotError, match="snapshot_exclude leaves it out"):
        Runner().dryrun(ddp(script="train.py"), "slurm", {"snapshot_exclude": "train.py"})


def test_distspec_s_own_folders_inside_the_repository_are_never_taken(
    repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A state directory or job_dir kept inside the repository (untracked, not ignored)
    would otherwise be copied into every snapshot, and change it with every run."""
    monkeypatch.setenv("DISTSPEC_STATE_DIR", str(repo / ".state"))
    runner = Runner()
    app = ddp(script="train.py", j="1x1")
    first = runner.dryrun(app, "local_cwd", {"snapshot": "on"}).snapshot
    handle = runner.run(app, "local_cwd", {"snapshot": "on"})
    runner.wait(handle, timeout=120)
    again = runner.dryrun(app, "local_cwd", {"snapshot": "on"}).snapshot
    assert again.tree_id == first.tree_id
    assert not any(p.startswith(".state") for p in again.paths)
    jobs = runner.dryrun(app, "slurm", {"job_dir": str(repo / "jobs [x]")}).snapshot
    (repo / "jobs [x]" / "snapshots").mkdir(parents=True)
    (repo / "jobs [x]" / "leftover.log").write_text("old job\n")
    assert runner.dryrun(app, "slurm", {"job_dir": str(repo / "jobs [x]")}).snapshot.tree_id == (
        jobs.tree_id
    )


@pytest.mark.parametrize(
    ("cfg", "refusal"),
    [
        ({"spares": "1", "workers": "direct"}, "workers=direct has no attempt loop"),
        ({"watchdog": "1m", "container": "podman"}, "watchdog: not available inside containers"),
        ({"checkpoint_dir": "ckpt"}, "checkpoint_dir='ckpt'"),
    ],
)
def test_a_job_the_backend_refuses_is_refused_before_the_snapshot_walk(
    repo: Path, cfg: dict[str, str], refusal: str
) -> None:
    """A code folder over the snapshot's cap would otherwise hide the job's own fault
    behind the cap's error (seen with --image /tmp on a machine with a full /tmp)."""
    write(repo, {"big.bin": "x" * (2 << 20)})
    with pytest.raises(SnapshotError, match="cap of"):
        Runner().dryrun(ddp(script="train.py"), "slurm", {"snapshot_max_mb": "1"})
    with pytest.raises(Exception, match=refusal) as caught:
        Runner().dryrun(ddp(script="train.py"), "slurm", {"snapshot_max_mb": "1", **cfg})
    assert not isinstance(caught.value, SnapshotError)
