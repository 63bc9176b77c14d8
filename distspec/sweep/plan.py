"""A sweep compiled: the requests that run every point, as few as the backend allows.

The component is bound once with the ``{{name}}`` placeholders left in (the
*template*) and once per point with the point's values. Where every point's AppDef is
the template filled in (the values only reach text: script arguments, ``--env``,
string parameters) and the backend runs job arrays, the points go out as arrays of at
most :meth:`~distspec.schedulers.api.Scheduler.max_array_size` points each: one
``sbatch --array`` for a sweep of any size below the cluster's ``MaxArraySize``.
Otherwise (a value changes the job's shape, such as ``-j {{nodes}}x8``, or the backend
has no arrays) each point is a job of its own, and ``--max-parallel K`` is kept by
making point ``i`` wait for point ``i-K`` (where the backend has dependencies).

Every point gets its values in its environment: ``DISTSPEC_SWEEP_<name>`` and
``DISTSPEC_SWEEP_INDEX``. All points run the same code snapshot, taken once.
"""

from __future__ import annotations

import os

from distspec.errors import CompileError, UsageError
from distspec.frozen import field, frozen, frozendict, replace
from distspec.specs import placeholders

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from distspec.components.loader import Component
    from distspec.runner import Runner
    from distspec.schedulers.api import Dependency, Request
    from distspec.specs.app import AppDef, Role
    from distspec.sweep.spec import Sweep

__all__ = ["INDEX_ENV", "SweepRequest", "fill_app", "new_sweep_id", "plan_sweep", "point_env"]

#: The sweep-wide index of the point a job runs.
INDEX_ENV = "DISTSPEC_SWEEP_INDEX"
#: A point's value of variable ``name`` is in ``DISTSPEC_SWEEP_<name>``.
VALUE_ENV = "DISTSPEC_SWEEP_"


def new_sweep_id(name: str) -> str:
    """``sweep-<app name>-<8 hex>``: the id a sweep's handle and record go by."""
    return f"sweep-{name}-{os.urandom(4).hex()}"


@frozen
class SweepRequest:
    """What submitting a sweep will do, as data (the sweep's dry run)."""

    sweep_id: str
    scheduler: str
    name: str
    sweep: Sweep
    #: Arrays (each with ``points``), or one request per point, in point order.
    requests: tuple[Request, ...]
    max_parallel: int | None = None
    after: tuple[Dependency, ...] = ()
    #: What made it, for its record and ``rerun --failed``: the component's name and
    #: arguments (with the placeholders), the ``-cfg`` options.
    component: str = ""
    args: tuple[str, ...] = ()
    cfg: Mapping[str, Any] = field(default_factory=frozendict)
    #: Why the points are not one array (None when they are, or the backend has none).
    why_not_array: str | None = None

    @property
    def arrays(self) -> bool:
        """Whether the requests are job arrays (else one job per point)."""
        return bool(self.requests) and self.requests[0].points is not None

    def render(self) -> str:
        """The text a dry run prints: each array's script and points file, or the first
        point's job and how the others differ."""
        first = self.requests[0]
        n = len(self.sweep)
        if self.arrays:
            out = []
            for req in self.requests:
                pts = req.points
                assert pts is not None
                out.append(
                    f"# --- array {req.app_id}: points {pts.first}-{pts.first + len(pts.values) - 1} ---"
                )
                out.append(req.render().rstrip("\n"))
                for name, text in req.files.items():
                    if name != req.main_file:
                        out.append(f"# --- {name} ---")
                        out.append(text.rstrip("\n"))
            return "\n".join(out) + "\n"
        head = f"# --- point 0 of {n} ({_values_text(self.sweep.values(0))}) ---\n"
        tail = ""
        if n > 1:
            tail = (
                f"# ... and {n - 1} more job(s), one per point, each with its own values"
                + (f"; at most {self.max_parallel} at once" if self.max_parallel else "")
                + (f" (not one array: {self.why_not_array})" if self.why_not_array else "")
                + "\n"
            )
        return head + first.render() + tail


def _values_text(values: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items())


def point_env(sweep: Sweep, index: int) -> dict[str, str]:
    """The environment that tells point ``index`` its values."""
    env = {INDEX_ENV: str(index)}
    env.update({VALUE_ENV + k: v for k, v in sweep.values(index).items()})
    return env


def fill_app(app: AppDef, values: Mapping[str, str]) -> AppDef:
    """``app`` with every ``{{name}}`` in its text (entrypoint, args, env, image,
    metadata) replaced by its value."""

    def text(value: Any) -> Any:
        return placeholders.fill(value, values) if isinstance(value, str) else value

    def role(r: Role) -> Role:
        return replace(
            r,
            image=text(r.image),
            entrypoint=text(r.entrypoint),
            args=tuple(text(a) for a in r.args),
            env=frozendict({k: text(v) for k, v in r.env.items()}),
            metadata=frozendict({k: text(v) for k, v in r.metadata.items()}),
        )

    return replace(
        app,
        roles=tuple(role(r) for r in app.roles),
        metadata=frozendict({k: text(v) for k, v in app.metadata.items()}),
    )


def _with_env(app: AppDef, env: Mapping[str, str]) -> AppDef:
    roles = tuple(replace(r, env=frozendict({**r.env, **env})) for r in app.roles)
    return replace(app, roles=roles)


def plan_sweep(
    runner: Runner,
    component: Component,
    args: Sequence[str],
    sweep: Sweep,
    scheduler: str,
    cfg: Mapping[str, Any] | None = None,
    *,
    max_parallel: int | None = None,
    after: Sequence[Dependency] = (),
    snapshot: Any = None,
    rerun_of: str | None = None,
    prog: str = "distspec run",
    keep_out: Sequence[str] = (),
) -> SweepRequest:
    """Bind, check and compile every point of ``sweep`` (see the module docstring).

    Raises:
        UsageError: a placeholder or variable that does not match, a point whose
            arguments do not bind (named with its values), ``max_parallel`` < 1.
        CompileError: a point the backend cannot run.
    """
    from distspec.sweep.spec import check_used

    if max_parallel is not None and max_parallel < 1:
        raise UsageError(f"--max-parallel {max_parallel}: give a number of points >= 1")
    check_used(args, sweep)
    sched = runner.scheduler(scheduler)
    apps = []
    for i in range(len(sweep)):
        values = sweep.values(i)
        try:
            apps.append(
                runner.bind(
                    component,
                    [placeholders.fill(a, values) for a in args],
                    prog=prog,
                    scheduler=scheduler,
                )
            )
        except UsageError as e:
            raise UsageError(f"sweep point {i} ({_values_text(values)}): {e}") from None
    name = apps[0].name
    sweep_id = new_sweep_id(name)
    template, why = _template(runner, component, args, sweep, apps, scheduler, prog)
    opts = runner.options(scheduler, cfg)
    requests: list[Request] = []
    if template is not None and sched.capabilities.arrays:
        bound = template  # the closure below sees it as not None

        def arrays(parallel: int | None) -> list[Request]:
            return _arrays(
                runner,
                bound,
                sweep,
                scheduler,
                cfg,
                opts,
                parallel,
                after,
                snapshot,
                rerun_of,
                keep_out,
            )

        try:
            requests = arrays(max_parallel)
        except CompileError as e:
            why = str(e)
        if len(requests) > 1 and max_parallel and not sched.capabilities.dependencies:
            # No array can wait for another here: --max-parallel is shared out instead.
            share = max_parallel // len(requests)
            if share < 1:
                raise UsageError(
                    f"--max-parallel {max_parallel}: these points are {len(requests)} arrays "
                    f"on {scheduler}, which cannot hold one until another ends, so each "
                    f"runs at least one point at a time; give --max-parallel "
                    f"{len(requests)} or more, or leave it out"
                )
            requests = arrays(share)
    elif template is not None:
        why = f"{scheduler} runs no job arrays"
    if not requests:
        if max_parallel and len(sweep) > max_parallel and not sched.capabilities.dependencies:
            raise UsageError(
                f"--max-parallel: {scheduler} cannot hold a job until another ends, and these "
                f"points are not one array ({why}); leave --max-parallel out"
            )
        if snapshot is None:
            snapshot = runner.dryrun(apps[0], scheduler, cfg, keep_out=keep_out).snapshot
        for i, app in enumerate(apps):
            requests.append(
                runner.dryrun(
                    _with_env(app, point_env(sweep, i)),
                    scheduler,
                    cfg,
                    snapshot=snapshot,
                    rerun_of=rerun_of,
                    after=after,
                )
            )
    return SweepRequest(
        sweep_id=sweep_id,
        scheduler=scheduler,
        name=name,
        sweep=sweep,
        requests=tuple(requests),
        max_parallel=max_parallel,
        after=tuple(after),
        component=component.name,
        args=tuple(args),
        cfg=frozendict(cfg or {}),
        why_not_array=why,
    )


def _template(
    runner: Runner,
    component: Component,
    args: Sequence[str],
    sweep: Sweep,
    apps: Sequence[AppDef],
    scheduler: str,
    prog: str,
) -> tuple[AppDef | None, str | None]:
    """The AppDef bound with the placeholders left in, when every point's is it filled
    in; else None and why not."""
    try:
        template = runner.bind(component, list(args), prog=prog, scheduler=scheduler)
    except UsageError:
        return None, "a swept value goes into a parameter that is not plain text"
    for i, app in enumerate(apps):
        if fill_app(template, sweep.values(i)) != app:
            return None, f"point {i}'s values change the job's shape, not only its text"
    return template, None


def _arrays(
    runner: Runner,
    template: AppDef,
    sweep: Sweep,
    scheduler: str,
    cfg: Mapping[str, Any] | None,
    opts: Any,
    max_parallel: int | None,
    after: Sequence[Dependency],
    snapshot: Any,
    rerun_of: str | None,
    keep_out: Sequence[str],
) -> list[Request]:
    """The arrays that run every point: one, or one per ``max_array_size`` points; an
    array the backend finds too large (:class:`~distspec.errors.ArrayTooLarge`: a
    Kubernetes points ConfigMap over 1 MB) is split in two until each fits."""
    from distspec.errors import ArrayTooLarge
    from distspec.runner import new_app_id
    from distspec.schedulers.api import Points

    sched = runner.scheduler(scheduler)
    size = sched.max_array_size(opts) or len(sweep)
    todo = [(first, min(size, len(sweep) - first)) for first in range(0, len(sweep), size)]
    todo.reverse()  # a stack: arrays come out in the order of their points
    requests = []
    while todo:
        first, count = todo.pop()
        values = tuple(sweep.points[first : first + count])
        points = Points(names=sweep.names, values=values, first=first, max_parallel=max_parallel)
        try:
            request = runner.dryrun(
                template,
                scheduler,
                cfg,
                app_id=new_app_id(template.name),
                snapshot=snapshot,
                rerun_of=rerun_of,
                after=after,
                points=points,
                keep_out=keep_out,
            )
        except ArrayTooLarge:
            if count == 1:
                raise
            half = count // 2
            todo += [(first + half, count - half), (first, half)]
            continue
        snapshot = request.snapshot  # planned once, shared by every array
        requests.append(request)
    return requests
