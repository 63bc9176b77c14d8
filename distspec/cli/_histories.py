"""The metrics histories of runs, ready to be drawn (``distspec plot``, a report).

:func:`load_histories` turns handles into one :class:`History` per run: a sweep's
handle stands for its points, each labelled by the values that vary between them
(``lr=0.1 bs=32``); a run's own handle is labelled by its app id, less the prefix
that all those given share (``train-1a2b3c4d`` and ``train-5e6f7a8b`` become
``1a2b3c4d`` and ``5e6f7a8b``). :func:`series` reads one metric of a history as x and
y values, :func:`by_attempt` the same cut where the job restarted, and
:func:`decimate` thins a series to what a chart can show, keeping each stretch's
lowest and highest value (a loss spike stays visible in a million steps).

Nothing beyond the standard library is imported: no plotting library.
"""

from __future__ import annotations

import math
import os

from distspec.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from distspec.metrics import Record
    from distspec.runner import Runner

__all__ = [
    "History",
    "by_attempt",
    "decimate",
    "load_histories",
    "metrics_path",
    "series",
    "shared_prefix",
]

#: What x can be: the record's step, or the seconds since the run's first record.
AXES = ("step", "time")


@frozen
class History:
    """One run's metrics history and how a chart names it."""

    handle: str
    """The run's handle (a sweep point's own handle, for a sweep)."""
    label: str
    """What the legend says: the varying values of a sweep point, else the app id."""
    params: dict[str, str]
    """A sweep point's values by variable name; ``{}`` for a run of its own."""
    records: list[Record]
    """Every record, in file order; ``[]`` when the run recorded none."""
    state: str | None
    """The app's state name (``SUCCEEDED``), None when its scheduler has no record."""


def load_histories(runner: Runner, handles: Sequence[str]) -> list[History]:
    """The history of each run ``handles`` name, in order: a sweep's handle gives its
    points, in point order; a handle named twice counts once.

    Raises:
        AppNotFound: a handle no scheduler knows, or a malformed one.
        UsageError: a sweep whose record cannot be read.
    """
    # handle, params, label (None: a run of its own, labelled below), state
    found: list[tuple[str, dict[str, str], str | None, str | None]] = []
    for handle in handles:
        sweep = runner.sweep(handle)
        if sweep is None:
            own = runner.status(handle)  # AppNotFound for an unknown app
            found.append((handle, {}, None, own.state.value))
            continue
        spec = sweep.sweep
        varying = [
            name for i, name in enumerate(spec.names) if len({p[i] for p in spec.points}) > 1
        ] or list(spec.names)
        states = sweep.states(runner)
        for i, (point, status) in enumerate(zip(sweep.handles, states, strict=True)):
            params = spec.values(i)
            label = " ".join(f"{name}={params[name]}" for name in varying)
            found.append((point, params, label, None if status is None else status.state.value))
    seen: set[str] = set()
    unique = []
    for item in found:
        if item[0] not in seen:
            seen.add(item[0])
            unique.append(item)
    prefix = shared_prefix([_app_id(h) for h, _, label, _ in unique if label is None])
    labels = [label or _app_id(h)[len(prefix) :] for h, _, label, _ in unique]
    labels = _distinct(labels, [h for h, _, _, _ in unique])
    return [
        History(handle=h, label=label, params=params, records=_read(runner, h), state=state)
        for (h, params, _, state), label in zip(unique, labels, strict=True)
    ]


def metrics_path(runner: Runner, handle: str) -> str | None:
    """Where the run keeps its history: ``metrics.jsonl`` in its job folder, or for a
    job folder that is a URL (Kubernetes' ``job_dir``) the ``metrics.d/`` parts there;
    None when it has no job folder."""
    from distspec.metrics import METRICS_FILE, PARTS_DIR

    folder = runner.job_folder(handle)
    if folder is None:
        return None
    if "://" in folder:
        return f"{folder.rstrip('/')}/{PARTS_DIR}/"
    return os.path.join(folder, METRICS_FILE)


def shared_prefix(app_ids: Sequence[str]) -> str:
    """What to cut off the front of each of ``app_ids`` to tell them apart: their
    common beginning up to its last ``-`` or ``_`` (``train-`` for ``train-1a2b``
    and ``train-3c4d``); ``""`` for fewer than two, or where nothing would be left."""
    if len(app_ids) < 2:
        return ""
    common = os.path.commonprefix(list(app_ids))  # noqa: RUF071  (characters, not paths)
    cut = max(common.rfind("-"), common.rfind("_")) + 1
    if any(len(a) <= cut for a in app_ids):
        return ""
    return common[:cut]


def series(
    records: Sequence[Record], metric: str, x: str = "step"
) -> tuple[list[float], list[float]]:
    """The x and y values of ``metric``: one per record that has it, NaN and the
    infinities included, as recorded.

    x is the record's step (its index in ``records`` where it has none), or for
    ``x="time"`` the seconds since the first record.

    Raises:
        ValueError: an ``x`` other than ``step`` or ``time``.
    """
    xs, ys, _ = _columns(records, metric, x)
    return xs, ys


def by_attempt(
    records: Sequence[Record], metric: str, x: str = "step"
) -> list[tuple[int, list[float], list[float]]]:
    """:func:`series` cut where the attempt changes: ``(attempt, xs, ys)`` for each
    stretch of records of one attempt, in file order (a job restarted from a
    checkpoint goes back to an earlier step: its curve starts again there)."""
    xs, ys, attempts = _columns(records, metric, x)
    if not attempts or attempts.count(attempts[0]) == len(attempts):
        return [(attempts[0], xs, ys)] if attempts else []
    out: list[tuple[int, list[float], list[float]]] = []
    start = 0
    for i in range(1, len(attempts) + 1):
        if i == len(attempts) or attempts[i] != attempts[start]:
            out.append((attempts[start], xs[start:i], ys[start:i]))
            start = i
    return out


def decimate(
    xs: Sequence[float], ys: Sequence[float], max_points: int = 2000
) -> tuple[list[float], list[float]]:
    """At most ``max_points`` of the points (xs[i], ys[i]), chosen to draw the same
    curve: the series cut into stretches of equal counts, and of each its lowest and
    highest value, in their order, and its first NaN or infinity (a gap stays a
    gap); the first and last points are always kept. A series of at most
    ``max_points`` comes back whole.

    Raises:
        ValueError: ``max_points`` under 5, or xs and ys of different lengths.
    """
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"{n} x values and {len(ys)} y values")
    if max_points < 5:
        raise ValueError(f"max_points must be >= 5, got {max_points}")
    if n <= max_points:
        return list(xs), list(ys)
    ys = ys if isinstance(ys, list) else list(ys)
    buckets = (max_points - 2) // 3
    keep = {0, n - 1}
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        part = ys[lo:hi]
        if math.isfinite(sum(part)):  # all finite, the usual case: min/max in C
            keep.add(lo + part.index(min(part)))
            keep.add(lo + part.index(max(part)))
            continue
        finite = [(v, lo + i) for i, v in enumerate(part) if math.isfinite(v)]
        if finite:
            keep.add(min(finite)[1])
            keep.add(max(finite)[1])
        keep.add(next(lo + i for i, v in enumerate(part) if not math.isfinite(v)))
    chosen = sorted(keep)
    return [xs[i] for i in chosen], [ys[i] for i in chosen]


def _columns(
    records: Sequence[Record], metric: str, x: str
) -> tuple[list[float], list[float], list[int]]:
    """x, y and attempt of each record that has ``metric`` (see :func:`series`);
    whole columns at a time, which is what makes a million records quick."""
    if x not in AXES:
        raise ValueError(f"x must be one of {', '.join(AXES)}, not {x!r}")
    values = [r.metrics.get(metric) for r in records]
    if x == "step":
        steps = [r.step for r in records]
        if None in steps:
            xs = [float(i if s is None else s) for i, s in enumerate(steps)]
        else:
            xs = list(map(float, steps))  # type: ignore[arg-type]  # no None, checked
    else:
        start = records[0].time if records else 0.0
        xs = [r.time - start for r in records]
    attempts = [r.attempt for r in records]
    if None not in values:
        return xs, values, attempts  # type: ignore[return-value]  # no None, checked
    keep = [i for i, v in enumerate(values) if v is not None]
    return [xs[i] for i in keep], [values[i] for i in keep], [attempts[i] for i in keep]  # type: ignore[misc]


def _app_id(handle: str) -> str:
    return handle.rstrip("/").rsplit("/", 1)[-1]


def _distinct(labels: list[str], handles: list[str]) -> list[str]:
    """``labels``, those that more than one run has (or that are empty) followed by
    the run's app id, or its handle where that is not enough."""
    out = list(labels)
    for attempt in (_app_id, lambda h: h):
        counts: dict[str, int] = {}
        for label in out:
            counts[label] = counts.get(label, 0) + 1
        for i, (label, handle) in enumerate(zip(out, handles, strict=True)):
            if counts[label] > 1 or not label:
                out[i] = f"{labels[i]} ({attempt(handle)})" if labels[i] else attempt(handle)
    return out


def _read(runner: Runner, handle: str) -> list[Record]:
    """The run's records; none (said in one line) where its store cannot be read."""
    import sys

    from distspec.metrics import read_history

    folder = runner.job_folder(handle)
    if folder is None:
        return []
    try:
        return read_history(folder)
    except Exception as e:  # a remote store's own errors (access, network)
        print(
            f"distspec: {handle}: cannot read its metrics in {folder}: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return []
