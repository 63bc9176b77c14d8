"""Snapshots, provenance and rerun on the real local two-node Slurm cluster
(scripts/slurm-cluster), through the ``distspec`` CLI as a user runs it.

Each test makes a real git repository under ``tmp_path``, which the nodes see (they
share this machine's file system), and a private state dir (the ``state_dir``
fixture), so the snapshot store and job folders are the test's own. The user edits
the code while the job waits in the queue (``sbatch --hold``, then ``scontrol
release``) or before a requeue (``scontrol requeue``): the job must run the code as it
was submitted. Edits write the files in place (same inode), the harsher case for a
store of hard links.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from distspec.runtime.call import PAYLOAD_WAIT
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)
from tests.snapshot._repo import git, make_repo

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent
#: How long a small job may take on the shared cluster (other sessions' jobs may queue).
JOB_TIMEOUT_S = 240

# The job prints which code it runs and where, reads data relative to where it was
# submitted, and writes its result there too. VERSION is replaced per edit.
TRAIN = """\
import os
import helper
VERSION = "v1"
data = open("data/input.txt").read().strip()
print(f"train {VERSION} helper {helper.V} restart={os.environ.get('SLURM_RESTART_COUNT', '0')} "
      f"data={data} cwd={os.getcwd()} file={__file__}", flush=True)
os.makedirs("out", exist_ok=True)
with open("out/result.txt", "w") as f:
    f.write(f"{VERSION} {helper.V} {data}\\n")
"""


def _train(version: str) -> str:
    return TRAIN.replace('VERSION = "v1"', f'VERSION = "{version}"')


def _helper(version: str) -> str:
    return f'V = "{version}"\n'


@pytest.fixture
def cluster() -> None:
    """The cluster up in either accounting mode, or a skip with the reason."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()


@pytest.fixture
def env(state_dir: Path) -> dict[str, str]:
    """The CLI's environment: a private state dir (snapshot options at their defaults:
    the fixture drops every other DISTSPEC_ variable), torchrun on PATH for the job."""
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A committed git repository: train.py importing helper.py, data/ and out/ ignored,
    and data/input.txt (so not in any snapshot) that the job reads relative to its cwd."""
    root = make_repo(
        tmp_path / "repo",
        {"train.py": _train("v1"), "helper.py": _helper("h1"), ".gitignore": "data/\nout/\n"},
    )
    (root / "data").mkdir()
    (root / "data" / "input.txt").write_text("hello\n")
    return root


def _cli(
    args: list[str], *, env: dict[str, str], cwd: Path, timeout: float = JOB_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{proc.args}: rc={proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc


def _handle(text: str, scheduler: str) -> str:
    match = re.search(rf"{scheduler}://\S+", text)
    assert match, text
    return match.group(0)


def _job_id(handle: str) -> str:
    return handle.rsplit("/", 1)[1]


def _until(check: Callable[[], bool], what: str, timeout: float = JOB_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.3)


def _job(job_id: str) -> dict[str, str]:
    """``scontrol show job``'s fields (finished jobs stay visible for MinJobAge=600 s)."""
    proc = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=False
    )
    return dict(re.findall(r"(\w+)=(\S*)", proc.stdout))


def _scontrol(*args: str) -> None:
    proc = subprocess.run(["scontrol", *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"scontrol {' '.join(args)}: {proc.stderr}"


def _held(job_id: str) -> bool:
    job = _job(job_id)
    return job.get("JobState") == "PENDING" and job.get("Reason") == "JobHeldUser"


def _wait_ended(job_id: str, restarts: int = 0) -> dict[str, str]:
    """Wait until the job's run number ``restarts`` has ended; its fields."""

    def ended() -> bool:
        job = _job(job_id)
        return job.get("JobState") in {
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
        } and job.get("Restarts") == str(restarts)

    _until(ended, f"job {job_id} (run {restarts}) to end: {_job(job_id)}")
    return _job(job_id)


def _log(handle: str, env: dict[str, str], cwd: Path) -> str:
    return _ok(_cli(["log", "--raw", handle], env=env, cwd=cwd, timeout=60)).stdout


def _squeue_names(name: str) -> str:
    proc = subprocess.run(
        ["squeue", "-h", "-t", "all", "-n", name, "-o", "%i %j %T"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _name(what: str) -> str:
    """A job name no other test or session uses, to look for in squeue."""
    return f"{what}-{uuid.uuid4().hex[:10]}"


def _provenance(handle: str, env: dict[str, str], cwd: Path) -> Any:
    """The provenance record `distspec describe --json` shows for ``handle``."""
    data = json.loads(_ok(_cli(["describe", "--json", handle], env=env, cwd=cwd)).stdout)
    assert isinstance(data.get("provenance"), dict), data
    return data["provenance"]


# ------------------------------------------------------------------ edits in the queue


def test_held_then_requeued_job_runs_the_code_it_was_submitted_with(
    cluster: None, env: dict[str, str], repo: Path, state_dir: Path
) -> None:
    """Edit train.py and the module it imports while the job is held: it prints the old
    version of both, reads data/ (gitignored) and writes out/ relative to where it was
    submitted. Edit again and requeue it (`scontrol requeue`): the second run still runs
    the submitted code. requeue=true is what a user asks for so Slurm may requeue the
    job (this cluster's JobRequeue=1 would allow it without)."""
    name = _name("held")
    proc = _ok(
        _cli(
            [
                *("run", "-s", "slurm", "-cfg", "sbatch_args=--hold", "-cfg", "requeue=true"),
                # utils.python: one process, no rendezvous port for the requeued run (same job
                # id) to find still held by the first run under CI load
                *("utils.python", "--name", name, "--script", "train.py"),
            ],
            env=env,
            cwd=repo,
        )
    )
    handle = _handle(proc.stdout, "slurm")
    job_id = _job_id(handle)
    try:
        assert _held(job_id), _job(job_id)
        (repo / "train.py").write_text(_train("v2"))
        (repo / "helper.py").write_text(_helper("h2"))
        _scontrol("release", job_id)
        job = _wait_ended(job_id)
        assert job["JobState"] == "COMPLETED", (job, _log(handle, env, repo))
        log = _log(handle, env, repo)
        first = re.findall(r"^train .*restart=0.*$", log, re.M)
        assert len(first) == 1, log
        assert first[0].startswith(f"train v1 helper h1 restart=0 data=hello cwd={repo} "), log
        tree = first[0].rpartition("file=")[2]
        assert tree.startswith(f"{state_dir}/snapshots/trees/"), first[0]
        assert (repo / "out" / "result.txt").read_text() == "v1 h1 hello\n"
        # data/ is gitignored: the job read the submit directory's copy, not the tree's.
        assert not (Path(tree).parent / "data").exists()

        (repo / "train.py").write_text(_train("v3"))
        (repo / "helper.py").write_text(_helper("h3"))
        (repo / "out" / "result.txt").unlink()
        _scontrol("requeue", job_id)
        # Slurm delays a requeued job's start (BeginTime); start it sooner. Not in the
        # same second as the first run ended: slurmd revoked that run's credential, and a
        # new one of the same second counts as revoked too ("Killing non-startable batch
        # job: Job credential revoked", the job FAILED without running).
        time.sleep(2)
        _scontrol("update", f"JobId={job_id}", "StartTime=now")
        job = _wait_ended(job_id, restarts=1)
        log = _log(handle, env, repo)
        assert job["JobState"] == "COMPLETED", (job, log)
        second = re.findall(r"^train .*restart=1.*$", log, re.M)
        assert second == [first[0].replace("restart=0", "restart=1")], log
        assert (repo / "out" / "result.txt").read_text() == "v1 h1 hello\n"
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, check=False)


def test_module_job_runs_the_snapshots_module_not_the_working_dirs(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    """`dist.ddp -m pkg.train` from the repository's top: the live working directory
    holds the edited package by the time the job starts, but PYTHONSAFEPATH keeps it
    off sys.path and the job imports the snapshot's (Python 3.11+)."""
    repo = make_repo(
        tmp_path / "repo",
        {
            "pkg/__init__.py": "",
            "pkg/train.py": (
                "import os\nfrom pkg import util\n"
                "print(f'module m1 util {util.V} cwd={os.getcwd()} file={__file__} "
                "util_file={util.__file__}', flush=True)\n"
            ),
            "pkg/util.py": 'V = "u1"\n',
        },
    )
    name = _name("mod")
    proc = _ok(
        _cli(
            [
                *("run", "-s", "slurm", "-cfg", "sbatch_args=--hold"),
                *("dist.ddp", "-j", "1x1", "--name", name, "-m", "pkg.train"),
            ],
            env=env,
            cwd=repo,
        )
    )
    handle = _handle(proc.stdout, "slurm")
    job_id = _job_id(handle)
    try:
        assert _held(job_id), _job(job_id)
        (repo / "pkg" / "train.py").write_text("print('module m2 from the working dir')\n")
        (repo / "pkg" / "util.py").write_text('V = "u2"\n')
        _scontrol("release", job_id)
        job = _wait_ended(job_id)
        log = _log(handle, env, repo)
        assert job["JobState"] == "COMPLETED", (job, log)
        lines = re.findall(r"^module .*$", log, re.M)
        assert len(lines) == 1 and lines[0].startswith(f"module m1 util u1 cwd={repo} "), log
        files = dict(re.findall(r"(\w+)=(\S+)", lines[0]))
        snapshot = _provenance(handle, env, repo)["snapshot"]
        tree = snapshot["path"]
        assert files["file"] == f"{tree}/pkg/train.py", lines[0]
        assert files["util_file"] == f"{tree}/pkg/util.py", lines[0]
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, check=False)


LAUNCH = """\
import sys

import distspec


def work():
    import os

    import chelper

    return chelper.V, chelper.__file__, os.environ.get("DISTSPEC_SNAPSHOT"), os.getcwd()


if __name__ == "__main__":
    job = distspec.submit(
        work, j="1x1", scheduler="slurm", cfg={"sbatch_args": "--hold"}, options={"name": sys.argv[1]}
    )
    print(job.handle, flush=True)
    sys.stdin.readline()  # the test edits chelper.py and releases the job
    print(repr(job.results(timeout=float(sys.argv[2]))), flush=True)
"""


def test_callable_imports_the_users_module_from_the_snapshot(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    """`distspec.submit(fn, scheduler="slurm")` from a user's script whose fn imports
    the user's own module in its body: the job imports the snapshot's copy, even when
    the module is edited while the job is held."""
    repo = make_repo(tmp_path / "repo", {"launch.py": LAUNCH, "chelper.py": 'V = "c1"\n'})
    name = _name("call")
    proc = subprocess.Popen(
        [sys.executable, "launch.py", name, str(JOB_TIMEOUT_S)],
        cwd=repo,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    job_id = None
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = proc.stdout.readline()
        handle = _handle(first, "slurm") if "slurm://" in first else None
        assert handle, first + proc.communicate(timeout=60)[1]
        job_id = _job_id(handle)
        assert _held(job_id), _job(job_id)
        (repo / "chelper.py").write_text('V = "c2"\n')
        _scontrol("release", job_id)
        out, err = proc.communicate("go\n", timeout=JOB_TIMEOUT_S + 30)
        assert proc.returncode == 0, out + err
        (version, file, snapshot, cwd) = ast.literal_eval(out.strip().splitlines()[-1])[0]
        assert snapshot and snapshot.startswith(f"{env['DISTSPEC_STATE_DIR']}/snapshots/trees/")
        assert (version, file, cwd) == ("c1", f"{snapshot}/chelper.py", str(repo)), out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if job_id:
            subprocess.run(["scancel", job_id], capture_output=True, check=False)


# ------------------------------------------------------------------ provenance and rerun


def test_rerun_local_and_on_slurm_runs_the_first_runs_code_after_edits(
    cluster: None, env: dict[str, str], repo: Path, tmp_path: Path
) -> None:
    """A local run with -cfg snapshot=on, of a dirty tree; then the tree changes (edits,
    a new commit). `distspec rerun` on local_cwd and on Slurm (in its store, and with a
    job_dir of its own), from another directory, print and write exactly what the first
    run did; describe names the run they repeat and its commit, dirty flag and snapshot."""
    (repo / "helper.py").write_text(_helper("h1-dirty"))  # not committed
    commit = git(repo, "rev-parse", "HEAD").strip()
    first = _ok(
        _cli(
            ["run", "-cfg", "snapshot=on", "--wait", "utils.python", "--script", "train.py"],
            env=env,
            cwd=repo,
        )
    )
    assert re.search(r"1 file \(helper\.py\) differs from HEAD", first.stderr), first.stderr
    handle = _handle(first.stdout, "local_cwd")
    expected = f"train v1 helper h1-dirty restart=0 data=hello cwd={repo} "
    assert expected in first.stdout, first.stdout
    assert (repo / "out" / "result.txt").read_text() == "v1 h1-dirty hello\n"

    record = _provenance(handle, env, repo)
    snap, state = record["snapshot"], record["git"]
    assert (state["commit"], state["dirty"], state["changed"]) == (commit, True, ["helper.py"])
    tree = Path(snap["path"])
    assert tree.name == snap["id"] and (tree / "helper.py").read_text() == _helper("h1-dirty")
    assert sorted(p.name for p in tree.iterdir()) == [".gitignore", "helper.py", "train.py"]

    # The working tree moves on: new code, committed, and the old output is gone.
    (repo / "train.py").write_text(_train("v2"))
    (repo / "helper.py").write_text(_helper("h2"))
    git(repo, "commit", "-q", "-am", "v2")
    shutil.rmtree(repo / "out")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    # On Slurm with its own job_dir the tree is copied into that folder's store.
    jobs = tmp_path / "jobs"
    for args, scheduler, store in (
        ([], "local_cwd", snap["store"]),
        (["-s", "slurm"], "slurm", snap["store"]),
        (["-s", "slurm", "-cfg", f"job_dir={jobs}"], "slurm", f"{jobs}/snapshots"),
    ):
        again = _ok(_cli(["rerun", handle, *args, "--wait"], env=env, cwd=elsewhere))
        assert expected in again.stdout, (scheduler, again.stdout, again.stderr)
        assert (repo / "out" / "result.txt").read_text() == "v1 h1-dirty hello\n", scheduler
        (repo / "out" / "result.txt").unlink()
        rerun = _handle(again.stdout, scheduler)
        shown = _ok(_cli(["describe", rerun], env=env, cwd=elsewhere)).stdout
        assert re.search(rf"^  rerun of:  {re.escape(handle)}$", shown, re.M), shown
        again_record = _provenance(rerun, env, elsewhere)
        assert again_record["rerun_of"] == handle
        assert again_record["snapshot"]["id"] == snap["id"], again_record["snapshot"]
        ran = again_record["snapshot"]["job_path"]
        assert ran == f"{store}/trees/{snap['id']}", (args, again_record["snapshot"])
        assert f"file={ran}/train.py" in again.stdout, again.stdout
        # The code it ran is the first run's: its commit and dirty state, not HEAD's.
        assert again_record["git"]["commit"] == commit, again_record["git"]
        assert again_record["git"]["dirty"] is True, again_record["git"]


def test_rerun_of_a_callables_run_ends(cluster: None, env: dict[str, str], repo: Path) -> None:
    """A run of `distspec.submit(fn)` took a snapshot, so `distspec rerun` accepts it;
    the rerun must then either run the function again (its run folder gets a result) or
    refuse (exit 2, one line), not start workers that wait for a call.pkl nothing
    writes (they give up after PAYLOAD_WAIT). local_cwd: the same as on Slurm."""
    program = (
        "import distspec\n"
        "def work():\n"
        "    import helper\n"
        "    return helper.V\n"
        "job = distspec.submit(work, j='1x1', cfg={'snapshot': 'on'})\n"
        "print(job.handle, job.results(timeout=120), flush=True)\n"
    )
    (repo / "launch.py").write_text(program)
    git(repo, "add", "launch.py")
    git(repo, "commit", "-q", "-m", "launch")
    first = subprocess.run(
        [sys.executable, "launch.py"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    assert first.returncode == 0 and "['h1']" in first.stdout, first.stdout + first.stderr
    handle = _handle(first.stdout, "local_cwd")
    proc = _cli(["rerun", handle], env=env, cwd=repo)
    if proc.returncode == 2:
        line = _one_error_line(proc, "rerun")
        assert handle in line, line
        return
    rerun = _handle(_ok(proc).stdout, "local_cwd")
    try:

        def status() -> Any:
            return json.loads(_ok(_cli(["status", "--json", rerun], env=env, cwd=repo)).stdout)

        # The submitter writes call.pkl right after submit: once `rerun` has returned,
        # nothing else will.
        folder = Path(status()["location"])
        assert (folder / "call.pkl").exists(), (
            f"`distspec rerun {handle}` started {rerun} without the function: no call.pkl "
            f"in {folder} (its workers wait {PAYLOAD_WAIT:.0f} s for it, then fail)"
        )
        _until(lambda: status()["state"] in {"SUCCEEDED", "FAILED", "CANCELLED"}, "the rerun")
        assert status()["state"] == "SUCCEEDED", status()
        assert (folder / "result-0.pkl").exists(), sorted(p.name for p in folder.iterdir())
    finally:
        _cli(["cancel", rerun], env=env, cwd=repo, timeout=60)


# ------------------------------------------------------------------ bad input


def _one_error_line(proc: subprocess.CompletedProcess[str], verb: str) -> str:
    assert proc.returncode == 2, f"rc={proc.returncode}\n{proc.stdout}{proc.stderr}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"distspec {verb}: error: "), proc.stderr
    return lines[0]


def _nothing_submitted(state_dir: Path, name: str) -> None:
    assert _squeue_names(name) == ""
    slurm = state_dir / "slurm"
    assert not slurm.exists() or not list(slurm.iterdir()), list(slurm.iterdir())


def test_run_over_the_size_cap_is_refused_naming_the_big_file(
    cluster: None, env: dict[str, str], repo: Path, state_dir: Path
) -> None:
    (repo / "weights.bin").write_bytes(b"\0" * (2 << 20))  # untracked, not ignored: taken
    name = _name("big")
    proc = _cli(
        [
            *("run", "-s", "slurm", "-cfg", "snapshot_max_mb=1"),
            *("dist.ddp", "-j", "1x1", "--name", name, "--script", "train.py"),
        ],
        env=env,
        cwd=repo,
    )
    line = _one_error_line(proc, "run")
    assert "weights.bin (2.1 MB)" in line and "snapshot_exclude" in line, line
    _nothing_submitted(state_dir, name)
    assert not (state_dir / "snapshots" / "trees").exists() or not list(
        (state_dir / "snapshots" / "trees").iterdir()
    )


def test_run_of_a_dirty_tree_with_snapshot_dirty_refuse_is_refused(
    cluster: None, env: dict[str, str], repo: Path, state_dir: Path
) -> None:
    (repo / "helper.py").write_text(_helper("h1-dirty"))
    name = _name("dirty")
    proc = _cli(
        [
            *("run", "-s", "slurm", "-cfg", "snapshot_dirty=refuse"),
            *("dist.ddp", "-j", "1x1", "--name", name, "--script", "train.py"),
        ],
        env=env,
        cwd=repo,
    )
    line = _one_error_line(proc, "run")
    assert "helper.py" in line and "snapshot_dirty" in line, line
    _nothing_submitted(state_dir, name)
    trees = state_dir / "snapshots" / "trees"
    assert not trees.exists() or not list(trees.iterdir()), list(trees.iterdir())


def test_rerun_of_an_unknown_handle_is_refused(
    cluster: None, env: dict[str, str], repo: Path, state_dir: Path
) -> None:
    for handle in ("slurm://distspec/999999999", "local_cwd://distspec/train-00000000"):
        line = _one_error_line(_cli(["rerun", handle], env=env, cwd=repo), "rerun")
        assert handle in line, line
    assert not (state_dir / "slurm").exists() or not list((state_dir / "slurm").iterdir())
    assert not (state_dir / "local_cwd").exists() or not list((state_dir / "local_cwd").iterdir())


def _local_run(env: dict[str, str], repo: Path, name: str, *cfg: str) -> str:
    proc = _ok(
        _cli(
            ["run", *cfg, "--wait", "utils.python", "--name", name, "--script", "train.py"],
            env=env,
            cwd=repo,
        )
    )
    return _handle(proc.stdout, "local_cwd")


def test_rerun_of_a_run_without_a_snapshot_is_refused(
    cluster: None, env: dict[str, str], repo: Path, state_dir: Path
) -> None:
    name = _name("nosnap")
    handle = _local_run(env, repo, name)  # local_cwd takes none by default
    line = _one_error_line(_cli(["rerun", handle, "-s", "slurm"], env=env, cwd=repo), "rerun")
    assert handle in line and "without a snapshot" in line, line
    _nothing_submitted(state_dir, name)
    assert len(list((state_dir / "local_cwd").iterdir())) == 1


def test_rerun_of_a_pruned_snapshot_is_refused(
    cluster: None, env: dict[str, str], repo: Path, state_dir: Path
) -> None:
    name = _name("pruned")
    handle = _local_run(env, repo, name, "-cfg", "snapshot=on")
    record = _provenance(handle, env, repo)
    tree = Path(record["snapshot"]["path"])
    assert tree.is_dir(), tree
    shutil.rmtree(tree)  # as `distspec prune` would once the runs using it are gone
    for args in ([], ["-s", "slurm"]):
        line = _one_error_line(_cli(["rerun", handle, *args], env=env, cwd=repo), "rerun")
        assert handle in line and "pruned" in line, line
    _nothing_submitted(state_dir, name)
    assert len(list((state_dir / "local_cwd").iterdir())) == 1
