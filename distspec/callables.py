"""Python callables as jobs: :func:`submit`, :class:`Job` and :func:`distributed`.

::

    import distspec

    job = distspec.submit(lambda: 6 * 7, j="1x2")
    assert job.result() == 42

A callable is compiled through the builtin component ``dist.fn`` and submitted
with the ordinary :class:`~distspec.runner.Runner`, so ``distspec status``, ``log``
and ``cancel`` work on its handle like on any other job. The function and its
arguments are pickled with cloudpickle into the job directory (``call.pkl``); each
rank runs :mod:`distspec.runtime.call`, which calls
:func:`distspec.runtime.init` and the function, and writes ``result-<rank>.pkl``
back. The job directory is:

==============  ==============================================================
local_cwd       the run directory, ``<state dir>/local_cwd/<app id>``
slurm, pbs      the job folder under ``job_dir`` on the shared file system
kubernetes      ``<job_dir>/<app id>``, an fsspec URL (``-cfg job_dir=s3://...``)
==============  ==============================================================

Where the folder is only known once the scheduler has accepted the job (Slurm
names it after the job id), ``call.pkl`` is written right after submit and the
workers wait for it.

``after=`` holds a job until others have ended (``Job``s or handles, as ``distspec
run --after``); :func:`distspec.callables_map.map` (``distspec.map``) runs a function
once per item, every item a job of one sweep.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from distspec.errors import ArgumentError, CallableError, RemoteError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypeAlias

    from distspec.runner import Runner
    from distspec.schedulers.api import Request
    from distspec.specs.app import AppDef
    from distspec.specs.handles import AppHandle
    from distspec.specs.state import AppStatus

    #: What ``after=`` takes: a Job, a handle (``HANDLE[:ok|any|failed]``), a list of them.
    After: TypeAlias = "Job | AppHandle | str | Sequence[Job | AppHandle | str] | None"

__all__ = [
    "CompiledCall",
    "DistributedFunction",
    "Job",
    "compile_call",
    "distributed",
    "submit",
    "submit_compiled",
]

#: How many log lines a "died without a result" error quotes.
TAIL_LINES = 20


class _RemoteTraceback(Exception):
    """The worker's formatted traceback, chained as ``__cause__`` of a RemoteError so
    that Python (and a notebook) prints it above the local one."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(text)

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'


# --------------------------------------------------------------------- pickling


def _installed(module_file: str) -> bool:
    """Whether a module file belongs to the interpreter (stdlib or site-packages), so
    the workers, running the same environment, import it by name."""
    import site
    import sysconfig

    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    roots.add(site.getusersitepackages())
    path = os.path.realpath(module_file)
    return any(path.startswith(os.path.realpath(r) + os.sep) for r in roots if r)


def _by_value_packages(objs: Sequence[Any]) -> list[Any]:
    """Top-level packages of ``objs``' modules that are the user's own code (not
    installed, not distspec): pickled by value, so workers need not import them."""
    found: dict[str, Any] = {}
    for obj in objs:
        name = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", None)
        if not name or name == "__main__" or name.startswith(("distspec.", "builtins")):
            continue
        top = name.partition(".")[0]
        if top in found or top == "distspec":
            continue
        module = sys.modules.get(top)
        file = getattr(module, "__file__", None)
        if module is None or file is None or _installed(file):
            continue
        found[top] = module
    return list(found.values())


def pickle_call(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
    """``call.pkl``'s content. Functions and classes of the user's own modules go by
    value (cloudpickle), installed ones by name.

    Raises:
        CallableError: the function or an argument cannot be pickled.
    """
    import cloudpickle

    from distspec.runtime.call_protocol import payload
    from distspec.runtime.pickling import dumps

    call = payload(fn, args, kwargs)
    packages = _by_value_packages([fn, *args, *kwargs.values()])
    for package in packages:
        cloudpickle.register_pickle_by_value(package)
    try:
        data = dumps(call)
    except Exception as e:
        what = _describe_unpicklable(fn, args, kwargs)
        raise CallableError(f"cannot send {what} to the job: {type(e).__name__}: {e}") from e
    finally:
        for package in packages:
            cloudpickle.unregister_pickle_by_value(package)
    return data


def _describe_unpicklable(fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    from distspec.runtime.pickling import dumps

    def fails(obj: Any) -> bool:
        try:
            dumps(obj)
        except Exception:
            return True
        return False

    if fails(fn):
        return f"the function {getattr(fn, '__qualname__', fn)!r} (it holds something unpicklable)"
    for i, arg in enumerate(args):
        if fails(arg):
            return f"positional argument {i} ({type(arg).__name__})"
    for key, value in kwargs.items():
        if fails(value):
            return f"keyword argument {key!r} ({type(value).__name__})"
    return "the call"


# --------------------------------------------------------------------- the record


def _record_path(runner: Runner, scheduler: str, app_id: str) -> str:
    safe = app_id.replace("/", "_")
    return os.path.join(runner.config.state_dir, "callables", scheduler, f"{safe}.json")


def _job_dir_before_submit(runner: Runner, request: Request) -> str | None:
    """Where the payload must be before the job starts, for a backend whose replicas do
    not see this machine's files (Kubernetes: its ``job_dir``); None for the others,
    whose job folder exists once the job is submitted."""
    sched = runner.scheduler(request.scheduler)
    if sched.capabilities.shared_files:
        return None
    paths = sched.job_paths(request.app_id, request)
    if paths is None:
        raise CallableError(
            f"{request.scheduler}: a Python callable needs a job directory the pods and this "
            "machine both reach: cfg={'job_dir': 's3://bucket/prefix'} (any fsspec URL)"
        )
    return paths.folder


def _job_dir_after_submit(runner: Runner, request: Request, app_id: str) -> str:
    """Where the job reads ``call.pkl`` and writes its results, once it is submitted."""
    paths = runner.scheduler(request.scheduler).job_paths(app_id, request)
    if paths is None:
        raise CallableError(
            f"{request.scheduler}: cannot tell where job {app_id} keeps its files; Python "
            "callables run on backends that say where a job keeps its files (job_paths)"
        )
    return paths.folder


#: The most a callable's record may hold (a real one is a few hundred bytes).
_RECORD_LIMIT = 64 * 1024


def _read_record(path: str, handle: str, state_dir: str) -> dict[str, Any]:
    """The record :func:`submit` wrote for ``handle``, checked field by field.

    Raises:
        CallableError: there is none, or it is damaged: not a regular file (a FIFO is
            never opened for a blocking read), too long, not UTF-8 JSON, not an object,
            or a field missing or of the wrong type.
    """
    import stat

    from distspec._arguments import show

    shown = show(handle, 200)

    def damaged(why: str) -> CallableError:
        return CallableError(
            f"{shown}: the callable's record {show(path, 200)} is damaged ({why}); "
            "it was not written by distspec.submit or was changed since: submit the "
            "function again"
        )

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise CallableError(
            f"{shown}: no callable was submitted under this handle from state dir {state_dir}"
        ) from None
    except OSError as e:
        raise damaged(f"cannot open it: {e.strerror or type(e).__name__}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise damaged(kind)
        if info.st_size > _RECORD_LIMIT:
            raise damaged(f"{info.st_size} bytes, a record is at most {_RECORD_LIMIT}")
        try:
            raw = os.read(fd, _RECORD_LIMIT + 1)
        except OSError as e:
            raise damaged(f"cannot read it: {e.strerror or type(e).__name__}") from None
    finally:
        os.close(fd)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise damaged("not UTF-8") from None
    except ValueError as e:
        raise damaged(f"not JSON: {e}" if raw.strip() else "empty") from None
    if not isinstance(data, dict):
        raise damaged(f"a JSON {type(data).__name__}, not an object")
    for key, want in (("job_dir", str), ("nodes", int), ("nproc_per_node", int), ("role", str)):
        if key not in data:
            raise damaged(f"no {key!r}")
        value = data[key]
        if want is int and (type(value) is not int or value < 1):
            raise damaged(f"{key!r} is {show(value)}, not a positive int")
        if want is str and (not isinstance(value, str) or not value):
            raise damaged(f"{key!r} is {show(value)}, not a non-empty string")
    return data


def _timeout(value: Any, where: str) -> float | None:
    from distspec._arguments import timeout

    return timeout(value, where)


# --------------------------------------------------------------------- Job


class Job:
    """A submitted callable: a future for its ranks' return values.

    ``handle`` is an ordinary distspec handle (``distspec status HANDLE`` works on it);
    :meth:`from_handle` re-attaches to it from another process. ``sweep`` is the
    handle of the sweep a :func:`~distspec.callables_map.map` call submitted it in
    (``distspec status SWEEP`` shows every item's job), else None.
    """

    def __init__(
        self,
        handle: str,
        *,
        job_dir: str,
        nodes: int,
        nproc_per_node: int,
        role: str,
        runner: Runner | None = None,
        sweep: str | None = None,
    ) -> None:
        self.handle = handle
        self.sweep = sweep
        self.job_dir = job_dir
        self.nodes = nodes
        self.nproc_per_node = nproc_per_node
        self.role = role
        self._runner = runner
        self._status: AppStatus | None = None

    def __repr__(self) -> str:
        return f"Job({self.handle!r})"

    @property
    def runner(self) -> Runner:
        """The Runner that follows the job (a new one for the handle's session if none
        was given)."""
        if self._runner is None:
            from distspec.runner import Runner

            self._runner = Runner(session=self.handle.partition("://")[2].partition("/")[0])
        return self._runner

    @property
    def world_size(self) -> int:
        """How many ranks the job has: nodes x processes per node."""
        return self.nodes * self.nproc_per_node

    # -- re-attaching --------------------------------------------------------------

    def _record(self) -> dict[str, Any]:
        return {
            "handle": self.handle,
            "job_dir": self.job_dir,
            "nodes": self.nodes,
            "nproc_per_node": self.nproc_per_node,
            "role": self.role,
            **({"sweep": self.sweep} if self.sweep else {}),
        }

    @classmethod
    def from_handle(cls, handle: AppHandle | str, *, runner: Runner | None = None) -> Job:
        """The Job of a callable submitted earlier, from this or another process.

        Raises:
            HandleError: a malformed handle.
            ArgumentError: ``handle`` is not a str or AppHandle, ``runner`` not a Runner.
            SchedulerNotFound: the handle names no scheduler distspec knows.
            CallableError: no callable was submitted under this handle from this state
                directory, or its record there is damaged (not a file, not JSON, fields
                missing or of the wrong type).
        """
        from distspec import _arguments as check
        from distspec.specs.handles import AppHandle

        where = "Job.from_handle"
        if isinstance(handle, str):
            h = AppHandle.parse(handle)
        elif isinstance(handle, AppHandle):
            h = handle
        else:
            check.fail(where, "handle", handle, "give a handle string (SCHEDULER://SESSION/APP_ID)")
        if runner is None:
            from distspec.runner import Runner

            runner = Runner(session=h.session)
        _check_runner(runner, where)
        if h.scheduler not in runner.registry.names():
            runner.registry.get(h.scheduler)  # SchedulerNotFound, with a did-you-mean
        path = _record_path(runner, h.scheduler, h.app_id)
        data = _read_record(path, h.format(), runner.config.state_dir)
        return cls(
            h.format(),
            job_dir=data["job_dir"],
            nodes=data["nodes"],
            nproc_per_node=data["nproc_per_node"],
            role=data["role"],
            runner=runner,
            sweep=data["sweep"] if isinstance(data.get("sweep"), str) else None,
        )

    # -- following -----------------------------------------------------------------

    def status(self) -> AppStatus:
        """The job's current status (as ``distspec status`` shows it)."""
        self._status = self.runner.status(self.handle)
        return self._status

    def done(self) -> bool:
        """Whether the job has ended (succeeded, failed or cancelled)."""
        if self._status is not None and self._status.is_terminal:
            return True
        return self.status().is_terminal

    def wait(self, timeout: float | None = None) -> AppStatus:
        """Block until the job ends, or ``timeout`` seconds; returns its status.

        Ctrl-C (KeyboardInterrupt) while waiting cancels the job, then is re-raised.
        ArgumentError for a ``timeout`` that is not None or a finite number >= 0
        (``result``, ``results`` and ``exception`` check theirs here too).
        """
        timeout = _timeout(timeout, "Job.wait")
        if self._status is not None and self._status.is_terminal:
            return self._status
        try:
            status = self.runner.wait(self.handle, timeout=timeout)
        except KeyboardInterrupt:
            # The cancel first, what is said after, never failing: stderr may be a
            # pipe whose reader died of the same Ctrl-C.
            from distspec.runner import cancel_interrupted

            cancel_interrupted(self.cancel, self.handle)
            raise
        self._status = status
        return status

    def cancel(self) -> None:
        """Stop every rank (nothing of the job is left running once this returns on
        local_cwd; batch schedulers and Kubernetes stop it asynchronously)."""
        if self._status is not None and self._status.is_terminal:
            return
        self.runner.cancel(self.handle)
        self._status = None

    def logs(self, rank: int | None = None, *, tail: int | None = None) -> str:
        """The job's log text; with ``rank``, only that rank's lines (torchrun prefixes
        each worker line with ``[rank<N>]:``) and the lines of its node
        that belong to no rank; ``tail``: only the last N lines.

        Raises:
            ArgumentError: ``rank`` is not an int in 0..world_size-1, or ``tail`` not an
                int >= 0 (None is allowed for both).
        """
        from distspec import _arguments as check
        from distspec.torchrun_output import line_of_rank

        rank = check.integer(rank, "Job.logs", "rank", lo=0, hi=self.world_size - 1, optional=True)
        tail = check.integer(tail, "Job.logs", "tail", lo=0, optional=True)
        replica = None if rank is None else rank // self.nproc_per_node
        lines = []
        for line in self.runner.log_lines(self.handle, self.role, replica):
            if rank is not None:
                # Newer Runners parse the rank out of each line; else read the prefix.
                known = getattr(line, "rank", None)
                if known is not None and known != rank:
                    continue
                if known is None and not line_of_rank(
                    line.text, self.role, rank, rank % self.nproc_per_node
                ):
                    continue
            lines.append(line.text)
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return "".join(f"{text}\n" for text in lines)

    # -- results -------------------------------------------------------------------

    def _read(self, rank: int) -> dict[str, Any] | None:
        import cloudpickle

        from distspec.runtime.call_protocol import is_record, join, read_bytes, result_file

        path = join(self.job_dir, result_file(rank))
        try:
            data = read_bytes(path)
        except FileNotFoundError:
            return None
        try:
            record = cloudpickle.loads(data)
        except Exception as e:
            why = f"it does not unpickle: {type(e).__name__}: {e}"
        else:
            if is_record(record):
                return record
            why = "it is not a result record"
        from distspec._arguments import show

        raise RemoteError(
            f"{self.handle}: rank {rank}'s result file {show(path, 200)} is damaged ({why}); "
            "it was changed after the job wrote it",
            rank=rank,
        ) from None

    def _finished(self, timeout: float | None) -> AppStatus:
        status = self.wait(timeout)
        if not status.is_terminal:
            raise TimeoutError(f"{self.handle} is still {status.state.value} after {timeout} s")
        return status

    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's return value, once the job has ended.

        Raises:
            RemoteError: a rank raised (the earliest failure: its type name, message,
                rank, host and traceback), or died without a result (its exit code and
                last log lines), or the job was cancelled.
            TimeoutError: the job had not ended after ``timeout`` seconds.
            ArgumentError: ``timeout`` is not None or a finite number >= 0.
        """
        from distspec.specs.state import AppState

        timeout = _timeout(timeout, "Job.result")
        status = self._finished(timeout)
        if status.state is AppState.SUCCEEDED:
            record = self._read(0)
            if record is not None and record["ok"]:
                return record["value"]
        return self._values(status)[0]

    def results(self, timeout: float | None = None) -> list[Any]:
        """Every rank's return value, in rank order; raises as :meth:`result`."""
        timeout = _timeout(timeout, "Job.results")
        return self._values(self._finished(timeout))

    def exception(self, timeout: float | None = None) -> RemoteError | None:
        """The RemoteError :meth:`results` would raise, or None."""
        timeout = _timeout(timeout, "Job.exception")
        try:
            self.results(timeout)
        except RemoteError as e:
            return e
        return None

    def _values(self, status: AppStatus) -> list[Any]:
        from distspec.specs.state import AppState

        records = [self._read(rank) for rank in range(self.world_size)]
        errors = [r for r in records if r is not None and not r["ok"]]
        # The root cause, in this order: a rank's own exception; a rank that died
        # without a result (or a cancel); a failure caused by a peer's (in init or in
        # the final barrier: a peer that raised or died). The earliest of each kind.
        own = [r for r in errors if not _peer_caused(r)]
        if own:
            raise _remote_error(min(own, key=lambda r: float(r["time"])), self.handle)
        missing = [rank for rank, r in enumerate(records) if r is None]
        if missing and status.state is AppState.CANCELLED:
            raise RemoteError(f"{self.handle} was cancelled", rank=missing[0])
        peer = (
            _remote_error(min(errors, key=lambda r: float(r["time"])), self.handle)
            if errors
            else None
        )
        if missing:
            raise self._died(status, missing) from peer
        if peer is not None:
            raise peer
        return [r["value"] for r in records if r is not None]

    def _died(self, status: AppStatus, missing: list[int]) -> RemoteError:
        from distspec.specs.state import AppState

        rank = missing[0]
        failed = status.first_failure()
        if status.state is AppState.SUCCEEDED or failed is None:
            return RemoteError(
                f"{self.handle} ended {status.state.value} but rank {rank} wrote no result to "
                f"{self.job_dir}: the workers cannot reach this job directory, or it was "
                "cleared",
                rank=rank,
            )
        node = failed.id
        first = node * self.nproc_per_node
        if not first <= rank < first + self.nproc_per_node:
            on_node = [r for r in missing if first <= r < first + self.nproc_per_node]
            rank = on_node[0] if on_node else rank
        try:
            lines = [
                line.text
                for line in self.runner.log_lines(self.handle, failed.role, node, tail=TAIL_LINES)
            ]
        except Exception as e:  # the logs are a courtesy; the exit code is the news
            lines = [f"(could not read the log: {e})"]
        # torchrun stops the node's other ranks when one dies: its summary names the
        # rank that died first.
        from distspec.torchrun_output import root_cause

        root = root_cause(lines, first=True)
        if root is not None and root.rank in missing:
            rank = root.rank
        text = "".join(f"{line}\n" for line in lines)
        code = failed.exit_code
        reason = f" ({failed.reason})" if failed.reason else ""
        where = f" on {failed.hostname}" if failed.hostname else ""
        err = RemoteError(
            f"rank {rank}{where} died without a result: its node ({failed.role}/{node}) "
            f"exited with {code if code is not None else 'an unknown code'}{reason}; "
            f"last lines:\n{text}",
            rank=rank,
            host=failed.hostname or "",
            remote_traceback=text,
            exit_code=code,
        )
        return err


def _peer_caused(record: Mapping[str, Any]) -> bool:
    """Whether a rank's failure is most likely another rank's doing: it failed in
    init or the final barrier, or a signal stopped it (torch's ``SignalException``,
    ``KeyboardInterrupt``), as when torchrun stops a node's ranks after one failed."""
    from distspec.runtime.call_protocol import PEER_PHASES

    kind = str(record["type"])
    return (
        record["phase"] in PEER_PHASES
        or kind.endswith("SignalException")
        or kind == "KeyboardInterrupt"
    )


def _remote_error(record: Mapping[str, Any], handle: str) -> RemoteError:
    exception = None
    if record.get("exception"):
        try:
            import cloudpickle

            exception = cloudpickle.loads(record["exception"])
        except Exception:
            exception = None
    phase = {
        "load": " while loading the function",
        "init": " while initialising the process group",
        "finish": " in the final barrier (another rank failed?)",
        "result": " while sending its result",
    }.get(str(record.get("phase")), "")
    err = RemoteError(
        f"rank {record['rank']} on {record['host']} raised {record['type']}{phase}: "
        f"{record['message']} ({handle})",
        type_name=str(record["type"]),
        remote_message=str(record["message"]),
        rank=int(record["rank"]),
        host=str(record["host"]),
        remote_traceback=str(record["traceback"]),
        exception=exception,
    )
    err.__cause__ = _RemoteTraceback(str(record["traceback"]))
    return err


# --------------------------------------------------------------------- arguments

#: submit's own keywords (distributed's too); dist.fn's other parameters go in options.
SETTINGS = (
    "j",
    "scheduler",
    "cfg",
    "seed",
    "groups",
    "timeout",
    "backend",
    "options",
    "after",
    "runner",
)
#: dist.fn parameters that are not options: the function itself travels pickled.
_CLI_ONLY = ("fn", "fn_args")


def _check_runner(runner: Any, where: str) -> None:
    from distspec.runner import Runner

    if not isinstance(runner, Runner):
        from distspec._arguments import fail

        fail(where, "runner", runner, "give a distspec.runner.Runner or None")


def _fn_params() -> dict[str, Any]:
    """dist.fn's parameters as the binder reads them (one source of truth for types)."""
    from distspec.components.binder import params
    from distspec.components.fn import fn as fn_component
    from distspec.components.loader import Component

    return {p.name: p for p in params(Component.of("dist.fn", fn_component))}


def _check_option(param: Any, value: Any, where: str, key: str) -> Any:
    """One ``options`` value in the type of dist.fn's parameter ``param``."""
    from distspec import _arguments as check
    from distspec.components.binder import Kind

    arg = f"options[{key!r}]"
    if value is None:
        if param.optional:
            return None
        check.fail(where, arg, value, "may not be None")
    kind = param.kind
    if kind is Kind.STR:
        text = check.string(value, where, arg, empty=param.default == "")
        if text is not None and not text.isprintable():
            check.fail(where, arg, value, "control characters are not allowed")
        return text
    if kind is Kind.INT:
        return check.integer(value, where, arg)
    if kind is Kind.FLOAT:
        return check.number(value, where, arg, unit="units")
    if kind is Kind.BOOL:
        if not isinstance(value, bool):
            check.fail(where, arg, value, f"give True or False, not {check.kind(value)}")
        return value
    if kind is Kind.LIST:
        items = check.sequence(value, where, arg)
        for i, item in enumerate(items):
            check.string(item, where, f"{arg}[{i}]")
        return list(items)
    if kind is Kind.DICT:
        # env values may be secrets (tokens): never shown.
        pairs = check.mapping(value, where, arg, optional=False)
        for name, item in pairs.items():
            if not isinstance(item, str):
                check.fail(
                    where,
                    f"{arg}[{name!r}]",
                    item,
                    f"give a str, not {check.kind(item)}",
                    secret=True,
                )
        return pairs
    check.fail(where, arg, value, f"dist.fn's {key} cannot be set from Python")


def _check_after(where: str, after: Any) -> tuple[str, ...]:
    """``after`` as handle strings (``HANDLE`` or ``HANDLE:ok|any|failed``): a Job, an
    AppHandle, a str, or a list or tuple of them; None is none. The Runner checks that
    each names a job of the same scheduler and the condition."""
    from distspec import _arguments as check
    from distspec.specs.handles import AppHandle

    if after is None:
        return ()
    many = isinstance(after, (list, tuple))
    items = tuple(after) if many else (after,)
    handles = []
    for i, item in enumerate(items):
        if isinstance(item, Job):
            handles.append(item.handle)
        elif isinstance(item, AppHandle):
            handles.append(item.format())
        elif isinstance(item, str) and item.strip():
            handles.append(item.strip())
        else:
            check.fail(
                where,
                f"after[{i}]" if many else "after",
                item,
                "give a Job, a handle string (HANDLE or HANDLE:ok|any|failed), or a list of them",
            )
    return tuple(handles)


def _check_settings(
    where: str,
    *,
    j: Any,
    scheduler: Any,
    cfg: Any,
    seed: Any,
    groups: Any,
    timeout: Any,
    backend: Any,
    options: Any,
    after: Any,
    runner: Any,
) -> dict[str, Any]:
    """submit's keywords checked and normalised: each wrong type or value raises
    ArgumentError (TopologyError for a ``j`` string that does not parse), naming it."""
    from distspec import _arguments as check
    from distspec.components import fn as fnc
    from distspec.specs.groups import groups_problem
    from distspec.specs.options import did_you_mean
    from distspec.specs.topology import Topology

    j = check.string(j, where, "j", limit=64)
    topology = Topology.parse(j)
    scheduler = check.string(scheduler, where, "scheduler", optional=True)
    cfg = check.mapping(cfg, where, "cfg")
    seed = check.integer(seed, where, "seed", lo=0, hi=fnc.MAX_SEED, optional=True)
    timeout = check.number(
        timeout, where, "timeout", positive=True, optional=True, hi=fnc.MAX_TIMEOUT
    )
    backend = check.string(backend, where, "backend", optional=True)
    if backend is not None and (problem := fnc.backend_problem(backend)):
        check.fail(where, "backend", backend, problem)
    ranks: list[tuple[int, ...]] = []
    for i, group in enumerate(check.sequence(groups, where, "groups")):
        members = check.sequence(group, where, f"groups[{i}]")
        ranks.append(
            tuple(
                check.integer(r, where, f"groups[{i}][{k}]", lo=0) or 0
                for k, r in enumerate(members)
            )
        )
    if problem := groups_problem(ranks, topology):
        check.fail(where, "groups", groups, problem)
    given = check.mapping(options, where, "options")
    known = _fn_params()
    checked: dict[str, Any] = {}
    for key, value in given.items():
        if key in SETTINGS:
            check.fail(where, f"options[{key!r}]", value, f"pass {key}= to submit itself")
        if key in _CLI_ONLY or key not in known:
            names = [n for n in known if n not in SETTINGS and n not in _CLI_ONLY]
            why = (
                "is for the command line: submit sends the function and its arguments"
                if key in _CLI_ONLY
                else f"is not a dist.fn parameter{did_you_mean(key, names)}"
            )
            raise ArgumentError(
                f"{where}: options key {check.show(key)} {why}; options takes {', '.join(names)}",
                argument="options",
                value=check.show(key),
            )
        checked[key] = _check_option(known[key], value, where, key)
    if runner is not None:
        _check_runner(runner, where)
    return {
        "after": _check_after(where, after),
        "j": j,
        "topology": topology,
        "scheduler": scheduler,
        "cfg": cfg,
        "seed": seed,
        "groups": tuple(ranks),
        "timeout": timeout,
        "backend": backend,
        "options": checked,
        "runner": runner,
    }


# --------------------------------------------------------------------- submit


def submit(
    fn: Callable[..., Any],
    /,
    *args: Any,
    j: str = "1x2",
    scheduler: str | None = None,
    cfg: Mapping[str, Any] | None = None,
    seed: int | None = None,
    groups: Sequence[Sequence[int]] = (),
    timeout: float | None = None,
    backend: str | None = None,
    options: Mapping[str, Any] | None = None,
    after: After = None,
    runner: Runner | None = None,
    **kwargs: Any,
) -> Job:
    """Run ``fn(*args, **kwargs)`` on every rank of a new job; returns at once.

    Each rank calls :func:`distspec.runtime.init` first (``seed``, ``groups``,
    ``timeout``, ``backend``) and passes the resulting ``Dist`` as the first argument
    when ``fn``'s first parameter is annotated ``Dist``; otherwise
    ``distspec.runtime.current()`` returns it inside ``fn``.

    Args:
        fn: the function; a lambda, closure or function of ``__main__`` or of the
            user's own modules travels by value, an installed package's by name.
        args: its positional arguments (pickled with cloudpickle).
        j: the topology ``NxM``: N nodes of M processes (a bare ``M`` is one node of
            M processes, whatever GPUs ``options`` gives the nodes).
        scheduler: local_cwd, slurm, pbs or kubernetes; the configured default
            (local_cwd unless configured) when None.
        cfg: the scheduler's run options, as ``-cfg`` takes them (kubernetes needs
            ``job_dir``, an fsspec URL both this machine and the pods reach).
        seed: seed Python, NumPy and torch on every rank before the call.
        groups: process subgroups, e.g. ``[[0, 2], [1, 3]]`` (``dist.group`` is the
            caller's).
        timeout: the process group's timeout in seconds (the runtime's default 1800).
        backend: the process group backend (nccl, gloo, ...); chosen for the device
            when None.
        options: any other ``dist.fn`` parameter: ``name``, ``image``, ``h``, ``cpu``,
            ``gpu``, ``mem_mb``, ``env``, ``max_retries``, ``seed_per_rank``,
            ``debug``, ``rdzv_backend``, ``rdzv_port``, ``mounts``, ``tee``.
        after: the jobs this one waits for (it starts once they have ended): a
            :class:`Job`, a handle string (``HANDLE:ok``, the default condition: it
            succeeded; ``HANDLE:any``: it ended; ``HANDLE:failed``), or a list of
            them, of the same scheduler; a sweep's handle stands for all its points
            (as ``distspec run --after``).
        runner: the Runner to submit with (a new one with the user's config when None).
        kwargs: the function's keyword arguments.

    Raises:
        ArgumentError: an argument of the wrong type or value (``j=2``, ``seed=-1``,
            ``timeout=float("nan")``, ``groups`` that overlap or miss a rank, an
            unknown ``options`` key or ``backend``, ...); the message names it.
        CallableError: ``fn`` is not callable, or it or an argument cannot be pickled,
            or the job directory cannot be written (nothing is left running).
        UsageError: a bad topology string, an unknown scheduler or run option (``cfg``),
            a component parameter the component refuses (``options={"cpu": -1}``), or
            an ``after`` job that is unknown, of another scheduler, or on a backend
            that cannot wait for one (Kubernetes).

    Nothing is submitted or written when any of these is raised before submitting.
    """
    settings = _settings_of(locals())
    call = _compile(fn, args, kwargs, where="distspec.submit", **settings)
    return submit_compiled(call)


def submit_compiled(call: CompiledCall) -> Job:
    """Submit a compiled callable (:func:`compile_call`; ``distspec rerun`` also gives
    a rerun's request with the first run's ``call.pkl``): the payload goes into the job
    directory (before submit where the replicas cannot see this machine's files, else
    right after), and the record :meth:`Job.from_handle` reads is written.

    Raises:
        CallableError: the job directory cannot be written (the job is cancelled).
    """
    runner, request = call.runner, call.request
    early_dir = _job_dir_before_submit(runner, request)
    if early_dir is not None:
        # Written before submit: a failure leaves nothing behind.
        _write_payload(early_dir, call.payload)
    handle = runner.submit(request)
    try:
        job_dir = early_dir or _job_dir_after_submit(runner, request, handle.app_id)
        if early_dir is None:
            _write_payload(job_dir, call.payload)
        job = Job(
            handle.format(),
            job_dir=job_dir,
            nodes=call.nodes,
            nproc_per_node=call.nproc_per_node,
            role=call.role,
            runner=runner,
        )
        _write_record(runner, job, handle)
    except BaseException:
        runner.cancel(handle)
        raise
    return job


class CompiledCall:
    """A callable compiled for a scheduler, not submitted: ``request.render()`` is what
    ``submit`` would hand the scheduler, ``payload`` the ``call.pkl`` it would write."""

    def __init__(
        self,
        *,
        request: Request,
        payload: bytes,
        runner: Runner,
        nodes: int,
        nproc_per_node: int,
        role: str,
    ) -> None:
        self.request = request
        self.payload = payload
        self.runner = runner
        self.nodes = nodes
        self.nproc_per_node = nproc_per_node
        self.role = role


def compile_call(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    j: str = "1x2",
    scheduler: str | None = None,
    cfg: Mapping[str, Any] | None = None,
    seed: int | None = None,
    groups: Sequence[Sequence[int]] = (),
    timeout: float | None = None,
    backend: str | None = None,
    options: Mapping[str, Any] | None = None,
    after: After = None,
    runner: Runner | None = None,
) -> CompiledCall:
    """Pickle ``fn(*args, **kwargs)`` and compile its ``dist.fn`` job (a dry run of
    :func:`submit`, whose arguments these are); nothing is written or submitted.

    Raises:
        CallableError: ``fn`` is not callable, or it or an argument cannot be pickled.
        UsageError: as :func:`submit` (ArgumentError for an argument of the wrong
            type or value).
    """
    return _compile(fn, args, kwargs, where="compile_call", **_settings_of(locals()))


def _settings_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """submit's keywords out of a caller's ``locals()``."""
    return {key: values[key] for key in SETTINGS}


def _compile(fn: Any, args: Any, kwargs: Any, *, where: str, **settings: Any) -> CompiledCall:
    """compile_call's work; ``where`` names the public function in messages."""
    from distspec import _arguments as check

    if not callable(fn):
        raise CallableError(
            f"{where}: fn={check.show(fn)}: give a function (or any callable), not {check.kind(fn)}"
        )
    args = check.sequence(args, where, "args")
    kwargs = check.mapping(kwargs, where, "kwargs")
    s = _check_settings(where, **settings)
    runner, scheduler, app = _job_app(fn, s)
    request = runner.dryrun(app, scheduler, s["cfg"], after=s["after"])
    # Pickled last: a usage mistake above is reported without the cost of pickling.
    payload = pickle_call(fn, args, kwargs)
    return CompiledCall(
        request=request,
        payload=payload,
        runner=runner,
        nodes=s["topology"].nodes,
        nproc_per_node=s["topology"].nproc_per_node,
        role=app.roles[0].name,
    )


def _job_app(fn: Any, s: Mapping[str, Any]) -> tuple[Runner, str, AppDef]:
    """The Runner, the scheduler's name and the ``dist.fn`` AppDef of checked settings
    ``s`` (:func:`_check_settings`); ``fn`` names the job unless ``options`` does.
    dist.fn reads ``j`` as dist.ddp does: a bare M is one node of M processes."""
    from distspec.components.fn import fn as fn_component
    from distspec.components.fn import job_name
    from distspec.specs.groups import format_groups

    runner = s["runner"]
    if runner is None:
        from distspec.runner import Runner

        runner = Runner()
    scheduler = s["scheduler"] or runner.config.scheduler
    params: dict[str, Any] = dict(s["options"])
    if params.get("name") is None:
        params["name"] = job_name(getattr(fn, "__name__", "fn"))
    app = fn_component(
        j=s["j"],
        seed=s["seed"],
        groups=format_groups(list(s["groups"])) if s["groups"] else None,
        timeout=s["timeout"],
        backend=s["backend"],
        **params,
    )
    return runner, scheduler, app


def _write_record(runner: Runner, job: Job, handle: AppHandle) -> None:
    """The record :meth:`Job.from_handle` reads."""
    path = _record_path(runner, handle.scheduler, handle.app_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(job._record(), f)


def _write_payload(job_dir: str, payload: bytes) -> None:
    from distspec.runtime.call_protocol import CALL_FILE, join, write_bytes

    try:
        if "://" not in job_dir:
            os.makedirs(job_dir, exist_ok=True)
        write_bytes(join(job_dir, CALL_FILE), payload)
    except Exception as e:
        raise CallableError(
            f"cannot write the function to the job directory {job_dir}: {type(e).__name__}: {e}"
        ) from e


# --------------------------------------------------------------------- decorator


class DistributedFunction:
    """A function wrapped by :func:`distributed`: calling it runs it as a job and
    returns rank 0's result; :meth:`submit` returns the :class:`Job` instead."""

    def __init__(self, fn: Callable[..., Any], settings: Mapping[str, Any]) -> None:
        self.fn = fn
        self.settings = dict(settings)
        functools.update_wrapper(self, fn)

    def submit(self, *args: Any, **kwargs: Any) -> Job:
        """Submit ``fn(*args, **kwargs)`` with the decorator's settings; returns at once.

        Raises:
            ArgumentError: a keyword named like one of submit's own (``j``, ``seed``,
                ...): the decorator's settings hold those; bind such an argument of the
                function with functools.partial.
        """
        clash = sorted(set(kwargs) & set(SETTINGS))
        if clash:
            name = getattr(self.fn, "__name__", "the function")
            raise ArgumentError(
                f"{name}.submit: keyword {clash[0]!r} is one of distspec.submit's own "
                f"({', '.join(SETTINGS)}), set by @distributed(...); pass such an argument "
                "of the function positionally or bind it with functools.partial",
                argument=clash[0],
            )
        return submit(self.fn, *args, **self.settings, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Submit, wait, and return rank 0's result (RemoteError as :meth:`Job.result`)."""
        return self.submit(*args, **kwargs).result()


def distributed(
    *,
    j: str = "1x2",
    scheduler: str | None = None,
    cfg: Mapping[str, Any] | None = None,
    seed: int | None = None,
    groups: Sequence[Sequence[int]] = (),
    timeout: float | None = None,
    backend: str | None = None,
    options: Mapping[str, Any] | None = None,
    after: After = None,
    runner: Runner | None = None,
) -> Callable[[Callable[..., Any]], DistributedFunction]:
    """Decorator: ``@distributed(j="2x4", scheduler="slurm")``; the arguments are
    :func:`submit`'s. Calling the decorated function submits it and returns rank 0's
    result; ``.submit(*args)`` returns the :class:`Job`.

    Raises:
        UsageError: as :func:`submit`, at the decorator: a setting of the wrong type or
            value, or an unknown scheduler (ArgumentError, TopologyError,
            SchedulerNotFound); CallableError when what it decorates is not callable.
    """
    settings = _settings_of(locals())
    where = "distspec.distributed"
    _check_settings(where, **settings)
    if scheduler is not None:
        registry = runner.registry if runner is not None else None
        if registry is None:
            from distspec.schedulers._registry import SchedulerRegistry

            registry = SchedulerRegistry()
        if scheduler not in registry.names():
            registry.get(scheduler)  # SchedulerNotFound, with a did-you-mean

    def wrap(fn: Callable[..., Any]) -> DistributedFunction:
        if not callable(fn):
            from distspec import _arguments as check

            raise CallableError(
                f"{where}: decorates a function (or any callable), not {check.kind(fn)} "
                f"{check.show(fn)}"
            )
        return DistributedFunction(fn, settings)

    return wrap
