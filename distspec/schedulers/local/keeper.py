"""One replica attempt, run by its *keeper*: a fork of the supervisor that starts the
replica's command, pumps its stdout and stderr into the run directory's logs, and
kills every process below it when the command ends, when the run is cancelled past
its grace period, or when the supervisor dies (see :mod:`.supervisor` for why).

The keeper reports to the supervisor on a pipe, one JSON line per message (each
below ``PIPE_BUF``, so written atomically): ``started`` with the command's pid, then
``exit`` with its return code, exit code, reason and an account of any output the
logs never got. Standard library only.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time

from distspec.schedulers.local.files import append, open_log
from distspec.schedulers.local.processes import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    kill_tree,
    prctl,
    reap,
)
from distspec.torchrun_output import (
    WORKER_EXEC_ENV,
    exit_code_of,
    signal_name,
    torchrun_root_cause,
)

# The idiom mypy understands without importing typing (~4 ms of the supervisor's start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["CombinedLog", "Keeper", "lost_note", "size_text"]

#: How many of the command's last lines are kept for torchrun's report: of stderr,
#: where torchrun writes it, and of both streams in the order read (the worker lines
#: before it, which with distspec's worker Python are on torchrun's stdout).
_TAIL_LINES = 400
_BOTH_TAIL_LINES = 1000
#: Of output that could not be written: how many of its last records a keeper keeps,
#: each cut to this size, and how much of them its exit message carries (the whole
#: message must stay below PIPE_BUF, 4096 bytes, to be written atomically).
_TAIL_RECORDS = 64
_TAIL_RECORD = 300
_TAIL_MESSAGE = 2600


class Keeper:
    """Runs one replica attempt in this (forked) process; :meth:`main` never returns.

    ``msg_fd`` is the pipe to the supervisor, whose pid is ``supervisor``.
    """

    #: Set on SIGUSR1 (the supervisor's "kill everything now", or its death): the
    #: command's whole tree is killed; ``reason`` says why.
    kill_now = False
    reason = ""

    def __init__(self, msg_fd: int, supervisor: int) -> None:
        self.msg_fd = msg_fd
        self.supervisor = supervisor

    def main(self, run_dir: str, replica: dict[str, Any], attempt: int) -> None:
        """Run ``replica`` (its plan entry, with ``role`` and ``cwd`` filled in) for the
        ``attempt``-th time, logging into ``run_dir``; exits the process."""
        code = 1
        try:
            code = self._run(run_dir, replica, attempt)
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

    def _run(self, run_dir: str, rep: dict[str, Any], attempt: int) -> int:
        os.setsid()
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_PDEATHSIG, signal.SIGUSR1)
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

        logs = {}
        unopened = ""
        for key in ("stdout", "stderr", "log"):
            logs[key], error = open_log(os.path.join(run_dir, rep[key]))
            if error and key == "log":
                unopened = error  # every record is lost
        log = CombinedLog(logs["log"], unopened)
        if attempt > 1:
            log.note(f"restart {attempt - 1}: {json.dumps(rep['argv'])}")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            child = _spawn(rep, out_w, err_w)
        except OSError as e:
            msg = f"cannot start {rep['argv'][0]!r}: {e.strerror or e}"
            log.note(msg)
            _write(logs["stderr"], f"distspec: {msg}\n".encode())
            self._send({"t": "exit", "returncode": 127, "reason": msg, **log.report()})
            return 127
        finally:
            os.close(out_w)
            os.close(err_w)
        self._send({"t": "started", "pid": child})
        status, tails = self._pump(child, wake_r, {out_r: "stdout", err_r: "stderr"}, logs, log)

        returncode = os.waitstatus_to_exitcode(status)
        reason = ""
        exit_code = exit_code_of(returncode)
        if returncode < 0:
            reason = f"killed by {signal_name(-returncode)}"
            if self.kill_now and self.reason:
                reason += f" ({self.reason})"
        elif returncode != 0:
            # Both streams first (the failed rank's last line comes from them); the
            # report alone when a flood of stdout read after it pushed it out.
            found = torchrun_root_cause(tails[1], rep["role"]) or torchrun_root_cause(
                tails[0], rep["role"]
            )
            if found is not None:
                exit_code, reason = found
                reason += f"; torchrun exited with {returncode}"
        if returncode != 0:
            log.note(f"exit code {exit_code}" + (f": {reason}" if reason else ""))
        self._send(
            {
                "t": "exit",
                "returncode": returncode,
                "exit_code": exit_code,
                "reason": reason,
                **log.report(),
            }
        )
        return 0

    def _pump(
        self,
        child: int,
        wake_r: int,
        streams: dict[int, str],
        logs: dict[str, int],
        log: CombinedLog,
    ) -> tuple[int, tuple[list[str], list[str]]]:
        """Copy the command's output (``streams``: read end -> ``stdout``/``stderr``)
        into its logs until it has exited and nothing of it holds a pipe open; kill
        its tree on SIGUSR1 and when it ends. Returns its wait status and its last
        lines: of stderr, and of both streams in the order read."""
        tail: list[str] = []
        both: list[str] = []
        partial = dict.fromkeys(streams, b"")
        tags = {"stdout": b"O", "stderr": b"E"}
        open_fds = set(streams)
        reaped: dict[int, int] = {}
        status: int | None = None
        poller = select.poll()
        for fd in (wake_r, *streams):
            poller.register(fd, select.POLLIN)
        while open_fds or status is None:
            if self.kill_now:
                kill_tree(set(), reaped)
            events = poller.poll(None if status is None or not open_fds else 1000)
            if not events and status is not None:
                # The command ended but something it left behind keeps a pipe open.
                kill_tree(set(), reaped)
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
                stream = streams[fd]
                tag = tags[stream]
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
                    log.write([now + tag + b" " + ln + b"\n" for ln in lines])
                    text = [ln.decode("utf-8", "replace") for ln in lines]
                    both.extend(text)
                    del both[:-_BOTH_TAIL_LINES]
                    if tag == b"E":
                        tail.extend(text)
                        del tail[:-_TAIL_LINES]
            reap(reaped)
            if status is None and child in reaped:
                status = reaped[child]
                # Whatever the command left behind dies with it.
                kill_tree(set(), reaped)
        kill_tree(set(), reaped)
        return status, (tail, both)


class CombinedLog:
    """A replica's combined log (``logs/<role>-<replica>.log``, one record a line),
    written whole records at a time. Output that cannot be written (a full disk, a
    log that could not be opened) is counted and its last records kept: they are
    written first once the log takes a write again, so it stays in order, and
    :meth:`report` sends the rest to the supervisor, which writes them once it has
    room."""

    #: Bytes of output the log never got, why the last write failed, and of them
    #: the bytes lost since the log last took a write.
    lost = 0
    error = ""
    unwritten = 0
    #: How many records were lost (numbers them, so the two tails merge in order).
    records = 0

    def __init__(self, fd: int, unopened: str = "") -> None:
        #: The log (opened O_APPEND), and why it could not be opened: then it is
        #: /dev/null and every record is lost.
        self.fd = fd
        self.unopened = unopened
        self.tail: list[tuple[int, bytes]] = []  # (sequence, record), any stream
        self.errors: list[tuple[int, bytes]] = []  # stderr and notes: the traceback

    def note(self, text: str) -> None:
        """A ``distspec:`` line of the keeper's own (a restart, an exit code)."""
        self.write([f"{time.time():.6f} D distspec: {text}\n".encode()])

    def write(self, records: list[bytes]) -> None:
        """Append records to the replica's log; what cannot be written is counted and
        its last records kept (the supervisor writes them once it has room)."""
        error = self.unopened
        if not error:
            data = b"".join(records)
            if self.tail:
                # Output was lost before these records: the note and the lost lines
                # kept come first, so the log stays in order.
                data = lost_note(self.unwritten, self.error) + self._tail_block() + data
            error = append(self.fd, data)
            if not error:
                self.tail.clear()
                self.errors.clear()
                self.unwritten = 0
                return
        size = sum(len(r) for r in records)
        self.lost += size
        self.unwritten += size
        self.error = error
        for record in records:
            self.records += 1
            kept = (self.records, record[:_TAIL_RECORD])
            self.tail.append(kept)
            if record.split(b" ", 2)[1:2] != [b"O"]:
                self.errors.append(kept)
        del self.tail[:-_TAIL_RECORDS]
        del self.errors[:-_TAIL_RECORDS]

    def _tail_block(self) -> bytes:
        return b"".join(r if r.endswith(b"\n") else r + b"\n" for _, r in self.tail)

    def report(self) -> dict[str, Any]:
        """The exit message's account of lost output: its size, why, and as many of
        the last records still not in the log as fit in one atomic pipe write."""
        if not self.lost:
            return {}
        # The last stderr lines first (stdout is read from another pipe, so a flood on
        # it may come after them), then the last lines of any kind, in their order.
        chosen: dict[int, str] = {}
        size = 0
        for kept, budget in (
            (self.errors, _TAIL_MESSAGE // 2),
            (self.tail, _TAIL_MESSAGE),
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
            "lost_error": self.error[:200],
            "unwritten": self.unwritten,
            "tail": tail,
        }


def _write(fd: int, data: bytes) -> None:
    """Append to a log; a full disk drops the output rather than failing the replica
    (the combined log, written by :meth:`CombinedLog.write`, accounts for it)."""
    append(fd, data)


def _spawn(rep: dict[str, Any], out_w: int, err_w: int) -> int:
    """fork + exec the replica's command; an exec failure is raised here as OSError."""
    env = dict(os.environ)
    env.update(rep["env"])
    worker = env.get(WORKER_EXEC_ENV, "")
    if rep.get("worker_exec") and "PYTHON_EXEC" not in env and os.access(worker, os.X_OK):
        # As worker_exec_line in the batch scripts: each worker's stderr joins its stdout.
        env["PYTHON_EXEC"] = worker
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
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
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


def lost_note(size: int, error: str) -> bytes:
    """The log record that marks where output was lost."""
    return (
        f"{time.time():.6f} D distspec: {size_text(size)} of output could not be written to this "
        f"log ({error}); its last lines, kept in memory:\n"
    ).encode()


def size_text(n: int) -> str:
    """``812 bytes``, ``3.9 MiB``."""
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
