"""The detached supervisor of one ``local_cwd`` run: it starts each replica under a
keeper (:mod:`.keeper`), restarts by the roles' retry policies, and records the run
in ``state.json``.

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
last line of defence (:func:`.processes.hunt`) kills by that marker.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import sys
import time

from distspec._files import write_atomic
from distspec.schedulers.local.exits import describe_rc
from distspec.schedulers.local.files import (
    ALIVE_FIFO,
    PLAN_FILE,
    RESERVE_FILE,
    STATE_FILE,
    append,
    file_key,
    make_reserve,
    open_alive_fifo,
    os_error_text,
    read_json,
    release_reserve,
    write_json_atomic,
)
from distspec.schedulers.local.keeper import Keeper, lost_note, size_text
from distspec.schedulers.local.processes import (
    PR_SET_CHILD_SUBREAPER,
    kill,
    kill_tree,
    killpg,
    prctl,
    process_starttime,
    reap,
)
from distspec.schedulers.local.replica import Replica
from distspec.torchrun_output import exit_code_of

# The idiom mypy understands without importing typing (~4 ms of the supervisor's start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "PACKAGE_ROOT",
    "SCHEMA_VERSION",
    "SUPERVISOR_MAIN",
    "Supervisor",
    "entry",
    "main",
]

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
#: The space set aside in RESERVE_FILE: enough for the final record of a run of this
#: many replicas and the notes on their lost output.
_RESERVE_BASE = 256 << 10
_RESERVE_PER_REPLICA = 8 << 10
#: Escalation after the grace period when a keeper did not end its replica itself.
_KEEPER_TIMEOUT = 5.0
#: While a state write fails (full disk, read-only or deleted run directory), the
#: supervisor retries this often, and checks that its state file still exists.
_STATE_RETRY = 1.0
#: How long the supervisor waits, retrying, to record the final state before exiting
#: without it (readers then report "supervisor died: ..." with the write error).
_FINAL_WRITE_PATIENCE = 3600.0


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
            Replica(role["name"], spec) for role in self.roles for spec in role["replicas"]
        ]
        self.role_restarts = {role["name"]: 0 for role in self.roles}
        self.app_restarts = 0
        self.final: tuple[str, str] | None = None  # (state, msg) once decided
        self.stopping: dict[int, float] = {}  # keeper pid -> time SIGTERM was sent
        self.escalated: set[int] = set()
        self.restart_when_stopped: list[Replica] = []
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
                f"logs truncated: {size_text(total)} of output not written ({lost[-1].lost_error}; "
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
        if data == self.last_written and file_key(path) == self.written_key:
            return True  # unchanged, and nobody deleted, truncated or replaced it
        try:
            if not os.path.isdir(self.run_dir):
                os.makedirs(os.path.join(self.run_dir, "logs"), mode=0o700, exist_ok=True)
            if not os.path.exists(os.path.join(self.run_dir, PLAN_FILE)):
                write_json_atomic(os.path.join(self.run_dir, PLAN_FILE), self.plan)
            write_json_atomic(path, data)
            self.written_key = file_key(path)
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
                if append(fd, data):
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

    def start(self, replica: Replica, msg_w: int, wake: list[int]) -> None:
        """Start a new attempt of ``replica``: fork its keeper, which leads the attempt's process
        group and starts its command."""
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
        # Which start of the replica this is, for distspec.runtime's `attempt`.
        spec["env"] = {**spec.get("env", {}), "DISTSPEC_ATTEMPT": str(replica.attempt - 1)}
        spec["cwd"] = spec.get("cwd") or self.cwd
        if spec.get("prepend_cwd"):
            spec["path_prepend"] = spec["cwd"]
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            for fd in wake:
                os.close(fd)
            Keeper(msg_w, me).main(self.run_dir, spec, replica.attempt)
        replica.keeper = pid

    def stop(self, replicas: list[Replica]) -> None:
        """SIGTERM each live replica's process group; escalate after the grace period."""
        now = time.monotonic()
        for r in replicas:
            if r.keeper is not None and r.keeper not in self.stopping:
                self.stopping[r.keeper] = now
                killpg(r.keeper, signal.SIGTERM)

    def next_deadline(self) -> float | None:
        """When (monotonic time) a stopping replica is next due an escalation, or None when none is
        stopping."""
        times = []
        for keeper, since in self.stopping.items():
            times.append(since + self.grace + (_KEEPER_TIMEOUT if keeper in self.escalated else 0))
        return min(times) if times else None

    def escalate(self) -> None:
        """After the grace period, ask a stopping replica's keeper to kill its whole tree (SIGUSR1);
        if the keeper does not end either, SIGKILL its process group."""
        now = time.monotonic()
        for keeper, since in list(self.stopping.items()):
            if keeper not in self.escalated and now >= since + self.grace:
                self.escalated.add(keeper)
                kill(keeper, signal.SIGUSR1)  # the keeper kills its whole tree
            elif keeper in self.escalated and now >= since + self.grace + _KEEPER_TIMEOUT:
                killpg(keeper, signal.SIGKILL)  # an unresponsive keeper

    def on_exit(self, replica: Replica, status: int, msg_w: int, wake: list[int]) -> None:
        """Record that ``replica``'s keeper ended (``status`` as waitpid gives it) and decide what
        follows: success, a restart, or the failure of the run."""
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
            kill_tree(live, self.reaped)
            result = {
                "returncode": rc,
                "exit_code": exit_code_of(rc),
                "reason": f"replica keeper ended unexpectedly ({describe_rc(rc)})",
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

    def _on_failure(self, replica: Replica, msg_w: int, wake: list[int]) -> None:
        role = next(r for r in self.roles if r["name"] == replica.role)
        policy, max_retries = role.get("retry_policy", "application"), role.get("max_retries", 0)
        what = f"{replica.role}/{replica.id} exited with {replica.exit_code}"
        if policy == "replica" and replica.restarts < max_retries:
            replica.restarts += 1
            self._write_restart_reason(replica)
            self.msg = f"restarted {replica.role}/{replica.id} after: {what}"
            self.start(replica, msg_w, wake)
            return
        group: list[Replica] = []
        if policy == "role" and self.role_restarts[replica.role] < max_retries:
            self.role_restarts[replica.role] += 1
            group = [r for r in self.replicas if r.role == replica.role]
        elif policy == "application" and self.app_restarts < max_retries:
            self.app_restarts += 1
            group = list(self.replicas)
        if group:
            self.msg = f"restarting {policy} after: {what}"
            self._write_restart_reason(replica)
            replica.state = "PENDING"
            self.restart_when_stopped = group
            self.stop([r for r in group if r.live])
            self._maybe_restart_group(msg_w, wake)
            return
        replica.state = "FAILED"
        self.final = ("FAILED", what)
        self.stop([r for r in self.replicas if r.live])

    def _write_restart_reason(self, failed: Replica) -> None:
        """Say why the next attempt runs, in ``restart_reason`` (for distspec.runtime's
        ``restart_reason``): ``hang`` when the hang watchdog's ``hang/hung`` mark is newer
        than the failed attempt's start, else ``failed-rank``."""
        try:
            hung = os.stat(os.path.join(self.run_dir, "hang", "hung")).st_mtime
        except OSError:
            hung = None
        reason = "hang" if hung is not None and hung >= (failed.started or 0.0) else "failed-rank"
        try:
            write_atomic(os.path.join(self.run_dir, "restart_reason"), f"{reason}\n".encode())
        except OSError:
            pass  # informational: a restart goes ahead without it

    def _maybe_restart_group(self, msg_w: int, wake: list[int]) -> None:
        group = self.restart_when_stopped
        if any(r.live for r in group):
            return
        self.restart_when_stopped = []
        for r in group:
            r.restarts += 1
            self.start(r, msg_w, wake)

    def cancel(self) -> None:
        """Stop every live replica; the run ends CANCELLED unless its outcome was decided before."""
        if self.final is None:
            self.final = ("CANCELLED", "cancel requested")
        self.stop([r for r in self.replicas if r.live])

    def run(self, ready_fd: int | None) -> int:
        """Start every replica, supervise them until the run has ended and write its final state;
        the exit code (1 when the first state could not be written, as told on ``ready_fd``).

        A run with dependencies (the plan's ``after``) answers ``ready_fd`` as soon as
        its first state says what it waits for, then starts its replicas once every
        dependency has ended as its condition asks, or ends CANCELLED without starting
        any (a dependency that did not, or a cancel meanwhile)."""
        prctl(PR_SET_CHILD_SUBREAPER, 1)
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
        alive = open_alive_fifo(os.path.join(self.run_dir, ALIVE_FIFO))
        make_reserve(os.path.join(self.run_dir, RESERVE_FILE), self.reserve_size)
        if alive is not None:
            wake.append(alive)  # keepers close it: only the supervisor holds it open
        if ready_fd is not None:
            os.set_inheritable(ready_fd, False)
            wake.append(ready_fd)
        self.reaped: dict[int, int] = {}
        # run --after: nothing starts before every dependency has ended as asked; the
        # submitter is answered at once, with the run PENDING ("waiting for ...").
        deps = self._dependencies()
        outcome = "go"
        if deps:
            outcome, self.msg = _verdict(deps)
            if outcome != "wait":
                for dep in deps:
                    dep.close()  # no descriptor of theirs goes to the keepers
        if outcome == "never":
            self._never_start(self.msg)
        elif outcome == "go":
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
                kill_tree(set(), self.reaped)
                release_reserve(self.run_dir)
                for dep in deps:
                    dep.close()
                if alive is not None:
                    os.close(alive)
                return 1
        if outcome == "wait":
            outcome = self._await(deps, wake_r)
            if outcome == "go":
                for r in self.replicas:
                    self.start(r, msg_w, wake)
                self.write_state()
        if outcome == "go":
            self._supervise(wake_r, msg_r, msg_w, wake)
        return self._finish(alive)

    def _dependencies(self) -> list[Any]:
        """The plan's ``after`` as :class:`.dependencies.Dependency` objects (that
        module is imported only for a run that has some)."""
        specs = self.plan.get("after") or ()
        if not specs:
            return []
        from distspec.schedulers.local.dependencies import Dependency

        return [Dependency(spec, self.run_dir) for spec in specs]

    def _await(self, deps: list[Any], wake_r: int) -> str:
        """Wait until every dependency has ended (:mod:`.dependencies`), the state file
        saying what for; ``"go"`` when each met its condition, ``"never"`` when one did
        not, ``"cancel"`` on a cancel. The run's outcome is decided for the last two."""
        from distspec.schedulers.local.dependencies import POLL_INTERVAL, SAFETY_INTERVAL

        try:
            while True:
                poller = select.poll()
                poller.register(wake_r, select.POLLIN)
                fifos = {d.fifo: d for d in deps if d.end is None and d.fifo is not None}
                for fd in fifos:
                    poller.register(fd, select.POLLIN)
                blind = any(d.end is None and d.fifo is None for d in deps)
                timeout = POLL_INTERVAL if blind or self.write_error else SAFETY_INTERVAL
                for fd, _ in poller.poll(timeout * 1000):
                    if fd in fifos:
                        # Hung up (the dependency ended or its supervisor died), or
                        # written to against the protocol: read its state from now on.
                        fifos[fd].close()
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                if self.cancel_requested:
                    self.final = ("CANCELLED", "cancel requested")
                    for r in self.replicas:
                        r.state, r.reason = "CANCELLED", "cancelled before it started"
                    self.msg = ""
                    return "cancel"
                outcome, self.msg = _verdict(deps)
                if outcome == "never":
                    self._never_start(self.msg)
                if outcome != "wait":
                    return outcome
                self.write_state()
        finally:
            for dep in deps:
                dep.close()

    def _never_start(self, msg: str) -> None:
        """End the run before it started anything: a dependency ended in a way that
        does not meet its condition (Slurm cancels such a job, ``--kill-on-invalid-dep``)."""
        self.final = ("CANCELLED", msg)
        self.msg = ""
        for r in self.replicas:
            r.state, r.reason = "CANCELLED", msg

    def _supervise(self, wake_r: int, msg_r: int, msg_w: int, wake: list[int]) -> None:
        """Follow the replicas until the run has ended and none is left alive."""
        poller = select.poll()
        poller.register(wake_r, select.POLLIN)
        poller.register(msg_r, select.POLLIN)
        pending = b""
        by_keeper: dict[int, Replica] = {}
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
            reap(self.reaped)
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

    def _finish(self, alive: int | None) -> int:
        """Record the final state (retrying while it cannot be written), then hang up
        ``alive.fifo``; the exit code."""
        kill_tree(set(), self.reaped)
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


def _verdict(deps: list[Any]) -> tuple[str, str]:
    from distspec.schedulers.local.dependencies import verdict

    return verdict(deps)


def _say(text: str) -> None:
    """A line to ``supervisor.log``, which may be on a full or read-only disk."""
    try:
        print(f"local_supervisor: {text}", file=sys.stderr, flush=True)
    except OSError:
        pass


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
