"""The third-party corpus through ``distspec run --wait`` on local_cwd, one node of two
processes (see tests/thirdparty/corpus.py)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

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

pytestmark = [pytest.mark.torch, pytest.mark.slow]
IDS = [w.name for w in WORKLOADS]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


def _run(script: Path, *script_args: str) -> subprocess.CompletedProcess[str]:
    return _cli(
        *("run", "--wait", "dist.ddp", "-j", "1x2", "--script", str(script)),
        *("--", "--steps", str(STEPS), *script_args),
        cwd=script.parent,
    )


@pytest.mark.parametrize("workload", WORKLOADS, ids=IDS)
def test_trains_on_local_cwd(workload: Workload, state_dir: Path, tmp_path: Path) -> None:
    in_matrix(workload, "local_cwd", failing=False)
    script = stage(workload, tmp_path)
    proc = _run(script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = proc.stdout.split()[0]
    log = _cli("log", handle, cwd=tmp_path)
    assert done_ranks(log.stdout) == [0, 1], log.stdout + log.stderr
    wait_no_leftovers(str(script.parent))


@pytest.mark.parametrize("workload", WORKLOADS, ids=IDS)
def test_failing_rank_on_local_cwd(workload: Workload, state_dir: Path, tmp_path: Path) -> None:
    in_matrix(workload, "local_cwd", failing=True)
    script = stage(workload, tmp_path)
    proc = _run(script, "--fail-rank", "1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert re.search(r"FAILED after \S+: \S+/0 rank 1 on localhost exited with 1", proc.stderr), out
    # The summary quotes rank 1's traceback: the script's own frame (a library's deep
    # stack can push the "Traceback" header out of the quoted lines) and the error.
    summary = proc.stderr.partition("--- rank 1: last")[2]
    assert f'File "{script}", line' in summary, out
    assert "ValueError: rank 1 fails on purpose" in summary, out
    wait_no_leftovers(str(script.parent))
