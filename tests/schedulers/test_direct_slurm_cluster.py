"""Direct launch (``-cfg workers=direct``) on the local two-node Slurm cluster: one
srun step of 2x2 tasks, every task one rank, no torchrun (see docs/launch.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppState
from tests.schedulers.test_slurm_cluster import _until
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DIRECT = ["-cfg", "workers=direct"]


@pytest.fixture
def cluster() -> None:
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()


@pytest.fixture
def env(state_dir: Path) -> dict[str, str]:
    """A private state dir, and the venv's python first on PATH for the job."""
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}


def _cli(
    args: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 240
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


def _handle(stdout: str) -> str:
    match = re.search(r"slurm://\S+", stdout)
    assert match, stdout
    return match.group(0)


def test_ddp_2x2_trains_with_a_log_per_rank(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    proc = _cli(
        [
            "run",
            "-s",
            "slurm",
            "--wait",
            *DIRECT,
            "dist.ddp",
            "-j",
            "2x2",
            "--script",
            "examples/train_ddp.py",
            "--",
            "--steps",
            "30",
            "--checkpoint",
            "none",
        ],
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = _handle(proc.stdout)
    status = _cli(["describe", handle], env=env, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "SUCCEEDED" in status.stdout
    assert len(re.findall(r"/[0-3]: SUCCEEDED", status.stdout)) == 4, status.stdout
    assert set(re.findall(r"host=(n\d)", status.stdout)) == {"n0", "n1"}, status.stdout
    logs = _cli(["log", handle], env=env, cwd=tmp_path)
    assert logs.returncode == 0, logs.stderr
    # Four log files, each one rank's (replica i is rank i).
    prefixes = set(re.findall(r"^\S+/(\d) rank (\d)\| ", logs.stdout, re.M))
    assert prefixes == {(str(i), str(i)) for i in range(4)}, logs.stdout
    assert "world_size=4 backend=gloo" in logs.stdout
    assert "done: loss" in logs.stdout
    one = _cli(["log", handle, "--rank", "2"], env=env, cwd=tmp_path)
    assert one.returncode == 0 and one.stdout, one.stderr
    assert all(" rank 2| " in line for line in one.stdout.splitlines()), one.stdout


def test_a_failing_rank_is_named_with_its_code_and_traceback(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "fail.py").write_text(
        "import os, sys, time\n"
        "rank = int(os.environ['RANK'])\n"
        "print(f'rank {rank} here', flush=True)\n"
        "if rank == 3:\n"
        "    raise SystemExit(7) if len(sys.argv) > 1 else ValueError('the real error')\n"
        "time.sleep(60)\n"
    )
    proc = _cli(
        ["run", "-s", "slurm", "--wait", *DIRECT, "dist.ddp", "-j", "2x2", "--script", "fail.py"],
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"FAILED after \S+: \S+/3 rank 3 on n1 exited with 1", proc.stderr), (
        proc.stderr
    )
    assert "--- rank 3: last 4 lines ---\nTraceback (most recent call last):" in proc.stderr
    assert "ValueError: the real error\n---" in proc.stderr, proc.stderr
    # Its own code is the job's, and --kill-on-bad-exit ended the sleeping ranks at once.
    coded = _cli(
        [
            "run",
            "-s",
            "slurm",
            "--wait",
            *DIRECT,
            "dist.ddp",
            "-j",
            "2x2",
            "--script",
            "fail.py",
            "--",
            "code",
        ],
        env=env,
        cwd=tmp_path,
    )
    assert coded.returncode == 7, coded.stdout + coded.stderr
    assert re.search(r"\S+/3 rank 3 on n1 exited with 7", coded.stderr), coded.stderr


def _processes(marker: str) -> list[str]:
    """Live processes whose full command line (``ps -ww``: the marker is at the end of a
    long one) holds ``marker``."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [p for p in out.splitlines() if marker in p and not p.lstrip().startswith("Z")]


def test_cancel_leaves_no_process_on_either_node(
    cluster: None, env: dict[str, str], state_dir: Path, tmp_path: Path
) -> None:
    marker = f"distspec-direct-{uuid.uuid4().hex}"
    (tmp_path / "sleep.py").write_text(
        "import os, sys, time\n"
        "print('rank', os.environ['RANK'], 'sleeping', flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = _cli(
        [
            "run",
            "-s",
            "slurm",
            *DIRECT,
            "dist.ddp",
            "-j",
            "2x2",
            "--script",
            "sleep.py",
            "--",
            marker,
        ],
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    handle = _handle(proc.stdout)
    job = handle.rsplit("/", 1)[1]

    def ranks() -> list[str]:
        """The rank processes themselves (not srun's or bash's command lines)."""
        return [p for p in _processes(marker) if p.split(None, 1)[1].startswith("python")]

    try:
        # The cluster is shared: the job may wait in the queue first.
        _until(lambda: len(ranks()) == 4, "four ranks to start", timeout=240)
        assert _cli(["cancel", handle], env=env, cwd=tmp_path).returncode == 0
        _until(lambda: not _processes(marker), "every process of the job to end")
        status = SlurmScheduler(state_dir=state_dir).wait(job, timeout=60)
        assert status is not None and status.state is AppState.CANCELLED, status
    finally:
        subprocess.run(["scancel", job], check=False)


def test_a_plain_torchrun_script_that_never_imports_distspec(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    script = REPO / "tests" / "thirdparty" / "workloads" / "torchrun_ddp.py"
    proc = _cli(
        [
            "run",
            "-s",
            "slurm",
            "--wait",
            "--log",
            *DIRECT,
            "dist.ddp",
            "-j",
            "2x2",
            "--script",
            str(script),
            "--",
            "--steps",
            "3",
        ],
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in range(4):
        assert f"rank {rank} (local {rank % 2}) of 4 joined" in proc.stdout, proc.stdout
        assert f"rank {rank} done: trained 3 steps" in proc.stdout
