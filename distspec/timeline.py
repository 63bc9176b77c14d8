"""A run's timeline: when it was submitted, started, when each node's launcher
started, when the process group was up, its first metric, and when it ended.

Put together from what is already kept, nothing asked of the scheduler twice:

- **submitted, started, ended**: the scheduler's status (:class:`AppStatus`);
- **launchers**: when each replica's wrapper began on its node, the modification time
  of the ``<role>-<i>.host`` file it writes first (Slurm, PBS), else the replica's own
  start time where the scheduler keeps one (local: its supervisor's record);
- **process group up**: ``timeline.jsonl`` in the job folder, where rank 0 of
  :func:`distspec.runtime.init` appends one line per attempt once its process group
  is up (:data:`TIMELINE_FILE`); a script that never calls ``init()`` has no such
  line;
- **environment packed, ready**: with ``env_to_local``, the ``env_packed`` and
  ``env_ready`` lines of ``timeline.jsonl`` (:mod:`distspec.runtime.envcopy`);
- **first metric**: the first record of ``metrics.jsonl`` (:mod:`distspec.metrics`).

``distspec describe`` prints it with each phase's length (how long the job waited in
the queue, how long its nodes took to start, how long the rendezvous took) and
``distspec report`` draws it. Standard library only.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.specs.state import AppStatus

__all__ = ["TIMELINE_FILE", "Event", "job_timeline", "timeline_text"]

#: The file in the job folder the runtime appends its events to.
TIMELINE_FILE = "timeline.jsonl"


class Event:
    """One point of the timeline: ``name`` at ``time`` (Unix seconds), ``detail``
    saying more (the node, the step), ``phase`` naming what led up to it (shown with
    its length: ``waiting in the queue``)."""

    __slots__ = ("detail", "name", "phase", "time")

    def __init__(self, name: str, time: float, detail: str = "", phase: str = "") -> None:
        self.name = name
        self.time = time
        self.detail = detail
        self.phase = phase

    def to_dict(self) -> dict[str, object]:
        """The event as JSON (``distspec report``)."""
        return {"name": self.name, "time": self.time, "detail": self.detail, "phase": self.phase}

    def __repr__(self) -> str:
        return f"Event({self.name!r}, {self.time!r}, {self.detail!r})"


def _runtime_events(folder: str) -> list[dict[str, object]]:
    try:
        with open(os.path.join(folder, TIMELINE_FILE), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("time"), (int, float)):
            out.append(data)
    return out


def _host_files(folder: str) -> list[tuple[float, str]]:
    """``(mtime, host)`` of each ``.host`` file in the folder."""
    out: list[tuple[float, str]] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        if not name.endswith(".host"):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                host = f.read().strip()
            out.append((os.stat(path).st_mtime, host or name[: -len(".host")]))
        except OSError:
            continue
    return sorted(out)


def _first_metric(folder: str) -> tuple[float, int | None, int] | None:
    """``(time, step, attempt)`` of the first record of the history of the last
    attempt, reading the file's start and its last lines only (it can be large)."""
    from distspec.metrics import METRICS_FILE, parse_line

    path = os.path.join(folder, METRICS_FILE)
    try:
        with open(path, "rb") as f:
            head = f.read(64 * 1024)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            tail = f.read()
    except OSError:
        return None
    firsts = [r for r in map(parse_line, head.decode("utf-8", "replace").splitlines()) if r]
    lasts = [r for r in map(parse_line, tail.decode("utf-8", "replace").splitlines()) if r]
    if not firsts:
        return None
    attempt = lasts[-1].attempt if lasts else firsts[0].attempt
    # The last attempt's first record, when it is within reach; else the file's first.
    for r in (*firsts, *lasts):
        if r.attempt == attempt:
            return r.time, r.step, r.attempt
    first = firsts[0]
    return first.time, first.step, first.attempt


def _env_events(folder: str) -> list[Event]:
    """``env_to_local``: the environment packed (or found in the cache), then ready on
    every node, from the ``env_packed`` and ``env_ready`` lines of the job's timeline
    (:mod:`distspec.runtime.envcopy`); the last attempt's when the job was requeued."""
    out: list[Event] = []
    ready: list[tuple[float, str, float]] = []
    for data in _runtime_events(folder):
        kind = data.get("event")
        seconds = data.get("seconds")
        took = float(seconds) if isinstance(seconds, (int, float)) else 0.0
        if kind == "env_packed":
            ready = []
            cached = "reused from the cache" if data.get("reused") else f"packed in {took:.1f}s"
            out = [Event("env packed", float(data["time"]), cached, phase="starting the job")]  # type: ignore[arg-type]
        elif kind == "env_ready":
            ready.append((float(data["time"]), str(data.get("node") or "?"), took))  # type: ignore[arg-type]
    if ready:
        ready.sort()
        first = ready[0][0]
        spread = ", ".join(f"{h} +{t - first:.1f}s (unpack {s:.1f}s)" for t, h, s in ready)
        out.append(
            Event(
                "env ready",
                ready[-1][0],
                f"{len(ready)} node(s): {spread}",
                phase="copying the environment",
            )
        )
    return out


def job_timeline(status: AppStatus, folder: str | None) -> list[Event]:
    """The run's events in time order (see the module's docstring); what is not known
    is left out. ``folder`` is its job folder (None, or a URL: the status only)."""
    events: list[Event] = []
    if status.submitted is not None:
        events.append(Event("submitted", status.submitted))
    if status.started is not None:
        events.append(Event("started", status.started, phase="waiting to start"))
    local = folder is not None and "://" not in folder
    hosts = _host_files(folder) if local and folder else []
    if hosts:
        first = hosts[0][0]
        spread = ", ".join(f"{h} +{t - first:.1f}s" for t, h in hosts)
        events.append(
            Event(
                "launchers up",
                hosts[-1][0],
                f"{len(hosts)} node(s): {spread}" if len(hosts) > 1 else hosts[0][1],
                phase="starting the launchers",
            )
        )
    else:
        starts = sorted(
            (r.started, r.hostname or f"{r.role}/{r.id}")
            for role in status.roles
            for r in role.replicas
            if r.started is not None
        )
        if len(starts) > 1:
            first = starts[0][0]
            spread = ", ".join(f"{h} +{t - first:.1f}s" for t, h in starts)
            events.append(
                Event(
                    "launchers up",
                    starts[-1][0],
                    f"{len(starts)} replicas: {spread}",
                    phase="starting the launchers",
                )
            )
    if local and folder:
        events += _env_events(folder)
        for data in _runtime_events(folder):
            if data.get("event") != "process_group":
                continue
            bits = []
            if isinstance(data.get("world_size"), int):
                bits.append(f"{data['world_size']} ranks")
            if isinstance(data.get("backend"), str) and data["backend"]:
                bits.append(str(data["backend"]))
            if isinstance(data.get("seconds"), (int, float)):
                bits.append(f"init_process_group took {data['seconds']:.2f}s")
            if data.get("attempt"):
                bits.append(f"attempt {data['attempt']}")
            events.append(
                Event(
                    "process group up",
                    float(data["time"]),  # type: ignore[arg-type]
                    ", ".join(bits),
                    phase="starting the workers and meeting",
                )
            )
        found = _first_metric(folder)
        if found is not None:
            when, step, attempt = found
            detail = "" if step is None else f"step {step}"
            if attempt:
                detail += f"{', ' if detail else ''}attempt {attempt}"
            events.append(Event("first metric", when, detail, phase="until the first metric"))
    if status.ended is not None:
        events.append(Event("ended", status.ended, status.state.value, phase="running"))
    events.sort(key=lambda e: e.time)
    return events


def _length(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def timeline_text(events: list[Event]) -> list[str]:
    """The lines ``describe`` prints: each event's clock time, its name, how long
    since the one before (the phase that led to it), and its detail."""
    import time

    lines = []
    before: float | None = None
    for e in events:
        clock = time.strftime("%H:%M:%S", time.localtime(e.time))
        gap = "" if before is None else f"+{_length(e.time - before)}"
        said = [e.phase] if e.phase and gap else []
        said += [e.detail] if e.detail else []
        lines.append(f"  {clock}  {e.name:<16} {gap:>7}  {': '.join(said)}".rstrip())
        before = e.time
    return lines
