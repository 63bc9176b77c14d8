"""Metrics from real jobs: a script records them with ``distspec.runtime`` (reduced
across real gloo ranks under torchrun), ``distspec metrics`` reads them back (numbers
compared), ``run --wait`` ends with the last value and a sparkline; ``-f`` follows a
running job; a job without metrics is one line."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.cli.test_follow import cli, needs_torch

#: Two ranks record 20 steps: the mean and the max over ranks (rank r's value at step
#: s is s + r), rank 0's own learning rate, and, without init, a plain log call.
SCRIPT = """\
import math, os
from distspec.runtime import init, log
with init() as dist:
    for step in range(1, 21):
        value = float(step + dist.rank)
        dist.log(step=step, reduce="mean", loss=value)
        dist.log(step=step, reduce="max", top=value)
        dist.log(step=step, lr=0.1 * step, bad=math.nan if step == 5 else 1.0)
print("trained", flush=True)
"""


@needs_torch
@pytest.mark.torch
def test_a_jobs_metrics_are_recorded_and_read_back(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SCRIPT)
    proc = cli("run", "--wait", "dist.ddp", "-j", "1x2", "--script", "m.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.splitlines()[0]
    # The end of run --wait: the main metric (loss), its last value and step, a curve.
    line = re.search(r"^  loss: +20\.5 at step 20  ([▁▂▃▄▅▆▇█]+)$", proc.stderr, re.M)
    assert line, proc.stderr
    assert line.group(1)[0] == "▁" and line.group(1)[-1] == "█"
    assert f"  its metrics:   distspec metrics {handle}" in proc.stderr
    assert proc.stderr.rstrip().endswith(f"  its curves:    distspec plot {handle}")

    got = cli("metrics", handle, "--json", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    records = [json.loads(x) for x in got.stdout.splitlines()]
    assert len(records) == 60
    loss = {r["step"]: r["loss"] for r in records if "loss" in r}
    top = {r["step"]: r["top"] for r in records if "top" in r}
    lr = {r["step"]: r["lr"] for r in records if "lr" in r}
    assert loss == {s: s + 0.5 for s in range(1, 21)}
    assert top == {s: s + 1.0 for s in range(1, 21)}
    assert lr == pytest.approx({s: 0.1 * s for s in range(1, 21)})
    assert [r["bad"] for r in records if "bad" in r][4] == "nan"
    assert {r["attempt"] for r in records} == {0}

    table = cli("metrics", handle, "-m", "loss", "-m", "bad", "--tail", "2", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    rows = [x.split() for x in table.stdout.splitlines()]
    assert rows[0] == ["step", "time", "attempt", "loss", "bad"]
    # The last two records with loss or bad: step 20's loss and its lr/bad one (the
    # "top" record between them has neither).
    assert [r[0] for r in rows[1:]] == ["20", "20"]
    assert rows[1][3:] == ["20.5", "-"]
    assert rows[2][3:] == ["-", "1"]

    # describe's timeline: the runtime's process group line, the first metric's step.
    described = cli("describe", handle, cwd=tmp_path)
    assert described.returncode == 0, described.stderr
    timeline = described.stdout.split("timeline:\n", 1)[1].split("\nrole ", 1)[0]
    names = [re.split(r"\s{2,}", line.strip())[1] for line in timeline.splitlines()]
    assert names == ["submitted", "started", "process group up", "first metric", "ended"]
    assert "2 ranks, gloo, init_process_group took" in timeline
    assert "until the first metric: step 1" in timeline

    unknown = cli("metrics", handle, "-m", "accuracy", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().endswith(
        "recorded no metric 'accuracy'; it recorded: loss, top, lr, bad"
    )


def test_a_job_without_metrics_is_one_line(state_dir: Path, tmp_path: Path) -> None:
    proc = cli("run", "--wait", "utils.sh", "--", "echo hi", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "its metrics:" not in proc.stderr
    handle = proc.stdout.splitlines()[0]
    got = cli("metrics", handle, cwd=tmp_path)
    assert got.returncode == 1
    assert got.stdout == ""
    assert len(got.stderr.splitlines()) == 1
    assert "recorded no metrics" in got.stderr and "metrics.jsonl does not exist" in got.stderr
    bad = cli("metrics", "local_cwd://distspec/no-such-app", cwd=tmp_path)
    assert bad.returncode == 2 and "no such app" in bad.stderr


@needs_torch
@pytest.mark.torch
def test_follow_prints_records_as_they_come_until_the_job_ends(
    state_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "slow.py").write_text(
        "import time\n"
        "from distspec.runtime import log\n"
        "for step in range(6):\n"
        "    log(step=step, loss=1.0 / (step + 1))\n"
        "    time.sleep(0.7)\n"
    )
    proc = cli("run", "dist.ddp", "-j", "1x1", "--script", "slow.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.strip().splitlines()[-1]
    follower = subprocess.Popen(
        [sys.executable, "-m", "distspec", "metrics", handle, "-f", "--json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None
    # The first record arrives while the job still runs (it takes > 4 s).
    first = follower.stdout.readline()
    assert json.loads(first)["step"] == 0
    running = cli("status", handle, cwd=tmp_path)
    assert running.stdout.startswith(("RUNNING", "PENDING")), running.stdout
    # Read on through the same buffered stream (communicate() would skip what
    # readline() has already buffered); the timer ends a follower that never stops.
    timer = threading.Timer(120, follower.kill)
    timer.start()
    try:
        rest = follower.stdout.read()
        assert follower.wait() == 0, follower.stderr.read() if follower.stderr else ""
    finally:
        timer.cancel()
    steps = [json.loads(x)["step"] for x in [first, *rest.splitlines()]]
    assert steps == list(range(6))
    assert cli("status", handle, cwd=tmp_path).stdout.startswith("SUCCEEDED")
    losses = [json.loads(x)["loss"] for x in rest.splitlines()]
    assert losses == [pytest.approx(1.0 / (s + 1)) for s in range(1, 6)]
    assert not math.isnan(losses[-1])


def test_a_sweeps_handle_asks_for_a_points(state_dir: Path, tmp_path: Path) -> None:
    proc = cli(
        "run",
        "--wait",
        "--no-log",
        "--sweep",
        "x=1,2",
        "utils.sh",
        "--",
        "echo {{x}}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    sweep = proc.stdout.splitlines()[0]
    got = cli("metrics", sweep, cwd=tmp_path)
    assert got.returncode == 2
    assert got.stderr.strip().endswith(
        f"{sweep} is a sweep of 2 points: give a point's handle (distspec describe {sweep} "
        "lists them)"
    )
