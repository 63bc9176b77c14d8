"""``python -m distspec.runtime.pbsdsh_hosts``: one ``pbsdsh -n`` per host, under a fake
``pbsdsh`` that records its arguments (a real one runs in
tests/schedulers/test_openpbs_cluster.py, inside an OpenPBS job)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAKE = """#!/bin/bash
# pbsdsh -n VNODE -- COMMAND...: record, then run COMMAND with VNODE exported.
[[ $1 == -n && $3 == -- ]] || exit 99
echo "$2 ${*:4}" >> "$PBSDSH_LOG"
export VNODE=$2
shift 3
exec "$@"
"""


def _env(tmp_path: Path) -> dict[str, str]:
    """This environment with the fake ``pbsdsh`` first on PATH, logging to ``calls``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "pbsdsh").write_text(FAKE)
    (bin_dir / "pbsdsh").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PBSDSH_LOG": str(tmp_path / "calls"),
    }


def _run(tmp_path: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec.runtime.pbsdsh_hosts", *args],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_one_pbsdsh_per_vnode_and_the_first_failure_is_the_exit_code(tmp_path: Path) -> None:
    proc = _run(tmp_path, "0,3", "--", "bash", "-c", "echo on $VNODE; exit $((VNODE == 3 ? 5 : 0))")
    assert proc.returncode == 5, proc.stderr
    assert sorted(proc.stdout.split("\n")[:2]) == ["on 0", "on 3"]
    calls = sorted((tmp_path / "calls").read_text().splitlines())
    assert calls == [
        "0 bash -c echo on $VNODE; exit $((VNODE == 3 ? 5 : 0))",
        "3 bash -c echo on $VNODE; exit $((VNODE == 3 ? 5 : 0))",
    ]
    assert _run(tmp_path, "0,3", "--", "true").returncode == 0


@pytest.mark.parametrize(
    "args",
    [(), ("0,2",), ("0,2", "true"), ("0,x", "--", "true"), ("", "--", "true")],
)
def test_bad_arguments_exit_2_with_the_usage(tmp_path: Path, args: tuple[str, ...]) -> None:
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2
    assert "usage: python -m distspec.runtime.pbsdsh_hosts" in proc.stderr
    assert not (tmp_path / "calls").exists()  # nothing started


def test_sigterm_reaches_every_task(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    script = f'trap "touch {marks}/$VNODE; exit 143" TERM; touch {marks}/up-$VNODE; sleep 60 & wait'
    proc = subprocess.Popen(
        [sys.executable, "-m", "distspec.runtime.pbsdsh_hosts", "0,1", "--", "bash", "-c", script],
        env=_env(tmp_path),
    )
    deadline = time.monotonic() + 20
    while len(list(marks.glob("up-*"))) < 2:
        assert time.monotonic() < deadline, "the two tasks did not start"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    assert sorted(p.name for p in marks.iterdir() if not p.name.startswith("up-")) == ["0", "1"]
