"""What the hang watchdog left in a job folder, read back for ``run --wait`` and
``describe``: whether the job hung, and where each rank was.

The watchdog (:mod:`distspec.runtime.watchdog`, ``-cfg watchdog=15m``) writes, in
``<job folder>/hang/``:

- ``hung``: one JSON object, written once per hang by the replica that saw it first:
  ``time`` (POSIX), ``period`` (seconds), ``replica`` (``<role>-<i>``), ``mode``
  (``heartbeat`` or ``output``: what progress was judged by) and ``last`` (the
  last progress seen, POSIX);
- ``stacks/<role>-<i>.json``: per replica, a list of processes, each ``rank``
  (None for torchrun itself and programs without ``RANK``), ``host``, ``pid``,
  ``hung_at`` (the ``hung`` record's ``time``), ``tool`` (``py-spy``, ``faulthandler``
  or ``none``), ``error`` and ``threads`` (each ``name``, ``main`` and ``frames``,
  innermost first: ``name``, ``file``, ``line``), plus ``where``: the rank's main
  thread's first frame in the user's code (``file``, ``line``, ``function``) and
  ``call``, the function it was blocked in;
- ``stacks/<role>-<i>.txt``: the same as py-spy prints it, for people.

Standard library only: the CLI imports this.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["HANG_DIR", "HUNG_EXIT", "Hang", "read_hang", "summary_lines"]

#: The folder, in the job folder, of the watchdog's records.
HANG_DIR = "hang"
#: The exit code of a replica the watchdog ended (as GNU timeout's).
HUNG_EXIT = 124
#: At most this many records are read, each at most this big.
_MAX_FILES = 4096
_MAX_BYTES = 8 << 20


class Hang:
    """A hang the watchdog reported: its ``hung`` record and every process's stack."""

    __slots__ = ("last", "mode", "period", "processes", "replica", "time")

    def __init__(self, record: dict[str, Any], processes: list[dict[str, Any]]) -> None:
        self.time = float(record.get("time") or 0.0)
        self.period = float(record.get("period") or 0.0)
        self.replica = str(record.get("replica") or "")
        self.mode = str(record.get("mode") or "")
        self.last = float(record.get("last") or 0.0)
        self.processes = processes

    def headline(self) -> str:
        """``no rank made progress for 30s (no heartbeat)``."""
        judged = {"heartbeat": "no heartbeat", "output": "no new output"}.get(self.mode, "")
        return f"no rank made progress for {_seconds(self.period)}" + (
            f" ({judged} from any rank)" if judged else ""
        )


def _seconds(value: float) -> str:
    value = round(value)
    if value < 120:
        return f"{value}s"
    if value < 7200:
        return f"{value // 60}m" + (f"{value % 60}s" if value % 60 else "")
    return f"{value // 3600}h" + (f"{value % 3600 // 60}m" if value % 3600 // 60 else "")


def _load(path: str) -> Any:
    with open(path, "rb") as f:
        return json.loads(f.read(_MAX_BYTES))


def read_hang(folder: str | os.PathLike[str], since: float = 0.0) -> Hang | None:
    """The hang recorded in job folder ``folder`` (at or after POSIX time ``since``),
    or None: no watchdog fired, or its records cannot be read."""
    base = os.path.join(folder, HANG_DIR)
    try:
        record = _load(os.path.join(base, "hung"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or float(record.get("time") or 0.0) < since:
        return None
    at = record.get("time")
    processes: list[dict[str, Any]] = []
    stacks = os.path.join(base, "stacks")
    try:
        names = sorted(n for n in os.listdir(stacks) if n.endswith(".json"))[:_MAX_FILES]
    except OSError:
        names = []
    for name in names:
        try:
            items = _load(os.path.join(stacks, name))
        except (OSError, ValueError):
            continue
        if isinstance(items, list):
            processes += [p for p in items if isinstance(p, dict) and p.get("hung_at") == at]
    return Hang(record, processes)


def _rank_key(process: dict[str, Any]) -> tuple[int, int]:
    rank = process.get("rank")
    return (0, rank) if isinstance(rank, int) else (1, int(process.get("pid") or 0))


def _place(process: dict[str, Any]) -> str:
    where = process.get("where")
    if not isinstance(where, dict):
        if process.get("tool") == "faulthandler":
            return "stack written to its log (faulthandler)"
        return "stack not read" + (f" ({process['error']})" if process.get("error") else "")
    call = where.get("call") or where.get("function") or "?"
    return f"in {call} at {where.get('file')}:{where.get('line')}"


def _ranks_text(ranks: list[int]) -> str:
    """``rank 2`` or ``ranks 0,1,3`` (runs as ``0-7``)."""
    runs: list[list[int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][-1] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    text = ",".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
    return ("ranks " if len(ranks) > 1 else "rank ") + text


def summary_lines(hang: Hang, limit: int = 8) -> list[str]:
    """Where the ranks were, grouped by place: ``ranks 0,1,3 in all_reduce at
    train.py:88``, one line per place (at most ``limit``), most ranks first."""
    ranked = [p for p in hang.processes if isinstance(p.get("rank"), int)]
    shown = ranked or [p for p in hang.processes if p.get("main_process")]
    groups: dict[str, list[dict[str, Any]]] = {}
    for process in sorted(shown, key=_rank_key):
        groups.setdefault(_place(process), []).append(process)
    lines = []
    for place, members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ranks = [p["rank"] for p in members if isinstance(p.get("rank"), int)]
        who = _ranks_text(ranks) if ranks else "pid " + ",".join(str(p["pid"]) for p in members)
        hosts = sorted({str(p.get("host") or "") for p in members} - {""})
        lines.append(f"{who} {place}" + (f" (on {','.join(hosts)})" if hosts else ""))
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more places"]
    return lines
