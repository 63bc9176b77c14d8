"""A submitted sweep: its record, its handle, and its points' states.

A sweep is kept in ``<state dir>/sweeps/<sweep id>/``: ``sweep.json`` (the points,
their values and handles, the arrays they went out as, what made it) and, beside it,
the provenance record of the code it runs (``provenance.json``, as a single run's).
Its handle is ``SCHEDULER://SESSION/<sweep id>``; each point has the handle of its
own job (``slurm://s/1234_7``, an array task).
"""

from __future__ import annotations

import json
import os

from distspec.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from distspec.runner import Runner
    from distspec.specs.handles import AppHandle
    from distspec.specs.state import AppState, AppStatus
    from distspec.sweep.plan import SweepRequest
    from distspec.sweep.spec import Sweep

__all__ = ["RECORD_FILE", "SweepRecord", "find_sweep", "sweeps_root"]

RECORD_FILE = "sweep.json"
PREFIX = "sweep-"


def sweeps_root(runner: Runner) -> str:
    """Where sweeps are recorded: ``<state dir>/sweeps``."""
    return os.path.join(os.fspath(runner.config.state_dir), "sweeps")


class SweepRecord:
    """``sweep.json`` read back."""

    def __init__(self, folder: str, data: dict[str, Any]) -> None:
        self.folder = folder
        self.data = data

    @property
    def sweep_id(self) -> str:
        """``sweep-<name>-<8 hex>``."""
        return str(self.data["sweep_id"])

    @property
    def scheduler(self) -> str:
        """The backend every point runs on."""
        return str(self.data["scheduler"])

    @property
    def handle(self) -> str:
        """The sweep's handle, ``SCHEDULER://SESSION/<sweep id>``."""
        return str(self.data["handle"])

    @property
    def handles(self) -> list[str]:
        """Each point's handle, in point order."""
        return [str(h) for h in self.data["handles"]]

    @property
    def sweep(self) -> Sweep:
        """The points and their values."""
        from distspec.sweep.spec import from_json

        return from_json(self.data["sweep"])

    def app_ids(self) -> list[str]:
        """Each point's app id, in point order."""
        return [h.rsplit("/", 1)[1] for h in self.handles]

    def dependency_ids(self) -> list[str]:
        """What a job that waits for the whole sweep waits for: its arrays (a Slurm
        array id stands for all its tasks), else every point."""
        arrays = self.data.get("arrays") or []
        return [str(a["app_id"]) for a in arrays] if arrays else self.app_ids()

    def states(self, runner: Runner) -> list[AppStatus | None]:
        """Each point's status now (None: its scheduler has no record of it)."""
        sched = runner.scheduler(self.scheduler)
        ids = self.app_ids()
        found = sched.describe_many(ids)
        return [found.get(i) for i in ids]

    @classmethod
    def write(
        cls,
        runner: Runner,
        request: SweepRequest,
        handles: Sequence[str],
        arrays: Sequence[tuple[str, int, int]],
        handle: str,
    ) -> SweepRecord:
        """Record a sweep just submitted: ``handles`` of its points, ``arrays`` as
        ``(array id, first point, point count)``."""
        import time

        from distspec._files import write_atomic
        from distspec.sweep.spec import to_json

        folder = os.path.join(sweeps_root(runner), request.sweep_id)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        data = {
            "version": 1,
            "sweep_id": request.sweep_id,
            "handle": handle,
            "scheduler": request.scheduler,
            "name": request.name,
            "submitted": time.time(),
            "cwd": os.getcwd(),
            "component": request.component,
            "args": list(request.args),
            "cfg": dict(request.cfg),
            "max_parallel": request.max_parallel,
            "after": [[d.app_id, d.condition] for d in request.after],
            "sweep": to_json(request.sweep),
            "handles": list(handles),
            "arrays": [{"app_id": a, "first": f, "count": n} for a, f, n in arrays],
        }
        text = json.dumps(data, indent=1) + "\n"
        write_atomic(os.path.join(folder, RECORD_FILE), text.encode())
        return cls(folder, data)

    @classmethod
    def read(cls, folder: str) -> SweepRecord | None:
        """The record in ``folder``, or None when there is none.

        Raises:
            UsageError: it cannot be read, or is not a sweep record.
        """
        try:
            with open(os.path.join(folder, RECORD_FILE), encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise UsageError(f"{folder}: the sweep's record cannot be read: {e}") from None
        if not isinstance(data, dict) or data.get("version") != 1:
            raise UsageError(f"{folder}: not a sweep record this distspec can read")
        return cls(folder, data)


def find_sweep(runner: Runner, handle: AppHandle) -> SweepRecord | None:
    """The sweep ``handle`` names, or None when it names a job."""
    if not handle.app_id.startswith(PREFIX):
        return None
    record = SweepRecord.read(os.path.join(sweeps_root(runner), handle.app_id))
    if record is not None and record.scheduler != handle.scheduler:
        raise UsageError(f"{handle}: the sweep {handle.app_id} runs on {record.scheduler}")
    return record


def all_sweeps(runner: Runner, scheduler: str) -> list[SweepRecord]:
    """The sweeps recorded for ``scheduler``, newest first."""
    root = sweeps_root(runner)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        try:
            record = SweepRecord.read(os.path.join(root, name))
        except UsageError:
            continue
        if record is not None and record.scheduler == scheduler:
            found.append(record)
    found.sort(key=lambda r: -float(r.data.get("submitted") or 0))
    return found


def counts(states: Sequence[Any]) -> dict[str, int]:
    """How many points are in each state (``UNKNOWN`` for those the scheduler forgot)."""
    out: dict[str, int] = {}
    for status in states:
        key = status.state.value if status is not None else "UNKNOWN"
        out[key] = out.get(key, 0) + 1
    return out


def sweep_status(states: Sequence[AppStatus | None]) -> AppStatus:
    """The sweep as one status: :func:`overall` state, the counts as its message, the
    earliest submit and start and (once ended) the latest end of its points."""
    from distspec.specs.state import AppStatus

    known = [s for s in states if s is not None]
    text = ", ".join(f"{n} {state}" for state, n in sorted(counts(states).items()))
    state = overall(states)

    def first(values: list[float | None]) -> float | None:
        found = [v for v in values if v is not None]
        return min(found) if found else None

    ended = [s.ended for s in known]
    return AppStatus(
        state=state,
        msg=f"{len(states)} points: {text}",
        submitted=first([s.submitted for s in known]),
        started=first([s.started for s in known]),
        ended=max((e for e in ended if e is not None), default=None) if state.is_terminal else None,
    )


def overall(states: Sequence[Any]) -> AppState:
    """The sweep's state: RUNNING while a point runs, PENDING while one waits, else
    FAILED when one failed or was cancelled, else SUCCEEDED."""
    from distspec.specs.state import AppState

    known = [s.state for s in states if s is not None]
    if any(s is AppState.RUNNING for s in known):
        return AppState.RUNNING
    if any(not s.is_terminal for s in known):
        return AppState.PENDING
    if any(s is AppState.FAILED for s in known) or len(known) < len(states):
        return AppState.FAILED
    if any(s is AppState.CANCELLED for s in known):
        return AppState.CANCELLED
    return AppState.SUCCEEDED
