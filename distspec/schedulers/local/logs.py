"""Reading a replica's combined log (``logs/<role>-<replica>.log``), one record a line,
``<unix time> <O|E|D> <text>`` (stdout, stderr, or a ``distspec:`` note of the keeper
or the supervisor): in bounded pieces, and followed until the replica has ended.
"""

from __future__ import annotations

import os

from distspec.errors import SchedulerError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path
    from typing import Any

__all__ = ["FOLLOW_INTERVAL", "LOG_CHUNK", "log_lines", "parse_log_line", "read_chunk"]

#: How often ``log --follow`` looks for new lines.
FOLLOW_INTERVAL = 0.05
#: How much of a log is read at once.
LOG_CHUNK = 4 << 20


def log_lines(
    path: Path,
    *,
    read: Callable[[int], bytes],
    since: float | None,
    done: Callable[[], bool] | None,
    alive_fifo: Path | None,
) -> Iterator[str]:
    """The text of the records of the log at ``path`` (from ``since``, a POSIX time),
    each chunk from ``read(position)``. Without ``done``, what is there now; with it,
    followed until ``done()`` says the replica has ended, then drained.

    While following, it pauses on the supervisor's ``alive_fifo`` rather than
    sleeping: its hang-up at the end of the run wakes the reader at once for its
    last read.
    """
    import select

    from distspec.schedulers.local.files import open_alive

    alive = open_alive(alive_fifo) if alive_fifo is not None else None
    poller = select.poll()
    if alive is not None:
        poller.register(alive, select.POLLIN)
    try:
        yield from _follow(read, since, done, alive, poller)
    finally:
        if alive is not None:
            os.close(alive)


def _follow(
    read: Callable[[int], bytes],
    since: float | None,
    done: Callable[[], bool] | None,
    alive: int | None,
    poller: Any,
) -> Iterator[str]:
    import time

    pending = b""
    pos = 0
    while True:
        # Read the state before the file: lines written before a terminal state
        # are then certain to be read below.
        ended = done is None or done()
        while True:  # in bounded pieces: a log may be larger than memory
            chunk = read(pos)
            pos += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                parsed = parse_log_line(raw)
                if parsed is not None and (since is None or parsed[0] >= since):
                    yield parsed[1]
            if len(pending) > LOG_CHUNK:  # no line ends in sight: not a log
                pending = b""
            if len(chunk) < LOG_CHUNK:
                break
        if ended:
            return
        if alive is None:
            time.sleep(FOLLOW_INTERVAL)
        elif poller.poll(FOLLOW_INTERVAL * 1000):
            poller.unregister(alive)  # hung up: the run has ended (or its supervisor)
            alive = None


def read_chunk(path: Path, pos: int, app_id: str, scheduler: str) -> bytes:
    """Up to :data:`LOG_CHUNK` bytes of the log at ``path`` from ``pos`` (b'' when
    it does not exist yet); a FIFO or a device there is an error, not a hang."""
    from distspec.schedulers.local.files import not_regular, os_error_text

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    except OSError as e:
        raise SchedulerError(
            f"the log of {app_id} ({path}) is unreadable: {os_error_text(e)}",
            scheduler=scheduler,
        ) from None
    try:
        problem = not_regular(os.fstat(fd).st_mode)
        if problem is not None:
            raise SchedulerError(
                f"the log of {app_id} ({path}) is unreadable: {problem.strerror}",
                scheduler=scheduler,
            )
        return os.pread(fd, LOG_CHUNK, pos)
    finally:
        os.close(fd)


def parse_log_line(raw: bytes) -> tuple[float, str] | None:
    """``(time, text)`` of one record, or None for a line that is not one."""
    stamp, _, rest = raw.partition(b" ")
    tag, _, text = rest.partition(b" ")
    try:
        when = float(stamp)
    except ValueError:
        return None
    if tag not in (b"O", b"E", b"D"):
        return None
    return when, text.decode("utf-8", "replace")
