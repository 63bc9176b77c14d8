"""The processes of a run, seen through ``/proc``: who is alive, who descends from
whom, and how to kill all of them.

Every process of a run carries :data:`APP_ID_ENV` in its environment; :func:`hunt`
kills by that marker when nothing else is left to ask (the supervisor gone). Linux
only (``/proc``, ``prctl``); standard library only: the supervisor imports it.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = [
    "APP_ID_ENV",
    "PR_SET_CHILD_SUBREAPER",
    "PR_SET_PDEATHSIG",
    "descendants",
    "find_supervisor",
    "hunt",
    "is_alive",
    "kill",
    "kill_tree",
    "killpg",
    "prctl",
    "process_starttime",
    "reap",
]

#: Every process of a run has this variable set to the app id.
APP_ID_ENV = "DISTSPEC_APP_ID"
#: What the command line of a supervisor (and of its keepers, forks of it) contains:
#: its module's name, or the old one of a run started before the package existed.
_COMMAND_MARKS = (b"distspec.schedulers.local.supervisor", b"local_supervisor")
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def find_supervisor(app_id: str) -> int | None:
    """The pid of the live supervisor of ``app_id``, found by the :data:`APP_ID_ENV`
    marker every process of a run carries, or None. Works when the run directory is
    gone.

    Keepers are forks of the supervisor with the same command line; the supervisor is
    the one whose parent is not one of them."""
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


def descendants(root: int, exclude: set[int] | None = None) -> list[int]:
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


def kill(pid: int, sig: int) -> None:
    """``os.kill``, where a process that is gone or not the user's is no error."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def killpg(pgid: int, sig: int) -> None:
    """``os.killpg``, where a group that is gone or not the user's is no error."""
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
            kill(int(name), sig)
            hit.append(int(name))
    return hit


def prctl(option: int, value: int) -> None:
    """Linux's ``prctl(option, value)``, through libc; OSError when it fails."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def reap(pids: dict[int, int]) -> None:
    """Reap every exited child without blocking, recording ``pid -> wait status``."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        pids[pid] = status


def kill_tree(exclude: set[int], reaped: dict[int, int], limit: float = 10.0) -> None:
    """SIGKILL every descendant of this process (except the ``exclude`` subtrees) until
    none is left. Needs this process to be a subreaper so orphans come back to it."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        victims = descendants(os.getpid(), exclude)
        reap(reaped)
        if not victims:
            return
        for pid in victims:
            kill(pid, signal.SIGKILL)
        time.sleep(0.002)
        reap(reaped)
