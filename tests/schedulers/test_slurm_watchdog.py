"""The hang watchdog (``-cfg watchdog``) on the real local Slurm cluster: a 2x2
torchrun job (gloo) whose rank 1 never reaches the collective the others wait in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distspec.hangs import HUNG_EXIT, read_hang
from tests.runtime.test_watchdog import HANGS
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent


@pytest.fixture
def cluster() -> None:
    """The cluster up, or a skip with the reason."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()


def _processes_of(job: str) -> list[int]:
    """Live processes of Slurm job ``job`` on either node (the nodes are network
    namespaces of this machine: their processes are visible here)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if f"SLURM_JOB_ID={job}".encode() in environ and state != "Z":
            found.append(int(pid))
    return found


def test_a_hung_2x2_job_is_reported_with_every_rank_s_stack(
    cluster: None, tmp_path: Path, state_dir: Path
) -> None:
    (tmp_path / "job.py").write_text(HANGS)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(BIN / "distspec"),
            "run",
            "--wait",
            "-s",
            "slurm",
            "-cfg",
            "watchdog=15s",
            "dist.ddp",
            "-j",
            "2x2",
            "--script",
            "job.py",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    took = time.monotonic() - started
    assert proc.returncode == HUNG_EXIT, proc.stdout + proc.stderr
    assert re.search(r"HUNG after \S+: no rank made progress for 15s", proc.stderr), proc.stderr
    # Ranks 0, 2 and 3 wait in the all_reduce (on both nodes); rank 1 sleeps on n0.
    assert re.search(r"\n  ranks 0,2-3 in all_reduce at job\.py:8 \(on n0,n1\)", proc.stderr)
    assert re.search(r"\n  rank 1 in main at job\.py:18 \(on n0\)", proc.stderr), proc.stderr
    assert took < 240, took
    job = re.search(r"slurm://\S+/(\d+)", proc.stdout + proc.stderr)
    assert job, proc.stdout
    folder = Path(re.search(r"stacks:\s+(\S+)/hang/stacks/", proc.stderr).group(1))  # type: ignore[union-attr]
    hang = read_hang(folder)
    assert hang is not None
    assert sorted(p["rank"] for p in hang.processes if p["rank"] is not None) == [0, 1, 2, 3]
    assert {p["host"] for p in hang.processes} == {"n0", "n1"}
    # Each node's replica log says what its watchdog saw.
    assert "distspec watchdog: stopping the job (HUNG)" in (folder / "job-1.log").read_text()
    queue = subprocess.run(
        ["squeue", "-h", "-j", job.group(1)], capture_output=True, text=True, check=False
    )
    assert queue.stdout.strip() == "", queue.stdout
    deadline = time.monotonic() + 30
    while _processes_of(job.group(1)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _processes_of(job.group(1)), "a process of the hung job is still running"
