"""The project's local two-host OpenPBS cluster, for the PBS backend's tests.

A thin wrapper around ``scripts/pbs-cluster`` (see
docs/contributing/pbs-local-cluster.md)::

    from tests.openpbs_cluster import require_openpbs_cluster

    @pytest.mark.openpbs
    def test_something(monkeypatch) -> None:
        bin_dir = require_openpbs_cluster()   # up, or skip with the reason
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        ...

OpenPBS is built from the source archive in ``../shared/vendor`` (or the one
``DISTSPEC_OPENPBS_SOURCE`` names), once, into ``~/.cache/distspec``: without an
archive these tests skip and say so. Its client commands reach this server only
with the returned folder first on PATH; without it, ``qsub`` is Slurm's PBS wrapper
(tests/schedulers/test_pbs_cluster.py).

Set ``DISTSPEC_OPENPBS_CLUSTER=0`` to skip these tests without touching the machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

__all__ = ["MARKER", "SCRIPT", "openpbs_unavailable_reason", "require_openpbs_cluster"]

#: The pytest marker these integration tests carry.
MARKER = "openpbs"
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "pbs-cluster"
# A cold 'up' builds OpenPBS (about 6 minutes on 2 cores, plus its packages).
_UP_TIMEOUT_S = 1800


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def openpbs_unavailable_reason() -> str | None:
    """Why the local OpenPBS cluster cannot run here, or None when it can."""
    if os.environ.get("DISTSPEC_OPENPBS_CLUSTER", "1") == "0":
        return "local OpenPBS cluster disabled by DISTSPEC_OPENPBS_CLUSTER=0"
    proc = _run("check")
    if proc.returncode != 0:
        return (
            _last_line(proc.stdout + proc.stderr) or f"pbs-cluster check exited {proc.returncode}"
        )
    return None


def require_openpbs_cluster() -> Path:
    """The folder of the cluster's client commands, once it is up; else skip the test.

    Skips with the script's one-line reason when the machine cannot host the cluster
    (no source archive, not root, no namespaces). Fails the test when it could and
    bringing it up failed: that is a real error, with the daemons' logs.
    """
    reason = openpbs_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if _run("status").returncode != 0:
        proc = _run("up", timeout=_UP_TIMEOUT_S)
        if proc.returncode != 0:
            pytest.fail(
                f"scripts/pbs-cluster up failed (rc={proc.returncode}):\n{proc.stdout}{proc.stderr}",
                pytrace=False,
            )
    return Path(_run("bin").stdout.strip())
