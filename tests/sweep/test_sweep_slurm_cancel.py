"""A sweep's cancel on the real local Slurm cluster (scripts/slurm-cluster), through the
``distspec`` CLI: a sweep over MaxArraySize (two arrays) is cancelled by ONE scancel
naming both arrays (scancel is wrapped to record its calls, then runs for real), and
every point ends CANCELLED."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent
TIMEOUT_S = 300


@pytest.fixture
def cluster() -> None:
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _max_array_size() -> int:
    out = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.M)
    assert match, out
    return int(match.group(1))


def test_a_sweep_of_two_arrays_is_cancelled_by_one_scancel(
    cluster: None, state_dir: Path, tmp_path: Path
) -> None:
    size = _max_array_size()
    if size > 64:
        pytest.skip(f"MaxArraySize is {size}: scripts/slurm-cluster sets 16 for this test")
    real = shutil.which("scancel")
    assert real is not None
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    calls = tmp_path / "scancel.calls"
    wrapper = wrappers / "scancel"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{wrappers}:{BIN}:{os.environ.get('PATH', '')}"}

    proc = _cli(
        [
            "run", "-s", "slurm", "--no-log", "-cfg", "snapshot=off", "--yes",
            "--sweep", f"i=range:0:{size + 3}", "utils.sh", "--", "sleep 300 # {{i}}",
        ],
        env,
        tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.split()[0]
    described = json.loads(_cli(["describe", "--json", handle], env, tmp_path).stdout)
    arrays = sorted(
        {p["handle"].rsplit("/", 1)[1].split("_")[0] for p in described["points"]}, key=int
    )
    assert len(arrays) == 2, described["points"]
    try:
        done = _cli(["cancel", handle], env, tmp_path)
        assert done.returncode == 0, done.stderr
        assert calls.read_text().split("\n")[:-1] == [" ".join(arrays)]
        deadline = time.monotonic() + 60
        while True:
            described = json.loads(_cli(["describe", "--json", handle], env, tmp_path).stdout)
            states = [p["status"]["state"] for p in described["points"]]
            if set(states) == {"CANCELLED"} or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert set(states) == {"CANCELLED"}, states
        assert len(states) == size + 3
    finally:
        subprocess.run([real, *arrays], check=False)
