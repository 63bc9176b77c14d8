"""The interface every scheduler backend implements.

A backend is a pure half and an effectful half:

- :meth:`Scheduler.compile` turns an AppDef and typed options into a frozen
  :class:`Request` — no subprocess, no network, no files, no clock, no random.
- :meth:`Scheduler.submit`, :meth:`describe`, :meth:`log_iter`, :meth:`cancel`
  and :meth:`list` talk to the scheduler, through ``self.run_cmd`` for command-line
  schedulers so tests can hand in a recording fake.
"""

from __future__ import annotations

import abc
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from distspec.errors import CompileError, SchedulerError
from distspec.frozen import FrozenDict, field, frozen
from distspec.specs.app import SCRIPT_METADATA, AppDef, Role
from distspec.specs.macros import Macro
from distspec.specs.options import OptionSpec, option_specs, parse_options

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, ClassVar, Generic, Protocol, TypeVar

    from distspec.specs.mounts import Mount
    from distspec.specs.state import AppState, AppStatus
else:
    from distspec._typing import Generic, Protocol, TypeVar

__all__ = [
    "SCRIPT_METADATA",
    "AppSummary",
    "Capabilities",
    "CommandResult",
    "CommandRunner",
    "Dependency",
    "JobPaths",
    "Points",
    "Request",
    "Scheduler",
    "check_capabilities",
    "run_command",
]

OptsT = TypeVar("OptsT")


@frozen
class CommandResult:
    """How a scheduler command ended."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandRunner(Protocol):
    """Runs a command to completion. Tests hand in a fake that records calls."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Run ``argv`` to completion (``input`` on its stdin; ``env``, when given, its
        whole environment) and return how it ended."""


def run_command(
    argv: Sequence[str],
    *,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
) -> CommandResult:
    """Run ``argv`` and capture its output; a missing program is a SchedulerError."""
    import subprocess

    try:
        proc = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as e:
        raise SchedulerError(f"{argv[0]} not found on PATH", argv=argv) from e
    except subprocess.TimeoutExpired as e:
        raise SchedulerError(f"{argv[0]} did not answer within {timeout}s", argv=argv) from e
    return CommandResult(
        argv=tuple(argv), returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr
    )


@frozen
class Capabilities:
    """What a backend can honour; compile rejects anything else with a clear error."""

    macros: frozenset[Macro] = frozenset(Macro)
    elastic: bool = True
    multi_role: bool = True
    mount_kinds: frozenset[str] = frozenset({"bind", "volume", "device"})
    needs_image: bool = False
    #: Replicas see the submitter's files (local, Slurm on a shared filesystem), so a
    #: script that is missing here is a usage error caught before submit.
    shared_files: bool = False
    #: The job runs beside the user, as a foreground program would: ``run --wait``
    #: cancels it on Ctrl-C (the others detach unless ``--cancel-on-interrupt``).
    interactive: bool = False
    #: What a role's ``image`` is: ``"container"`` (an image a runtime pulls) or
    #: ``"directory"`` (a folder the role runs in; ``${img_root}`` is that folder).
    image: str = "container"
    #: The backend keeps whole runs (their logs too) under the state directory, so
    #: ``distspec prune`` can remove them.
    prunable: bool = False
    #: ``-cfg snapshot=auto`` takes a snapshot: jobs that wait in a queue (Slurm, PBS)
    #: would otherwise run whatever is on disk when they start.
    snapshot_default: bool = False
    #: The job can wait for others of this backend (``run --after``): ``compile`` takes
    #: ``after`` and the scheduler holds the job until they have ended.
    dependencies: bool = False
    #: Many sweep points go in one submission (:meth:`Scheduler.compile_array`): a Slurm
    #: job array, a PBS array job.
    arrays: bool = False


#: ``run --after HANDLE:CONDITION``: what the other job must have done for this one to
#: start: succeeded (``ok``), ended in any way (``any``), failed or been cancelled
#: (``failed``).
CONDITIONS = ("ok", "any", "failed")


@frozen(kw_only=False)
class Dependency:
    """Start only once the job ``app_id`` (of the same backend) has ended as ``condition``
    says (one of :data:`CONDITIONS`). A job whose dependency can no longer be met is
    ended (Slurm: cancelled by ``--kill-on-invalid-dep``), not left pending forever."""

    app_id: str
    condition: str = "ok"


@frozen
class Points:
    """The sweep points one array submission runs (:meth:`Scheduler.compile_array`).

    ``values[i]`` holds point ``first + i``'s value of each of ``names``, in order; the
    job's text keeps every ``{{name}}`` (:mod:`distspec.specs.placeholders`) and maps it
    to a runtime expression that reads the point's value.
    """

    names: tuple[str, ...]
    values: tuple[tuple[str, ...], ...]
    #: The sweep-wide index of ``values[0]`` (an array split in several submissions).
    first: int = 0
    #: At most this many points run at once (``--max-parallel``); None: no limit.
    max_parallel: int | None = None

    def point(self, i: int) -> dict[str, str]:
        """The values of ``values[i]`` by name."""
        return dict(zip(self.names, self.values[i], strict=True))


def check_capabilities(app: AppDef, caps: Capabilities, scheduler: str) -> None:
    """Raise CompileError for anything in ``app`` that ``caps`` says the backend cannot do."""
    from distspec.schedulers.shell import used_macros

    if len(app.roles) > 1 and not caps.multi_role:
        raise CompileError(
            scheduler, f"app {app.name!r} has {len(app.roles)} roles; this backend runs one"
        )
    for role in app.roles:
        missing = used_macros(role) - caps.macros
        if missing:
            names = ", ".join(sorted(m.token for m in missing))
            raise CompileError(
                scheduler, f"role {role.name!r} uses {names}, which this backend cannot provide"
            )
        if role.elastic and not caps.elastic:
            raise CompileError(
                scheduler,
                f"role {role.name!r} is elastic ({role.min_replicas}:{role.num_replicas}); "
                "this backend needs a fixed node count",
            )
        if caps.needs_image and not role.image:
            raise CompileError(scheduler, f"role {role.name!r} needs an image (--image)")
        for mount in role.mounts:
            kind = _mount_kind(mount)
            if kind not in caps.mount_kinds:
                raise CompileError(
                    scheduler, f"role {role.name!r}: {kind} mounts are not supported here"
                )


def _mount_kind(mount: Mount) -> str:
    """``bind``, ``volume`` or ``device``: the names :attr:`Capabilities.mount_kinds` uses."""
    from distspec.specs.mounts import BindMount, VolumeMount

    if isinstance(mount, BindMount):
        return "bind"
    if isinstance(mount, VolumeMount):
        return "volume"
    return "device"


@frozen
class JobPaths:
    """Where a submitted job keeps its files: what ``run --wait``, callables,
    ``describe`` and ``prune`` ask instead of re-deriving a backend's layout.

    ``folder`` is a local path or an fsspec URL (Kubernetes' ``job_dir``).
    """

    folder: str
    #: A replica's log, relative to ``folder``, with ``{role}`` and ``{replica}``; None
    #: where the logs are not files there (Kubernetes: the API server keeps them).
    log_pattern: str | None = "{role}-{replica}.log"
    #: The batch script's own output (Slurm's ``--output``, PBS's ``-o``), if any.
    script_output: str | None = None

    def replica_log(self, role: str, replica: int) -> str | None:
        """The path (or URL) of one replica's log, or None (see :attr:`log_pattern`)."""
        if self.log_pattern is None:
            return None
        name = self.log_pattern.format(role=role, replica=replica)
        return f"{self.folder.rstrip('/')}/{name}"


@frozen
class Request:
    """What submit will do, as data.

    ``files`` maps a file name to its content; ``argv`` is the command that
    submits them by hand from the folder they are written to (``--dryrun -o DIR``).
    ``render()`` is the exact text handed to the scheduler.
    """

    scheduler: str
    app: AppDef
    app_id: str
    options: Any
    files: FrozenDict[str, str]
    argv: tuple[str, ...]
    main_file: str
    #: The folder that submitting creates before anything runs (Slurm's and PBS's
    #: job folder); a ``submit.sh`` written by ``--dryrun -o DIR`` creates it too.
    job_dir: str | None = None
    #: The code snapshot the job runs (:class:`distspec.snapshot.policy.Snapshot`),
    #: taken by submit before the job is handed over; None without one.
    snapshot: Any = field(default=None, compare=False)
    #: The jobs this one waits for (``run --after``); empty: it starts when it can.
    after: tuple[Dependency, ...] = ()
    #: The sweep points this request runs as one array (:meth:`Scheduler.compile_array`);
    #: None for a single job.
    points: Points | None = field(default=None, compare=False)
    #: Where the job came from, for its provenance record: the AppDef as the component
    #: built it (``app`` is the compiled one: a snapshot rewrites it), the source of each
    #: run option, and the run it repeats (:meth:`distspec.runner.Runner.rerun`).
    origin: Any = field(default=None, compare=False)

    def render(self) -> str:
        """The main file's text, byte for byte what submit hands over."""
        return self.files[self.main_file]

    def write(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Write every file and a ``submit.sh`` that submits them by hand; returns the paths.

        ``submit.sh`` submits from the directory this process runs in (where the job's
        relative paths, such as its script, are found) and first creates
        :attr:`job_dir`, as submit would (and copies an array's points file there,
        where its script reads it). Everything is private to its owner, as a real
        job's folder is (the files hold the job's ``--env`` values): ``directory`` is
        created 0700 (one that exists keeps its mode: it may be shared on purpose) and
        each file 0600 (0700 for scripts) before a byte of it is written, also when it
        existed with a wider mode.
        """
        import shlex
        from pathlib import Path

        folder = Path(directory)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        written: list[Path] = []
        for name, text in self.files.items():
            path = folder / name
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_private(path, text, executable=text.startswith("#!"))
            written.append(path)
        # An argument that names one of the written files (or "." for the folder
        # itself) is made absolute, since submit.sh runs from elsewhere.
        words = []
        for arg in self.argv:
            if arg in self.files:
                words.append('"$here"/' + shlex.quote(arg))
            elif arg == ".":
                words.append('"$here"')
            else:
                words.append(shlex.quote(arg))
        script = folder / "submit.sh"
        _write_private(
            script,
            "#!/usr/bin/env bash\n"
            f"# Submits the {self.scheduler} request in this folder by hand, from the directory\n"
            "# `distspec run --dryrun` ran in, so that the job finds its relative paths.\n"
            "set -euo pipefail\n"
            'here="$(cd "$(dirname "$0")" && pwd)"\n'
            + (f"mkdir -p {shlex.quote(self.job_dir)}\n" if self.job_dir else "")
            + "".join(
                f'cp "$here"/{shlex.quote(name)} {shlex.quote(self.job_dir)}/\n'
                for name in self.files
                if self.job_dir and self.points is not None and name != self.main_file
            )
            + f"cd {shlex.quote(os.getcwd())}\n"
            + " ".join(words)
            + "\n",
            executable=True,
        )
        return [*written, script]


def _write_private(path: Path, text: str, *, executable: bool) -> None:
    """Write ``text`` to ``path`` for its owner alone: 0600, or 0700 with ``executable``."""
    mode = 0o700 if executable else 0o600
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), mode)
        f.write(text)


@frozen
class AppSummary:
    """One line of ``distspec list``."""

    app_id: str
    name: str
    state: AppState
    detail: str = ""
    extra: FrozenDict[str, str] = field(default_factory=FrozenDict)


class Scheduler(abc.ABC, Generic[OptsT]):
    """A scheduler backend. Subclasses set ``name``, ``Options`` and ``capabilities``."""

    name: ClassVar[str]
    Options: ClassVar[type[Any]]
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: Longest pause between two polls in the default :meth:`wait`.
    max_poll_interval: ClassVar[float] = 1.0

    def __init__(
        self,
        session: str = "distspec",
        *,
        run_cmd: CommandRunner = run_command,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.session = session
        self.run_cmd = run_cmd
        self._state_dir = None if state_dir is None else os.fspath(state_dir)

    # -- options ---------------------------------------------------------------

    @classmethod
    def run_opts(cls) -> tuple[OptionSpec, ...]:
        """The options this backend accepts (``-cfg``), with types, defaults and help."""
        return option_specs(cls.Options)

    @classmethod
    def parse_options(cls, raw: Mapping[str, Any]) -> OptsT:
        """Typed options from strings or typed values; unknown keys are errors."""
        result: OptsT = parse_options(cls.Options, raw, scheduler=cls.name)
        return result

    # -- the pure half ---------------------------------------------------------

    @abc.abstractmethod
    def compile(
        self, app: AppDef, opts: OptsT, *, app_id: str, after: Sequence[Dependency] = ()
    ) -> Request:
        """Deterministic: the same (app, opts, app_id, after) always gives an equal Request.

        ``after`` is empty unless :attr:`Capabilities.dependencies` is set: the jobs this
        one waits for (:class:`Dependency`)."""

    def check(self, app: AppDef, opts: OptsT) -> None:
        """Refuse, before anything costly is done for it, a job this backend cannot run:
        the runner calls this ahead of the code snapshot (whose walk of a large folder
        may stop at its own cap first, hiding the job's real fault), and
        :meth:`compile` checks again. The default checks nothing.

        Raises:
            CompileError: what compile would raise for ``app`` with ``opts``.
        """

    def compile_array(
        self,
        app: AppDef,
        opts: OptsT,
        *,
        app_id: str,
        points: Points,
        after: Sequence[Dependency] = (),
    ) -> Request:
        """One submission that runs every point of ``points`` (where
        :attr:`Capabilities.arrays` is set): ``app`` keeps its ``{{name}}`` placeholders,
        each filled in by the job from the point it runs. The Request's ``points`` is
        ``points``; :meth:`submit` returns the array's id and :meth:`point_id` names
        each point's job."""
        raise CompileError(self.name, "this backend runs no job arrays")

    def point_id(self, array_id: str, request: Request, index: int) -> str:
        """The app id of point ``index`` (sweep-wide) of the array ``array_id`` that
        ``request`` (a :meth:`compile_array` one) was submitted as."""
        raise NotImplementedError(f"{self.name} runs no job arrays")

    def max_array_size(self, opts: OptsT) -> int | None:
        """The most points one array submission may hold here (Slurm's ``MaxArraySize``,
        read from the cluster), or None for no limit. Asked before compiling a sweep."""
        return None

    # -- where a job's files are -----------------------------------------------

    def job_paths(self, app_id: str, request: Request | None = None) -> JobPaths | None:
        """Where the submitted job ``app_id`` keeps its files, or None when it keeps
        none that this machine can name. ``request`` is the one it was submitted
        from, for a backend whose folder is set by its options (Kubernetes)."""
        return None

    # -- the code snapshot ------------------------------------------------------

    def working_dir(self, role: Role, opts: OptsT) -> str:
        """The directory on this machine that the role's relative paths (its script)
        are taken from: a directory image (Slurm, PBS), else where ``distspec run`` runs."""
        if self.capabilities.image == "directory" and role.image:
            return os.path.abspath(role.image)
        return os.getcwd()

    def snapshot_root(self, opts: OptsT) -> str:
        """The content store that snapshots for this backend go to: a folder the job's
        nodes can read (by default ``<state dir>/snapshots``)."""
        if self._state_dir is None:
            raise CompileError(self.name, "no state directory to keep the snapshot in")
        return os.path.join(self._state_dir, "snapshots")

    def snapshot_job_path(self, tree: str, tree_id: str, opts: OptsT) -> str:
        """Where the job sees the snapshot ``tree_id`` (kept here at ``tree``): the same
        path on a backend whose nodes share this machine's files."""
        return tree

    # -- the effectful half ----------------------------------------------------

    def preflight(self, request: Request) -> None:
        """Checks against the submitting machine, run just before :meth:`submit` (never by a
        dry run). By default: with ``shared_files``, every role's script must exist."""
        if not self.capabilities.shared_files:
            return
        import os

        from distspec.errors import UsageError

        for role in request.app.roles:
            script = role.metadata.get(SCRIPT_METADATA)
            if script and not os.path.exists(script):
                raise UsageError(
                    f"role {role.name!r}: script {script!r} not found (relative to {os.getcwd()})"
                )

    def stage_snapshot(self, request: Request) -> str | None:
        """Put the code snapshot of ``request`` (already taken) where its job reads it,
        for a backend whose nodes do not see the store; what it did, in a few words, or
        None when there was nothing to do (the default: the nodes read the store).
        :meth:`submit` calls it; so does ``run --dryrun -o``, whose ``submit.sh``
        submits by hand.

        Raises:
            SchedulerError: it could not be staged.
        """
        return None

    @abc.abstractmethod
    def submit(self, request: Request) -> str:
        """Hand the request to the scheduler; returns the app id the scheduler knows it by."""

    @abc.abstractmethod
    def describe(self, app_id: str) -> AppStatus | None:
        """The app's status, or None when the scheduler has no record of it."""

    def describe_many(self, app_ids: Sequence[str]) -> dict[str, AppStatus | None]:
        """:meth:`describe` of each of ``app_ids`` (a sweep's points); a backend that can
        ask for many jobs in one query (Slurm: an array's tasks) overrides it."""
        return {app_id: self.describe(app_id) for app_id in app_ids}

    @abc.abstractmethod
    def log_iter(
        self,
        app_id: str,
        role: str,
        replica: int,
        *,
        since: float | None = None,
        follow: bool = False,
    ) -> Iterator[str]:
        """Lines (without newline) of one replica's log. ``since`` is a POSIX time."""

    @abc.abstractmethod
    def cancel(self, app_id: str) -> None:
        """Stop the app; a no-op for an app that already ended."""

    def cancel_many(self, app_ids: Sequence[str]) -> None:
        """:meth:`cancel` of each of ``app_ids`` (a sweep's arrays or points), the first
        error stopping the rest; a backend that can stop many jobs with one command
        (Slurm: ``scancel A B ...``) overrides it."""
        for app_id in app_ids:
            self.cancel(app_id)

    @abc.abstractmethod
    def list(self) -> list[AppSummary]:
        """Apps this backend can see, newest first where it knows the order."""

    def prune(
        self,
        *,
        older_than: float | None = None,
        states: frozenset[AppState] | None = None,
        dry_run: bool = False,
        on_failure: Callable[[AppSummary, str], object] | None = None,
    ) -> tuple[AppSummary, ...]:
        """Delete the folders of ended runs this backend keeps (``capabilities.prunable``);
        see the local backend. Returns what was (with ``dry_run``: would be) deleted."""
        raise NotImplementedError(f"{self.name} keeps no runs to prune")

    # -- shared behaviour ------------------------------------------------------

    def wait(
        self,
        app_id: str,
        *,
        timeout: float | None = None,
        on_status: Callable[[AppStatus], None] | None = None,
    ) -> AppStatus | None:
        """Call :meth:`describe` until a terminal state, pausing between two calls as
        :meth:`_pauser` says (by default a short, growing sleep).

        Backends that can be told when something changes override :meth:`_pauser`
        (or this, when following works another way). Returns the last status (None
        if the app vanished); on timeout returns the last non-terminal status.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = self._pauser(app_id)
        while True:
            status = self.describe(app_id)
            if on_status is not None and status is not None:
                on_status(status)
            if status is None or status.is_terminal:
                return status
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return status
            pause(left)

    def _pauser(self, app_id: str) -> Callable[[float | None], None]:
        """What :meth:`wait` calls between two describes of ``app_id``, with the seconds
        left before its timeout (None: no timeout): here a sleep that grows by half
        each time, from 0.05 s up to :attr:`max_poll_interval`."""
        interval = 0.05

        def pause(left: float | None) -> None:
            nonlocal interval
            time.sleep(interval)
            interval = min(interval * 1.5, self.max_poll_interval)

        return pause
