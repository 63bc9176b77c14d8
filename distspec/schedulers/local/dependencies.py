"""``run --after``: the supervisor of a run with dependencies waits for the runs it
depends on to end before it starts any replica. Standard library only (the supervisor
imports it, only for a plan that has an ``after`` list).

Each entry of the plan's ``after`` names a run of this backend (``app_id``), its run
directory (``run_dir``) and the ``condition`` its end must meet:

- ``ok``: it SUCCEEDED;
- ``failed``: it FAILED or was CANCELLED;
- ``any``: it ended, in any way.

How a dependency ended is read from its ``state.json`` as every reader reads it: a
terminal state is its end; a record that says it goes on while its supervisor is gone
is a FAILED end ("supervisor died", what the next ``status`` of it records); a run
whose record is gone (its run directory pruned or deleted) with no live supervisor
ended UNKNOWN, which meets ``any`` only (prune removes ended runs alone, so it did
end; how, nobody can tell). While a dependency runs, its supervisor holds its
``alive.fifo`` open: the waiting supervisor blocks on that FIFO, whose hang-up wakes
it the moment the dependency's final state is written (or its supervisor dies); it
reads the state files every :data:`POLL_INTERVAL` only where there is no FIFO to wait on.

A dependency whose end does not meet its condition ends the waiting run at once,
CANCELLED, with nothing started: what Slurm does with ``--kill-on-invalid-dep=yes``
(the job is cancelled, reason ``DependencyNeverSatisfied``).
"""

from __future__ import annotations

import os

from distspec.schedulers.local.files import ALIVE_FIFO, STATE_FILE, open_alive, read_json
from distspec.schedulers.local.processes import find_supervisor, is_alive

# The idiom mypy understands without importing typing (~4 ms of the supervisor's start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["POLL_INTERVAL", "SAFETY_INTERVAL", "UNKNOWN", "Dependency", "meets", "verdict"]

#: How often a dependency's state file is read when there is no FIFO to wait on.
POLL_INTERVAL = 0.2
#: How often the state files are read anyway while every dependency has a FIFO (its
#: hang-up is what ends the wait; this only guards against a FIFO replaced by hand).
SAFETY_INTERVAL = 5.0
#: How a dependency whose record is gone ended, as far as anyone can tell.
UNKNOWN = "UNKNOWN"
_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
_STATES = frozenset({"UNSUBMITTED", "SUBMITTED", "PENDING", "RUNNING"}) | _TERMINAL


def meets(condition: str, end: str) -> bool:
    """Whether a dependency that ended as ``end`` (a terminal state or
    :data:`UNKNOWN`) meets ``condition`` (``ok``, ``failed`` or ``any``)."""
    if condition == "ok":
        return end == "SUCCEEDED"
    if condition == "failed":
        return end in ("FAILED", "CANCELLED")
    return True


class Dependency:
    """One entry of the plan's ``after``: where that run is and how it ended."""

    def __init__(self, spec: dict[str, Any], own_run_dir: str) -> None:
        self.app_id = str(spec["app_id"])
        self.condition = str(spec.get("condition") or "ok")
        # A hand-written plan without run_dir: a run of the same state dir.
        self.run_dir = str(
            spec.get("run_dir") or os.path.join(os.path.dirname(own_run_dir), self.app_id)
        )
        #: How it ended, once it has: a terminal state or UNKNOWN.
        self.end: str | None = None
        #: The read end of its ``alive.fifo`` while it is being waited on.
        self.fifo: int | None = None
        self._fifo_tried = False

    def close(self) -> None:
        """Stop waiting on its FIFO (it hung up, or the wait is over); from then on its
        state is read every :data:`POLL_INTERVAL`."""
        if self.fifo is not None:
            os.close(self.fifo)
            self.fifo = None

    def check(self) -> str | None:
        """How the dependency ended (also kept in :attr:`end`), or None while it goes on.

        The first check opens its ``alive.fifo`` (:attr:`fifo`, to wait on) before it
        reads the state: a supervisor found alive by that read held the FIFO open when
        it was opened, so its end hangs it up."""
        if not self._fifo_tried:
            self._fifo_tried = True
            self.fifo = open_alive(os.path.join(self.run_dir, ALIVE_FIFO))
        if self.end is None:
            self.end = self._read_end(again=True)
        if self.end is not None:
            self.close()
        return self.end

    def _read_end(self, *, again: bool) -> str | None:
        try:
            data = read_json(os.path.join(self.run_dir, STATE_FILE))
        except (OSError, ValueError):
            data = None  # absent, or unreadable (a corrupt record is never terminal)
        state = data.get("state") if isinstance(data, dict) else None
        if state in _TERMINAL:
            return str(state)
        if state not in _STATES:
            # No record (pruned, deleted) or none that can be read. A live supervisor
            # writes its record again within a second: wait for that; else it is gone.
            return None if find_supervisor(self.app_id) is not None else UNKNOWN
        info = data.get("supervisor") if isinstance(data, dict) else None
        info = info if isinstance(info, dict) else {}
        try:
            alive = is_alive(int(info.get("pid") or 0), info.get("starttime"))
        except (TypeError, ValueError):
            alive = False
        if alive:
            return None
        if again:  # it may have written its final state and exited since the read
            return self._read_end(again=False)
        return "FAILED"  # its supervisor died; its next reader records that


def verdict(deps: list[Dependency]) -> tuple[str, str]:
    """``("wait", msg)`` while a dependency goes on, ``("never", msg)`` once one ended in
    a way that does not meet its condition, ``("go", "")`` when every one has met its
    own. ``msg`` is the run's message: what it waits for, or why it never ran."""
    waiting = []
    for dep in deps:
        end = dep.check()
        if end is None:
            waiting.append(dep)
        elif not meets(dep.condition, end):
            why = " (no record of it is left)" if end == UNKNOWN else ""
            return "never", f"dependency {dep.app_id} ended {end}{why}: never ran"
    if not waiting:
        return "go", ""
    first = waiting[0]
    msg = f"waiting for {first.app_id} to end (after {first.condition})"
    for dep in waiting[1:]:
        msg += f", {dep.app_id} (after {dep.condition})"
    return "wait", msg
