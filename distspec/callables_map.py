"""``distspec.map``: call a function once per item, every item's call a job of one sweep.

::

    import distspec

    jobs = distspec.map(lambda x: x * x, range(20), j="1x1", max_parallel=3)
    assert [job.result() for job in jobs] == [x * x for x in range(20)]

Every item's job is the same ``dist.fn`` job (:mod:`distspec.callables`); what differs
is the payload in its job folder, ``call.pkl`` holding ``fn(item)``, which the worker
(:mod:`distspec.runtime.call`) reads as it reads a single ``submit``'s, and the result
files it writes there. The items go out as a sweep (:mod:`distspec.sweep`) of one
variable, ``item``, whose value is the item's index in the input
(``$DISTSPEC_SWEEP_item``, and ``$DISTSPEC_SWEEP_INDEX``): where the backend runs job
arrays (Slurm, PBS, Kubernetes) one array submission runs them all (one per
``max_array_size`` items), each item in its array task's own job folder; elsewhere
(local_cwd) each item is a job of its own, and ``max_parallel=K`` makes item ``i``
wait for item ``i-K`` to end. The payloads are written where each item's job reads
them: right after the submission where the job folders are on this machine's file
system (an array's are named by its id), before it where they are not (Kubernetes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from distspec.callables import Job
from distspec.errors import CallableError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.callables import After
    from distspec.runner import Runner
    from distspec.schedulers.api import Request, Scheduler
    from distspec.specs.app import AppDef
    from distspec.sweep.plan import SweepRequest

__all__ = ["COMPONENT", "VARIABLE", "map"]

#: The sweep variable of a map: the item's index in the input, as a string.
VARIABLE = "item"
#: What a map's sweep record names as its component (it is ``dist.fn`` with a payload
#: per item, which ``rerun --failed`` cannot rebuild from the record).
COMPONENT = "distspec.map"


def map(
    fn: Callable[[Any], Any],
    iterable: Iterable[Any],
    /,
    *,
    j: str = "1x2",
    scheduler: str | None = None,
    cfg: Mapping[str, Any] | None = None,
    max_parallel: int | None = None,
    seed: int | None = None,
    groups: Sequence[Sequence[int]] = (),
    timeout: float | None = None,
    backend: str | None = None,
    options: Mapping[str, Any] | None = None,
    after: After = None,
    runner: Runner | None = None,
) -> list[Job]:
    """Run ``fn(item)`` for every item of ``iterable``, each call a job of ``j`` ranks;
    returns at once with one :class:`~distspec.callables.Job` per item, in input order
    (``[job.result() for job in jobs]`` are the results in order).

    One submission runs every item where the backend has job arrays (Slurm; one per
    ``MaxArraySize`` items), else one job per item (local_cwd). The jobs form a sweep:
    ``jobs[0].sweep`` is its handle (``distspec status``, ``list``, ``cancel`` take it).
    Bind further arguments of ``fn`` with ``functools.partial``.

    Args:
        fn: the function, called with one item (with the ``Dist`` first when its first
            parameter is annotated ``Dist``); it travels as :func:`submit`'s does.
        iterable: the items (read once, here); each is pickled with ``fn`` into its
            job's own ``call.pkl``.
        max_parallel: at most this many items' jobs run at once (an array's ``%K``;
            else item ``i`` starts once item ``i - K`` has ended, in any state); no
            limit when None.
        j: each item's topology ``NxM`` (as :func:`~distspec.callables.submit`).
        scheduler: local_cwd, slurm, pbs or kubernetes; the configured default when None.
        cfg: the scheduler's run options, as ``-cfg`` takes them.
        seed: seed Python, NumPy and torch on every rank of every item's job.
        groups: process subgroups of each job (as submit's).
        timeout: the process group's timeout in seconds.
        backend: the process group backend; chosen for the device when None.
        options: any other ``dist.fn`` parameter (as submit's).
        after: what every item's job waits for: a Job, a handle
            (``HANDLE[:ok|any|failed]``) or a list of them (as submit's).
        runner: the Runner to submit with (a new one with the user's config when None).

    Raises:
        ArgumentError: ``iterable`` is not iterable or has no items, ``max_parallel``
            is not an int >= 1, or a setting as :func:`~distspec.callables.submit`.
        CallableError: ``fn`` is not callable, it or an item cannot be pickled (the
            message names the item's index), or a job folder cannot be written (every
            job of the map is cancelled).
        UsageError: as :func:`~distspec.callables.submit`; ``max_parallel`` on a backend
            that can neither run arrays nor hold a job until another ends.

    Nothing is submitted or written when any of these is raised before submitting.
    """
    from distspec import _arguments as check
    from distspec.callables import _check_settings, _job_app, _settings_of

    where = "distspec.map"
    if not callable(fn):
        raise CallableError(
            f"{where}: fn={check.show(fn)}: give a function (or any callable), not {check.kind(fn)}"
        )
    items = _items(iterable, where)
    max_parallel = check.integer(max_parallel, where, "max_parallel", lo=1, optional=True)
    s = _check_settings(where, **_settings_of(locals()))
    runner, scheduler, app = _job_app(fn, s)
    request = _plan(runner, app, scheduler, s["cfg"], len(items), max_parallel, s["after"])
    # Pickled last: a usage mistake above is reported without the cost of pickling.
    payloads = [_pickled(fn, item, i, where) for i, item in enumerate(items)]
    topology = s["topology"]
    return _submit(runner, request, payloads, topology.nodes, topology.nproc_per_node)


def _items(iterable: Any, where: str) -> list[Any]:
    """The items, read once; ArgumentError when there are none or it is not iterable."""
    from distspec import _arguments as check

    try:
        iterator = iter(iterable)
    except TypeError:
        check.fail(
            where,
            "iterable",
            iterable,
            f"give the items as an iterable (a list, a range, ...), not {check.kind(iterable)}",
        )
    items = list(iterator)
    if not items:
        check.fail(where, "iterable", iterable, "it has no items: give at least one")
    return items


def _pickled(fn: Any, item: Any, index: int, where: str) -> bytes:
    from distspec import _arguments as check
    from distspec.callables import pickle_call

    try:
        return pickle_call(fn, (item,), {})
    except CallableError as e:
        raise CallableError(f"{where}: item {index} ({check.kind(item)}): {e}") from e.__cause__


def _plan(
    runner: Runner,
    app: AppDef,
    scheduler: str,
    cfg: Mapping[str, Any],
    n: int,
    max_parallel: int | None,
    after: Sequence[str],
) -> SweepRequest:
    """The sweep's requests: arrays of at most ``max_array_size`` items where the
    backend has arrays, else one request per item (as :func:`~distspec.sweep.plan.
    plan_sweep` plans a sweep whose points only differ in text; here they differ in
    nothing but the payload their folder will hold)."""
    from distspec.errors import CompileError, UsageError
    from distspec.frozen import frozendict
    from distspec.schedulers.api import Points
    from distspec.sweep.plan import SweepRequest, new_sweep_id, point_env
    from distspec.sweep.spec import Sweep

    sched = runner.scheduler(scheduler)
    deps = runner.dependencies(scheduler, after)  # the handles checked once, not per item
    sweep = Sweep(names=(VARIABLE,), points=tuple((str(i),) for i in range(n)))
    requests: list[Request] = []
    snapshot = None  # planned with the first request, shared by every other
    why = f"{scheduler} runs no job arrays"
    if sched.capabilities.arrays:
        try:
            size = sched.max_array_size(runner.options(scheduler, cfg)) or n
            for first in range(0, n, size):
                points = Points(
                    names=sweep.names,
                    values=sweep.points[first : first + size],
                    first=first,
                    max_parallel=max_parallel,
                )
                requests.append(
                    runner.dryrun(app, scheduler, cfg, snapshot=snapshot, after=deps, points=points)
                )
                snapshot = requests[-1].snapshot
        except CompileError as e:  # e.g. Kubernetes runs an array only of one-pod points
            requests, why, snapshot = [], str(e), None
    if not requests:
        for i in range(n):
            requests.append(
                runner.dryrun(
                    _with_env(app, point_env(sweep, i)),
                    scheduler,
                    cfg,
                    snapshot=snapshot,
                    after=deps,
                )
            )
            snapshot = requests[-1].snapshot
        # Checked once the jobs compile: a mistake of their own is the news, not this.
        if max_parallel and n > max_parallel and not sched.capabilities.dependencies:
            raise UsageError(
                f"distspec.map: max_parallel={max_parallel}: {scheduler} cannot hold a job "
                f"until another ends, and the items are not one array ({why}); leave "
                "max_parallel out"
            )
    return SweepRequest(
        sweep_id=new_sweep_id(app.name),
        scheduler=scheduler,
        name=app.name,
        sweep=sweep,
        requests=tuple(requests),
        max_parallel=max_parallel,
        after=deps,
        component=COMPONENT,
        cfg=frozendict(
            {k: v if isinstance(v, (str, int, float, bool)) else str(v) for k, v in cfg.items()}
        ),
        why_not_array=None if requests[0].points is not None else why,
    )


def _with_env(app: AppDef, env: Mapping[str, str]) -> AppDef:
    from distspec.frozen import frozendict, replace

    return replace(
        app, roles=tuple(replace(r, env=frozendict({**r.env, **env})) for r in app.roles)
    )


def _submit(
    runner: Runner, request: SweepRequest, payloads: Sequence[bytes], nodes: int, nproc: int
) -> list[Job]:
    """Submit the sweep and put each item's payload into its job's folder; every job of
    the map is cancelled when a payload or record cannot be written."""
    from distspec.callables import _job_dir_before_submit, _write_payload, _write_record
    from distspec.specs.handles import AppHandle
    from distspec.sweep.submit import submit_sweep

    sched = runner.scheduler(request.scheduler)
    # The request each item goes out in, in item order.
    owners = [r for r in request.requests for _ in range(len(r.points.values) if r.points else 1)]
    early: list[str] | None = None
    if _job_dir_before_submit(runner, request.requests[0]) is not None:
        # The replicas do not see this machine's files: the payloads go first.
        early = [_folder(sched, req, i, None) for i, req in enumerate(owners)]
        for folder, payload in zip(early, payloads, strict=True):
            _write_payload(folder, payload)
    handle = AppHandle(
        scheduler=request.scheduler, session=runner.session, app_id=request.sweep_id
    ).format()
    role = request.requests[0].app.roles[0].name
    jobs = []
    try:
        record = submit_sweep(runner, request)
        for i, (text, req) in enumerate(zip(record.handles, owners, strict=True)):
            h = AppHandle.parse(text)
            folder = early[i] if early else _folder(sched, req, i, h.app_id)
            if early is None:
                _write_payload(folder, payloads[i])
            job = Job(
                text,
                job_dir=folder,
                nodes=nodes,
                nproc_per_node=nproc,
                role=role,
                runner=runner,
                sweep=record.handle,
            )
            _write_record(runner, job, h)
            jobs.append(job)
    except BaseException:
        if runner.sweep(handle) is not None:  # something was submitted
            runner.cancel(handle)
        raise
    return jobs


def _folder(sched: Scheduler[Any], req: Request, index: int, app_id: str | None) -> str:
    """Item ``index``'s job folder: of its job ``app_id`` once submitted, else of the
    job it will be (the request's app id, or its point of the array)."""
    if app_id is None:
        app_id = req.app_id if req.points is None else sched.point_id(req.app_id, req, index)
    paths = sched.job_paths(app_id, req)
    if paths is None:
        raise CallableError(
            f"{req.scheduler}: cannot tell where job {app_id} keeps its files; Python "
            "callables run on backends that say where a job keeps its files (job_paths)"
        )
    return paths.folder
