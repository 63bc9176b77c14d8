"""Metrics from a real 2-node job on the local Slurm cluster: 4 ranks reduce their
values across both nodes, rank 0 records them in the job folder the nodes share, and
``distspec metrics`` on the submitting machine reads them back (numbers compared)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_metrics_cli import SCRIPT
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = pytest.mark.slurm
BIN = Path(sys.executable).parent


def test_a_slurm_jobs_metrics_are_read_back(tmp_path: Path, state_dir: Path) -> None:
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    (tmp_path / "m.py").write_text(SCRIPT)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}

    def distspec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "distspec"), *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    proc = distspec("run", "-s", "slurm", "--wait", "dist.ddp", "-j", "2x2", "--script", "m.py")
    handle = re.search(r"slurm://\S+", proc.stdout)
    try:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        assert handle is not None
        # Ranks 0..3 record step + rank: the mean is step + 1.5, the max step + 3.
        assert re.search(r"^  loss: +21\.5 at step 20  [▁▂▃▄▅▆▇█]+$", proc.stderr, re.M), (
            proc.stderr
        )
        got = distspec("metrics", handle.group(0), "--json")
        assert got.returncode == 0, got.stderr
        records = [json.loads(x) for x in got.stdout.splitlines()]
        assert {r["step"]: r["loss"] for r in records if "loss" in r} == {
            s: s + 1.5 for s in range(1, 21)
        }
        assert {r["step"]: r["top"] for r in records if "top" in r} == {
            s: s + 3.0 for s in range(1, 21)
        }
        # describe's timeline: each node's launcher (from its .host file), the
        # process group of 4 ranks, the first metric.
        described = distspec("describe", handle.group(0))
        assert described.returncode == 0, described.stderr
        timeline = described.stdout.split("timeline:\n", 1)[1].split("\nrole ", 1)[0]
        names = [re.split(r"\s{2,}", line.strip())[1] for line in timeline.splitlines()]
        assert names[-4:] == ["launchers up", "process group up", "first metric", "ended"]
        assert re.search(r"2 node\(s\): n[01] \+0\.0s, n[01] \+\d+\.\ds", timeline), timeline
        assert "4 ranks, gloo" in timeline
    finally:
        if handle:
            subprocess.run(["scancel", handle.group(0).rsplit("/", 1)[1]], check=False)
