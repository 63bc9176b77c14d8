"""The runtime examples train for real: train_ddp.py and the 2-D mesh example."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .launched import REPO, clean_env

pytest.importorskip("torch", reason="torch is not installed")
pytestmark = [pytest.mark.torch, pytest.mark.slow]


def _losses(text: str) -> tuple[float, float]:
    found = re.search(r"done: loss ([0-9.]+) -> ([0-9.]+)", text)
    assert found, text[-3000:]
    return float(found.group(1)), float(found.group(2))


def test_mesh_example_trains_with_dp_x_tp_through_distspec_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "distspec", "run", "--wait", "dist.ddp", "-j", "1x4", "--tp", "2",
         "--script", "examples/train_mesh.py", "--", "--steps", "60"],
        capture_output=True, text=True, timeout=280, cwd=REPO, check=False,
        env=clean_env(DISTSPEC_STATE_DIR=str(tmp_path / "state"), HOME=str(tmp_path)),
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "mesh pp=1 dp=2 cp=1 tp=2" in out
    first, last = _losses(out)
    assert last < first / 4
    # rank 0 recorded the job's runtime facts in the run directory
    (info,) = (tmp_path / "state").rglob("runtime.json")
    assert '"tp": 2' in info.read_text()
    # ... and describe shows them
    handle = re.search(r"local_cwd://\S+", out)
    assert handle, out[-2000:]
    described = subprocess.run(
        [sys.executable, "-m", "distspec", "describe", handle.group(0)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
        env=clean_env(DISTSPEC_STATE_DIR=str(tmp_path / "state"), HOME=str(tmp_path)),
    )  # fmt: skip
    assert (
        "runtime:    launcher=torchrun world=4 nodes=1 backend=gloo device=cpu "
        "degrees=pp=1,dp=2,cp=1,tp=2" in described.stdout
    ), described.stdout


def test_train_ddp_without_torchrun_is_a_world_of_one(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "examples/train_ddp.py", "--steps", "20", "--checkpoint", "none"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=clean_env(), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "training: world_size=1 backend=gloo" in proc.stdout
    assert "launcher=none world=1" in proc.stderr
