"""The third-party corpus through ``distspec run -s slurm --wait`` on the local two-node
cluster, two nodes of two processes (see tests/thirdparty/corpus.py)."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)
from tests.thirdparty.corpus import (
    BIN,
    STEPS,
    WORKLOADS,
    Workload,
    done_ranks,
    in_matrix,
    stage,
    wait_no_leftovers,
)

IDS = [w.name for w in WORKLOADS]
# The shared cluster runs one 2x2 job at a time (each takes every CPU): a job may wait
# in the queue behind others'.
JOB_TIMEOUT_S = 600
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.torch,
    pytest.mark.slow,
    pytest.mark.timeout(JOB_TIMEOUT_S + 60),
]


@pytest.fixture
def cluster() -> None:
    """The cluster up in either accounting mode, or a skip with the reason."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()


@pytest.fixture
def name() -> Iterator[str]:
    """A unique job name; any job left under it is cancelled after the test (once the
    test has checked that none is)."""
    name = f"tp-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["scancel", "--name", name], capture_output=True, check=False)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )


def _run(script: Path, name: str, *script_args: str) -> subprocess.CompletedProcess[str]:
    return _cli(
        *("run", "-s", "slurm", "--wait", "dist.ddp", "-j", "2x2", "--name", name),
        *("--script", str(script), "--", "--steps", str(STEPS), *script_args),
        cwd=script.parent,
    )


def _assert_nothing_left(name: str, script: Path) -> None:
    queued = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i %T"], capture_output=True, text=True, check=True
    )
    assert not queued.stdout.strip(), f"jobs left queued or running: {queued.stdout}"
    wait_no_leftovers(str(script.parent))


@pytest.mark.parametrize("workload", WORKLOADS, ids=IDS)
def test_trains_on_slurm_2x2(
    workload: Workload, cluster: None, state_dir: Path, tmp_path: Path, name: str
) -> None:
    in_matrix(workload, "slurm", failing=False)
    script = stage(workload, tmp_path)
    proc = _run(script, name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = proc.stdout.split()[0]
    log = _cli("log", handle, cwd=tmp_path)
    assert done_ranks(log.stdout) == [0, 1, 2, 3], log.stdout + log.stderr
    _assert_nothing_left(name, script)


@pytest.mark.parametrize("workload", WORKLOADS, ids=IDS)
def test_failing_rank_on_slurm_2x2(
    workload: Workload, cluster: None, state_dir: Path, tmp_path: Path, name: str
) -> None:
    """Rank 3 (the second node's) raises: run --wait names it, its node, and quotes its
    traceback; the job leaves no process on either node and nothing queued."""
    in_matrix(workload, "slurm", failing=True)
    script = stage(workload, tmp_path)
    proc = _run(script, name, "--fail-rank", "3")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert re.search(r"FAILED after \S+: \S+/1 rank 3 on n1 exited with 1", proc.stderr), out
    summary = proc.stderr.partition("--- rank 3: last")[2]
    # The job ran the code snapshot (on by default on Slurm): the traceback names its copy.
    assert re.search(rf'File "\S+/snapshots/trees/\w+/{re.escape(script.name)}", line', summary), (
        out
    )
    assert f"(the job ran the code snapshot {state_dir}/snapshots/trees/" in summary, out
    assert "ValueError: rank 3 fails on purpose" in summary, out
    _assert_nothing_left(name, script)
