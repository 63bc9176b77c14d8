"""`scripts/bench --smoke` still runs and prints its table.

A check that the benchmark has not rotted, not a benchmark: nothing here looks
at a time. It needs the peer's venv (`.bench/torchx-venv`, built by a full
`scripts/bench` run), so it skips without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "scripts" / "bench"
PEER = ROOT / ".bench" / "torchx-venv" / "bin" / "torchx"

pytestmark = pytest.mark.slow


@pytest.mark.skipif(
    not PEER.exists(), reason="no .bench/torchx-venv (run scripts/bench once to build it)"
)
def test_bench_smoke_prints_one_table() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--timer", "python"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    cases = [row.split("|")[1].strip() for row in rows]
    assert cases[0] == "case"
    assert "1. `--help`" in cases
    for sched in ("local_cwd 1x2", "slurm 2x8", "kubernetes 2x8", "pbs 2x8"):
        assert f"2. dry run {sched}" in cases
    help_row = rows[cases.index("1. `--help`")]
    distspec_cell, torchx_cell = (c.strip() for c in help_row.split("|")[2:4])
    assert not distspec_cell.startswith("n/a"), help_row
    assert not torchx_cell.startswith("n/a"), help_row
    assert "targets missed:" in proc.stdout
