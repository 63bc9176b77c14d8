"""``local_cwd``'s scheduler: :class:`LocalScheduler`, every replica on this machine
under a detached supervisor.

``compile`` is :mod:`.plan`'s; ``submit`` creates the run directory
``<state dir>/local_cwd/<app id>/`` (mode 0700) and starts the supervisor fully
detached on it (:mod:`.launch`); ``status``, ``describe``, ``wait``, ``log``,
``cancel``, ``list`` and ``prune`` read that directory, so they work from any shell,
also after the submitting CLI has exited. A reader that finds the record of a run
whose supervisor died records the truth (FAILED, "supervisor died").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.frozen import frozendict
from distspec.schedulers.api import (
    CONDITIONS,
    SCRIPT_METADATA,
    AppSummary,
    Capabilities,
    Dependency,
    JobPaths,
    Request,
    Scheduler,
    check_capabilities,
)
from distspec.schedulers.local.files import PLAN_FILE
from distspec.schedulers.local.options import LocalOptions, default_state_dir
from distspec.schedulers.local.plan import BY_HAND, LOG_PATTERN, plan_files
from distspec.schedulers.local.status import TERMINAL
from distspec.schedulers.logs import log_file_name
from distspec.specs.app import AppDef, Role

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, ClassVar

    from distspec.specs.state import AppState, AppStatus

__all__ = ["LocalOptions", "LocalScheduler"]

#: Interval of the state-file check in :meth:`LocalScheduler.wait` (a stat() call)
#: while the supervisor's end cannot be waited for (no ``alive.fifo``, or just after
#: it ended), and of :meth:`LocalScheduler.cancel`.
WAIT_INTERVAL = 0.005
#: Interval of the state-file check while ``wait`` blocks on ``alive.fifo``; the end
#: of the run wakes it at once, this only paces intermediate changes.
WAIT_SLOW_INTERVAL = 0.1
#: How often ``wait`` also checks that the supervisor is alive.
LIVENESS_INTERVAL = 0.25
#: How long ``cancel`` lets a supervisor whose replicas are all gone try to record the
#: end (it retries every second) before it kills it and records the cancel itself.
STUCK_AFTER = 2.5


class LocalScheduler(Scheduler[LocalOptions]):
    """Processes on this machine under a detached supervisor; see the module docstring."""

    name: ClassVar[str] = "local_cwd"
    Options: ClassVar[type[Any]] = LocalOptions
    capabilities: ClassVar[Capabilities] = Capabilities(
        mount_kinds=frozenset(),
        shared_files=True,
        # A run is followed as a foreground program would be: run --wait streams its
        # logs and cancels it on Ctrl-C.
        interactive=True,
        # A role's image is the directory it runs in (``${img_root}``).
        image="directory",
        # Whole runs, logs included, live in the state dir: prune removes ended ones.
        prunable=True,
        # run --after: the supervisor waits for the other runs' ends (.dependencies).
        dependencies=True,
    )
    max_poll_interval: ClassVar[float] = 0.05

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._commands: dict[str, dict[str, str]] = {}  # app id -> role -> command (plan.json)

    # -- paths --------------------------------------------------------------------

    @property
    def root(self) -> Path:
        """``<state dir>/local_cwd``: one directory per run below it."""
        from pathlib import Path  # not at the top: a dry run never needs it

        base = self._state_dir if self._state_dir is not None else default_state_dir()
        return Path(base) / self.name

    def run_dir(self, app_id: str) -> Path:
        """``<state dir>/local_cwd/<app id>``, the run directory of ``app_id``.

        Raises:
            UsageError: ``app_id`` is not a name a run directory can have.
        """
        if not app_id or "/" in app_id or app_id in (".", ".."):
            raise UsageError(f"invalid local_cwd app id {app_id!r}")
        return self.root / app_id

    def job_paths(self, app_id: str, request: Request | None = None) -> JobPaths:
        """The run directory; each replica's combined log is
        ``logs/<role>-<replica>.log`` in it; there is no batch script, so no output of
        one. ``request`` is not needed: the run directory depends on the state dir."""
        return JobPaths(folder=str(self.run_dir(app_id)), log_pattern=LOG_PATTERN)

    # -- the pure half ------------------------------------------------------------

    def compile(
        self, app: AppDef, opts: LocalOptions, *, app_id: str, after: Sequence[Dependency] = ()
    ) -> Request:
        """The plan (:mod:`.plan`): every replica's argv, env, cwd and log files, macros
        substituted; ``--dryrun`` prints it, ``-o DIR`` runs it by hand in DIR.

        ``after`` (``run --after``) becomes the plan's ``after`` list, each run named
        with its run directory under this scheduler's state dir: the supervisor waits
        for them to end before it starts anything (:mod:`.dependencies`).

        Raises:
            CompileError: a dependency's condition is not one of ``CONDITIONS``.
            UsageError: a dependency's app id is not one a run directory can have.
        """
        check_capabilities(app, self.capabilities, self.name)
        deps = []
        for dep in after:
            if dep.condition not in CONDITIONS:
                raise CompileError(
                    self.name,
                    f"after {dep.app_id}: unknown condition {dep.condition!r} "
                    f"(one of {', '.join(CONDITIONS)})",
                )
            run_dir = os.path.abspath(self.run_dir(dep.app_id))
            deps.append({"app_id": dep.app_id, "run_dir": run_dir, "condition": dep.condition})
        return Request(
            scheduler=self.name,
            app=app,
            app_id=app_id,
            options=opts,
            files=frozendict(plan_files(app, opts, app_id=app_id, after=deps)),
            argv=BY_HAND,
            main_file=PLAN_FILE,
            after=tuple(after),
        )

    # -- the effectful half -------------------------------------------------------

    def working_dir(self, role: Role, opts: LocalOptions) -> str:
        """``-cfg cwd``, else the role's image (a directory here), else the current one."""
        return os.path.abspath(opts.cwd or role.image or os.getcwd())

    def preflight(self, request: Request) -> None:
        """Every role's working directory and script must exist here."""
        opts: LocalOptions = request.options
        for role in request.app.roles:
            base = opts.cwd or role.image or os.getcwd()
            if not os.path.isdir(base):
                what = "cwd" if opts.cwd else "image (a directory for local_cwd)"
                raise UsageError(f"role {role.name!r}: {what} {base!r} is not a directory")
            script = role.metadata.get(SCRIPT_METADATA)
            if script and not os.path.exists(os.path.join(base, script)):
                raise UsageError(f"role {role.name!r}: script {script!r} not found in {base}")

    def submit(self, request: Request) -> str:
        """Write the run directory and start the supervisor detached; returns the app id
        once the supervisor has started every replica and written its first state (a
        run with dependencies: once its state says PENDING, "waiting for ...").

        Raises:
            SchedulerError: the run directory cannot be made or written (read-only or
                full state directory), or the supervisor did not start; nothing is left.
        """
        from distspec.schedulers.local.launch import submit_run

        return submit_run(request, self.root, self.run_dir(request.app_id), self.name)

    def _read_state(self, app_id: str) -> dict[str, Any] | None:
        """``state.json`` validated against its declared shape
        (:class:`~distspec.schedulers.local.records.StateRecord`); None if absent.
        A truncated or malformed record raises SchedulerError (one line)."""
        from distspec.schedulers.local.files import STATE_FILE
        from distspec.schedulers.local.records import load_state

        data = load_state(str(self.run_dir(app_id) / STATE_FILE), app_id, self.name)
        return None if data is None else dict(data)

    def _checked_state(self, app_id: str) -> dict[str, Any] | None:
        """The state file, made terminal (and the run's processes killed) when it says
        the run goes on but its supervisor is gone."""
        import time

        from distspec.schedulers.local.files import read_regular
        from distspec.schedulers.local.processes import find_supervisor, hunt, is_alive

        data = self._read_state(app_id)
        if data is None and find_supervisor(app_id) is not None:
            # The run directory was deleted under a live run: its supervisor creates
            # it again within a second (_STATE_RETRY); wait for that.
            deadline = time.monotonic() + 5.0
            while data is None and time.monotonic() < deadline:
                time.sleep(WAIT_INTERVAL * 10)
                data = self._read_state(app_id)
        if data is None or data["state"] in TERMINAL:
            return data
        info = data.get("supervisor", {})
        if is_alive(int(info.get("pid", 0)), info.get("starttime")):
            return data
        # The supervisor died (SIGKILL, OOM killer...). Its keepers kill their trees on
        # its death; make sure, then record the truth so every later reader sees it.
        data = self._read_state(app_id) or data
        if data["state"] in TERMINAL:  # it finished between the two reads
            return data
        hunt(app_id)
        msg = "supervisor died"
        try:  # a crash (not a SIGKILL) leaves its traceback here, a failed write its error
            said = read_regular(
                str(self.run_dir(app_id) / "supervisor.log"), 16384, tail=True
            ).decode(errors="replace")
        except OSError:
            said = ""
        if said.strip():
            msg += f": {said.strip().splitlines()[-1][:300]}"
        self._record_end(app_id, data, "FAILED", msg, "supervisor died")
        return data

    def _record_end(
        self, app_id: str, data: dict[str, Any], state: str, msg: str, reason: str
    ) -> str:
        """Make ``data`` (a record whose supervisor is gone) final, in place, and write
        it; '' or why it could not be written (it is then reported, not recorded, and
        the next reader tries again). A full disk gets the supervisor's reserve."""
        import time

        from distspec.schedulers.local.files import (
            STATE_FILE,
            no_space,
            os_error_text,
            release_reserve,
            write_json_atomic,
        )

        now = time.time()
        data["state"] = state
        data["msg"] = msg
        data["ended"] = now
        for role in data["roles"]:
            for rep in role["replicas"]:
                if rep["state"] not in TERMINAL:
                    rep["state"] = state
                    rep["reason"] = reason
                    rep["ended"] = now
        run_dir = str(self.run_dir(app_id))
        for _ in range(2):
            try:
                write_json_atomic(os.path.join(run_dir, STATE_FILE), data)
                release_reserve(run_dir)
                return ""
            except OSError as e:
                error = f"cannot write {STATE_FILE}: {os_error_text(e)}"
                if not (no_space(e) and release_reserve(run_dir)):
                    break
        return error

    def describe(self, app_id: str) -> AppStatus | None:
        """The run's status from its ``state.json``, or None when no run of that id is kept here."""
        from distspec.schedulers.local.status import role_commands, to_status

        data = self._checked_state(app_id)
        if data is None:
            return None
        run_dir = self.run_dir(app_id)
        commands = self._commands.get(app_id)
        if commands is None:
            commands = self._commands[app_id] = role_commands(run_dir)
        return to_status(data, str(run_dir), commands)

    def wait(
        self,
        app_id: str,
        *,
        timeout: float | None = None,
        on_status: Callable[[AppStatus], None] | None = None,
    ) -> AppStatus | None:
        """Follow the state file: block on the supervisor's ``alive.fifo`` (it hangs up
        when the run has ended or the supervisor died), with a stat() of the state file
        every :data:`WAIT_SLOW_INTERVAL` for intermediate changes and a liveness check
        every :data:`LIVENESS_INTERVAL`. Without the FIFO (a supervisor that could not
        create it), a stat() every :data:`WAIT_INTERVAL`; after the hang-up, a full
        check every :data:`WAIT_INTERVAL` until the state is terminal (a killed
        supervisor closes its files a moment before it counts as dead)."""
        import select
        import time

        from distspec.schedulers.local.files import ALIVE_FIFO, STATE_FILE, open_alive

        run_dir = self.run_dir(app_id)
        path = run_dir / STATE_FILE
        deadline = None if timeout is None else time.monotonic() + timeout
        last_key: tuple[int, int] | None = None
        last_check = 0.0
        status: AppStatus | None = None
        alive = open_alive(run_dir / ALIVE_FIFO)
        hung_up = False
        poller = select.poll()
        if alive is not None:
            poller.register(alive, select.POLLIN)
        try:
            while True:
                try:
                    st = os.stat(path)
                    key: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
                except FileNotFoundError:
                    key = None
                now = time.monotonic()
                if hung_up or key != last_key or now - last_check >= LIVENESS_INTERVAL:
                    last_key, last_check = key, now
                    status = self.describe(app_id)
                    if on_status is not None and status is not None:
                        on_status(status)
                    if status is None or status.is_terminal:
                        return status
                if deadline is not None and now >= deadline:
                    return status
                pause = WAIT_INTERVAL if alive is None else WAIT_SLOW_INTERVAL
                if deadline is not None:
                    pause = max(0.0, min(pause, deadline - now))
                if alive is None:
                    time.sleep(pause)
                elif poller.poll(pause * 1000):
                    # Hung up (or, against the protocol, written to): the state is
                    # final or the supervisor is dying; read it until it says so.
                    poller.unregister(alive)
                    os.close(alive)
                    alive = None
                    hung_up = True
        finally:
            if alive is not None:
                os.close(alive)

    def log_iter(
        self,
        app_id: str,
        role: str,
        replica: int,
        *,
        since: float | None = None,
        follow: bool = False,
    ) -> Iterator[str]:
        """Lines of ``logs/<role>-<replica>.log`` (stdout and stderr in the order they
        arrived, plus the supervisor's ``distspec:`` notes on each attempt). With
        ``follow``, ends once the replica is terminal and its log is drained."""
        from distspec.schedulers.local.files import ALIVE_FIFO
        from distspec.schedulers.local.logs import log_lines, read_chunk

        run_dir = self.run_dir(app_id)
        path = run_dir / "logs" / log_file_name(role, replica, "log")
        if self._read_state(app_id) is None:
            return
        yield from log_lines(
            path,
            read=lambda pos: read_chunk(path, pos, app_id, self.name),
            since=since,
            done=(lambda: self._replica_done(app_id, role, replica)) if follow else None,
            alive_fifo=run_dir / ALIVE_FIFO if follow else None,
        )

    def _replica_done(self, app_id: str, role: str, replica: int) -> bool:
        data = self._checked_state(app_id)
        if data is None:
            return True
        if data["state"] in TERMINAL:
            return True
        for r in data["roles"]:
            if r["role"] == role:
                for rep in r["replicas"]:
                    if rep["id"] == replica:
                        return bool(rep["state"] in TERMINAL)
        return True

    def cancel(self, app_id: str) -> None:
        """SIGTERM the supervisor (it stops every replica: SIGTERM to each process group,
        SIGKILL after ``grace_period``) and wait until the run is terminal and the
        supervisor has exited (it writes the final state a moment before it exits).

        A running job can always be cancelled: when its state file is missing or
        unreadable, its supervisor is found by the ``DISTSPEC_APP_ID`` it carries.

        Raises:
            SchedulerError: the state file is unreadable and no live supervisor of
                ``app_id`` exists (nothing to cancel, and the record says nothing).
        """
        import signal
        import time

        from distspec.schedulers.local.files import PLAN_FILE, read_json
        from distspec.schedulers.local.processes import (
            find_supervisor,
            hunt,
            is_alive,
            process_starttime,
        )

        try:
            data = self._checked_state(app_id)
            unreadable: SchedulerError | None = None
        except SchedulerError as e:
            data, unreadable = None, e
        if data is not None and data["state"] in TERMINAL:
            return
        if data is not None:
            info = data["supervisor"]
            pid, starttime = int(info["pid"]), info.get("starttime")
        else:
            found = find_supervisor(app_id)
            if found is None:
                if unreadable is not None:
                    raise unreadable
                return
            pid, starttime = found, process_starttime(found)
        try:
            plan = read_json(str(self.run_dir(app_id) / PLAN_FILE))
            grace = float(plan.get("options", {}).get("grace_period", 10.0))
        except (OSError, ValueError, AttributeError):
            grace = 10.0
        if is_alive(pid, starttime):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace + 10.0
        alone_since: float | None = None
        look = 0.0
        while time.monotonic() < deadline:
            try:
                now = self._checked_state(app_id)
                ended = now is None or now["state"] in TERMINAL
            except SchedulerError:
                ended = True  # unreadable: the supervisor's exit is what counts
            alive = is_alive(pid, starttime)
            if ended and not alive:
                return
            moment = time.monotonic()
            if alive and not ended and moment >= look:
                # Every other process of the run is gone but the record is not final:
                # the supervisor cannot write it (read-only or unwritable run dir).
                look = moment + LIVENESS_INTERVAL
                if set(hunt(app_id, sig=0)) <= {pid}:
                    alone_since = alone_since if alone_since is not None else moment
                    if moment - alone_since >= STUCK_AFTER:
                        break
                else:
                    alone_since = None
            time.sleep(WAIT_INTERVAL)
        # A supervisor that cannot record the end, or does not respond: kill it (its
        # keepers kill their trees on its death), make sure, and record the cancel here.
        if is_alive(pid, starttime):
            os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            if not is_alive(pid, starttime):
                break
            time.sleep(0.01)
        hunt(app_id)
        try:
            data = self._read_state(app_id)
        except SchedulerError as e:
            raise SchedulerError(
                f"stopped every process of {app_id}, but could not record the cancel: {e}",
                scheduler=self.name,
            ) from None
        if data is None or data["state"] in TERMINAL:
            return
        error = self._record_end(
            app_id, data, "CANCELLED", "cancel requested (recorded by cancel)", "cancelled"
        )
        if error:
            raise SchedulerError(
                f"stopped every process of {app_id}, but could not record the cancel "
                f"({error}); its status will say that its supervisor died",
                scheduler=self.name,
            )

    def list(self) -> list[AppSummary]:
        """Every run under the state dir, newest first. ``extra`` has ``submitted`` and,
        once it ended, ``ended`` (POSIX times as text)."""
        from distspec.schedulers.local.status import (
            record_summary,
            recordless_summary,
            unreadable_summary,
        )

        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            try:
                data = self._checked_state(name)
            except UsageError:
                continue
            except SchedulerError as e:
                # Listed, not hidden: UNKNOWN, with why (and never pruned).
                if os.path.isdir(self.root / name):
                    found.append((0.0, unreadable_summary(name, e)))
                continue
            if data is None:
                # A run directory without a record and without a supervisor (a submit
                # killed before its clean-up): listed as UNKNOWN rather than hidden.
                lost = recordless_summary(self.root, name)
                if lost is not None:
                    found.append((0.0, lost))
                continue
            found.append((float(data.get("created", 0.0)), record_summary(name, data)))
        found.sort(key=lambda item: item[0], reverse=True)
        return [summary for _, summary in found]

    def prune(
        self,
        *,
        older_than: float | None = None,
        states: frozenset[AppState] | None = None,
        dry_run: bool = False,
        on_failure: Callable[[AppSummary, str], object] | None = None,
    ) -> tuple[AppSummary, ...]:
        """Delete the run directories of ended runs (never a running one): those that
        ended more than ``older_than`` seconds ago (all ended ones if None), in one of
        ``states`` (every terminal state if None). Returns what was (with ``dry_run``:
        would be) deleted, newest first: only runs whose directory is really gone. A
        run that could not be deleted is passed to ``on_failure`` with the reason."""
        import time

        from distspec.schedulers.local.processes import is_alive

        now = time.time()
        gone = []
        for summary in self.list():
            if not summary.state.is_terminal:
                continue
            if states is not None and summary.state not in states:
                continue
            ended = float(summary.extra.get("ended") or summary.extra.get("submitted") or 0)
            if older_than is not None and now - ended < older_than:
                continue
            run_dir = self.run_dir(summary.app_id)
            # Terminal in its state file; make sure nothing of it is left running (a
            # supervisor that wrote its final state is about to exit).
            data = self._read_state(summary.app_id) or {}
            info = data.get("supervisor", {})
            if is_alive(int(info.get("pid", 0) or 0), info.get("starttime")):
                continue
            if not dry_run:
                problem = _remove_tree(run_dir)
                if problem is not None:
                    if on_failure is not None:
                        on_failure(summary, problem)
                    continue
            gone.append(summary)
        return tuple(gone)


def _remove_tree(path: Path) -> str | None:
    """Delete ``path`` and everything in it: None once it is gone, else why not."""
    import shutil

    for _ in range(3):
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass  # a part of it vanished meanwhile (the supervisor's last files): again
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            return f"{e.strerror or e}{where}"
        if not os.path.lexists(path):
            return None
    return "it kept changing while being deleted"
