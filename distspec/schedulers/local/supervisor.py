"""The detached supervisor of one ``local_cwd`` run, and the process helpers it shares
with :mod:`distspec.schedulers.local.scheduler`.

Started as ``python -I -S -c SUPERVISOR_MAIN ROOT ... RUN_DIR`` (see
:data:`SUPERVISOR_MAIN`), or by hand as ``python3 -m distspec.schedulers.local.supervisor
--foreground RUN_DIR``: it reads ``RUN_DIR/plan.json``, starts every replica, writes
``RUN_DIR/state.json`` (atomically, on every change) and exits when the run has ended
and nothing of it is left alive. It imports only the standard library (and not even
``site``), so it starts in a few milliseconds; of distspec it imports only modules
that do the same (the packages' ``__init__`` files import nothing heavy).

Process tree of a run::

    supervisor          own session; a child subreaper; SIGTERM = cancel
    └── keeper          one per replica attempt: own session and process group,
        │               a child subreaper, parent-death signal SIGUSR1 (= kill all)
        └── command     e.g. torchrun; parent-death signal SIGKILL; same group as keeper
            └── ...     torchrun's workers, each in a session of its own

torchrun starts each worker with ``start_new_session=True``, so killing torchrun's
process group does not reach the workers, and a SIGKILLed torchrun leaves them
running. That is why every replica runs under a *keeper*, a fork of the supervisor:
it pumps the command's stdout/stderr into the log files, and when the command
ends, is cancelled, or the supervisor dies (its parent-death signal), it kills
every process below it. Being a subreaper, it inherits descendants whose parent
died, so none can slip away by re-parenting. The supervisor is a subreaper too, so
if a keeper is SIGKILLed, its orphans come back to the supervisor, which kills them.
Every process of a run also carries ``DISTSPEC_APP_ID`` in its environment; the
last line of defence (:func:`hunt`) kills by that marker.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import stat
import sys
import time

# The idiom mypy understands without importing typing (~4 ms of the supervisor's start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ALIVE_FIFO",
    "APP_ID_ENV",
    "RECORD_LIMIT",
    "RESERVE_FILE",
    "STATE_FILE",
    "SUPERVISOR_MAIN",
    "find_supervisor",
    "hunt",
    "is_alive",
    "no_space",
    "not_regular",
    "os_error_text",
    "process_starttime",
    "read_json",
    "read_regular",
    "release_reserve",
    "write_json_atomic",
]

#: Every process of a run has this variable set to the app id.
APP_ID_ENV = "DISTSPEC_APP_ID"
STATE_FILE = "state.json"
PLAN_FILE = "plan.json"
#: A FIFO the supervisor holds open for writing until it has written the final state
#: (or dies): a reader that opened it while the supervisor had it open sees POLLHUP
#: at that moment, so ``wait`` blocks on it instead of polling.
ALIVE_FIFO = "alive.fifo"
#: Space the supervisor sets aside in the run directory when it starts (a file it
#: fallocate()s) and frees when its final record finds the disk full, typically filled
#: by the job's own output: the run's true end is then recorded at once, not retried.
RESERVE_FILE = ".reserve"
_RESERVE_BASE = 256 << 10
_RESERVE_PER_REPLICA = 8 << 10
#: The largest record or plan a reader accepts (state.json of ten thousand replicas
#: is ~3 MiB); a bigger file is reported, not read into memory.
RECORD_LIMIT = 64 << 20
SCHEMA_VERSION = 1
#: How ``local_cwd`` starts a supervisor: ``python -I -S -c SUPERVISOR_MAIN ROOT ARGS``,
#: ROOT being :data:`PACKAGE_ROOT`, the folder that holds the ``distspec`` package.
#: Imported rather than run as a script, the module comes from its cached bytecode
#: (compiling it takes ~7 ms); appended to sys.path, ROOT cannot shadow the standard
#: library.
SUPERVISOR_MAIN = (
    "import sys; sys.path.append(sys.argv[1]); "
    "from distspec.schedulers.local.supervisor import entry; entry(sys.argv[2:])"
)
PACKAGE_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
#: What the command line of a supervisor (and of its keepers, forks of it) contains:
#: this module's name, or the old one of a run started before the package existed.
_COMMAND_MARKS = (b"distspec.schedulers.local.supervisor", b"local_supervisor")

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: Escalation after the grace period when a keeper did not end its replica itself.
_KEEPER_TIMEOUT = 5.0
_TAIL_LINES = 400
#: Of output that could not be written: how many of its last records a keeper keeps,
#: each cut to this size, and how much of them its exit message carries (the whole
#: message must stay below PIPE_BUF, 4096 bytes, to be written atomically).
_TAIL_RECORDS = 64
_TAIL_RECORD = 300
_TAIL_MESSAGE = 2600
#: While a state write fails (full disk, read-only or deleted run directory), the
#: supervisor retries this often, and checks that its state file still exists.
_STATE_RETRY = 1.0
#: How long the supervisor waits, retrying, to record the final state before exiting
#: without it (readers then report "supervisor died: ..." with the write error).
_FINAL_WRITE_PATIENCE = 3600.0


# -- small helpers shared with the scheduler ----------------------------------------


def write_json_atomic(path: str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file and rename (never half-written)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        # A full disk or a read-only directory: leave no half-written temp file.
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def find_supervisor(app_id: str) -> int | None:
    """The pid of the live supervisor of ``app_id``, found by the :data:`APP_ID_ENV`
    marker every process of a run carries, or None. Works when the run directory is
    gone. (Keepers are forks of the supervisor with the same command line; the
    supervisor is the one whose parent is not one of them.)"""
    marker = f"{APP_ID_ENV}={app_id}".encode()
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                command = f.read()
                if not any(mark in command for mark in _COMMAND_MARKS):
                    continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
        except OSError:
            continue
        fields = _stat_fields(int(name))
        if fields is not None and fields[0] not in ("Z", "X", "x"):
            found[int(name)] = int(fields[1])
    roots = [pid for pid, ppid in found.items() if ppid not in found]
    return roots[0] if len(roots) == 1 else None


def read_json(path: str) -> Any:
    return json.loads(read_regular(path).decode("utf-8"))


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular(mode: int) -> OSError | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a plain file")
    return OSError(errno.EINVAL, f"not a regular file ({kind})")


def read_regular(path: str, limit: int = RECORD_LIMIT, *, tail: bool = False) -> bytes:
    """The content of the regular file at ``path`` (following symlinks), at most
    ``limit`` bytes: a FIFO, a device or a directory there never blocks the reader nor
    fills its memory (``stat`` first, then ``O_NONBLOCK`` and ``fstat``).

    Raises:
        OSError: FileNotFoundError when absent; else with a ``strerror`` a person can
            read: "not a regular file (a FIFO)", "too large (N bytes, at most M)", or
            the system's (a symlink loop, permission denied). With ``tail``, a file
            larger than ``limit`` gives its last ``limit`` bytes instead.
    """
    problem = not_regular(os.stat(path).st_mode)
    if problem is not None:
        raise problem
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)  # the file may have been swapped since the stat
        problem = not_regular(st.st_mode)
        if problem is not None:
            raise problem
        if st.st_size > limit:
            if not tail:
                raise OSError(errno.EFBIG, f"too large ({st.st_size} bytes, at most {limit})")
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _make_reserve(path: str, size: int) -> bool:
    """Set ``size`` bytes aside in a file at ``path``; False if there is no room."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, size)
        return True
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        return False
    finally:
        os.close(fd)


def release_reserve(run_dir: str) -> bool:
    """Free the space the supervisor set aside in ``run_dir``; False if there was none."""
    try:
        os.unlink(os.path.join(run_dir, RESERVE_FILE))
        return True
    except OSError:
        return False


def no_space(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT)


def os_error_text(e: OSError) -> str:
    """``No space left on device (ENOSPC)``: the text and the errno's name."""
    name = errno.errorcode.get(e.errno or 0, "")
    text = e.strerror or str(e)
    return f"{text} ({name})" if name and name not in text else text


def _append(fd: int, data: bytes) -> str:
    """Append ``data`` to the file ``fd`` (opened O_APPEND) whole or not at all: ''
    or why it could not (a short write on a full disk is cut off again, so a line-based
    log never holds half a line followed by the next one)."""
    done = 0
    while done < len(data):
        try:
            n = os.write(fd, data[done:])
        except OSError as e:
            if done:
                try:
                    os.ftruncate(fd, max(0, os.fstat(fd).st_size - done))
                except OSError:
                    pass
            return os_error_text(e)
        done += n
    return ""


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` after the command name (index 0 is the state)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].decode().split()


def process_starttime(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: int, starttime: int | None = None) -> bool:
    """True if ``pid`` runs and is not a zombie (and started at ``starttime`` if given)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X", "x"):
        return False
    return starttime is None or int(fields[19]) == starttime


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every process visible in /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                table[int(name)] = (int(fields[1]), fields[0])
    return table


def _children(pid: int) -> list[int] | None:
    """Direct children of ``pid`` from /proc/PID/task/*/children; None if unsupported."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(c) for c in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}/children") and os.path.exists(
                f"/proc/{pid}"
            ):
                return None  # kernel without CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return found


def _descendants(root: int, exclude: set[int] | None = None) -> list[int]:
    """Live (non-zombie) descendants of ``root``, not descending into ``exclude``.

    Walks the children lists (a few reads), falling back to a scan of every process."""
    exclude = exclude or set()
    children: dict[int, list[int]] = {}
    if _children(root) is None:
        for pid, (ppid, _) in _process_table().items():
            children.setdefault(ppid, []).append(pid)

    def kids(pid: int) -> list[int]:
        if children:
            return children.get(pid, [])
        return _children(pid) or []

    found, todo = [], list(kids(root))
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        fields = _stat_fields(pid)
        if fields is None:
            continue
        if fields[0] not in ("Z", "X", "x"):
            found.append(pid)
        todo.extend(kids(pid))
    return found


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def hunt(app_id: str, *, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to every process whose environment marks it as part of ``app_id``.

    The last line of defence, used when the supervisor itself is gone. Returns the pids hit.
    """
    marker = f"{APP_ID_ENV}={app_id}".encode()
    hit = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if marker in env.split(b"\0"):
            _kill(int(name), sig)
            hit.append(int(name))
    return hit


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _reap(pids: dict[int, int]) -> None:
    """Reap every exited child without blocking, recording ``pid -> wait status``."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        pids[pid] = status


def _kill_tree(exclude: set[int], reaped: dict[int, int], limit: float = 10.0) -> None:
    """SIGKILL every descendant of this process (except the ``exclude`` subtrees) until
    none is left. Needs this process to be a subreaper so orphans come back to it."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        victims = _descendants(os.getpid(), exclude)
        _reap(reaped)
        if not victims:
            return
        for pid in victims:
            _kill(pid, signal.SIGKILL)
        time.sleep(0.002)
        _reap(reaped)


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def exit_code_of(returncode: int) -> int:
    """A shell-style exit code: a death by signal N is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


# -- torchrun's failure report ------------------------------------------------------


def torchrun_root_cause(stderr_tail: list[str], role: str = "") -> tuple[int, str] | None:
    """(exit code, reason) of the first failed worker from torchrun's ChildFailedError
    report ("Root Cause (first observed failure)"), or None when there is none.

    torchrun itself exits 1 whenever a worker fails; the worker's own code is only in
    this report. The one reader of it: the batch backends (Slurm, PBS) use it too,
    through :func:`distspec.schedulers._common.torchrun_root_cause` (this file imports
    only the standard library, so the code lives here). ``stderr_tail`` may hold
    stdout and stderr merged.
    """
    import re

    try:
        start = max(i for i, line in enumerate(stderr_tail) if line.startswith("Root Cause"))
    except ValueError:
        return None
    block = "\n".join(stderr_tail[start : start + 12])
    code = re.search(r"exitcode\s*:\s*(-?\d+)(?: \(pid: (\d+)\))?", block)
    if code is None:
        return None
    value = int(code.group(1))
    rank = re.search(r"rank\s*:\s*(\d+) \(local_rank: (\d+)\)", block)
    who = f"rank {rank.group(1)} (local_rank {rank.group(2)})" if rank else "a worker"
    how = f"was killed by {_signal_name(-value)}" if value < 0 else f"exited with {value}"
    reason = f"torchrun: {who} {how}"
    if code.group(2):
        reason += f", pid {code.group(2)}"
    if rank:
        # With --tee torchrun prefixes each worker line: [rank<global rank>]: under the
        # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE local_cwd sets, else [<role><local rank>]:.
        prefixes = [f"[rank{rank.group(1)}]:"] + ([f"[{role}{rank.group(2)}]:"] if role else [])
        said = [ln[len(p) :] for ln in stderr_tail[:start] for p in prefixes if ln.startswith(p)]
        said = [
            ln[len(f"[rank{rank.group(1)}]: ") :] if ln.startswith("[rank") else ln for ln in said
        ]
        last = _last_said(said)
        if last:
            reason += f"; its last line: {last[:200]}"
    return exit_code_of(value), reason


def _last_said(said: list[str]) -> str:
    """What a rank printed last that tells why it failed: the exception line of its
    last traceback, else its last non-empty line (a warning torch prints at exit,
    after the traceback, is not it)."""
    starts = [i for i, text in enumerate(said) if text.startswith("Traceback (")]
    if starts:
        # The exception line is the first line after the frames that is not indented.
        for text in said[starts[-1] + 1 :]:
            if text.strip() and not text[0].isspace():
                return text.strip()
    for text in reversed(said):
        if text.strip():
            return text.strip()
    return ""


# -- the keeper: one replica attempt ------------------------------------------------


class _Keeper:
    """Runs one replica attempt in this (forked) process; never returns."""

    def __init__(
        self, run_dir: str, replica: dict[str, Any], attempt: int, msg_fd: int, supervisor: int
    ) -> None:
        self.run_dir = run_dir
        self.replica = replica
        self.attempt = attempt
        self.msg_fd = msg_fd
        self.supervisor = supervisor
        self.kill_now = False
        self.reason = ""
        #: Output that could not be written to the log (full disk...): its size, why,
        #: and its last records, kept here and sent to the supervisor at the end.
        self.lost = 0
        self.lost_error = ""
        self.lost_tail: list[tuple[int, bytes]] = []  # (sequence, record), any stream
        self.lost_errors: list[tuple[int, bytes]] = []  # stderr and notes: the traceback
        self.lost_records = 0
        self.unwritten = 0  # of it, bytes lost since the log last took a write
        self.log_unopened = ""

    def main(self) -> None:
        code = 1
        try:
            code = self._run()
        except BaseException as e:  # report, never let the exception escape a fork
            self._send({"t": "exit", "returncode": 1, "reason": f"keeper error: {e!r}"})
        finally:
            os._exit(code)

    def _send(self, msg: dict[str, Any]) -> None:
        msg["keeper"] = os.getpid()
        data = (json.dumps(msg)[:3800] + "\n").encode()
        try:
            os.write(self.msg_fd, data)  # < PIPE_BUF: one atomic write
        except OSError:
            pass

    def _on_kill(self, signum: int, frame: Any) -> None:
        self.kill_now = True
        if not self.reason:
            self.reason = (
                "supervisor died"
                if os.getppid() != self.supervisor
                else "killed after the grace period"
            )

    def _run(self) -> int:
        os.setsid()
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGUSR1, self._on_kill)
        # SIGTERM/SIGINT/SIGHUP reach the whole group; the command handles them, the
        # keeper only wakes up. (A handler, not SIG_IGN: ignoring would be inherited.)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, lambda s, f: None)
        if os.getppid() != self.supervisor:  # the supervisor died before prctl
            self._on_kill(signal.SIGUSR1, None)

        rep = self.replica
        logs = {}
        for key in ("stdout", "stderr", "log"):
            logs[key], error = _open_log(os.path.join(self.run_dir, rep[key]))
            if error and key == "log":
                self.log_unopened = error  # every record is lost
        if self.attempt > 1:
            self._note(logs["log"], f"restart {self.attempt - 1}: {json.dumps(rep['argv'])}")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            child = _spawn(rep, out_w, err_w)
        except OSError as e:
            msg = f"cannot start {rep['argv'][0]!r}: {e.strerror or e}"
            self._note(logs["log"], msg)
            _write(logs["stderr"], f"distspec: {msg}\n".encode())
            self._send({"t": "exit", "returncode": 127, "reason": msg, **self._losses()})
            return 127
        finally:
            os.close(out_w)
            os.close(err_w)
        self._send({"t": "started", "pid": child})

        tail: list[str] = []
        partial = {out_r: b"", err_r: b""}
        names = {out_r: ("stdout", b"O"), err_r: ("stderr", b"E")}
        open_fds = {out_r, err_r}
        reaped: dict[int, int] = {}
        status: int | None = None
        poller = select.poll()
        for fd in (wake_r, out_r, err_r):
            poller.register(fd, select.POLLIN)
        while open_fds or status is None:
            if self.kill_now:
                _kill_tree(set(), reaped)
            events = poller.poll(None if status is None or not open_fds else 1000)
            if not events and status is not None:
                # The command ended but something it left behind keeps a pipe open.
                _kill_tree(set(), reaped)
            for fd, _ in events:
                if fd == wake_r:
                    try:
                        os.read(wake_r, 512)
                    except BlockingIOError:
                        pass
                    continue
                data = os.read(fd, 65536)
                if not data:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    data = b""
                stream, tag = names[fd]
                if data:
                    _write(logs[stream], data)
                buf = partial[fd] + data
                lines = buf.split(b"\n")
                rest = lines.pop()
                if (not data and rest) or len(
                    rest
                ) > 65536:  # end of stream: flush the unterminated last line
                    lines.append(rest)
                    rest = b""
                partial[fd] = rest
                if lines:
                    now = f"{time.time():.6f} ".encode()
                    self._log(logs["log"], [now + tag + b" " + ln + b"\n" for ln in lines])
                    if tag == b"E":
                        tail.extend(ln.decode("utf-8", "replace") for ln in lines)
                        del tail[:-_TAIL_LINES]
            _reap(reaped)
            if status is None and child in reaped:
                status = reaped[child]
                # Whatever the command left behind dies with it.
                _kill_tree(set(), reaped)
        _kill_tree(set(), reaped)

        returncode = os.waitstatus_to_exitcode(status)
        reason = ""
        exit_code = exit_code_of(returncode)
        if returncode < 0:
            reason = f"killed by {_signal_name(-returncode)}"
            if self.kill_now and self.reason:
                reason += f" ({self.reason})"
        elif returncode != 0:
            found = torchrun_root_cause(tail, self.replica["role"])
            if found is not None:
                exit_code, reason = found
                reason += f"; torchrun exited with {returncode}"
        if returncode != 0:
            self._note(logs["log"], f"exit code {exit_code}" + (f": {reason}" if reason else ""))
        self._send(
            {
                "t": "exit",
                "returncode": returncode,
                "exit_code": exit_code,
                "reason": reason,
                **self._losses(),
            }
        )
        return 0

    def _note(self, fd: int, text: str) -> None:
        self._log(fd, [f"{time.time():.6f} D distspec: {text}\n".encode()])

    def _log(self, fd: int, records: list[bytes]) -> None:
        """Append records to the replica's log; what cannot be written is counted and
        its last records kept (the supervisor writes them once it has room)."""
        error = self.log_unopened
        if not error:
            data = b"".join(records)
            if self.lost_tail:
                # Output was lost before these records: the note and the lost lines
                # kept come first, so the log stays in order.
                data = lost_note(self.unwritten, self.lost_error) + self._tail_block() + data
            error = _append(fd, data)
            if not error:
                self.lost_tail.clear()
                self.lost_errors.clear()
                self.unwritten = 0
                return
        size = sum(len(r) for r in records)
        self.lost += size
        self.unwritten += size
        self.lost_error = error
        for record in records:
            self.lost_records += 1
            kept = (self.lost_records, record[:_TAIL_RECORD])
            self.lost_tail.append(kept)
            if record.split(b" ", 2)[1:2] != [b"O"]:
                self.lost_errors.append(kept)
        del self.lost_tail[:-_TAIL_RECORDS]
        del self.lost_errors[:-_TAIL_RECORDS]

    def _tail_block(self) -> bytes:
        return b"".join(r if r.endswith(b"\n") else r + b"\n" for _, r in self.lost_tail)

    def _losses(self) -> dict[str, Any]:
        """The exit message's account of lost output: its size, why, and as many of
        the last records still not in the log as fit in one atomic pipe write."""
        if not self.lost:
            return {}
        # The last stderr lines first (stdout is read from another pipe, so a flood on
        # it may come after them), then the last lines of any kind, in their order.
        chosen: dict[int, str] = {}
        size = 0
        for kept, budget in (
            (self.lost_errors, _TAIL_MESSAGE // 2),
            (self.lost_tail, _TAIL_MESSAGE),
        ):
            for seq, record in reversed(kept):
                if seq in chosen:
                    continue
                text = record.decode("utf-8", "replace").rstrip("\n")
                size += len(json.dumps(text)) + 2
                if size > budget:
                    size -= len(json.dumps(text)) + 2
                    break
                chosen[seq] = text
        tail = [chosen[seq] for seq in sorted(chosen)]
        return {
            "lost": self.lost,
            "lost_error": self.lost_error[:200],
            "unwritten": self.unwritten,
            "tail": tail,
        }


def _file_key(path: str) -> tuple[int, int, int] | None:
    """(inode, size, mtime) of ``path``, None if it cannot be stat()ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _open_log(path: str) -> tuple[int, str]:
    """A log file for appending, and ''; /dev/null and why when it cannot be made (a
    read-only, full or deleted run directory): the replica runs on, its output is lost,
    not its result. Never blocks on a FIFO put there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
        problem = not_regular(os.fstat(fd).st_mode)
        if problem is None:
            os.set_blocking(fd, True)
            return fd, ""
        os.close(fd)
        error = f"{path}: {problem.strerror}"
    except OSError as e:
        error = os_error_text(e)
    return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC), error


def _write(fd: int, data: bytes) -> None:
    """Append to a log; a full disk drops the output rather than failing the replica
    (the combined log, written by :meth:`_Keeper._log`, accounts for it)."""
    _append(fd, data)


def _spawn(rep: dict[str, Any], out_w: int, err_w: int) -> int:
    """fork + exec the replica's command; an exec failure is raised here as OSError."""
    env = dict(os.environ)
    env.update(rep["env"])
    path_extra = rep.get("path_prepend")
    if path_extra:
        env["PATH"] = path_extra + os.pathsep + env.get("PATH", "")
    argv = rep["argv"]
    cwd = rep["cwd"]
    err_r, err_w2 = os.pipe()  # close-on-exec: EOF without data means exec succeeded
    pid = os.fork()
    if pid == 0:
        try:
            os.close(err_r)
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            if cwd:
                os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except BaseException as e:
            err = getattr(e, "errno", None) or 0
            os.write(err_w2, f"{err}:{getattr(e, 'strerror', None) or e}".encode())
        os._exit(127)
    os.close(err_w2)
    with os.fdopen(err_r, "rb") as f:
        failure = f.read()
    if failure:
        os.waitpid(pid, 0)
        num, _, text = failure.decode("utf-8", "replace").partition(":")
        raise OSError(int(num or 0), text)
    return pid


# -- the supervisor -----------------------------------------------------------------


class _Replica:
    def __init__(self, role: str, spec: dict[str, Any]) -> None:
        self.role = role
        self.spec = spec
        self.id: int = spec["id"]
        self.state = "PENDING"
        self.keeper: int | None = None
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.reason = ""
        self.restarts = 0
        self.attempt = 0
        self.started: float | None = None
        self.ended: float | None = None
        self.result: dict[str, Any] | None = None
        self.lost = 0  # bytes of output its log never got, over every attempt
        self.lost_error = ""

    @property
    def lost_note(self) -> str:
        if not self.lost:
            return ""
        return f"logs truncated: {_size(self.lost)} of output not written ({self.lost_error})"

    @property
    def live(self) -> bool:
        return self.keeper is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "pid": self.pid,
            "pgid": self.keeper,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "restarts": self.restarts,
            "attempt": self.attempt,
            "started": self.started,
            "ended": self.ended,
        }


class Supervisor:
    """Owns the replicas of one run; see the module docstring."""

    def __init__(self, run_dir: str, cwd: str) -> None:
        self.run_dir = run_dir
        self.cwd = cwd
        self.plan = read_json(os.path.join(run_dir, PLAN_FILE))
        opts = self.plan.get("options", {})
        self.grace = float(opts.get("grace_period", 10.0))
        self.roles = self.plan["roles"]
        self.replicas = [
            _Replica(role["name"], spec) for role in self.roles for spec in role["replicas"]
        ]
        self.role_restarts = {role["name"]: 0 for role in self.roles}
        self.app_restarts = 0
        self.final: tuple[str, str] | None = None  # (state, msg) once decided
        self.stopping: dict[int, float] = {}  # keeper pid -> time SIGTERM was sent
        self.escalated: set[int] = set()
        self.restart_when_stopped: list[_Replica] = []
        self.cancel_requested = False
        self.created = time.time()
        self.last_written: Any = None
        self.write_error = ""
        self.written_key: tuple[int, int, int] | None = None
        self.write_errno = 0
        self.msg = ""
        #: (log path, records) of output the keepers could not write, kept in memory
        #: until there is room for it (at the latest, the reserve's at the end).
        self.pending_tails: list[tuple[str, bytes]] = []
        self.reserve_size = _RESERVE_BASE + _RESERVE_PER_REPLICA * len(self.replicas)

    # state file

    def _state(self) -> dict[str, Any]:
        state, msg = self._app_state()
        return {
            "version": SCHEMA_VERSION,
            "app_id": self.plan["app_id"],
            "app_name": self.plan["app_name"],
            "state": state,
            "msg": msg,
            "supervisor": {"pid": os.getpid(), "starttime": process_starttime(os.getpid())},
            "created": self.created,
            "num_restarts": self.app_restarts + sum(self.role_restarts.values()),
            "roles": [
                {
                    "role": role["name"],
                    "replicas": [r.to_dict() for r in self.replicas if r.role == role["name"]],
                }
                for role in self.roles
            ],
        }

    def _app_state(self) -> tuple[str, str]:
        state, msg = self._app_state_alone()
        lost = [r for r in self.replicas if r.lost]
        if lost:
            # Said in the run's message too: `status` prints it on its first line.
            total = sum(r.lost for r in lost)
            who = ", ".join(f"{r.role}/{r.id}" for r in lost[:3]) + (", ..." if lost[3:] else "")
            note = (
                f"logs truncated: {_size(total)} of output not written ({lost[-1].lost_error}; "
                f"{who})"
            )
            msg = f"{msg}; {note}" if msg else note
        return state, msg

    def _app_state_alone(self) -> tuple[str, str]:
        if self.final is not None and not any(r.live for r in self.replicas):
            return self.final
        if self.final is not None:
            return "RUNNING", f"stopping: {self.final[1]}"
        if all(r.state == "SUCCEEDED" for r in self.replicas):
            return "SUCCEEDED", ""
        if any(r.state == "RUNNING" for r in self.replicas):
            return "RUNNING", self.msg
        return "PENDING", self.msg

    def write_state(self, *, ended: bool = False) -> bool:
        """Record the state; False (and retried on the next wake-up) if it cannot be
        written. A deleted run directory is created again, with ``plan.json``, so the
        run stays reachable (``status``, ``wait``, ``cancel``)."""
        data = self._state()
        if ended:
            data["ended"] = time.time()
        path = os.path.join(self.run_dir, STATE_FILE)
        if data == self.last_written and _file_key(path) == self.written_key:
            return True  # unchanged, and nobody deleted, truncated or replaced it
        try:
            if not os.path.isdir(self.run_dir):
                os.makedirs(os.path.join(self.run_dir, "logs"), mode=0o700, exist_ok=True)
            if not os.path.exists(os.path.join(self.run_dir, PLAN_FILE)):
                write_json_atomic(os.path.join(self.run_dir, PLAN_FILE), self.plan)
            write_json_atomic(path, data)
            self.written_key = _file_key(path)
        except OSError as e:
            self.write_error = f"cannot write {STATE_FILE}: {os_error_text(e)}"
            self.write_errno = e.errno or 0
            self.last_written = None
            return False
        self.write_error = ""
        self.write_errno = 0
        self.last_written = data
        return True

    def flush_tails(self) -> None:
        """Append the output keepers could not write to its logs, where there is room:
        a note on what was lost, then its last records (so `log` and the failure
        report quote the rank's last lines, traceback included)."""
        left = []
        for path, data in self.pending_tails:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            except OSError:
                left.append((path, data))
                continue
            try:
                if _append(fd, data):
                    left.append((path, data))
            finally:
                os.close(fd)
        self.pending_tails = left

    def write_final(self) -> bool:
        """Record the final state (and the lost output's last lines). On a full disk
        the reserve set aside at the start is freed for it: the run's true end is
        recorded now, whoever filled the disk (usually the job's own output)."""
        self.flush_tails()
        if self.write_state(ended=True):
            return True
        if self.write_errno in (errno.ENOSPC, errno.EDQUOT) and release_reserve(self.run_dir):
            self.flush_tails()
            return self.write_state(ended=True)
        return False

    # lifecycle

    def start(self, replica: _Replica, msg_w: int, wake: list[int]) -> None:
        replica.attempt += 1
        replica.state = "RUNNING"
        replica.exit_code = None
        replica.reason = ""
        replica.result = None
        replica.pid = None
        replica.started = time.time()
        replica.ended = None
        spec = dict(replica.spec)
        spec["role"] = replica.role
        spec["cwd"] = spec.get("cwd") or self.cwd
        if spec.get("prepend_cwd"):
            spec["path_prepend"] = spec["cwd"]
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            for fd in wake:
                os.close(fd)
            _Keeper(self.run_dir, spec, replica.attempt, msg_w, me).main()
        replica.keeper = pid

    def stop(self, replicas: list[_Replica]) -> None:
        """SIGTERM each live replica's process group; escalate after the grace period."""
        now = time.monotonic()
        for r in replicas:
            if r.keeper is not None and r.keeper not in self.stopping:
                self.stopping[r.keeper] = now
                _killpg(r.keeper, signal.SIGTERM)

    def next_deadline(self) -> float | None:
        times = []
        for keeper, since in self.stopping.items():
            times.append(since + self.grace + (_KEEPER_TIMEOUT if keeper in self.escalated else 0))
        return min(times) if times else None

    def escalate(self) -> None:
        now = time.monotonic()
        for keeper, since in list(self.stopping.items()):
            if keeper not in self.escalated and now >= since + self.grace:
                self.escalated.add(keeper)
                _kill(keeper, signal.SIGUSR1)  # the keeper kills its whole tree
            elif keeper in self.escalated and now >= since + self.grace + _KEEPER_TIMEOUT:
                _killpg(keeper, signal.SIGKILL)  # an unresponsive keeper

    def on_exit(self, replica: _Replica, status: int, msg_w: int, wake: list[int]) -> None:
        keeper = replica.keeper
        assert keeper is not None
        replica.keeper = None
        self.stopping.pop(keeper, None)
        self.escalated.discard(keeper)
        replica.ended = time.time()
        result = replica.result
        if result is None:
            # The keeper itself died: its orphans came back to us (subreaper).
            rc = os.waitstatus_to_exitcode(status)
            live = {r.keeper for r in self.replicas if r.keeper is not None}
            _kill_tree(live, self.reaped)
            result = {
                "returncode": rc,
                "exit_code": exit_code_of(rc),
                "reason": f"replica keeper ended unexpectedly ({_describe_rc(rc)})",
            }
        rc = int(result.get("returncode", 1))
        replica.exit_code = int(result.get("exit_code", exit_code_of(rc)))
        replica.reason = str(result.get("reason", ""))
        lost = int(result.get("lost") or 0)
        if lost:
            replica.lost += lost
            replica.lost_error = str(result.get("lost_error", ""))
        unwritten = int(result.get("unwritten") or 0)
        if unwritten:
            note = lost_note(unwritten, replica.lost_error)
            tail = "".join(f"{line}\n" for line in result.get("tail") or ())
            log = os.path.join(self.run_dir, replica.spec["log"])
            self.pending_tails.append((log, note + tail.encode("utf-8", "replace")))
            self.flush_tails()
        if replica.lost_note:
            replica.reason = (
                f"{replica.reason}; {replica.lost_note}" if replica.reason else (replica.lost_note)
            )
        if self.final is not None:
            if rc == 0:
                replica.state = "SUCCEEDED"
            else:
                replica.state = "CANCELLED" if replica.state != "FAILED" else "FAILED"
                replica.reason = replica.reason or f"stopped: {self.final[1]}"
            return
        if replica in self.restart_when_stopped:
            replica.state = "PENDING"
            self._maybe_restart_group(msg_w, wake)
            return
        if rc == 0:
            replica.state = "SUCCEEDED"
            return
        self._on_failure(replica, msg_w, wake)

    def _on_failure(self, replica: _Replica, msg_w: int, wake: list[int]) -> None:
        role = next(r for r in self.roles if r["name"] == replica.role)
        policy, max_retries = role.get("retry_policy", "application"), role.get("max_retries", 0)
        what = f"{replica.role}/{replica.id} exited with {replica.exit_code}"
        if policy == "replica" and replica.restarts < max_retries:
            replica.restarts += 1
            self.msg = f"restarted {replica.role}/{replica.id} after: {what}"
            self.start(replica, msg_w, wake)
            return
        group: list[_Replica] = []
        if policy == "role" and self.role_restarts[replica.role] < max_retries:
            self.role_restarts[replica.role] += 1
            group = [r for r in self.replicas if r.role == replica.role]
        elif policy == "application" and self.app_restarts < max_retries:
            self.app_restarts += 1
            group = list(self.replicas)
        if group:
            self.msg = f"restarting {policy} after: {what}"
            replica.state = "PENDING"
            self.restart_when_stopped = group
            self.stop([r for r in group if r.live])
            self._maybe_restart_group(msg_w, wake)
            return
        replica.state = "FAILED"
        self.final = ("FAILED", what)
        self.stop([r for r in self.replicas if r.live])

    def _maybe_restart_group(self, msg_w: int, wake: list[int]) -> None:
        group = self.restart_when_stopped
        if any(r.live for r in group):
            return
        self.restart_when_stopped = []
        for r in group:
            r.restarts += 1
            self.start(r, msg_w, wake)

    def cancel(self) -> None:
        if self.final is None:
            self.final = ("CANCELLED", "cancel requested")
        self.stop([r for r in self.replicas if r.live])

    def run(self, ready_fd: int | None) -> int:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        wake_r, wake_w = os.pipe()
        msg_r, msg_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        os.set_blocking(msg_r, False)
        signal.set_wakeup_fd(wake_w)

        def on_term(signum: int, frame: Any) -> None:
            self.cancel_requested = True

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, on_term)
        signal.signal(signal.SIGCHLD, lambda s, f: None)
        wake = [wake_r, wake_w, msg_r]
        alive = _open_alive_fifo(os.path.join(self.run_dir, ALIVE_FIFO))
        _make_reserve(os.path.join(self.run_dir, RESERVE_FILE), self.reserve_size)
        if alive is not None:
            wake.append(alive)  # keepers close it: only the supervisor holds it open
        if ready_fd is not None:
            os.set_inheritable(ready_fd, False)
            wake.append(ready_fd)
        self.reaped: dict[int, int] = {}
        for r in self.replicas:
            self.start(r, msg_w, wake)
        recorded = self.write_state()
        if ready_fd is not None:
            try:
                os.write(ready_fd, b"ok\n" if recorded else f"error: {self.write_error}\n".encode())
            except OSError:
                # The submitter is gone (Ctrl-C): it kills this run and removes its
                # directory unless it read "ok"; never crash on it (BrokenPipeError).
                pass
            finally:
                os.close(ready_fd)
                wake.remove(ready_fd)
            if not recorded:
                # A run without a record could be neither followed nor cancelled: the
                # submitter, told why, removes its directory; nothing of it is left.
                _kill_tree(set(), self.reaped)
                release_reserve(self.run_dir)
                if alive is not None:
                    os.close(alive)
                return 1

        poller = select.poll()
        poller.register(wake_r, select.POLLIN)
        poller.register(msg_r, select.POLLIN)
        pending = b""
        by_keeper: dict[int, _Replica] = {}
        while True:
            deadline = self.next_deadline()
            timeout = None if deadline is None else max(0, (deadline - time.monotonic()) * 1000)
            # Wake up now and then to retry a failed state write and to notice a
            # deleted run directory (write_state recreates it).
            timeout = _STATE_RETRY * 1000 if timeout is None else min(timeout, _STATE_RETRY * 1000)
            poller.poll(timeout)
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            _reap(self.reaped)
            try:
                while True:
                    chunk = os.read(msg_r, 65536)
                    if not chunk:
                        break
                    pending += chunk
            except BlockingIOError:
                pass
            by_keeper = {r.keeper: r for r in self.replicas if r.keeper is not None}
            *lines, pending = pending.split(b"\n")
            for line in lines:
                try:
                    msg = json.loads(line)
                except ValueError:
                    _say(f"unreadable message from a keeper: {line[:200]!r}")
                    continue
                target = by_keeper.get(msg.get("keeper"))
                if target is None:
                    continue
                if msg["t"] == "started":
                    target.pid = msg["pid"]
                elif msg["t"] == "exit":
                    target.result = msg
            for keeper, status in list(self.reaped.items()):
                target = by_keeper.get(keeper)
                del self.reaped[keeper]
                if target is not None:
                    self.on_exit(target, status, msg_w, wake)
            if self.cancel_requested:
                self.cancel()
            self.escalate()
            done = self.final is not None or all(r.state == "SUCCEEDED" for r in self.replicas)
            if done and not any(r.live for r in self.replicas):
                break
            self.write_state()
        _kill_tree(set(), self.reaped)
        for r in self.replicas:
            if r.state not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                r.state = "CANCELLED"
                r.reason = r.reason or "never restarted"
        # The final state must be recorded: a job that succeeded on a disk that filled
        # up meanwhile is not to be reported "supervisor died". Retry until it can
        # (space freed, directory writable again), cancellable by SIGKILL only.
        give_up = time.monotonic() + _FINAL_WRITE_PATIENCE
        while not self.write_final() and time.monotonic() < give_up:
            _say(f"{self.write_error}; retrying")
            time.sleep(_STATE_RETRY)
        if self.write_error:
            _say(self.write_error)
        release_reserve(self.run_dir)
        if alive is not None:
            os.close(alive)  # wakes every waiter now, not at the end of interpreter exit
        return 0


def _open_alive_fifo(path: str) -> int | None:
    """Create ``path`` as a FIFO and open it for writing (close-on-exec); None where
    the file system has no FIFOs (waiters then poll)."""
    try:
        try:
            os.mkfifo(path, 0o600)
        except FileExistsError:
            pass
        # O_RDWR: opening a FIFO for writing alone would block until a reader comes.
        return os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None


def _say(text: str) -> None:
    """A line to ``supervisor.log``, which may be on a full or read-only disk."""
    try:
        print(f"local_supervisor: {text}", file=sys.stderr, flush=True)
    except OSError:
        pass


def lost_note(size: int, error: str) -> bytes:
    """The log record that marks where output was lost."""
    return (
        f"{time.time():.6f} D distspec: {_size(size)} of output could not be written to this "
        f"log ({error}); its last lines, kept in memory:\n"
    ).encode()


def _size(n: int) -> str:
    """``812 bytes``, ``3.9 MiB``."""
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _describe_rc(rc: int) -> str:
    return f"killed by {_signal_name(-rc)}" if rc < 0 else f"exit code {rc}"


def main(argv: list[str] | None = None) -> int:
    """``local_supervisor.py [--ready-fd N] [--foreground] [--cwd DIR] RUN_DIR``."""
    args = list(sys.argv[1:] if argv is None else argv)
    ready_fd: int | None = None
    foreground = False
    cwd = os.getcwd()
    while args and args[0].startswith("--"):
        flag = args.pop(0)
        if flag == "--ready-fd":
            ready_fd = int(args.pop(0))
        elif flag == "--foreground":
            foreground = True
        elif flag == "--cwd":
            cwd = os.path.abspath(args.pop(0))
        else:
            print(f"local_supervisor: unknown flag {flag}", file=sys.stderr)
            return 2
    if len(args) != 1:
        print("usage: local_supervisor.py [--foreground] [--cwd DIR] RUN_DIR", file=sys.stderr)
        return 2
    run_dir = os.path.abspath(args[0])
    if not foreground:
        _close_inherited(ready_fd)
    # Detach: the submitting process waits for this first process (no zombie left
    # behind) while the real supervisor is re-parented away from it.
    if not foreground and os.fork() != 0:
        os._exit(0)
    os.makedirs(os.path.join(run_dir, "logs"), mode=0o700, exist_ok=True)
    sup = Supervisor(run_dir, cwd)
    if foreground:
        print(f"{sup.plan['app_id']}: supervising in {run_dir}", file=sys.stderr)
    rc = sup.run(ready_fd)
    if foreground:
        state = read_json(os.path.join(run_dir, STATE_FILE))
        print(f"{state['app_id']}: {state['state']} {state['msg']}".rstrip(), file=sys.stderr)
        return 0 if state["state"] == "SUCCEEDED" else 1
    return rc


def _close_inherited(keep: int | None) -> None:
    """Close every descriptor above 2 except ``keep``: the supervisor lives as long as
    the job and must not hold open a pipe its launcher's caller passed on."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the descriptor listdir itself used


def entry(argv: list[str] | None = None) -> None:
    """Run :func:`main` and exit with its code (see :data:`SUPERVISOR_MAIN`)."""
    try:
        code = main(argv)
    except OSError as e:
        if e.errno != errno.EINTR:
            raise
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    entry()
