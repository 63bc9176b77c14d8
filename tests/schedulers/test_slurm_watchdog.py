"""The hang watchdog (``-cfg watchdog``) on the real local Slurm cluster: a 2x2
torchrun job (gloo) whose rank 1 never reaches the collective the others wait in."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distspec.hangs import HUNG_EXIT, read_hang
from tests.runtime.test_watchdog import HANGS, processes_with, run_watched
from tests.slurm_cluster import use_slurm_cluster

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent


@pytest.fixture
def cluster() -> None:
    use_slurm_cluster()


def test_a_hung_2x2_job_is_reported_with_every_rank_s_stack(
    cluster: None, tmp_path: Path, state_dir: Path
) -> None:
    proc, took = run_watched(tmp_path, HANGS, "15s", scheduler="slurm", shape="2x2", timeout=300)
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
    while processes_with(f"SLURM_JOB_ID={job.group(1)}") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_with(f"SLURM_JOB_ID={job.group(1)}"), (
        "a process of the hung job is still running"
    )
