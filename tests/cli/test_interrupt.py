"""Ctrl-C during ``run --wait``, per backend: local_cwd cancels (tested in
test_follow.py on a pty and in the local_cwd job tests for SIGTERM); on Slurm — the
real local cluster — and on PBS — through Slurm's PBS wrappers (qsub/qstat/qdel) on
that cluster, the narrowest stand-in for a PBS server here — a first Ctrl-C detaches
and says how to follow or cancel, a second one cancels, and
``--cancel-on-interrupt`` cancels at once.

Kubernetes takes the same code path (every backend but local_cwd detaches); it is
run end to end against the test kube-apiserver in tests/test_k8s_interrupt.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
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
Waiters = list[tuple[subprocess.Popen[str], list[str]]]
BIN = Path(sys.executable).parent


@pytest.fixture(params=["slurm", "pbs"])
def cluster(request: pytest.FixtureRequest) -> str:
    """The scheduler to test, with the cluster up (or a skip with the reason)."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    if request.param == "pbs" and shutil.which("qsub") is None:
        pytest.skip("Slurm's PBS wrappers (qsub) are not installed")
    return str(request.param)


@pytest.fixture
def waiters() -> Iterator[list[tuple[subprocess.Popen[str], list[str]]]]:
    """Started ``run --wait`` processes; any job left is scancelled at the end."""
    started: list[tuple[subprocess.Popen[str], list[str]]] = []
    yield started
    for proc, seen in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for handle in set(re.findall(r"(?:slurm|pbs)://\S+", "".join(seen))):
            subprocess.run(
                [str(BIN / "distspec"), "cancel", handle], capture_output=True, check=False
            )


def start(
    sched: str,
    tmp_path: Path,
    waiters: list[tuple[subprocess.Popen[str], list[str]]],
    *extra: str,
) -> tuple[subprocess.Popen[str], list[str]]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(
        [
            str(BIN / "distspec"),
            "run",
            "-s",
            sched,
            "--wait",
            "--log",
            *extra,
            "utils.sh",
            "--",
            "echo started; exec sleep 300",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    waiters.append((proc, seen))
    read_until(proc, seen, "sh/0| started")
    return proc, seen


def read_until(proc: subprocess.Popen[str], seen: list[str], text: str) -> None:
    assert proc.stdout is not None
    while text not in "".join(seen):
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"ended before {text!r}:\n{''.join(seen)}")
        seen.append(line)


def finish(proc: subprocess.Popen[str], seen: list[str]) -> tuple[int, str, str]:
    assert proc.stdout is not None
    seen.append(proc.stdout.read())
    code = proc.wait(timeout=60)
    out = "".join(seen)
    handle = re.search(r"(?:slurm|pbs)://\S+", out)
    assert handle, out
    return code, out, handle.group(0)


def state(handle: str, cwd: Path) -> str:
    proc = subprocess.run(
        [str(BIN / "distspec"), "status", handle],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.stdout.split(":")[0].strip()


def settled(handle: str, cwd: Path) -> str:
    """The state once Slurm has acted on a scancel (it is asynchronous)."""
    for _ in range(100):
        now = state(handle, cwd)
        if now not in ("RUNNING", "PENDING"):
            return now
        time.sleep(0.2)
    return now


def test_first_ctrl_c_detaches_from_a_batch_job(
    cluster: str, state_dir: Path, tmp_path: Path, waiters: Waiters
) -> None:
    proc, seen = start(cluster, tmp_path, waiters)
    proc.send_signal(signal.SIGINT)
    code, out, handle = finish(proc, seen)
    assert code == 130, out
    assert f"stopped following {handle}; the job goes on" in out
    assert f"distspec log -f {handle}" in out and f"distspec cancel {handle}" in out
    assert "cancelling" not in out
    assert state(handle, tmp_path) == "RUNNING"


def test_second_ctrl_c_cancels_a_batch_job(
    cluster: str, state_dir: Path, tmp_path: Path, waiters: Waiters
) -> None:
    proc, seen = start(cluster, tmp_path, waiters)
    proc.send_signal(signal.SIGINT)
    read_until(proc, seen, "press Ctrl-C again")
    proc.send_signal(signal.SIGINT)
    code, out, handle = finish(proc, seen)
    assert code == 130, out
    assert f"cancelling {handle}" in out
    assert settled(handle, tmp_path) == "CANCELLED"


def test_cancel_on_interrupt_cancels_a_batch_job_at_once(
    cluster: str, state_dir: Path, tmp_path: Path, waiters: Waiters
) -> None:
    proc, seen = start(cluster, tmp_path, waiters, "--cancel-on-interrupt")
    proc.send_signal(signal.SIGINT)
    code, out, handle = finish(proc, seen)
    assert code == 130, out
    assert f"cancelling {handle}" in out and "stopped following" not in out
    assert settled(handle, tmp_path) == "CANCELLED"
