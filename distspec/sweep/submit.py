"""Submitting a compiled sweep (:class:`~distspec.sweep.plan.SweepRequest`).

The code snapshot is taken once (one dirty-tree warning, one copy) and every request
runs it. ``--max-parallel K`` without arrays, or over several arrays, is kept with
dependencies on what was submitted before: point ``i`` waits for point ``i-K`` (it
starts once that one has ended, in any state); array ``k`` waits for array ``k-1``.
A scheduler error part-way leaves the points submitted so far recorded (their sweep
can be followed and cancelled), and is raised.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from distspec.runner import Runner
    from distspec.schedulers.api import Dependency, Request, Scheduler
    from distspec.sweep.plan import SweepRequest
    from distspec.sweep.record import SweepRecord

__all__ = ["submit_sweep"]


def submit_sweep(runner: Runner, request: SweepRequest) -> SweepRecord:
    """Submit every request of ``request``; returns the sweep's record (its handle:
    ``record.handle``)."""
    from distspec.frozen import replace
    from distspec.schedulers.api import Dependency
    from distspec.specs.handles import AppHandle
    from distspec.sweep.record import SweepRecord

    sched = runner.scheduler(request.scheduler)
    snapshot = _take_once(request.requests[0].snapshot)
    handle = AppHandle(
        scheduler=request.scheduler, session=runner.session, app_id=request.sweep_id
    ).format()
    handles: list[str] = []
    arrays: list[tuple[str, int, int]] = []
    submitted: list[str] = []  # app id of each request submitted
    # Where nothing can wait for another job (Kubernetes), plan_sweep shared
    # --max-parallel out among the arrays instead.
    k = request.max_parallel if sched.capabilities.dependencies else None
    try:
        for n, req in enumerate(request.requests):
            if snapshot is not None:
                req = replace(req, snapshot=snapshot)
            extra: list[Dependency] = []
            if req.points is not None and k and n > 0:
                extra.append(Dependency(submitted[n - 1], "any"))
            elif req.points is None and k and n >= k:
                extra.append(Dependency(submitted[n - k], "any"))
            if extra:
                req = _recompiled(sched, req, extra)
            h = runner.submit(req)
            submitted.append(h.app_id)
            if req.points is not None:
                count = len(req.points.values)
                arrays.append((h.app_id, req.points.first, count))
                for i in range(req.points.first, req.points.first + count):
                    point = sched.point_id(h.app_id, req, i)
                    handles.append(
                        AppHandle(scheduler=h.scheduler, session=h.session, app_id=point).format()
                    )
            else:
                handles.append(h.format())
    except BaseException:
        if handles:
            record = SweepRecord.write(runner, request, handles, arrays, handle)
            _provenance(runner, request, record, snapshot)
            from distspec.runner import tell

            tell(f"distspec: {handle}: {len(handles)} of {len(request.sweep)} points submitted")
        raise
    record = SweepRecord.write(runner, request, handles, arrays, handle)
    _provenance(runner, request, record, snapshot)
    return record


def _take_once(snapshot: Any) -> Any:
    """Take a new snapshot (checking the tree, warning once) and return it as already
    taken, with its git state recorded, so that each submission only reuses it."""
    if snapshot is None or snapshot.plan is None:
        return snapshot
    from distspec.frozen import replace
    from distspec.snapshot.policy import take
    from distspec.snapshot.provenance import check_dirty, git_state

    state = git_state(snapshot.base) if snapshot.git else None
    check_dirty(snapshot, state)
    take(snapshot)
    return replace(snapshot, plan=None, recorded_git=state.to_dict() if state is not None else None)


def _recompiled(sched: Scheduler[Any], req: Request, extra: Sequence[Dependency]) -> Request:
    """``req`` compiled again to wait for ``extra`` too (its app is already rewritten
    for the snapshot)."""
    from distspec.frozen import replace

    after = (*req.after, *extra)
    if req.points is not None:
        new = sched.compile_array(
            req.app, req.options, app_id=req.app_id, points=req.points, after=after
        )
    else:
        new = sched.compile(req.app, req.options, app_id=req.app_id, after=after)
    return replace(new, snapshot=req.snapshot, origin=req.origin)


def _provenance(runner: Runner, request: SweepRequest, record: SweepRecord, snapshot: Any) -> None:
    """The sweep's provenance record beside its ``sweep.json``: the code every point
    runs, the template AppDef, the options (what ``rerun --failed`` reuses)."""
    from distspec.runner import Origin, tell
    from distspec.snapshot import provenance
    from distspec.specs.options import options_to_strings

    first = request.requests[0]
    try:
        origin = first.origin or Origin(app=first.app)
        state = provenance.RecordedGit(snapshot.recorded_git) if snapshot is not None else None
        data = provenance.record(
            handle=record.handle,
            app=origin.app,
            options=options_to_strings(first.options),
            sources=origin.sources,
            snapshot=snapshot,
            state=state,
            rerun_of=origin.rerun_of,
        )
        provenance.write(record.folder, data, state.patch() if state is not None else b"")
    except Exception as e:  # the points run either way
        tell(f"distspec: {record.handle}: could not write its provenance record: {e}")
