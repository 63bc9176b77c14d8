"""The replicas' log files: their one naming rule, reading and following them, and
filtering their lines (``distspec log --regex/--tail``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from distspec.frozen import replace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from distspec.specs.state import AppStatus

__all__ = ["filter_lines", "log_file_name", "read_log_lines", "with_location"]


def log_file_name(role: str, replica: int | str, stream: str = "log") -> str:
    """The one naming rule for per-replica log files: ``<role>-<replica>.<stream>``."""
    return f"{role}-{replica}.{stream}"


def filter_lines(
    lines: Iterable[str],
    *,
    regex: str | None = None,
    tail: int | None = None,
) -> Iterator[str]:
    """Keep lines matching ``regex`` (searched anywhere), then only the last ``tail`` of them.

    With ``tail`` the input must end (no following); without it lines stream through.
    """
    pattern = re.compile(regex) if regex else None
    selected = (line for line in lines if pattern is None or pattern.search(line))
    if tail is None:
        yield from selected
        return
    if tail <= 0:
        return
    from collections import deque

    yield from deque(selected, maxlen=tail)


def with_location(status: AppStatus, folder: str | None, native_id: str) -> AppStatus:
    """``status`` with the job folder, the scheduler's own id and each replica's log
    path (``<folder>/<role>-<replica>.log``) filled in, for the batch backends."""
    import os

    if not folder:
        return replace(status, native_id=native_id)
    roles = tuple(
        replace(
            role,
            replicas=tuple(
                replace(r, log=os.path.join(folder, log_file_name(r.role, r.id)))
                for r in role.replicas
            ),
        )
        for role in status.roles
    )
    return replace(status, roles=roles, location=str(folder), native_id=native_id)


def read_log_lines(
    path: Path, *, follow: bool, ended: Callable[[], bool], poll: float = 0.5
) -> Iterator[str]:
    """The lines of a log file the job writes (without newlines).

    Without ``follow``: what is there now (nothing if the file does not exist yet).
    With ``follow``: wait for the file, then keep reading until ``ended()`` returns
    True, with one last pass for what was written before the end.
    """
    import time

    if not follow:
        if not path.exists():
            return
        with path.open(errors="replace") as f:
            for line in f:
                yield line.rstrip("\n")
        return
    while not path.exists():
        if ended():
            if path.exists():
                break
            return
        time.sleep(poll)
    with path.open(errors="replace") as f:
        partial = ""
        done = False
        while True:
            chunk = f.readline()
            if chunk:
                partial += chunk
                if partial.endswith("\n"):
                    yield partial.rstrip("\n")
                    partial = ""
                continue
            if done:
                if partial:
                    yield partial
                return
            if ended():
                done = True
                continue
            time.sleep(poll)
