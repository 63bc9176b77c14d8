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
from collections.abc import Callable, Iterator, Mapping

from distspec.errors import AppNotFound, ConfigError, OptionError, UsageError
from distspec.specs.app import AppDef
from distspec.specs.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.config import Config
    from distspec.schedulers._registry import SchedulerRegistry
    from distspec.schedulers.api import AppSummary, CommandRunner, Request, Scheduler
    from distspec.specs.handles import AppHandle
    from distspec.specs.state import AppStatus

__all__ = ["LogLine", "Runner", "new_app_id"]


def new_app_id(app_name: str) -> str:
    """``<name>-<8 hex>``: readable, unique enough, valid in every backend after sanitising."""
    # os.urandom is what secrets.token_hex uses; importing secrets costs a dry run
    # ~5 ms (it loads hmac, OpenSSL's _hashlib, random and base64).
    return f"{app_name}-{os.urandom(4).hex()}"


@frozen(kw_only=False)
class LogLine:
    """One line of one replica's log."""

    role: str
    replica: int
    text: str


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
        """Typed options: config layers, then ``cfg`` on top; errors name their source."""
        sched = self.scheduler(scheduler)
        merged: dict[str, Any] = {}
        for source, values in self.config.scheduler_layers(scheduler):
            try:
                sched.parse_options(values)
            except OptionError as e:
                raise ConfigError(str(e), source=source) from None
            merged.update(values)
        merged.update(cfg or {})
        return sched.parse_options(merged)

    def dryrun(
        self,
        app: AppDef,
        scheduler: str,
        cfg: Mapping[str, Any] | None = None,
        *,
        app_id: str | None = None,
    ) -> Request:
        """Compile without submitting: the Request's ``render()`` is what would be submitted."""
        sched = self.scheduler(scheduler)
        opts = self.options(scheduler, cfg)
        return sched.compile(app, opts, app_id=app_id or new_app_id(app.name))

    def submit(self, request: Request) -> AppHandle:
        sched = self.scheduler(request.scheduler)
        sched.preflight(request)
        app_id = sched.submit(request)
        from distspec.specs.handles import AppHandle

        return AppHandle(scheduler=request.scheduler, session=self.session, app_id=app_id)

    def run(self, app: AppDef, scheduler: str, cfg: Mapping[str, Any] | None = None) -> AppHandle:
        """Compile and submit; returns at once with the handle."""
        return self.submit(self.dryrun(app, scheduler, cfg))

    def _resolve(self, handle: AppHandle | str) -> tuple[AppHandle, Scheduler[Any]]:
        if isinstance(handle, str):
            from distspec.specs.handles import AppHandle

            handle = AppHandle.parse(handle)
        return handle, self.scheduler(handle.scheduler)

    def status(self, handle: AppHandle | str) -> AppStatus:
        """The current status. Raises AppNotFound when the scheduler has no record."""
        h, sched = self._resolve(handle)
        status = sched.describe(h.app_id)
        if status is None:
            raise AppNotFound(h.format())
        return status

    describe = status

    def wait(
        self,
        handle: AppHandle | str,
        *,
        timeout: float | None = None,
        on_status: Callable[[AppStatus], None] | None = None,
    ) -> AppStatus:
        """Block until the app ends (or ``timeout``); ``on_status`` sees every poll."""
        h, sched = self._resolve(handle)
        status = sched.wait(h.app_id, timeout=timeout, on_status=on_status)
        if status is None:
            raise AppNotFound(h.format())
        return status

    def cancel(self, handle: AppHandle | str) -> None:
        h, sched = self._resolve(handle)
        if sched.describe(h.app_id) is None:
            raise AppNotFound(h.format())
        sched.cancel(h.app_id)

    def list(self, scheduler: str) -> list[AppSummary]:
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
    ) -> Iterator[LogLine]:
        """Lines of the chosen replicas' logs (all of them by default), filtered.

        Replicas are read one after another; with ``follow`` several replicas are
        interleaved as lines arrive.
        """
        from distspec.schedulers._common import filter_lines

        h, sched = self._resolve(handle)
        status = sched.describe(h.app_id)
        if status is None:
            raise AppNotFound(h.format())
        targets = [
            (rs.role, r.id)
            for rs in status.roles
            for r in rs.replicas
            if (role is None or rs.role == role) and (replica is None or r.id == replica)
        ]
        if not targets:
            known = ", ".join(f"{rs.role}/{r.id}" for rs in status.roles for r in rs.replicas)
            raise UsageError(
                f"{h}: no replica matches {role or '*'}/{'*' if replica is None else replica}; known: {known}"
            )

        def one(target: tuple[str, int]) -> Iterator[LogLine]:
            lines = sched.log_iter(h.app_id, target[0], target[1], since=since, follow=follow)
            for text in filter_lines(lines, regex=regex, tail=tail):
                yield LogLine(target[0], target[1], text)

        if not follow or len(targets) == 1:
            for target in targets:
                yield from one(target)
            return
        yield from _interleave([one(t) for t in targets])


def _interleave(streams: list[Iterator[LogLine]]) -> Iterator[LogLine]:
    """Merge followed streams as their lines arrive (one reader thread per stream)."""
    import queue
    import threading

    done = object()
    q: queue.Queue[Any] = queue.Queue(maxsize=1024)

    def pump(stream: Iterator[LogLine]) -> None:
        try:
            for item in stream:
                q.put(item)
        finally:
            q.put(done)

    for stream in streams:
        threading.Thread(target=pump, args=(stream,), daemon=True).start()
    remaining = len(streams)
    while remaining:
        item = q.get()
        if item is done:
            remaining -= 1
        else:
            yield item
