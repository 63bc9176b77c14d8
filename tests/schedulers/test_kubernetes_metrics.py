"""Metrics of a Kubernetes run, whose job folder is an fsspec URL: rank 0 ships its
records to ``<job folder>/metrics.d/`` in parts (a real S3 API server, moto in server
mode, through s3fs; and ``file://``), and ``distspec metrics``/``plot``/``report`` on the
submitting machine read them back (numbers compared).

As in test_kubernetes_snapshot.py, the API server is the loopback fake and the pod's
command is taken from the Job distspec created and run here with bash and a real
torchrun (CPU, one process): no kubelet can run here (docs/schedulers/kubernetes.md).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from distspec.metrics import PARTS_DIR, read_history
from distspec.runner import Runner
from distspec.runtime.metrics import MetricsWriter
from tests.k8s_fake_server import FakeApiServer
from tests.schedulers.test_kubernetes_snapshot import (  # noqa: F401  (fixtures)
    VENV_BIN,
    _ddp,
    _job,
    _run_pod_command,
    api,
    bucket,
    moto_endpoint,
    repo,
)

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")

#: The pod's script: 12 steps of loss 1 / step, and a second metric every third step.
TRAIN = """\
from distspec.runtime import init
with init() as dist:
    for step in range(1, 13):
        dist.log(step=step, loss=1.0 / step)
        if step % 3 == 0:
            dist.log(step=step, acc=step / 12)
print("trained", flush=True)
"""


def _url(where: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if where == "s3":
        return f"s3://{request.getfixturevalue('bucket').bucket}/jobs"
    return f"file://{tmp_path}/shared/jobs"


@pytest.mark.parametrize("where", ["s3", "file"])
def test_records_go_up_in_parts_and_read_back_in_order(
    where: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    folder = _url(where, request, tmp_path) + "/run-1"
    first = MetricsWriter(str(tmp_path / "a.jsonl"), 0, 1, 0, remote=folder, every=0.2)
    for step in range(1, 11):
        first.log(step=step, loss=1.0 / step)
    # The background thread ships them while the job runs (no close yet).
    deadline = time.monotonic() + 30
    while len(read_history(folder)) < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    shipped_while_running = len(read_history(folder))
    for step in range(11, 21):
        first.log(step=step, loss=1.0 / step)
    first.close()
    # A restart: a new process (attempt 1) goes on from step 15.
    second = MetricsWriter(str(tmp_path / "b.jsonl"), 0, 1, 1, remote=folder, every=0.2)
    for step in range(15, 18):
        second.log(step=step, loss=float("nan") if step == 16 else 2.0 / step)
    second.close()

    assert shipped_while_running == 10
    records = read_history(folder)
    assert [(r.step, r.attempt) for r in records] == [(s, 0) for s in range(1, 21)] + [
        (s, 1) for s in range(15, 18)
    ]
    assert [r.metrics["loss"] for r in records[:20]] == [1.0 / s for s in range(1, 21)]
    assert str(records[21].metrics["loss"]) == "nan"
    import fsspec

    fs, root = fsspec.core.url_to_fs(folder)
    parts = fs.ls(f"{root}/{PARTS_DIR}", detail=False)
    assert len(parts) >= 3  # during the run, at the first close, at the second
    # And a folder with nothing in it has no records.
    assert read_history(_url(where, request, tmp_path) + "/empty") == []


def test_a_store_that_cannot_be_written_is_said_once_and_training_goes_on(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    folder = f"file://{tmp_path}/file/job"  # under a file: no folder can be made
    writer = MetricsWriter(str(tmp_path / "m.jsonl"), 0, 1, 0, remote=folder, every=0.1)
    for step in range(1, 6):
        writer.log(step=step, loss=1.0)
        time.sleep(0.1)
    writer.close()
    err = capfd.readouterr().err
    assert err.count("distspec.runtime.log: could not send metrics to") == 1, err
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 5  # kept in the pod


@pytest.mark.torch
@pytest.mark.slow
def test_a_pods_metrics_are_read_back_on_the_submitting_machine(
    repo: Path,  # noqa: F811  (the fixture)
    api: FakeApiServer,  # noqa: F811  (the fixture)
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    pytest.importorskip("torch", reason="torchrun runs the pod's command")
    job_dir = _url("s3", request, tmp_path)
    (repo / "train.py").write_text(TRAIN)
    runner = Runner()
    app = runner.bind(
        _ddp(), ["-j", "1x1", "--image", "img:1", "--script", "train.py"], scheduler="kubernetes"
    )
    handle = runner.submit(runner.dryrun(app, "kubernetes", {"snapshot": "on", "job_dir": job_dir}))
    out = _run_pod_command(_job(api, handle.app_id), tmp_path / "pod-tmp", {})
    assert "trained" in out, out

    def distspec(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [f"{VENV_BIN}/distspec", *args],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    got = distspec("metrics", handle.format(), "--json")
    assert got.returncode == 0, got.stderr
    records: list[dict[str, Any]] = [json.loads(x) for x in got.stdout.splitlines()]
    assert [r["loss"] for r in records if "loss" in r] == [1.0 / s for s in range(1, 13)]
    assert [(r["step"], r["acc"]) for r in records if "acc" in r] == [
        (s, s / 12) for s in (3, 6, 9, 12)
    ]
    plot = distspec("plot", handle.format(), "--width", "60", "--height", "15")
    assert plot.returncode == 0, plot.stderr
    assert "loss" in plot.stdout.splitlines()[0]
    report = distspec("report", handle.format(), "-o", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r.html").read_text().count('<svg class="chart"') == 2
