"""``env_to_local`` on the real local two-node Slurm cluster (scripts/slurm-cluster).

The environment copied is a SMALL venv made with ``python -m venv`` in a shared tmp
dir, whose site-packages has a ``.pth`` that runs ``site.addsitedir`` on distspec's own
venv: torch and distspec import from there, but ``sys.prefix`` is the venv's, so the
ranks' ``sys.prefix`` shows whether they run from the node-local copy. distspec's CLI
runs with that venv's python, so the environment recorded is it (the default, no
env_prefix). Packing the real 2 GB venv is measured by hand (docs/env-to-local.md).
The two nodes share this machine's file system, /tmp included: the test checks that
the copy is gone after the job, not that it was on a separate disk.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = pytest.mark.slurm


@pytest.fixture
def small_env(state_dir: Path) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """(root, the small venv, the environment to run distspec in); removed after."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    # A folder the nodes see (they share this file system) that is not /tmp, which
    # the copies go to.
    root = Path(__file__).resolve().parents[2] / ".pytest-env-to-local" / str(os.getpid())
    root.mkdir(parents=True)
    try:
        small = root / "small"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(small)], check=True)
        site = next(small.glob("lib/python*/site-packages"))
        base_site = next(Path(sys.prefix).glob("lib/python*/site-packages"))
        (site / "base.pth").write_text(f"import site; site.addsitedir({str(base_site)!r})\n")
        torchrun = small / "bin" / "torchrun"
        torchrun.write_text(
            f"#!{small}/bin/python\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n"
        )
        torchrun.chmod(0o755)
        (root / "train.py").write_text(
            "import os, sys, time, torch\nprint('PREFIX', os.environ['RANK'], sys.prefix, flush=True)\n"
            "time.sleep(float(os.environ.get('SLEEP', '0')))\n"
        )
        yield root, small, {**os.environ, "PATH": f"{small}/bin:{os.environ['PATH']}"}
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _distspec(
    small: Path, root: Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(small / "bin" / "python"), "-m", "distspec", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip


def _prefixes(folder: Path) -> set[str]:
    return {
        line.split()[-1]
        for log in folder.glob("train-*.log")
        for line in log.read_text().splitlines()
        if "PREFIX" in line
    }


def test_ranks_run_from_the_copy_and_the_cache_is_reused(
    small_env: tuple[Path, Path, dict[str, str]],
) -> None:
    root, small, env = small_env
    jobs = root / "jobs"
    for _ in range(2):
        proc = _distspec(
            small, root, env, "run", "-s", "slurm", "--wait",
            "-cfg", f"env_to_local=/tmp,job_dir={jobs},snapshot=off",
            "dist.ddp", "-j", "2x2", "--script", "train.py",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
    folders = sorted(p for p in jobs.iterdir() if p.is_dir() and p.name.startswith("train-"))
    assert len(folders) == 2
    for folder in folders:
        job_id = folder.name.rsplit("-", 1)[1]
        local = f"/tmp/distspec-env-{job_id}"
        assert _prefixes(folder) == {local}
        assert not Path(local).exists() and not Path(f"{local}.tar").exists()
        events = [json.loads(line) for line in (folder / "timeline.jsonl").read_text().splitlines()]
        assert {e["node"] for e in events if e["event"] == "env_ready"} == {"n0", "n1"}
    packed = [
        json.loads(line)["reused"]
        for folder in folders
        for line in (folder / "timeline.jsonl").read_text().splitlines()
        if "env_packed" in line
    ]
    assert packed == [False, True]
    assert len(list((jobs / "envs").glob("*.tar"))) == 1


def test_direct_launch_ranks_run_from_the_copy(
    small_env: tuple[Path, Path, dict[str, str]],
) -> None:
    """workers=direct: srun starts the ranks with the copy's python (PATH)."""
    root, small, env = small_env
    jobs = root / "jobs"
    proc = _distspec(
        small, root, env, "run", "-s", "slurm", "--wait",
        "-cfg", f"env_to_local=/tmp,job_dir={jobs},snapshot=off,workers=direct",
        "dist.ddp", "-j", "2x2", "--script", "train.py",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = (p for p in jobs.iterdir() if p.is_dir() and p.name.startswith("train-"))
    local = f"/tmp/distspec-env-{folder.name.rsplit('-', 1)[1]}"
    assert _prefixes(folder) == {local}
    assert len(list(folder.glob("train-*.log"))) == 4
    assert not Path(local).exists()


def test_cancel_removes_the_copy(small_env: tuple[Path, Path, dict[str, str]]) -> None:
    """distspec cancel of a running job: the keeper step's tasks get SIGTERM from Slurm
    and remove the copy (no new step, such as an srun rm, can start then)."""
    root, small, env = small_env
    jobs = root / "jobs"
    proc = _distspec(
        small, root, {**env, "SLEEP": "300"}, "run", "-s", "slurm",
        "-cfg", f"env_to_local=/tmp,job_dir={jobs},snapshot=off",
        "dist.ddp", "-j", "2x1", "--script", "train.py",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = re.search(r"slurm://\S+", proc.stdout)
    assert handle, proc.stdout
    deadline = time.monotonic() + 180
    folder: Path | None = None
    while time.monotonic() < deadline:
        folder = next((p for p in jobs.glob("train-*") if p.is_dir()), None)
        if folder is not None and len(_prefixes(folder)) == 1:
            break
        time.sleep(1)
    assert folder is not None and _prefixes(folder), "the ranks did not start"
    (local,) = _prefixes(folder)
    assert Path(local).is_dir()
    proc = _distspec(small, root, env, "cancel", handle.group(0))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = folder.name.rsplit("-", 1)[1]
    while time.monotonic() < deadline + 60:
        queued = subprocess.run(
            ["squeue", "-h", "-j", job_id], capture_output=True, text=True, check=False
        )
        if not queued.stdout.strip():
            break
        time.sleep(1)
    assert not queued.stdout.strip(), f"job {job_id} still queued"
    assert not Path(local).exists()
    assert not Path(f"{local}.tar").exists()


def test_a_missing_node_local_directory_fails_early_naming_the_node(
    small_env: tuple[Path, Path, dict[str, str]],
) -> None:
    """A DIR that no node has: the job ends before any rank starts (its script with
    exit code 2), and the end of `run --wait` quotes the one line naming each node;
    nothing is packed."""
    root, small, env = small_env
    jobs = root / "jobs"
    missing = root / "no-such-dir"  # on the shared file system, so on no node either
    proc = _distspec(
        small, root, env, "run", "-s", "slurm", "--wait",
        "-cfg", f"env_to_local={missing},job_dir={jobs},snapshot=off",
        "dist.ddp", "-j", "2x2", "--script", "train.py",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for node in ("n0", "n1"):
        assert f"node {node}: env_to_local={missing} is not a directory there" in out, out
    (folder,) = (p for p in jobs.iterdir() if p.is_dir() and p.name.startswith("train-"))
    assert not _prefixes(folder)  # no rank ran
    assert not (jobs / "envs").exists() or not list((jobs / "envs").glob("*.tar"))
