"""Run option ``env_to_local`` (issue #28): the script lines, the compile-time checks and
:mod:`distspec.runtime.envcopy` on a small venv made in ``tmp_path``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from distspec.errors import CompileError
from distspec.runtime import envcopy
from distspec.schedulers.pbs import PbsScheduler
from distspec.schedulers.slurm import SlurmScheduler
from distspec.timeline import _env_events
from tests.schedulers.batch_apps import app as _app
from tests.schedulers.batch_apps import bash_n, compile_text, trainer_role

REPO = Path(__file__).resolve().parents[2]


def _venv(root: Path) -> Path:
    """A real venv (no pip) with a console script, a .pth naming the prefix, an
    absolute link into it and a package."""
    prefix = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True)
    site = next(prefix.glob("lib/python*/site-packages"))
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    (site / "extra.pth").write_text(f"{prefix}/extra\n")
    (prefix / "extra").mkdir()
    (prefix / "extra" / "extra_mod.py").write_text("X = 1\n")
    tool = prefix / "bin" / "tool"
    tool.write_text(f"#!{prefix}/bin/python\nimport sys, pkg\nprint(sys.prefix, pkg.VALUE)\n")
    tool.chmod(0o755)
    os.symlink(f"{prefix}/extra", prefix / "extra-link")
    return prefix


def _slurm(tmp_path: Path, **opts: str) -> str:
    return compile_text(SlurmScheduler, _app(trainer_role(2, 2)), **opts)


def test_golden_slurm(tmp_path: Path, golden: Callable[[str, str], None]) -> None:
    prefix = _venv(tmp_path)
    text = _slurm(tmp_path, env_to_local="/local/scratch", env_prefix=str(prefix))
    bash_n(text)
    golden("slurm/env_to_local.sbatch", text.replace(str(tmp_path), "/TMP"))


def test_golden_slurm_direct(tmp_path: Path, golden: Callable[[str, str], None]) -> None:
    """workers=direct: the ranks' python is the copy's (PATH), as with torchrun."""
    prefix = _venv(tmp_path)
    text = _slurm(tmp_path, env_to_local="/tmp", env_prefix=str(prefix), workers="direct")
    bash_n(text)
    lines = text.splitlines()
    unpack = next(i for i, line in enumerate(lines) if "envcopy unpack" in line)
    assert unpack < next(i for i, line in enumerate(lines) if line.startswith("srun --ntasks"))
    golden("slurm/env_to_local_direct.sbatch", text.replace(str(tmp_path), "/TMP"))


#: PBS (no real server here: golden-tested only): pbsdsh, mpiexec with retries, direct
#: launch, one node.
_PBS_CASES = {
    "env_to_local": (2, {}),
    "env_to_local_mpiexec_retries": (2, {"launcher": "mpiexec"}),
    "env_to_local_direct": (2, {"workers": "direct"}),
    "env_to_local_1node": (1, {}),
}


@pytest.mark.parametrize("case", sorted(_PBS_CASES))
def test_golden_pbs(case: str, tmp_path: Path, golden: Callable[[str, str], None]) -> None:
    prefix = _venv(tmp_path)
    nodes, opts = _PBS_CASES[case]
    role = trainer_role(nodes, 2)
    if "retries" in case:
        role = dataclasses.replace(role, max_retries=1)
    text = compile_text(
        PbsScheduler, _app(role), env_to_local="/local/scratch", env_prefix=str(prefix), **opts
    )
    bash_n(text)
    lines = text.splitlines()
    unpack = next(i for i, line in enumerate(lines) if "envcopy unpack" in line)
    assert "distspec_env_clean" in next(line for line in lines if line.endswith("' EXIT"))
    if nodes > 1:
        # The tasks run from the copy: task.sh puts its bin/ first on PATH.
        assert unpack < next(i for i, line in enumerate(lines) if "DISTSPEC_ENV_LOCAL/bin" in line)
    golden(f"pbs/{case}.pbs", text.replace(str(tmp_path), "/TMP"))


def test_pbs_without_the_option_nothing_changes() -> None:
    assert "env" + "copy" not in compile_text(PbsScheduler, _app(trainer_role(2, 2)))


def test_retries_script_has_the_lines(tmp_path: Path) -> None:
    prefix = _venv(tmp_path)
    app = dataclasses.replace(
        _app(trainer_role(2, 2)), roles=(dataclasses.replace(trainer_role(2, 2), max_retries=2),)
    )
    text = compile_text(SlurmScheduler, app, env_to_local="/tmp", env_prefix=str(prefix))
    bash_n(text)
    lines = text.splitlines()
    unpack = next(i for i, line in enumerate(lines) if "envcopy unpack" in line)
    first_step = next(
        i for i, line in enumerate(lines) if "srun --ntasks-per-node=1 --cpus" in line
    )
    assert unpack < first_step


def test_without_the_option_nothing_changes(tmp_path: Path) -> None:
    assert "envcopy" not in _slurm(tmp_path)


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"env_to_local": "tmp"}, "expected an absolute node-local directory"),
        ({"env_to_local": "/tmp/a b"}, "expected an absolute node-local directory"),
        ({"env_to_local": "/tmp", "env_prefix": "/"}, "is not a virtual environment"),
        ({"env_prefix": "/opt/venv"}, "env_prefix is set without env_to_local"),
    ],
)
def test_bad_options(opts: dict[str, str], message: str) -> None:
    with pytest.raises(CompileError, match=message):
        _slurm(Path("/"), **opts)


def test_conda_is_refused(tmp_path: Path) -> None:
    (tmp_path / "conda-meta").mkdir()
    with pytest.raises(CompileError, match="conda environment"):
        _slurm(tmp_path, env_to_local="/tmp", env_prefix=str(tmp_path))


def test_cli_refuses_the_system_python(tmp_path: Path, state_dir: Path) -> None:
    """A dry run with env_prefix at a Python that is no venv: one line, exit 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "distspec", "run", "--dryrun", "-s", "slurm", "-cfg",
         f"env_to_local=/tmp,env_prefix={sys.base_prefix},job_dir={tmp_path}/jobs",
         "dist.ddp", "-j", "2x2", "--script", "train.py"],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "not a virtual environment" in proc.stderr
    assert not (tmp_path / "jobs").exists()


def test_fingerprint_ignores_byte_code_and_sees_changes(tmp_path: Path) -> None:
    prefix = _venv(tmp_path)
    first = envcopy.fingerprint(prefix)
    assert first == envcopy.fingerprint(prefix)
    (prefix / "extra" / "__pycache__").mkdir()
    (prefix / "extra" / "__pycache__" / "extra_mod.cpython-311.pyc").write_bytes(b"x" * 1000)
    with_cache = envcopy.fingerprint(prefix)
    assert with_cache.hash == first.hash
    # Packed too, so the free-space check counts them (issue #28: it undercounted).
    assert (with_cache.bytes, with_cache.files) == (first.bytes + 1000, first.files + 1)
    (prefix / "extra" / "extra_mod.py").write_text("X = 22\n")
    assert envcopy.fingerprint(prefix).hash != first.hash


def test_pack_caches_and_reuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _venv(tmp_path)
    found = envcopy.fingerprint(prefix)
    tar = envcopy.pack(prefix, tmp_path / "cache", found.hash)
    assert tar == tmp_path / "cache" / f"{found.hash}.tar"
    assert "packed environment" in capsys.readouterr().err
    mtime = tar.stat().st_mtime_ns
    assert envcopy.pack(prefix, tmp_path / "cache", found.hash) == tar
    assert "reused cached environment" in capsys.readouterr().err
    assert tar.stat().st_mtime_ns == mtime
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [tar.name]  # no temp left


def test_unpack_runs_from_the_copy(tmp_path: Path) -> None:
    prefix = _venv(tmp_path)
    tar = envcopy.pack(prefix, tmp_path / "cache")
    local = tmp_path / "node"
    local.mkdir()
    dest = local / "distspec-env-7"
    timeline = tmp_path / "timeline.jsonl"
    envcopy.unpack(tar, dest, str(prefix), str(timeline))
    assert tar.exists()  # the shared cache is never removed
    out = subprocess.run([str(dest / "bin" / "tool")], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(dest), "42"]
    assert str(prefix) not in (dest / "bin" / "activate").read_text()
    site = next(dest.glob("lib/python*/site-packages"))
    assert (site / "extra.pth").read_text() == f"{dest}/extra\n"
    assert os.readlink(dest / "extra-link") == f"{dest}/extra"
    event = json.loads(timeline.read_text())
    assert event["event"] == "env_ready" and event["path"] == str(dest)
    # A second unpack of the same source (a requeue, or nodes sharing the folder) keeps it.
    envcopy.unpack(tar, dest, str(prefix), None)
    assert [e.name for e in _env_events(str(tmp_path))] == ["env ready"]


def test_unpack_removes_the_node_local_tar(tmp_path: Path) -> None:
    prefix = _venv(tmp_path)
    cached = envcopy.pack(prefix, tmp_path / "cache")
    local = tmp_path / "distspec-env-8.tar"
    local.write_bytes(cached.read_bytes())
    envcopy.unpack(local, tmp_path / "distspec-env-8", str(prefix), None, str(cached))
    assert not local.exists()


def test_missing_base_interpreter_fails_clearly(tmp_path: Path) -> None:
    prefix = _venv(tmp_path)
    tar = envcopy.pack(prefix, tmp_path / "cache")
    # The same venv as if its base Python were not on this node.
    (prefix / "bin" / "python").unlink()
    os.symlink("/nonexistent/bin/python3", prefix / "bin" / "python")
    tar = envcopy.pack(prefix, tmp_path / "cache")
    code = envcopy.main(["unpack", str(tar), str(tmp_path / "copy"), str(prefix)])
    assert code == 2
    assert not (tmp_path / "copy").exists()


def test_check_names_the_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert envcopy.main(["check", str(tmp_path / "nope"), "10"]) == 2
    assert "is not a directory there" in capsys.readouterr().err
    assert envcopy.main(["check", str(tmp_path), str(10**18)]) == 2
    assert "GB free" in capsys.readouterr().err
    assert envcopy.main(["check", str(tmp_path), "10"]) == 0


def test_timeline_shows_packing_and_nodes(tmp_path: Path) -> None:
    lines = [
        {"event": "env_packed", "time": 10.0, "seconds": 3.5, "reused": False, "hash": "h"},
        {"event": "env_ready", "time": 12.0, "node": "n1", "seconds": 1.5},
        {"event": "env_ready", "time": 11.5, "node": "n0", "seconds": 1.0},
    ]
    (tmp_path / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    events = _env_events(str(tmp_path))
    assert [(e.name, e.time) for e in events] == [("env packed", 10.0), ("env ready", 12.0)]
    assert events[0].detail == "packed in 3.5s"
    assert events[1].detail == "2 node(s): n0 +0.0s (unpack 1.0s), n1 +0.5s (unpack 1.5s)"
