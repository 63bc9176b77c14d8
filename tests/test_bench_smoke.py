"""`scripts/bench --smoke` and `scripts/bench_sweep --smoke` still run and print their tables.

Checks that the benchmarks have not rotted, not benchmarks: nothing here looks
at a time. `scripts/bench` needs the peer's venv (`.bench/torchx-venv`, built by a
full `scripts/bench` run), so it skips without it; `scripts/bench_sweep` needs the
local Slurm cluster and leaves submitit out without `.bench/submitit-venv`.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

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


SWEEP_BENCH = ROOT / "scripts" / "bench_sweep"
SUBMITIT_PY = ROOT / ".bench" / "submitit-venv" / "bin" / "python"


@pytest.mark.slurm
def test_bench_sweep_smoke_submits_the_arrays_and_cancels_them(tmp_path: Path) -> None:
    """`scripts/bench_sweep --smoke`: 40 held points on the local Slurm cluster, one sbatch
    per MaxArraySize points on each side, and nothing it submitted left in the queue."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    out = tmp_path / "sweep.json"
    argv = [sys.executable, str(SWEEP_BENCH), "--smoke", "--json", str(out)]
    peers = SUBMITIT_PY.exists()
    if not peers:
        argv.append("--no-peers")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    arrays = math.ceil(40 / data["max_array_size"])
    assert data["points"] == 40
    assert data["arrays"] == arrays
    assert data["slurm_calls"]["distspec run (submit)"]["sbatch"] == arrays
    cases = {line.split("|")[1].strip() for line in proc.stdout.splitlines() if line[:2] == "| "}
    assert {"distspec run (submit)", "distspec status", "distspec list -s slurm"} <= cases
    if peers:
        assert data["slurm_calls"]["submitit map_array (submit)"]["sbatch"] == arrays
        assert "submitit [job.state for job in jobs]" in cases
        assert "distspec / submitit" in proc.stdout
    assert "targets missed:" in proc.stdout
    ids = data["job_ids"]
    assert len(ids) == arrays * (2 if peers else 1)
    queued = subprocess.run(
        ["squeue", "-h", "-r", "-t", "PD,R,CG,S", "-o", "%F", "-j", ",".join(ids)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert queued.stdout.split() == [], f"left in the queue: {queued.stdout}"


METRICS_BENCH = ROOT / "scripts" / "bench_metrics"


def test_bench_metrics_runs_and_reports_every_case(tmp_path: Path) -> None:
    """`scripts/bench_metrics` with a few calls: the floor, log and the 2-rank reduce,
    and `distspec plot` on a short history (terminal and PNG), all measured and written
    (the numbers themselves are the benchmark's business)."""
    pytest.importorskip("torch", reason="the reduce case runs two gloo ranks")
    out = tmp_path / "m.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(METRICS_BENCH),
            *("--calls", "300", "--rounds", "2", "--json", str(out)),
            *("--plot-records", "3000", "--plot-rounds", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    keys = ("floor_us", "log_us", "reduce_us", "log_over_floor")
    for key in (*keys, "plot_read_s", "plot_terminal_s", "plot_png_s"):
        assert isinstance(result[key], float) and math.isfinite(result[key]) and result[key] > 0
    assert result["plot_records"] == 3000
    assert "distspec.runtime.log" in proc.stdout and "2 gloo ranks" in proc.stdout
    assert "distspec plot, a history of 3,000 records" in proc.stdout
    assert "in the terminal (plotext)" in proc.stdout and "-o chart.png" in proc.stdout


FAULTS_BENCH = ROOT / "scripts" / "bench_faults"


@pytest.mark.torch
def test_bench_faults_hang_part_measures_a_real_hang(tmp_path: Path) -> None:
    """`scripts/bench_faults --part hang` on local_cwd, one round: a real hang detected
    after the period, and the figures written (not judged: no time is asserted beyond
    the period the watchdog must wait)."""
    out = tmp_path / "faults.json"
    argv = [sys.executable, str(FAULTS_BENCH), "--part", "hang", "--backends", "local_cwd"]
    argv += ["--runs", "1", "--json", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    figures = json.loads(out.read_text())["hang/local_cwd"]
    assert figures["period"] == 10
    assert figures["report"] >= figures["detected"] >= figures["period"], figures
    assert "onset->detected" in proc.stdout
