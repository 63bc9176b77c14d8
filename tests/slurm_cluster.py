"""The project's local two-node Slurm cluster, for integration tests.

A thin wrapper around ``scripts/slurm-cluster`` (see docs/contributing/slurm-local-cluster.md)::

    from tests.slurm_cluster import require_slurm_cluster

    @pytest.mark.slurm
    def test_something() -> None:
        require_slurm_cluster()               # up without accounting, or skip
        ...

    @pytest.mark.slurm
    def test_sacct() -> None:
        require_slurm_cluster(accounting=True)  # restarts the cluster if needed
        ...

The cluster is shared machine state: requesting the other accounting mode
restarts every daemon, killing running jobs. Group tests by mode.

Set ``DISTSPEC_SLURM_CLUSTER=0`` to skip these tests without touching the
machine (the script installs packages and creates network namespaces).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "MARKER",
    "SCRIPT",
    "cluster_has_accounting",
    "cluster_is_up",
    "require_slurm_cluster",
    "slurm_cluster_unavailable_reason",
    "submitted",
    "succeeded",
    "until",
    "use_slurm_cluster",
]

#: The pytest marker these integration tests carry.
MARKER = "slurm"
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "slurm-cluster"
# A cold `up` installs packages (~10 s here, ~35 s with MariaDB); apt may also
# wait for another process's lock.
_UP_TIMEOUT_S = 900


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def slurm_cluster_unavailable_reason() -> str | None:
    """Why the local cluster cannot run here, or None when it can."""
    if os.environ.get("DISTSPEC_SLURM_CLUSTER", "1") == "0":
        return "local Slurm cluster disabled by DISTSPEC_SLURM_CLUSTER=0"
    if not SCRIPT.is_file():
        return f"{SCRIPT} is missing"
    proc = _run("check")
    if proc.returncode != 0:
        return (
            _last_line(proc.stdout + proc.stderr) or f"slurm-cluster check exited {proc.returncode}"
        )
    return None


def _status() -> tuple[bool, bool]:
    """(up, accounting) as reported by ``slurm-cluster status``."""
    proc = _run("status")
    return proc.returncode == 0, "accounting: on" in proc.stdout.splitlines()


def cluster_is_up() -> bool:
    """True when both nodes of the local cluster are up and serving jobs."""
    return _status()[0]


def cluster_has_accounting() -> bool:
    """True when the local cluster is up with slurmdbd accounting (sacct works)."""
    up, accounting = _status()
    return up and accounting


def use_slurm_cluster() -> None:
    """For a test that needs the cluster up in either accounting mode: skip with the
    reason when it cannot run here, bring it up when it is down."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()


def until(check: Callable[[], bool], what: str, timeout: float, every: float = 0.3) -> None:
    """Poll ``check`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(every)


def submitted(stdout: str, state_dir: Path) -> tuple[str, Path]:
    """The Slurm job id and job folder of the job ``distspec run -s slurm`` printed the
    handle of in ``stdout`` (submitted with ``DISTSPEC_STATE_DIR=state_dir``)."""
    from distspec.schedulers.slurm import SlurmScheduler

    handle = re.search(r"slurm://\S+", stdout)
    assert handle, stdout
    job = handle.group(0).rsplit("/", 1)[-1]
    record = SlurmScheduler(state_dir=state_dir)._record(job)
    assert record is not None, f"no record of job {job}"
    return job, Path(record.folder)


def succeeded(sched: Any, job: str) -> Callable[[], bool]:
    """For :func:`until`: true once ``job`` has succeeded; fails the test when it ends
    otherwise (``sched`` is a SlurmScheduler)."""

    def check() -> bool:
        status = sched.describe(job)
        assert status is not None
        if status.is_terminal and status.state.value != "SUCCEEDED":
            pytest.fail(f"job {job} ended {status.format()}")
        return bool(status.state.value == "SUCCEEDED")

    return check


def require_slurm_cluster(accounting: bool = False) -> None:
    """Ensure the local cluster is up in the requested mode, or skip the test.

    Args:
        accounting: True for slurmdbd + MariaDB accounting (``sacct`` works),
            False for none (``sacct`` fails, as on some real clusters).

    Skips with the script's one-line reason when the machine cannot host the
    cluster (not root, no namespaces, ...). Fails the test when it could and
    bringing it up failed: that is a real error, with the daemons' logs.
    """
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    up, has_accounting = _status()
    if up and has_accounting == accounting:
        return
    proc = _run("up", *(["--accounting"] if accounting else []), timeout=_UP_TIMEOUT_S)
    if proc.returncode != 0:
        pytest.fail(
            f"scripts/slurm-cluster up{' --accounting' if accounting else ''} failed "
            f"(rc={proc.returncode}):\n{proc.stdout}{proc.stderr}",
            pytrace=False,
        )
