"""A job's metrics history: the file format, read back, and drawn as a sparkline.

A job records metrics with :func:`distspec.runtime.log` (or ``Dist.log``): rank 0
appends one JSON object per call to ``metrics.jsonl`` in the job folder
(``$DISTSPEC_JOB_DIR``) and flushes it, so a running job can be read::

    {"step": 10, "time": 1764233000.12, "attempt": 0, "loss": 0.51, "acc": 0.8}

- ``step``: the script's step, an integer, or null when it gave none;
- ``time``: when it was recorded, Unix seconds;
- ``attempt``: 0 for the job's first start, then one more for each restart of its
  workers by torchrun (``--max_restarts``, ``TORCHELASTIC_RESTART_COUNT``) and each
  requeue by Slurm (``SLURM_RESTART_COUNT``), so a resumed run continues its curve
  and the attempts can be told apart;
- every other key is a metric: a number, NaN and the infinities written as the
  strings ``"nan"``, ``"inf"`` and ``"-inf"`` (JSON has no such numbers).

A line that is not such an object (cut short when the job was killed mid-write) is
skipped. This module is what the command line reads it with (``distspec metrics``,
the end of ``run --wait``): the standard library only, no torch.
"""

from __future__ import annotations

import json
import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = [
    "METRICS_FILE",
    "PARTS_DIR",
    "RESERVED",
    "Record",
    "decode_value",
    "encode_value",
    "main_metric",
    "metric_names",
    "parse_line",
    "read_history",
    "read_records",
    "records_of",
    "sparkline",
    "value_text",
    "wide_range",
]

#: The file in the job folder.
METRICS_FILE = "metrics.jsonl"

#: The folder, in a job folder that is a URL, of the parts the runtime ships.
PARTS_DIR = "metrics.d"

#: The keys every record has; no metric may be called so.
RESERVED = ("step", "time", "attempt")

#: The characters of a sparkline, lowest to highest.
_BARS = "▁▂▃▄▅▆▇█"

_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class Record:
    """One line of the history: its step, time, attempt and metrics (name -> value)."""

    __slots__ = ("attempt", "metrics", "step", "time")

    def __init__(
        self, step: int | None, time: float, attempt: int, metrics: dict[str, float]
    ) -> None:
        self.step = step
        self.time = time
        self.attempt = attempt
        self.metrics = metrics

    def to_dict(self) -> dict[str, object]:
        """The record as written (non-finite values as strings)."""
        out: dict[str, object] = {"step": self.step, "time": self.time, "attempt": self.attempt}
        out.update((k, encode_value(v)) for k, v in self.metrics.items())
        return out


def encode_value(value: float) -> float | str:
    """A metric value as JSON can hold it: a finite float, or ``nan``/``inf``/``-inf``."""
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def decode_value(value: object) -> float | None:
    """A metric value read back; None for anything that is not one."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return _SPECIAL.get(value)
    return None


def parse_line(line: str) -> Record | None:
    """The record on one line of ``metrics.jsonl``, or None when it is not one."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    step = data.get("step")
    when = data.get("time")
    attempt = data.get("attempt", 0)
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        return None
    if not isinstance(when, (int, float)) or not isinstance(attempt, int):
        return None
    metrics = {}
    for key, raw in data.items():
        if key in RESERVED:
            continue
        value = decode_value(raw)
        if value is not None:
            metrics[key] = value
    return Record(step, float(when), attempt, metrics)


def read_records(path: str) -> list[Record]:
    """Every record in the file at ``path`` (a missing file: none); unreadable lines
    are skipped: the records :func:`parse_line` finds, line by line.

    A million lines are read in one pass of the JSON decoder over each block of
    lines, the garbage collector paused (a million records are a million dicts,
    which would start a full collection again and again for nothing to free)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    return records_of(lines)


def read_history(folder: str) -> list[Record]:
    """The history a job recorded in its job folder ``folder``: a path (its
    ``metrics.jsonl``), or an fsspec URL (Kubernetes' ``job_dir``), where the runtime
    ships the records in parts: ``metrics.jsonl`` there if any, then every part in
    ``metrics.d/``, in name (time) order. A folder without either: no records.

    Raises:
        Exception: the store's own, for a URL that cannot be read (no access, no
            network); the caller says it in one line.
    """
    import os

    if "://" not in folder:
        return read_records(os.path.join(folder, METRICS_FILE))
    import fsspec

    fs, root = fsspec.core.url_to_fs(folder)
    fs.invalidate_cache()  # a live job adds parts: list them anew
    texts: list[bytes] = []
    try:
        texts.append(fs.cat_file(f"{root}/{METRICS_FILE}"))
    except FileNotFoundError:
        pass
    try:
        parts = sorted(
            p for p in fs.ls(f"{root}/{PARTS_DIR}", detail=False) if p.endswith(".jsonl")
        )
    except FileNotFoundError:
        parts = []
    if parts:
        got = fs.cat(parts)
        texts.extend(got[p] for p in parts if isinstance(got.get(p), bytes))
    lines: list[str] = []
    for text in texts:
        lines.extend(text.decode("utf-8", "replace").splitlines())
    return records_of(lines)


def records_of(lines: list[str]) -> list[Record]:
    """The records on ``lines`` (see :func:`read_records`)."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        out: list[Record] = []
        for start in range(0, len(lines), _BLOCK):
            _records(_objects(lines[start : start + _BLOCK]), out)
        return out
    finally:
        if collecting:
            gc.enable()


#: Lines decoded at once by :func:`read_records`.
_BLOCK = 4096


_LOADS: Any = None


def _loads() -> Any:
    """orjson's ``loads`` where it can be imported, else the standard library's."""
    global _LOADS
    if _LOADS is None:
        try:
            import orjson

            _LOADS = orjson.loads
        except ImportError:  # a source build without it: slower, the same records
            _LOADS = json.loads
    return _LOADS


def _objects(lines: list[str]) -> list[object]:
    """The JSON value on each line, None where there is none.

    The block is decoded as one JSON array, by orjson where it is installed (a
    dependency: 3 to 4 times the standard decoder's speed on a long history); where
    that fails (a line that is not JSON, cut short or empty) or yields another number
    of values than lines (a line holding two), each line is decoded alone by the
    standard decoder."""
    try:
        values: list[object] = _loads()("[" + ",".join(lines) + "]")
    except ValueError:  # orjson's error is a ValueError too
        pass
    else:
        if len(values) == len(lines):
            return values
    out: list[object] = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(None)
    return out


def _records(values: list[object], out: list[Record]) -> None:
    """Append to ``out`` the record of each value that is one, as :func:`parse_line`
    makes it (the decoded dicts are kept as the metrics, less the reserved keys)."""
    for data in values:
        if type(data) is not dict:
            continue
        step = data.pop("step", None)
        when = data.pop("time", None)
        attempt = data.pop("attempt", 0)
        if step is not None and type(step) is not int:  # not a bool either
            continue
        if type(when) is not float:
            if not isinstance(when, (int, float)):
                continue
            when = float(when)
        if not isinstance(attempt, int):
            continue
        metrics: dict[str, float] = data
        for value in data.values():
            if type(value) is not float:  # an int, a "nan", or no value at all: rare
                metrics = {}
                for key, raw in data.items():
                    decoded = decode_value(raw)
                    if decoded is not None:
                        metrics[key] = decoded
                break
        out.append(Record(step, when, attempt, metrics))


def metric_names(records: Iterable[Record]) -> list[str]:
    """The metrics recorded, in the order they first appear."""
    seen: dict[str, None] = {}
    for record in records:
        for name in record.metrics:
            seen.setdefault(name, None)
    return list(seen)


def main_metric(names: Sequence[str]) -> str | None:
    """The metric a summary shows: ``loss`` if recorded, else the first whose name
    has ``loss`` in it, else the first; None when there are none."""
    if "loss" in names:
        return "loss"
    return next((n for n in names if "loss" in n.lower()), names[0] if names else None)


def value_text(value: float) -> str:
    """A value as a person reads it: ``0.01234``, ``1.235e+06``, ``nan``, ``inf``."""
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.4g}" if value == 0 or 1e-4 <= abs(value) < 1e6 else f"{value:.3e}"


def wide_range(values: Sequence[float]) -> bool:
    """Whether ``values`` are all positive and span two orders of magnitude or more
    (a loss from 0.5 to 0.002): then a log scale shows the end of the curve, which a
    linear one flattens into its lowest bar."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) >= 100


def sparkline(values: Sequence[float], width: int = 40, *, log: bool = False) -> str:
    """``values`` as at most ``width`` bar characters, low to high: each character is
    the mean of the finite values of its share of the series (a million values draw
    as fast as forty). A share with no finite value is a space; a flat series is a
    row of middle bars. ``log``: bars by the logarithm of the values (all positive,
    see :func:`wide_range`)."""
    if not values or width < 1:
        return ""
    n = len(values)
    buckets = min(width, n)
    means: list[float | None] = []
    for b in range(buckets):
        part = values[b * n // buckets : (b + 1) * n // buckets]
        finite = [v for v in part if math.isfinite(v)]
        means.append(sum(finite) / len(finite) if finite else None)
    if log:
        means = [math.log10(m) if m is not None and m > 0 else None for m in means]
    shown = [m for m in means if m is not None]
    if not shown:
        return " " * buckets
    low, high = min(shown), max(shown)
    top = len(_BARS) - 1
    out = []
    for m in means:
        if m is None:
            out.append(" ")
        elif high == low:
            out.append(_BARS[top // 2])
        else:
            out.append(_BARS[round((m - low) / (high - low) * top)])
    return "".join(out)
