"""Every exception distspec raises on purpose.

The tree::

    DistspecError                     base of everything below
    ├── UsageError                    the user's mistake; the CLI prints one line, exit 2
    │   ├── TopologyError             a bad ``-j`` value
    │   ├── SpecError                 an AppDef, Role, Resource or mount that cannot exist
    │   ├── ComponentError            a component that cannot be loaded, bound or called
    │   ├── OptionError               an unknown or malformed run option (``-cfg``)
    │   ├── ConfigError               a bad config file or DISTSPEC_* variable
    │   ├── SchedulerNotFound         no backend by that name
    │   ├── HandleError               a malformed ``scheduler://session/app_id``
    │   ├── CompileError              this AppDef cannot run on this backend
    │   │   └── ArrayTooLarge         a sweep array over what one array job can hold (split it)
    │   ├── RuntimeEnvError           in the job: launcher variables missing or in conflict
    │   ├── CallableError             a function or its arguments that cannot be sent to a job
    │   ├── SnapshotError             the code cannot be snapshotted (size cap, unreadable file, full disk)
    │   └── ArgumentError             a Python API argument of the wrong type or value
    ├── SchedulerError                a backend command or API call failed (argv, stderr)
    ├── AppNotFound                   the scheduler does not know the app id
    └── RemoteError                   a submitted function raised, or a rank died, in the job

A genuine bug is anything else: the CLI lets it show its traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "EXIT_CODES",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_READER_GONE",
    "EXIT_USAGE",
    "AppNotFound",
    "ArgumentError",
    "ArrayTooLarge",
    "CallableError",
    "CompileError",
    "ComponentError",
    "ConfigError",
    "DistspecError",
    "HandleError",
    "OptionError",
    "RemoteError",
    "RuntimeEnvError",
    "SchedulerError",
    "SchedulerNotFound",
    "SnapshotError",
    "SpecError",
    "TopologyError",
    "UsageError",
]


class DistspecError(Exception):
    """Base class of every error distspec raises on purpose."""


class UsageError(DistspecError):
    """A user mistake: reported as one line, exit code 2, nothing submitted."""


class TopologyError(UsageError):
    """A ``-j`` value that does not parse."""

    def __init__(self, value: str, reason: str) -> None:
        self.value = value
        self.reason = reason
        super().__init__(
            f"invalid -j {value!r}: {reason}; accepted forms: "
            "NxM (N nodes, M processes each), MIN:MAXxM (elastic), M (one node)"
        )


class SpecError(UsageError):
    """An AppDef, Role, Resource or mount that violates its invariants."""


class ComponentError(UsageError):
    """A component that cannot be found, loaded, bound or called."""


class OptionError(UsageError):
    """An unknown or malformed run option."""

    def __init__(self, message: str, *, option: str = "", value: str = "", scheduler: str = ""):
        self.option = option
        self.value = value
        self.scheduler = scheduler
        super().__init__(message)


class ConfigError(UsageError):
    """A config file or DISTSPEC_* variable that is malformed."""

    def __init__(self, message: str, *, source: str = "") -> None:
        self.source = source
        super().__init__(f"{source}: {message}" if source else message)


class SchedulerNotFound(UsageError):
    """No scheduler backend is registered under that name."""

    def __init__(self, name: str, known: Sequence[str], hint: str = "") -> None:
        self.name = name
        self.known = tuple(known)
        extra = f" ({hint})" if hint else ""
        super().__init__(f"unknown scheduler {name!r}{extra}; known: {', '.join(self.known)}")


class HandleError(UsageError):
    """A string that is not a ``scheduler://session/app_id`` handle."""


class CompileError(UsageError):
    """The AppDef asks for something this backend cannot honour."""

    def __init__(self, scheduler: str, message: str) -> None:
        self.scheduler = scheduler
        super().__init__(f"{scheduler}: {message}")


class ArrayTooLarge(CompileError):
    """A sweep array whose points take more than one array job of this backend can hold
    (a Kubernetes points ConfigMap over 1 MB): fewer points per array fit."""


class RuntimeEnvError(UsageError):
    """Inside a job: the launcher's variables are incomplete, malformed or contradict each other.

    ``variables`` holds the variables (name → value) the message is about.
    """

    def __init__(self, message: str, *, variables: Mapping[str, str] | None = None) -> None:
        self.variables = dict(variables or {})
        if self.variables:
            shown = ", ".join(f"{k}={v!r}" for k, v in sorted(self.variables.items()))
            message = f"{message} ({shown})"
        super().__init__(message)


class SchedulerError(DistspecError):
    """A scheduler command or API call failed."""

    def __init__(
        self,
        message: str,
        *,
        scheduler: str = "",
        argv: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        self.scheduler = scheduler
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        text = f"{scheduler}: {message}" if scheduler else message
        super().__init__(f"{text}: {detail}" if detail else text)


class AppNotFound(DistspecError):
    """The scheduler has no record of the app id (never existed or aged out)."""

    def __init__(self, handle: str) -> None:
        self.handle = handle
        super().__init__(f"no such app: {handle}")


class CallableError(UsageError):
    """A function or its arguments that cannot be sent to a job (``distspec.submit``):
    unpicklable, or a job directory the workers could not reach."""


class SnapshotError(UsageError):
    """The code a job would run cannot be snapshotted: a tree over the size cap, an
    unreadable file, a file changed while it was copied, or a full disk. Nothing was
    submitted and nothing half-written was left in the store."""


class ArgumentError(UsageError):
    """An argument of the Python API (``distspec.submit``, ``Job``, ``Runner``) of the
    wrong type or value, refused at the call: nothing is submitted or written.

    ``argument`` names it (``"seed"``, ``"options['env']"``); ``value`` is how the
    message shows the value (escaped and shortened; "" where it may be a secret).
    """

    def __init__(self, message: str, *, argument: str = "", value: str = "") -> None:
        self.argument = argument
        self.value = value
        super().__init__(message)


class RemoteError(DistspecError):
    """A function submitted with ``distspec.submit`` raised on a rank, or a rank died
    without a result.

    Attributes:
        type_name: the original exception's ``module.QualName`` ("" when the rank died).
        remote_message: the original exception's message.
        rank: the global rank that failed (None when unknown).
        host: the host it ran on ("" when unknown).
        remote_traceback: the worker's formatted traceback, or the rank's last log lines.
        exit_code: the replica's exit code when the rank died without a result.
        exception: the original exception object when it could be unpickled here, else None.

    The worker's traceback is also chained as ``__cause__`` so a notebook shows it.
    """

    def __init__(
        self,
        message: str,
        *,
        type_name: str = "",
        remote_message: str = "",
        rank: int | None = None,
        host: str = "",
        remote_traceback: str = "",
        exit_code: int | None = None,
        exception: BaseException | None = None,
    ) -> None:
        self.type_name = type_name
        self.remote_message = remote_message
        self.rank = rank
        self.host = host
        self.remote_traceback = remote_traceback
        self.exit_code = exit_code
        self.exception = exception
        super().__init__(message)


#: Success.
EXIT_OK = 0
#: A :class:`SchedulerError`, a file system fault, or a job that failed with no code of its own.
EXIT_FAILURE = 1
#: A :class:`UsageError` or :class:`AppNotFound`: one line on stderr, nothing submitted.
EXIT_USAGE = 2
#: Interrupted by Ctrl-C (128 + SIGINT), as a shell reports it.
EXIT_INTERRUPTED = 130
#: ``run --wait``: the reader of its output went away (128 + SIGPIPE, as a shell reports it).
EXIT_READER_GONE = 141

#: Every exit code of the ``distspec`` command, declared once: ``(code, verbs, meaning)``.
#: ``code`` is a number, or says where the number comes from. docs/reference/exit-codes.md
#: is generated from this table (scripts/gen-docs); ``distspec status --exit-status`` adds
#: its per-state codes, :data:`distspec.cli.status.STATE_EXIT_CODES`.
EXIT_CODES: tuple[tuple[str, str, str], ...] = (
    (str(EXIT_OK), "every verb", "success: the command did what it was asked"),
    (
        str(EXIT_FAILURE),
        "every verb",
        "a scheduler command or API call failed (SchedulerError: its stderr's last line is "
        "shown), a file system fault (full disk, missing or unwritable path), or a job "
        "that ended without an exit code of its own (cancelled, or failed with none)",
    ),
    (
        str(EXIT_USAGE),
        "every verb",
        "a usage mistake (UsageError: a bad flag, -j, option, component argument, config "
        "value or handle) or an app the scheduler does not know (AppNotFound): one line on "
        "stderr, nothing submitted",
    ),
    (
        str(EXIT_INTERRUPTED),
        "every verb",
        "interrupted by Ctrl-C (a local job followed by run --wait is cancelled first)",
    ),
    (
        "124",
        "run --wait",
        "the job hung: the hang watchdog (-cfg watchdog) saw no progress from any rank for "
        "its period, wrote every rank's stack into the job folder and ended it; stderr says "
        "HUNG and where each rank was (docs/fault-tolerance.md)",
    ),
    (
        str(EXIT_READER_GONE),
        "run --wait",
        "the reader of its output went away (`| head`): taken as a Ctrl-C, so a local job "
        "was cancelled and another one detached from",
    ),
    (
        "the failing replica's code",
        "run --wait",
        "the job failed: the exit code of its first failed replica (128 + N when signal N "
        "killed it), after its rank, host and last log lines on stderr",
    ),
    (
        "the command's code",
        "launch",
        "the launched command (srun, mpiexec or torchrun) ran: launch exits with its code",
    ),
)
