"""The Python API: compile, submit, wait, status, logs, cancel, list.

The CLI is a thin layer over :class:`Runner`::

    from distspec.runner import Runner
    from distspec.components.dist import ddp

    runner = Runner()
    handle = runner.run(ddp(script="train.py", j="1x2"), "local_cwd")
    status = runner.wait(handle)
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence

from distspec.errors import AppNotFound, ConfigError, OptionError, SchedulerError, UsageError
from distspec.frozen import field, frozen
from distspec.specs.app import AppDef

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.components.loader import Component
    from distspec.config import Config
    from distspec.schedulers._registry import SchedulerRegistry
    from distspec.schedulers.api import (
        AppSummary,
        CommandRunner,
        Dependency,
        Points,
        Request,
        Scheduler,
    )
    from distspec.snapshot.policy import Snapshot
    from distspec.specs.handles import AppHandle
    from distspec.specs.state import AppStatus
    from distspec.sweep.record import SweepRecord

__all__ = ["LogLine", "Runner", "cancel_interrupted", "new_app_id", "tell"]


def _log(level: int, msg: str, *args: object) -> None:
    """Log to the ``distspec`` logger, only once something configured logging (the CLI
    does for ``-v`` or ``DISTSPEC_LOG_LEVEL``): importing it costs start-up otherwise."""
    logging = sys.modules.get("logging")
    if logging is not None:
        logging.getLogger("distspec").log(level, msg, *args)


_DEBUG, _INFO = 10, 20


def _masked(values: Mapping[str, Any]) -> dict[str, Any]:
    """Options as the debug log shows them: what may be a secret (``secret_env``, not
    yet checked, may hold a pasted token) as ``***`` (:func:`distspec.config.masked`)."""
    from distspec.config import masked

    return {k: masked(k, v) for k, v in values.items()}


def new_app_id(app_name: str) -> str:
    """``<name>-<8 hex>``: readable, unique enough, valid in every backend after sanitising."""
    # os.urandom is what secrets.token_hex uses; importing secrets costs a dry run
    # ~5 ms (it loads hmac, OpenSSL's _hashlib, random and base64).
    return f"{app_name}-{os.urandom(4).hex()}"


def tell(text: str) -> None:
    """Write ``text`` and a newline to stderr, and never fail: after a Ctrl-C the reader
    of a pipe (``2>&1 | tee run.log``) may have died of the same Ctrl-C, and what
    must happen next (a cancel) may not depend on saying so."""
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def cancel_interrupted(cancel: Callable[[], None], handle: object) -> None:
    """Cancel a job whose follower was interrupted (Ctrl-C, SIGTERM, a reader that went
    away): ``cancel()`` first, with SIGINT and SIGTERM held off until it returns (a
    second Ctrl-C cannot cut it short), then
    ``distspec: cancelling HANDLE: done`` on stderr, said by :func:`tell`.

    A failing ``cancel()`` is said too, then raised.
    """
    import signal

    previous: dict[signal.Signals, Any] = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: None)
    except ValueError:  # not the main thread: no signal is delivered here anyway
        pass
    try:
        cancel()
    except BaseException as e:
        tell(f"distspec: cancelling {handle} failed: {e}")
        raise
    finally:
        for held, handler in previous.items():
            signal.signal(held, signal.SIG_DFL if handler is None else handler)
    tell(f"distspec: cancelling {handle}: done")


@frozen(kw_only=False)
class LogLine:
    """One line of one replica's log.

    ``text`` is the line without the prefixes torchrun and torch put on a worker's
    lines (``[rank3]:``, ``[train0]:``); ``rank`` is the global rank that wrote it, or
    None for a line of the replica's own process (torchrun's messages, a plain program).
    """

    role: str
    replica: int
    text: str
    rank: int | None = None

    @property
    def prefix(self) -> str:
        """``role/replica rank N|`` (``role/replica|`` without a rank): how the CLI shows it."""
        where = f"{self.role}/{self.replica}"
        return f"{where} rank {self.rank}|" if self.rank is not None else f"{where}|"

    def format(self) -> str:
        """The line as ``run --wait`` and ``log`` print it: the prefix, a space, the text."""
        return f"{self.prefix} {self.text}"


class Runner:
    """Compiles AppDefs for a backend and follows what it submitted."""

    def __init__(
        self,
        *,
        session: str | None = None,
        config: Config | None = None,
        registry: SchedulerRegistry | None = None,
        run_cmd: CommandRunner | None = None,
    ) -> None:
        if session is not None:
            _check_session(session)
        if config is None:
            from distspec.config import load_config

            config = load_config()
        if registry is None:
            from distspec.schedulers._registry import SchedulerRegistry

            registry = SchedulerRegistry()
        self.config = config
        self.registry = registry
        self.session = session or config.session
        self._run_cmd = run_cmd
        self._schedulers: dict[str, Scheduler[Any]] = {}

    def scheduler(self, name: str) -> Scheduler[Any]:
        """The backend called ``name``, created once per Runner."""
        if not isinstance(name, str):
            from distspec._arguments import fail

            fail("Runner", "scheduler", name, "give a scheduler name (a str)")
        sched = self._schedulers.get(name)
        if sched is None:
            cls = self.registry.get(name)
            kwargs: dict[str, Any] = {"state_dir": self.config.state_dir}
            if self._run_cmd is not None:
                kwargs["run_cmd"] = self._run_cmd
            sched = cls(self.session, **kwargs)
            self._schedulers[name] = sched
        return sched

    def options(self, scheduler: str, cfg: Mapping[str, Any] | None = None) -> Any:
        """Typed options: config layers, then ``cfg`` on top; errors name their source.

        Raises:
            ArgumentError: ``cfg`` is not a mapping with str keys.
            OptionError: an unknown option (with a did-you-mean), or a value that does
                not parse or whose Python type cannot mean the option's (``True`` for a
                number, ``3.5`` for an integer).
        """
        from distspec import _arguments

        sched = self.scheduler(scheduler)
        cfg = _arguments.mapping(cfg, "Runner", "cfg")
        _arguments.cfg_values(cfg, sched.run_opts(), scheduler)
        merged: dict[str, Any] = {}
        for source, values in self.config.scheduler_layers(scheduler):
            try:
                sched.parse_options(values)
            except OptionError as e:
                where = source
                if e.option:
                    where = self.config.where(source, f"scheduler:{scheduler}", e.option)
                raise ConfigError(str(e), source=where) from None
            merged.update(values)
            _log(_DEBUG, "%s options from %s: %s", scheduler, source, _masked(values))
        merged.update(cfg or {})
        if cfg:
            _log(_DEBUG, "%s options from -cfg: %s", scheduler, _masked(cfg))
        return sched.parse_options(merged)

    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, Any] | None = None,
        *,
        app_id: str | None = None,
        snapshot: Snapshot | None = None,
        rerun_of: str | None = None,
        after: Sequence[Dependency | AppHandle | str] = (),
        points: Points | None = None,
        keep_out: Sequence[str] = (),
    ) -> Request:
        """Compile without submitting: the Request's ``render()`` is what would be submitted.

        When the run options ask for a snapshot (``-cfg snapshot``; on by default for
        queued backends), the code is listed and hashed here (nothing copied) and the
        job is rewritten to run the snapshot's copy (:mod:`distspec.snapshot.policy`);
        ``snapshot`` gives one instead (a rerun's, ``rerun_of`` naming that run).

        ``after`` holds the jobs this one waits for: handles (``HANDLE`` or
        ``HANDLE:ok|any|failed``, ``ok`` by default; a sweep's handle stands for all its
        points) of the same scheduler, which must exist. ``points`` compiles one job
        array that runs them (:meth:`~distspec.schedulers.api.Scheduler.compile_array`).
        ``keep_out`` names folders a new snapshot leaves out besides distspec's own (the
        folder ``--dryrun -o DIR`` writes into).

        Raises:
            ArgumentError: ``app`` is not an AppDef or ``app_id`` not a str.
            UsageError: a dependency the backend cannot honour, of another scheduler, or
                unknown to it.
        """
        if not isinstance(app, AppDef):
            from distspec._arguments import fail, kind

            fail("Runner", "app", app, f"give an AppDef (a component's result), not {kind(app)}")
        if app_id is not None:
            from distspec._arguments import string

            string(app_id, "Runner", "app_id", limit=253)
        sched = self.scheduler(scheduler)
        opts = self.options(scheduler, cfg)
        compiled = app
        faults = getattr(opts, "watchdog", None) is not None or bool(
            getattr(opts, "checkpoint_dir", None)
        )
        # What can be refused cheaply is, before a snapshot's walk of the code folder.
        sched.check(app, opts)
        if faults:
            from distspec.specs.faults import check

            check(opts, shared_files=sched.capabilities.shared_files)
        if snapshot is None and _wants_snapshot(opts, sched):
            from distspec.snapshot.policy import plan

            snapshot = plan(
                app, sched, opts, keep_out=(self.config.state_dir, *map(os.path.abspath, keep_out))
            )
        if snapshot is not None:
            from distspec.snapshot.policy import rewrite

            compiled = rewrite(app, snapshot, sched, opts)
        if faults:
            from distspec.specs.faults import apply

            shared = sched.capabilities.shared_files
            compiled = apply(
                compiled, opts, shared_files=shared, python=sys.executable if shared else "python"
            )
        deps = self.dependencies(scheduler, after)
        app_id = app_id or new_app_id(app.name)
        if points is not None:
            request = sched.compile_array(compiled, opts, app_id=app_id, points=points, after=deps)
        else:
            request = sched.compile(compiled, opts, app_id=app_id, after=deps)
        _log(_INFO, "compiled %s for %s: %s", app.name, scheduler, opts)
        origin = Origin(app=app, sources=self._option_sources(scheduler, cfg), rerun_of=rerun_of)
        return _with(request, snapshot=snapshot, origin=origin)

    def dependencies(
        self, scheduler: str, after: Sequence[Dependency | AppHandle | str]
    ) -> tuple[Dependency, ...]:
        """``after`` as :class:`~distspec.schedulers.api.Dependency` records for
        ``scheduler``: each handle checked to be of that scheduler and known to it; a
        sweep's handle becomes its arrays (or points).

        Raises:
            UsageError: the backend has no dependencies, a handle is of another scheduler
                or unknown, a condition is not one of ok, any, failed.
        """
        from distspec.schedulers.api import CONDITIONS, Dependency
        from distspec.specs.handles import AppHandle

        if isinstance(after, (str, AppHandle, Dependency)):
            after = [after]
        if not after:
            return ()
        sched = self.scheduler(scheduler)
        if not sched.capabilities.dependencies:
            raise UsageError(
                f"--after: {scheduler} cannot hold a job until another has ended; "
                "submit it once the other has ended"
            )
        deps: list[Dependency] = []
        for item in after:
            if isinstance(item, Dependency):
                deps.append(item)
                continue
            condition = "ok"
            if isinstance(item, str):
                text, sep, tail = item.rpartition(":")
                if sep and "/" not in tail and tail:
                    if tail not in CONDITIONS:
                        raise UsageError(
                            f"--after {item}: {tail!r} is not a condition; give "
                            "HANDLE:ok (it succeeded, the default), HANDLE:any or HANDLE:failed"
                        )
                    item, condition = text, tail
                item = AppHandle.parse(item)
            if item.scheduler != scheduler:
                raise UsageError(
                    f"--after {item}: a {item.scheduler} job; a {scheduler} job can only "
                    f"wait for {scheduler} jobs"
                )
            from distspec.sweep.record import find_sweep

            sweep = find_sweep(self, item)
            if sweep is not None:
                deps += [Dependency(i, condition) for i in sweep.dependency_ids()]
                continue
            if sched.describe(item.app_id) is None:
                raise UsageError(f"--after {item}: {scheduler} knows no such job")
            deps.append(Dependency(item.app_id, condition))
        return tuple(deps)

    def _option_sources(self, scheduler: str, cfg: Mapping[str, Any] | None) -> dict[str, str]:
        """Where each run option set for ``scheduler`` came from (the rest: defaults)."""
        sources: dict[str, str] = {}
        for source, values in self.config.scheduler_layers(scheduler):
            for key in values:
                sources[key.replace("-", "_")] = source
        for key in cfg or {}:
            sources[str(key).replace("-", "_")] = "-cfg"
        return sources

    def submit(self, request: Request) -> AppHandle:
        """Submit what :meth:`dryrun` compiled; returns the handle."""
        from distspec.schedulers.api import Request

        if not isinstance(request, Request):
            from distspec._arguments import fail, kind

            fail(
                "Runner.submit", "request", request, f"give a dryrun's Request, not {kind(request)}"
            )
        sched = self.scheduler(request.scheduler)
        snapshot = request.snapshot
        state = None
        if snapshot is not None:
            from distspec.snapshot.policy import take
            from distspec.snapshot.provenance import check_dirty, git_state

            if snapshot.plan is not None:  # a new snapshot (a rerun's is as it was)
                state = git_state(snapshot.base) if snapshot.git else None
                check_dirty(snapshot, state)
            take(snapshot)
        sched.preflight(request)
        _log(
            _INFO, "submitting %s to %s (%s)", request.app_id, request.scheduler, request.main_file
        )
        app_id = sched.submit(request)
        from distspec.specs.handles import AppHandle

        handle = AppHandle(scheduler=request.scheduler, session=self.session, app_id=app_id)
        _log(_INFO, "submitted %s", handle)
        self._record_provenance(sched, request, handle, state)
        return handle

    def _record_provenance(
        self, sched: Scheduler[Any], request: Request, handle: AppHandle, state: Any
    ) -> None:
        """Write the run's provenance record into its job folder, where it has one. The
        job is submitted by now: a record that cannot be written is said, not raised."""
        from distspec.snapshot import provenance

        try:
            folder = self._provenance_folder(sched, handle.app_id, request)
            if folder is None:
                return
            snapshot = request.snapshot
            if snapshot is not None and snapshot.plan is None:
                state = provenance.RecordedGit(snapshot.recorded_git)
            elif state is None:
                from distspec.snapshot.files import find_base

                base, is_git = find_base(sched.working_dir(request.app.roles[0], request.options))
                state = provenance.git_state(base) if is_git else None
            from distspec.specs.options import options_to_strings

            origin = request.origin or Origin(app=request.app)
            data = provenance.record(
                handle=handle.format(),
                app=origin.app,
                options=options_to_strings(request.options),
                sources=origin.sources,
                snapshot=request.snapshot,
                state=state,
                rerun_of=origin.rerun_of,
            )
            patch = state.patch() if state is not None else b""
            provenance.write(folder, data, patch)
        except Exception as e:  # the job runs either way
            tell(f"distspec: {handle}: could not write its provenance record: {e}")

    def provenance(self, handle: AppHandle | str) -> dict[str, Any] | None:
        """The run's provenance record (:mod:`distspec.snapshot.provenance`), or None when
        it has none (submitted before distspec kept them, or its job folder is gone)."""
        from distspec.snapshot.provenance import read

        h, sched = self._resolve(handle)
        sweep = self.sweep(h)
        if sweep is not None:
            return read(sweep.folder)
        folder = self._provenance_folder(sched, h.app_id)
        return None if folder is None else read(folder)

    def job_folder(self, handle: AppHandle | str) -> str | None:
        """The run's job folder (a local path, or an fsspec URL on Kubernetes), where
        it keeps its logs, ``runtime.json`` and ``metrics.jsonl``; None when it keeps
        none this machine can name. Raises AppNotFound for a malformed handle or an
        unknown scheduler."""
        h, sched = self._resolve(handle)
        paths = sched.job_paths(h.app_id)
        return None if paths is None else paths.folder

    def _provenance_folder(
        self, sched: Scheduler[Any], app_id: str, request: Request | None = None
    ) -> str | None:
        """Where the run's provenance record is kept: its job folder; for a run without
        one (Kubernetes without ``job_dir``), ``<state dir>/provenance/<scheduler>/<app
        id>`` on the submitting machine. None for an app id that names no folder."""
        paths = sched.job_paths(app_id, request)
        if paths is not None:
            return paths.folder
        if not app_id or app_id in (".", "..") or "/" in app_id or "\0" in app_id:
            return None
        return os.path.join(os.fspath(self.config.state_dir), "provenance", sched.name, app_id)

    def run(self, app: AppDef, scheduler: str, cfg: Mapping[str, Any] | None = None) -> AppHandle:
        """Compile and submit; returns at once with the handle."""
        return self.submit(self.dryrun(app, scheduler, cfg))

    def run_component(
        self,
        component: str,
        args: Sequence[str] = (),
        scheduler: str | None = None,
        cfg: Mapping[str, Any] | None = None,
    ) -> AppHandle:
        """Bind ``component`` (a builtin name, ``path/file.py:fn`` or ``pkg.mod:fn``) to
        command-line style ``args``, compile it for ``scheduler`` (the configured one by
        default) and submit it; returns at once with the handle.

        ``runner.run_component("dist.ddp", ["-j", "1x2", "--script", "train.py"])`` does
        what ``distspec run dist.ddp -j 1x2 --script train.py`` does, config defaults
        for the component included.

        Raises:
            ComponentError: the component cannot be loaded or ``args`` do not bind
                (``--help`` among ``args`` is also refused: there is no terminal to show it).
            UsageError: any other usage mistake (unknown scheduler or option, ...).
        """
        from distspec import _arguments as check
        from distspec.components.binder import ComponentHelp
        from distspec.components.loader import load
        from distspec.errors import ComponentError

        where = "Runner.run_component"
        check.string(component, where, "component")
        for i, arg in enumerate(check.sequence(args, where, "args")):
            check.string(arg, where, f"args[{i}]", empty=True)
        check.string(scheduler, where, "scheduler", optional=True)
        loaded = load(component)
        scheduler = scheduler or self.config.scheduler
        try:
            app = self.bind(loaded, args, prog=f"distspec run {component}", scheduler=scheduler)
        except ComponentHelp:
            raise ComponentError(f"{component}: --help asks for help text, not a job") from None
        return self.run(app, scheduler, cfg)

    def bind(
        self,
        component: Component,
        args: Sequence[str],
        *,
        prog: str = "distspec run",
        scheduler: str | None = None,
    ) -> AppDef:
        """``component`` bound to CLI-style ``args`` over the config's defaults for it
        (``scheduler``: the backend it is for, as the binder takes it).

        Raises:
            ComponentHelp: ``args`` ask for ``--help`` (its ``text`` is the help).
            ConfigError: a config default does not bind; names its file and line.
            UsageError: ``args`` do not bind.
        """
        from distspec.components.binder import bind

        argv = list(args)
        defaults = self.config.component_defaults(component.name)
        try:
            return bind(component, argv, defaults=defaults, prog=prog, scheduler=scheduler)
        except UsageError as e:
            if not defaults:
                raise
            try:  # the arguments alone: their own mistake, or the config's?
                bind(component, argv, prog=prog, scheduler=scheduler)
            except UsageError:
                raise e from None
            for key, value in defaults.items():
                try:
                    bind(component, argv, defaults={key: value}, prog=prog, scheduler=scheduler)
                except UsageError:
                    source = self.config.component_source(component.name, key)
                    raise ConfigError(str(e), source=source) from None
            raise

    def _resolve(self, handle: AppHandle | str) -> tuple[AppHandle, Scheduler[Any]]:
        from distspec.specs.handles import AppHandle

        if isinstance(handle, str):
            handle = AppHandle.parse(handle)
        elif not isinstance(handle, AppHandle):
            from distspec._arguments import fail

            fail("Runner", "handle", handle, "give a handle string (SCHEDULER://SESSION/APP_ID)")
        return handle, self.scheduler(handle.scheduler)

    def sweep(self, handle: AppHandle | str) -> SweepRecord | None:
        """The record of the sweep ``handle`` names (:mod:`distspec.sweep.record`), or
        None when it names a single job."""
        from distspec.sweep.record import find_sweep

        h, _ = self._resolve(handle)
        return find_sweep(self, h)

    def status(self, handle: AppHandle | str) -> AppStatus:
        """The current status. Raises AppNotFound when the scheduler has no record.

        A sweep's status is its points' together: RUNNING while one runs, PENDING while
        one waits, then FAILED if one failed, else SUCCEEDED (CANCELLED when cancelled);
        ``msg`` counts the points in each state."""
        h, sched = self._resolve(handle)
        sweep = self.sweep(h)
        if sweep is not None:
            from distspec.sweep.record import sweep_status

            return sweep_status(sweep.states(self))
        status = sched.describe(h.app_id)
        if status is None:
            raise AppNotFound(h.format())
        _log(_DEBUG, "%s: %s %s", h, status.state.value, status.msg)
        return status

    describe = status

    def wait(
        self,
        handle: AppHandle | str,
        *,
        timeout: float | None = None,
        on_status: Callable[[AppStatus], None] | None = None,
    ) -> AppStatus:
        """Block until the app ends and return its final status; ``on_status`` sees every
        poll.

        Raises:
            TimeoutError: ``timeout`` seconds passed and the app has not ended (it keeps
                running; call ``wait`` again or ``cancel`` it).
            AppNotFound: the scheduler has no record of the app.
            ArgumentError: ``timeout`` is not None or a finite number >= 0, or
                ``on_status`` is not callable.
        """
        from distspec import _arguments

        timeout = _arguments.timeout(timeout, "Runner.wait")
        if on_status is not None and not callable(on_status):
            _arguments.fail("Runner.wait", "on_status", on_status, "give a function or None")
        h, sched = self._resolve(handle)
        status: AppStatus | None
        if self.sweep(h) is not None:
            status = self._wait_sweep(h, timeout, on_status)
        else:
            status = sched.wait(h.app_id, timeout=timeout, on_status=on_status)
        if status is None:
            raise AppNotFound(h.format())
        _log(_INFO, "%s after waiting: %s", h, f"{status.state.value} {status.msg}".strip())
        if not status.is_terminal:
            raise TimeoutError(f"{h} is still {status.state.value} after {timeout:g}s")
        return status

    def _wait_sweep(
        self,
        h: AppHandle,
        timeout: float | None,
        on_status: Callable[[AppStatus], None] | None,
    ) -> AppStatus:
        """Poll a sweep's points until every one has ended (or ``timeout``)."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        sched = self.scheduler(h.scheduler)
        while True:
            status = self.status(h)
            if on_status is not None:
                on_status(status)
            if status.is_terminal:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                return status
            pause = sched.max_poll_interval * 2
            if deadline is not None:
                pause = max(0.0, min(pause, deadline - time.monotonic()))
            time.sleep(pause)

    def cancel(self, handle: AppHandle | str) -> None:
        """Stop the app. A record the scheduler cannot read (a corrupt local
        ``state.json``) does not stop the cancel: the scheduler decides whether it can
        still reach the app, and raises its error if not.

        A sweep's handle cancels every point that has not ended (an array at once); a
        point's handle cancels that point alone.

        Raises:
            AppNotFound: the scheduler has no record of the app.
        """
        h, sched = self._resolve(handle)
        sweep = self.sweep(h)
        if sweep is not None:
            _log(_INFO, "cancelling sweep %s", h)
            jobs = [str(a["app_id"]) for a in sweep.data.get("arrays") or []]
            if not jobs:  # one job per point
                jobs = [
                    app_id
                    for app_id, status in zip(sweep.app_ids(), sweep.states(self), strict=True)
                    if status is not None and not status.is_terminal
                ]
            # One command where the backend has one for many jobs (scancel A B ...).
            sched.cancel_many(jobs)
            return
        try:
            known = sched.describe(h.app_id) is not None
        except SchedulerError:
            known = True
        if not known:
            raise AppNotFound(h.format())
        _log(_INFO, "cancelling %s", h)
        sched.cancel(h.app_id)

    def list(self, scheduler: str) -> list[AppSummary]:
        """The apps ``scheduler`` knows of this session."""
        return self.scheduler(scheduler).list()

    def log_lines(
        self,
        handle: AppHandle | str,
        role: str | None = None,
        replica: int | None = None,
        *,
        regex: str | None = None,
        tail: int | None = None,
        since: float | None = None,
        follow: bool = False,
        rank: int | None = None,
    ) -> Iterator[LogLine]:
        """Lines of the chosen replicas' logs (all of them by default), filtered.

        Replicas are read one after another; with ``follow`` several replicas are
        interleaved as lines arrive, and each replica's lines end when it has ended
        (every line it wrote given out exactly once, restarts included). ``rank`` keeps
        the lines of one global rank (torchrun's workers; see :class:`LogLine`);
        ``tail`` the last N lines (of the selection, per replica), also when following.

        Raises:
            ArgumentError: at the call, an argument of the wrong type or value (``role``
                not a str, ``replica``, ``tail`` or ``rank`` not an int >= 0, ``since``
                not a number, ``regex`` not a valid regular expression).
        """
        import math

        from distspec import _arguments as check

        where = "Runner.log_lines"
        check.string(role, where, "role", optional=True)
        check.integer(replica, where, "replica", lo=0, optional=True)
        check.integer(tail, where, "tail", lo=0, optional=True)
        check.integer(rank, where, "rank", lo=0, optional=True)
        if since is not None and (
            isinstance(since, bool)
            or not isinstance(since, (int, float))
            or not math.isfinite(since)
        ):
            check.fail(where, "since", since, "give a time (seconds since the epoch) or None")
        if not isinstance(follow, bool):
            check.fail(where, "follow", follow, f"give True or False, not {check.kind(follow)}")
        if regex is not None:
            check.string(regex, where, "regex", empty=True)
            try:
                re.compile(regex)
            except re.error as e:
                check.fail(where, "regex", regex, f"not a regular expression: {e}")
        return self._log_lines(
            handle, role, replica, regex=regex, tail=tail, since=since, follow=follow, rank=rank
        )

    def _log_lines(
        self,
        handle: AppHandle | str,
        role: str | None,
        replica: int | None,
        *,
        regex: str | None,
        tail: int | None,
        since: float | None,
        follow: bool,
        rank: int | None,
    ) -> Iterator[LogLine]:
        from collections import deque

        from distspec.torchrun_output import rank_lines

        h, sched = self._resolve(handle)
        if self.sweep(h) is not None:
            raise UsageError(
                f"{h} is a sweep: give one point's handle (`distspec describe {h}` lists them)"
            )
        status = sched.describe(h.app_id)
        if status is None:
            raise AppNotFound(h.format())

        def matching(status: AppStatus) -> list[tuple[str, int]]:
            return [
                (rs.role, r.id)
                for rs in status.roles
                for r in rs.replicas
                if (role is None or rs.role == role) and (replica is None or r.id == replica)
            ]

        targets = matching(status)
        # Following a job whose replicas the scheduler does not list yet (Kubernetes
        # before its pods exist): wait for them, or for the end.
        while follow and not targets and not status.is_terminal and not status.roles:
            import time

            time.sleep(1.0)
            status = sched.describe(h.app_id) or status
            targets = matching(status)
        if not targets:
            known = ", ".join(f"{rs.role}/{r.id}" for rs in status.roles for r in rs.replicas)
            raise UsageError(
                f"{h}: no replica matches {role or '*'}/{'*' if replica is None else replica}; known: {known}"
            )

        def parsed(target: tuple[str, int], follow: bool) -> Iterator[LogLine]:
            role_name, index = target
            raw = sched.log_iter(h.app_id, role_name, index, since=since, follow=follow)
            for line_rank, text in rank_lines(raw, role_name):
                if rank is None or line_rank == rank:
                    yield LogLine(role_name, index, text, line_rank)

        def selected(lines: Iterator[LogLine]) -> Iterator[LogLine]:
            pattern = re.compile(regex) if regex else None
            return (ln for ln in lines if pattern is None or pattern.search(ln.text))

        def one(target: tuple[str, int]) -> Iterator[LogLine]:
            if tail is None:
                yield from selected(parsed(target, follow))
                return
            # The last `tail` lines there are now; when following, then everything after
            # them: follow from the start skipping what was counted (the log only grows,
            # so nothing written in between is lost or repeated).
            seen = 0
            last: deque[LogLine] = deque(maxlen=max(tail, 0))
            for line in selected(parsed(target, False)):
                seen += 1
                last.append(line)
            yield from last
            if follow:
                for i, line in enumerate(selected(parsed(target, True))):
                    if i >= seen:
                        yield line

        if not follow or replica is not None:
            for target in targets:
                yield from one(target)
            return

        def discover() -> list[tuple[str, int]]:
            current = sched.describe(h.app_id)
            return [] if current is None else matching(current)

        # Replicas the scheduler lists only later (Kubernetes pods, an elastic job
        # growing) are looked for while following and followed too.
        yield from _interleave(targets, one, discover)


@frozen
class Origin:
    """Where a Request came from (:attr:`distspec.schedulers.api.Request.origin`)."""

    app: AppDef
    #: Run option -> where its value came from (``-cfg``, a config file); the rest are defaults.
    sources: Mapping[str, str] = field(default_factory=dict)
    #: The handle of the run this one repeats (``distspec rerun``).
    rerun_of: str | None = None


def _wants_snapshot(opts: Any, sched: Scheduler[Any]) -> bool:
    """Whether the options ask for a snapshot (``auto``: the backend's default)."""
    mode = getattr(opts, "snapshot", None)
    value = getattr(mode, "value", mode)
    return value == "on" or (value == "auto" and sched.capabilities.snapshot_default)


def _with(request: Request, **changes: Any) -> Request:
    from distspec.frozen import replace

    return replace(request, **changes)


def _check_session(session: object) -> None:
    """A session is one path-free word: it is part of ``scheduler://session/app_id``."""
    from distspec import _arguments

    text = _arguments.string(session, "Runner", "session", limit=128)
    if text is not None and any(c == "/" or c.isspace() or not c.isprintable() for c in text):
        _arguments.fail(
            "Runner", "session", session, "give one word without '/', spaces or control characters"
        )


#: While following several replicas, how often to look for replicas not listed before.
DISCOVER_INTERVAL = 2.0


class _Failed:
    """A reader thread's exception, handed to the consumer to raise."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _interleave(
    targets: list[tuple[str, int]],
    open_stream: Callable[[tuple[str, int]], Iterator[LogLine]],
    discover: Callable[[], list[tuple[str, int]]],
) -> Iterator[LogLine]:
    """Merge followed streams as their lines arrive, one reader thread per target.

    Every :data:`DISCOVER_INTERVAL` seconds, and once every stream has ended,
    ``discover()`` names the targets known now; new ones are followed too. Ends when
    every stream has ended and nothing new is found. A reader's exception is raised
    here.
    """
    import queue
    import threading
    import time

    done = object()
    q: queue.Queue[Any] = queue.Queue(maxsize=1024)
    started: set[tuple[str, int]] = set()
    running = 0

    def pump(target: tuple[str, int]) -> None:
        try:
            for item in open_stream(target):
                q.put(item)
        except BaseException as e:  # handed over, raised by the consumer
            q.put(_Failed(e))
        finally:
            q.put(done)

    def start(found: list[tuple[str, int]]) -> None:
        nonlocal running
        for target in found:
            if target not in started:
                started.add(target)
                running += 1
                threading.Thread(target=pump, args=(target,), daemon=True).start()

    start(targets)
    next_look = time.monotonic() + DISCOVER_INTERVAL
    while True:
        if not running:
            found = discover()
            if not set(found) - started:
                return
            start(found)
            continue
        try:
            item = q.get(timeout=max(0.0, next_look - time.monotonic()))
        except queue.Empty:
            start(discover())
            next_look = time.monotonic() + DISCOVER_INTERVAL
            continue
        if item is done:
            running -= 1
        elif isinstance(item, _Failed):
            raise item.error
        else:
            yield item
