"""The metrics history's file format (:mod:`distspec.metrics`) and its writer
(:mod:`distspec.runtime.metrics`) in one process; the writer across ranks, real jobs
and the command line are in tests/cli/test_metrics_cli.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from distspec.metrics import (
    Record,
    main_metric,
    metric_names,
    parse_line,
    read_records,
    sparkline,
    value_text,
    wide_range,
)
from distspec.runtime.metrics import MetricsWriter


def _writer(path: Path | None, rank: int = 0, world: int = 1, attempt: int = 0) -> MetricsWriter:
    return MetricsWriter(None if path is None else str(path), rank, world, attempt)


def test_records_round_trip_with_nan_and_infinities(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    w = _writer(path, attempt=2)
    w.log(step=1, loss=0.5, acc=1)
    w.log(step=2, loss=float("nan"), grad=float("inf"))
    w.log(loss=float("-inf"), ok=True)
    w.close()
    lines = path.read_text().splitlines()
    # Each line is strict JSON (no NaN tokens a browser's JSON.parse would refuse).
    parsed = [
        json.loads(line, parse_constant=lambda c: pytest.fail(f"token {c}")) for line in lines
    ]
    assert parsed[1]["loss"] == "nan" and parsed[1]["grad"] == "inf"
    records = read_records(str(path))
    assert [r.step for r in records] == [1, 2, None]
    assert [r.attempt for r in records] == [2, 2, 2]
    assert records[0].metrics == {"loss": 0.5, "acc": 1.0}
    assert math.isnan(records[1].metrics["loss"]) and records[1].metrics["grad"] == math.inf
    assert records[2].metrics == {"loss": -math.inf, "ok": 1.0}
    assert records[0].time <= records[1].time <= records[2].time
    assert metric_names(records) == ["loss", "acc", "grad", "ok"]


def test_values_with_item_are_numbers(tmp_path: Path) -> None:
    class Scalar:  # what a one-element tensor or a NumPy scalar offers
        def item(self) -> float:
            return 0.25

    path = tmp_path / "m.jsonl"
    _writer(path).log(step=3, loss=Scalar())
    assert read_records(str(path))[0].metrics == {"loss": 0.25}


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"step": 1, "loss": "low"}, TypeError, "loss='low' is not a number"),
        ({"step": 1, "loss": [1.0]}, TypeError, "is not a number"),
        ({"step": 1.5, "loss": 1.0}, TypeError, "step must be an int"),
        ({"step": True, "loss": 1.0}, TypeError, "step must be an int"),
        ({"step": 1, "time": 1.0}, ValueError, "'time' is the record's own key"),
        ({"step": 1}, ValueError, "at least one metric"),
        ({"step": 1, "reduce": "median", "loss": 1.0}, ValueError, "use one of mean, sum"),
    ],
)
def test_bad_metrics_are_one_clear_error(
    tmp_path: Path, kwargs: dict[str, object], error: type[Exception], words: str
) -> None:
    path = tmp_path / "m.jsonl"
    with pytest.raises(error, match=words.replace("(", r"\(").replace("[", r"\[")):
        _writer(path).log(**kwargs)  # type: ignore[arg-type]
    assert not path.exists() or path.read_text() == ""


def test_only_rank_0_writes(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    _writer(path, rank=1, world=2).log(step=1, loss=1.0)
    assert not path.exists()
    _writer(path, rank=0, world=2).log(step=1, loss=1.0)
    assert len(read_records(str(path))) == 1


def test_outside_a_job_nothing_is_written_and_nothing_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same script runs under any launcher: outside distspec it records nothing,
    # quietly (no file appears where it runs).
    monkeypatch.chdir(tmp_path)
    w = MetricsWriter.from_env({})
    assert w.path is None and (w.rank, w.world_size, w.attempt) == (0, 1, 0)
    w.log(step=1, loss=1.0)
    w.log(step=2, loss=1.0)
    assert capsys.readouterr() == ("", "")
    assert list(tmp_path.iterdir()) == []
    # Still checked: a bad value is an error there too.
    with pytest.raises(TypeError):
        w.log(step=3, loss="x")


def test_where_and_who_come_from_the_environment(tmp_path: Path) -> None:
    env = {
        "DISTSPEC_JOB_DIR": str(tmp_path),
        "RANK": "3",
        "WORLD_SIZE": "4",
        "TORCHELASTIC_RESTART_COUNT": "1",
        "SLURM_RESTART_COUNT": "2",
    }
    w = MetricsWriter.from_env(env)
    assert w.path == str(tmp_path / "metrics.jsonl")
    assert (w.rank, w.world_size, w.attempt) == (3, 4, 3)
    assert MetricsWriter.from_env({**env, "DISTSPEC_METRICS": "/x/m.jsonl"}).path == "/x/m.jsonl"
    # A job folder that is a URL (Kubernetes' fsspec job_dir): a file of the pod's own,
    # shipped there in parts (tests/schedulers/test_kubernetes_metrics.py).
    remote = MetricsWriter.from_env({"DISTSPEC_JOB_DIR": "s3://b/j"})
    assert remote.path is not None and "://" not in remote.path
    assert remote._shipper is not None and remote._shipper.folder == "s3://b/j/metrics.d"
    assert remote._shipper.every == 10.0
    shipped = MetricsWriter.from_env(
        {"DISTSPEC_JOB_DIR": "s3://b/j", "DISTSPEC_METRICS_SHIP_S": "2"}
    )
    assert shipped._shipper is not None and shipped._shipper.every == 2.0


def test_lines_that_are_not_records_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"step": 1, "time": 5.0, "attempt": 0, "loss": 2}\n'
        "not json\n"
        "[1, 2]\n"
        '{"step": "x", "time": 5.0, "loss": 2}\n'
        '{"step": 2, "loss": 2}\n'
        '{"step": 3, "time": 6.0, "attempt": 0, "loss": 1, "note": "text"}\n'
        '{"step": 4, "time": 7.0, "att'  # cut short by a kill mid-write
    )
    records = read_records(str(path))
    assert [(r.step, r.metrics) for r in records] == [(1, {"loss": 2.0}), (3, {"loss": 1.0})]
    assert read_records(str(tmp_path / "missing.jsonl")) == []
    assert parse_line("") is None


def test_record_to_dict_is_what_is_written() -> None:
    r = Record(7, 1.5, 1, {"loss": math.nan, "acc": 0.5})
    assert r.to_dict() == {"step": 7, "time": 1.5, "attempt": 1, "loss": "nan", "acc": 0.5}


def test_main_metric_prefers_loss() -> None:
    assert main_metric(["acc", "loss", "val_loss"]) == "loss"
    assert main_metric(["acc", "val_loss"]) == "val_loss"
    assert main_metric(["acc", "lr"]) == "acc"
    assert main_metric([]) is None


def test_value_text() -> None:
    assert value_text(0.012345678) == "0.01235"
    assert value_text(0.0) == "0"
    assert value_text(1234567.0) == "1.235e+06"
    assert value_text(math.nan) == "nan" and value_text(-math.inf) == "-inf"


def test_sparkline_shape() -> None:
    assert sparkline([]) == ""
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([8, 7, 6, 5, 4, 3, 2, 1]) == "█▇▆▅▄▃▂▁"
    assert sparkline([3.0, 3.0, 3.0]) == "▄▄▄"
    # A gap where nothing was finite; NaN elsewhere does not spoil a bucket's mean.
    assert sparkline([1.0, math.nan, 2.0, math.nan], width=4) == "▁ █ "
    # A million values in at most `width` characters, the trend kept.
    line = sparkline([float(i) for i in range(1_000_000)], width=40)
    assert len(line) == 40 and line[0] == "▁" and line[-1] == "█"
    assert list(line) == sorted(line)


def test_a_loss_over_orders_of_magnitude_is_drawn_on_a_log_scale() -> None:
    loss = [0.5 * 0.9**i for i in range(100)]  # 0.5 down to ~1.3e-5
    assert wide_range(loss)
    linear = sparkline(loss)
    logged = sparkline(loss, log=True)
    # Linear: most of the curve is in the lowest bar; log: it keeps going down evenly.
    assert linear.count("▁") > 20
    assert logged[0] == "█" and logged[-1] == "▁" and logged.count("▁") < 8
    assert not wide_range([1.0, 2.0]) and not wide_range([-1.0, 1000.0])


def test_orjson_and_the_json_module_read_the_same_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """orjson decodes long histories when installed; the json module is the fallback
    (and decodes each line of a block orjson refuses, e.g. a bare -Infinity)."""

    from distspec import metrics

    pytest.importorskip("orjson", reason="orjson is a dependency; a source build may lack it")
    lines = [
        f'{{"step": {i}, "time": {i}.5, "attempt": 0, "loss": {1 / (i + 1)}}}' for i in range(9000)
    ]
    lines[4500] = '{"step": 4500, "time": 1.0, "attempt": 0, "loss": -Infinity}'
    lines[100] = '{"step": 100, "time": 1.0, "attempt": 0, "loss": "nan"}'
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")

    def rows(records: list[Record]) -> list[tuple[object, ...]]:
        return [(r.step, r.time, r.attempt, repr(r.metrics)) for r in records]

    monkeypatch.setattr(metrics, "_LOADS", None)
    fast = read_records(str(path))
    assert metrics._LOADS is not json.loads  # orjson's
    monkeypatch.setattr(metrics, "_LOADS", json.loads)
    slow = read_records(str(path))
    assert len(fast) == 9000 and rows(fast) == rows(slow)
    assert math.isinf(fast[4500].metrics["loss"]) and math.isnan(fast[100].metrics["loss"])
