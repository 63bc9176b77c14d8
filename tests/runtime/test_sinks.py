"""Metrics sinks (DISTSPEC_METRICS_SINKS): each record written through the real library
and read back with that library's own reader; real torchrun for the 2-rank case."""

from __future__ import annotations

import glob
import json
import math
import os
import re
import struct
import subprocess
import sys
import zlib
from collections.abc import Mapping
from pathlib import Path

import pytest

from distspec.metrics import read_records
from distspec.runtime.metrics import MetricsWriter
from distspec.runtime.sinks import SINKS, Job, Sinks, _wandb_key_at_hand

from .launched import TORCHRUN, clean_env, run

REPO = Path(__file__).resolve().parents[2]

#: Records with a NaN, both infinities and a step left out.
RECORDS: list[tuple[int | None, dict[str, float]]] = [
    (0, {"loss": 1.0, "lr": 0.1}),
    (5, {"loss": 0.5, "lr": 0.1}),
    (10, {"loss": math.nan, "lr": math.inf}),
    (None, {"loss": 0.25, "lr": -math.inf}),  # the last step sent plus one: 11
]
STEPS = [0, 5, 10, 11]


def _f32(x: float) -> float:
    """``x`` as TensorBoard keeps it (a float32 ``simple_value``)."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _same(got: float, want: float) -> bool:
    return (math.isnan(got) and math.isnan(want)) or got == want


def _log_all(writer: MetricsWriter) -> None:
    for step, values in RECORDS:
        writer.log(step=step, **values)


def _tensorboard(folder: Path) -> dict[str, list[tuple[int, float, float]]]:
    """(step, value, wall time) per tag, read with TensorBoard's own EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {
        tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
    }


# --- TensorBoard -----------------------------------------------------------------------


def test_tensorboard_reads_back_every_record_while_the_job_runs(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    writer = MetricsWriter(str(tmp_path / "metrics.jsonl"), 0, 1, 0, sinks=["tensorboard"])
    _log_all(writer)
    # flushed with each record: readable before the writer is closed
    got = _tensorboard(tmp_path / "tensorboard")
    writer.close()
    assert sorted(got) == ["loss", "lr"]
    for name in ("loss", "lr"):
        assert [step for step, _, _ in got[name]] == STEPS
        want = [_f32(values[name]) for _, values in RECORDS]
        assert all(_same(g, w) for (_, g, _), w in zip(got[name], want, strict=True)), got
    # the same values and times as metrics.jsonl
    records = read_records(str(tmp_path / "metrics.jsonl"))
    assert [r.step for r in records] == [0, 5, 10, None]
    for record, (_, loss, when) in zip(records, got["loss"], strict=True):
        assert _same(loss, _f32(record.metrics["loss"])) and when == pytest.approx(record.time)
    assert len(os.listdir(tmp_path / "tensorboard")) == 1


def test_a_closed_writer_starts_its_sinks_again_on_the_next_record(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    writer = MetricsWriter(str(tmp_path / "metrics.jsonl"), 0, 1, 0, sinks=["tensorboard"])
    writer.log(step=1, loss=1.0)
    writer.close()
    writer.log(step=2, loss=2.0)
    writer.close()
    assert [(s, v) for s, v, _ in _tensorboard(tmp_path / "tensorboard")["loss"]] == [
        (1, 1.0),
        (2, 2.0),
    ]
    assert len(os.listdir(tmp_path / "tensorboard")) == 2


def test_the_folder_is_the_metrics_files_and_only_rank_0_starts_sinks(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    target = tmp_path / "sub" / "m.jsonl"
    target.parent.mkdir()
    env = {"DISTSPEC_METRICS": str(target), "DISTSPEC_METRICS_SINKS": " tensorboard, "}
    MetricsWriter.from_env(env, rank=1, world_size=2).log(step=0, loss=1.0)
    assert not (target.parent / "tensorboard").exists()
    writer = MetricsWriter.from_env(env, rank=0, world_size=2)
    writer.log(step=0, loss=1.0)
    writer.close()
    assert [v for _, v, _ in _tensorboard(target.parent / "tensorboard")["loss"]] == [1.0]


def test_outside_a_job_no_sink_starts_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    writer = MetricsWriter.from_env({"DISTSPEC_METRICS_SINKS": "tensorboard,wandb,mlflow"})
    writer.log(step=0, loss=1.0)
    writer.close()
    assert list(tmp_path.iterdir()) == []


# --- failures --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("tensorbord", " (did you mean tensorboard?)"),
        ("comet", ""),
        ("WandB,,mlfow", " (did you mean mlflow?)"),
        ("tensorboard+wandbb", " (did you mean wandb?)"),  # + as --env cannot pass a comma
    ],
)
def test_an_unknown_sink_is_one_line_naming_the_known_ones(text: str, hint: str) -> None:
    with pytest.raises(ValueError) as info:
        MetricsWriter.from_env({"DISTSPEC_METRICS_SINKS": text})
    bad = re.split(r"[,+]", text)[-1]
    assert str(info.value) == (
        f"distspec.runtime.log: DISTSPEC_METRICS_SINKS names an unknown metrics sink "
        f"{bad!r}{hint}; the known ones: tensorboard, wandb, mlflow"
    )
    with pytest.raises(ValueError, match="^distspec.runtime.log: sinks names an unknown"):
        MetricsWriter(None, 0, 1, 0, sinks=[bad])


def test_a_missing_package_is_one_line_and_the_call_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    writer = MetricsWriter(str(tmp_path / "m.jsonl"), 0, 1, 0, sinks=["tensorboard", "mlflow"])
    with pytest.raises(ImportError) as info:
        writer.log(step=0, loss=1.0)
    assert str(info.value) == (
        "distspec.runtime.log: the mlflow sink needs the mlflow package: "
        "pip install 'distspec[mlflow]'"
    )
    assert info.value.name == "mlflow" and info.value.__cause__ is None
    # all or none: the sink whose package is there was not started either
    assert not (tmp_path / "m.jsonl").exists() and not (tmp_path / "tensorboard").exists()


def test_a_broken_package_is_one_line_saying_why(tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "tensorboard"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('protobuf is too old')\n")
    script = (
        "from distspec.runtime.metrics import MetricsWriter\n"
        f"MetricsWriter({str(tmp_path / 'm.jsonl')!r}, 0, 1, 0, sinks=['tensorboard'])"
        ".log(step=0, loss=1.0)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(REPO)])},
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        "ImportError: distspec.runtime.log: the tensorboard sink could not import "
        "tensorboard (ImportError: protobuf is too old)"
    )


class _Broken:
    """A sink that starts, takes one record, then fails."""

    modules = ("json",)
    records: list[int] = []

    def __init__(self, job: Job) -> None:
        self.job = job

    def write(self, step: int, when: float, values: Mapping[str, float]) -> None:
        if _Broken.records:
            raise OSError("No space left on device\nsecond line")
        _Broken.records.append(step)

    def close(self) -> None:
        raise RuntimeError("cannot close either")


class _Unstartable(_Broken):
    def __init__(self, job: Job) -> None:
        raise ConnectionError("no route to host")


def test_a_failing_sink_is_reported_once_and_dropped_and_the_history_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(SINKS, "broken", _Broken)  # type: ignore[index]
    monkeypatch.setitem(SINKS, "unstartable", _Unstartable)  # type: ignore[index]
    monkeypatch.setattr(_Broken, "records", [])
    writer = MetricsWriter(str(tmp_path / "m.jsonl"), 0, 1, 0, sinks=["broken", "unstartable"])
    for step in range(4):
        writer.log(step=step, loss=float(step))
    writer.close()
    assert capsys.readouterr().err.splitlines() == [
        "distspec.runtime.log: the unstartable sink could not start (ConnectionError: no "
        "route to host); it is off from here on, metrics.jsonl goes on",
        "distspec.runtime.log: the broken sink failed (OSError: No space left on device); "
        "it is off from here on, metrics.jsonl goes on",
    ]
    assert _Broken.records == [0]
    assert [r.step for r in read_records(str(tmp_path / "m.jsonl"))] == [0, 1, 2, 3]


def test_a_sink_that_fails_to_close_is_reported_and_the_others_are_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("tensorboard")
    monkeypatch.setitem(SINKS, "broken", _Broken)  # type: ignore[index]
    monkeypatch.setattr(_Broken, "records", [])
    sinks = Sinks(["broken", "tensorboard"], Job(folder=str(tmp_path), name="j"))
    sinks.write(None, 1.0, {"loss": 1.0})
    assert sinks.active == ("broken", "tensorboard")
    sinks.close()
    assert sinks.active == ()
    assert capsys.readouterr().err == (
        "distspec.runtime.log: the broken sink failed to close (RuntimeError: cannot close "
        "either)\n"
    )
    assert [s for s, _, _ in _tensorboard(tmp_path / "tensorboard")["loss"]] == [0]


# --- W&B -------------------------------------------------------------------------------


def test_wandb_goes_online_only_with_a_key_at_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    assert not _wandb_key_at_hand()  # no file
    netrc.write_text("machine example.org login user password secret\n")
    assert not _wandb_key_at_hand()
    netrc.write_text("machine api.wandb.ai login user password secret\n")
    netrc.chmod(0o600)
    assert _wandb_key_at_hand()
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert not _wandb_key_at_hand()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert _wandb_key_at_hand()


def _wandb_records(path: str) -> list[object]:
    """The records of a ``.wandb`` file (a LevelDB-style log of ``Record`` protos, each
    chunk checked against its CRC-32), parsed with W&B's own proto classes: wandb 0.31
    keeps no Python reader of its own."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, pending, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header
            pos += block - pos % block
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        body = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        assert zlib.crc32(body, zlib.crc32(bytes([kind]))) == crc
        pending += body
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


@pytest.mark.timeout(180)
def test_wandb_offline_run_in_the_job_folder_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    job = tmp_path / "job"
    job.mkdir()
    script = tmp_path / "train.py"
    script.write_text(
        "import math\n"
        "from distspec.runtime import log\n"
        "log(step=0, loss=1.0)\n"
        "log(step=3, loss=math.nan, acc=math.inf)\n"
        "log(loss=0.25)\n"
    )
    env = clean_env(
        DISTSPEC_JOB_DIR=str(job),
        DISTSPEC_APP_ID="train-x1",
        DISTSPEC_METRICS_SINKS="wandb",
        HOME=str(tmp_path),  # no netrc, no W&B settings of the machine's user
        WANDB_CONFIG_DIR=str(tmp_path / "config"),
        WANDB_CACHE_DIR=str(tmp_path / "cache"),
        WANDB_DATA_DIR=str(tmp_path / "data"),
        WANDB_BASE_URL="http://127.0.0.1:9",  # nothing there: a network attempt would fail
        WANDB_SILENT="true",
    )
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_NAME"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "distspec.runtime.log" not in proc.stderr, proc.stderr
    files = glob.glob(str(job / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1, os.listdir(job)
    records = _wandb_records(files[0])
    kinds = [r.WhichOneof("record_type") for r in records]  # type: ignore[attr-defined]
    assert "exit" in kinds  # finished, at exit
    run_record = next(r.run for r in records if r.WhichOneof("record_type") == "run")  # type: ignore[attr-defined]
    assert (run_record.project, run_record.display_name) == ("distspec", "train-x1")
    history = [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}  # type: ignore[attr-defined]
        for r in records
        if r.WhichOneof("record_type") == "history"  # type: ignore[attr-defined]
    ]
    # NaN and the infinities are kept (W&B writes them as NaN and Infinity)
    assert [h["_step"] for h in history] == [0, 3, 4]
    assert [h["loss"] for h in history][::2] == [1, 0.25] and math.isnan(history[1]["loss"])
    assert history[1]["acc"] == math.inf


# --- MLflow ----------------------------------------------------------------------------


def test_mlflow_file_store_in_the_job_folder_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME",
                 "MLFLOW_EXPERIMENT_ID", "MLFLOW_ENABLE_ASYNC_LOGGING"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    # set, then unset: restored to what it was after the test, whatever the sink sets
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "false")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    env = {"DISTSPEC_JOB_DIR": str(tmp_path), "DISTSPEC_APP_ID": "train-x2",
           "DISTSPEC_METRICS_SINKS": "mlflow"}  # fmt: skip
    writer = MetricsWriter.from_env(env)
    _log_all(writer)
    writer.close()

    uri = (tmp_path / "mlruns").as_uri()
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("distspec")
    assert experiment is not None
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "train-x2" and found.info.status == "FINISHED"
    for name in ("loss", "lr"):
        history = client.get_metric_history(found.info.run_id, name)
        got = sorted((m.step, m.value) for m in history)
        assert [s for s, _ in got] == STEPS
        want = [values[name] for _, values in RECORDS]
        assert all(_same(g, w) for (_, g), w in zip(got, want, strict=True)), got

    # MLFLOW_RUN_ID: that run gets the records and is left open
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_RUN_ID", found.info.run_id)
    other = tmp_path / "elsewhere"
    other.mkdir()
    writer = MetricsWriter(str(other / "m.jsonl"), 0, 1, 0, sinks=["mlflow"])
    writer.log(step=12, loss=0.125)
    writer.close()
    assert not (other / "mlruns").exists()
    history = client.get_metric_history(found.info.run_id, "loss")
    assert sorted(m.step for m in history) == [*STEPS, 12]


# --- real ranks ------------------------------------------------------------------------

TRAIN = """\
from distspec.runtime import init

with init() as dist:
    for step in range(1, 6):
        dist.log(step=step, reduce="mean", loss=1.0 / step + dist.rank)
    dist.log(lr=0.1 + dist.rank)  # rank 0's value, the step after the last
"""


@pytest.mark.torch
@pytest.mark.timeout(240)
def test_two_ranks_under_torchrun_tensorboard_matches_the_history(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tensorboard")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    job = tmp_path / "job"
    job.mkdir()
    proc = run(
        [TORCHRUN, "--standalone", "--nproc_per_node", "2", str(script)],
        DISTSPEC_JOB_DIR=str(job),
        DISTSPEC_METRICS_SINKS="tensorboard",
        OMP_NUM_THREADS="1",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = read_records(str(job / "metrics.jsonl"))
    assert [r.step for r in records] == [1, 2, 3, 4, 5, None]
    assert [r.metrics["loss"] for r in records[:5]] == [1.0 / s + 0.5 for s in range(1, 6)]
    assert len(os.listdir(job / "tensorboard")) == 1  # rank 0's only
    got = _tensorboard(job / "tensorboard")
    assert [(s, v) for s, v, _ in got["loss"]] == [
        (r.step, _f32(r.metrics["loss"])) for r in records[:5]
    ]
    assert [(s, v) for s, v, _ in got["lr"]] == [(6, _f32(0.1))]


def test_the_sinks_are_not_imported_until_asked_for() -> None:
    code = (
        "import sys\n"
        "from distspec.runtime.metrics import MetricsWriter, log\n"
        "MetricsWriter.from_env({'DISTSPEC_METRICS_SINKS': 'tensorboard,wandb,mlflow'})"
        ".log(step=0, loss=1.0)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorboard', 'wandb', 'mlflow', 'torch')))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=True,
    )
    assert proc.stdout.strip() == "[]"
