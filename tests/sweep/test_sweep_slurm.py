"""Sweeps and dependencies on the real local two-node Slurm cluster (scripts/slurm-cluster),
through the ``distspec`` CLI as a user runs it: a 12-point sweep under --max-parallel 2
is one job array, never more than two of its tasks run (sampled from squeue while it
runs), each point prints its own values, a failing point fails the sweep and ``rerun
--failed`` runs it alone; a sweep over the cluster's MaxArraySize is split; an afterok
chain whose first job fails never runs the second (and says so), one whose first job
succeeds runs it after."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
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


@pytest.fixture
def env(state_dir: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}


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


class _Sampler:
    """Counts, every 0.2 s, the running tasks of jobs whose comment is ``tag`` (squeue)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.most = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            out = subprocess.run(
                ["squeue", "-h", "-r", "-t", "RUNNING", "-o", "%i %k"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            running = [line for line in out.splitlines() if line.split()[1:] == [self.tag]]
            self.most = max(self.most, len(running))
            self.samples += 1
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_a_12_point_sweep_is_one_array_of_at_most_2_at_once_and_reruns_its_failure(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    tag = f"sweep-test-{os.getpid()}"
    script = (
        'echo "point $DISTSPEC_SWEEP_INDEX lr={{lr}} seed={{seed}} task=$SLURM_ARRAY_TASK_ID"; '
        'sleep 1; [ "{{lr}}" != 0.3 ] || [ "{{seed}}" != 2 ]'
    )
    sampler = _Sampler(tag)
    try:
        proc = _cli(
            [
                "run", "-s", "slurm", "--wait", "--no-log", "-cfg", f"snapshot=off,comment={tag}",
                "--sweep", "lr=0.1,0.2,0.3", "--sweep", "seed=range:0:4", "--max-parallel", "2",
                "utils.sh", "--", script,
            ],
            env,
            tmp_path,
        )  # fmt: skip
    finally:
        sampler.stop()
    assert proc.returncode == 1, proc.stderr  # the point lr=0.3 seed=2 failed
    handle = proc.stdout.split()[0]
    assert "/sweep-" in handle
    assert 0 < sampler.most <= 2, (sampler.most, sampler.samples)
    assert "lr=0.3 seed=2  FAILED" in proc.stderr
    described = json.loads(_cli(["describe", "--json", handle], env, tmp_path).stdout)
    points = described["points"]
    assert len(points) == 12
    array = points[0]["handle"].rsplit("/", 1)[1].split("_")[0]
    # one submission: every point is a task of the same array
    assert [p["handle"].rsplit("/", 1)[1] for p in points] == [f"{array}_{i}" for i in range(12)]
    for i, point in enumerate(points):
        v = point["values"]
        log = _cli(["log", point["handle"]], env, tmp_path).stdout
        assert f"point {i} lr={v['lr']} seed={v['seed']} task={i}" in log, log
        want = "FAILED" if (v["lr"], v["seed"]) == ("0.3", "2") else "SUCCEEDED"
        assert point["status"]["state"] == want, point

    again = _cli(["rerun", "--failed", handle, "--wait", "--no-log"], env, tmp_path)
    assert again.returncode == 1, again.stderr  # it fails again, alone
    assert "rerunning 1 of 12 points" in again.stderr
    new = json.loads(_cli(["describe", "--json", again.stdout.split()[0]], env, tmp_path).stdout)
    assert [p["values"] for p in new["points"]] == [{"lr": "0.3", "seed": "2"}]


def test_a_sweep_over_max_array_size_is_split_into_arrays(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    size = _max_array_size()
    if size > 64:
        pytest.skip(f"MaxArraySize is {size}: scripts/slurm-cluster sets 16 for this test")
    count = size + 3
    proc = _cli(
        [
            "run", "-s", "slurm", "--wait", "--no-log", "-cfg", "snapshot=off", "--yes",
            "--sweep", f"i=range:0:{count}", "utils.sh", "--", "echo item {{i}}",
        ],
        env,
        tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.split()[0]
    described = json.loads(_cli(["describe", "--json", handle], env, tmp_path).stdout)
    ids = [p["handle"].rsplit("/", 1)[1] for p in described["points"]]
    arrays = sorted({i.split("_")[0] for i in ids}, key=int)
    assert len(arrays) == 2, ids
    assert ids[size] == f"{arrays[1]}_0" and ids[-1] == f"{arrays[1]}_2"
    assert {p["status"]["state"] for p in described["points"]} == {"SUCCEEDED"}
    last = _cli(["log", described["points"][-1]["handle"]], env, tmp_path).stdout
    assert f"item {count - 1}" in last


def _job(handle: str, env: dict[str, str], cwd: Path) -> dict[str, object]:
    out = _cli(["describe", "--json", handle], env, cwd)
    assert out.returncode == 0, out.stderr
    data: dict[str, object] = json.loads(out.stdout)
    return data


def test_afterok_chains(cluster: None, env: dict[str, str], tmp_path: Path) -> None:
    base = ["run", "-s", "slurm", "-cfg", "snapshot=off"]
    bad = _cli([*base, "utils.sh", "--", "sleep 2; exit 3"], env, tmp_path)
    assert bad.returncode == 0, bad.stderr
    a = bad.stdout.strip()
    b = _cli(
        [*base, "--wait", "--no-log", "--after", a, "utils.sh", "--", "echo ran"], env, tmp_path
    )
    assert b.returncode != 0, b.stderr
    b_handle = b.stdout.split()[0]
    status = _job(b_handle, env, tmp_path)
    assert status["state"] == "CANCELLED", status
    assert "ran" not in _cli(["log", b_handle], env, tmp_path).stdout
    assert _job(a, env, tmp_path)["state"] == "FAILED"

    good = _cli([*base, "utils.sh", "--", "sleep 2; date +%s.%N"], env, tmp_path)
    a = good.stdout.strip()
    c = _cli(
        [*base, "--wait", "--no-log", "--after", f"{a}:ok", "utils.sh", "--", "date +%s.%N"],
        env,
        tmp_path,
    )
    assert c.returncode == 0, c.stderr
    first = float(_cli(["log", "--raw", a], env, tmp_path).stdout.split()[-1])
    second = float(_cli(["log", "--raw", c.stdout.split()[0]], env, tmp_path).stdout.split()[-1])
    assert second > first, (first, second)
