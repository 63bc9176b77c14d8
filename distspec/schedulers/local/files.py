"""The run directory's files, and how they are read and written safely.

A run directory (``<state dir>/local_cwd/<app id>/``, see :mod:`distspec.schedulers.local`)
is shared by the supervisor, its keepers and every reader (``status``, ``wait``,
``log``, ``cancel``...). What is here never blocks on a FIFO or a device put where a
file should be, never reads a huge file into memory, never leaves a half-written
record, and tells a full disk apart (the space set aside in :data:`RESERVE_FILE` is
for the final record). Standard library only: the supervisor imports it.
"""

from __future__ import annotations

import errno
import json
import os
import stat

from distspec._files import write_atomic

# The idiom mypy understands without importing typing (~4 ms of the supervisor's start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ALIVE_FIFO",
    "PLAN_FILE",
    "RECORD_LIMIT",
    "RESERVE_FILE",
    "STATE_FILE",
    "append",
    "file_key",
    "make_reserve",
    "no_space",
    "not_regular",
    "open_alive",
    "open_alive_fifo",
    "open_log",
    "os_error_text",
    "read_json",
    "read_regular",
    "release_reserve",
    "write_json_atomic",
]

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
#: The largest record or plan a reader accepts (state.json of ten thousand replicas
#: is ~3 MiB); a bigger file is reported, not read into memory.
RECORD_LIMIT = 64 << 20


def write_json_atomic(path: str, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file and rename (never half-written)."""
    write_atomic(path, (json.dumps(data, indent=1) + "\n").encode())


def read_json(path: str) -> Any:
    """The JSON value in the file at ``path``, read as :func:`read_regular` reads it."""
    return json.loads(read_regular(path).decode("utf-8"))


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular(mode: int) -> OSError | None:
    """None for the ``mode`` of a regular file; else the OSError (EINVAL) that says what it is
    instead."""
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


def make_reserve(path: str, size: int) -> bool:
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
    """True when ``e`` says the disk (or the user's quota) is full."""
    return e.errno in (errno.ENOSPC, errno.EDQUOT)


def os_error_text(e: OSError) -> str:
    """``No space left on device (ENOSPC)``: the text and the errno's name."""
    name = errno.errorcode.get(e.errno or 0, "")
    text = e.strerror or str(e)
    return f"{text} ({name})" if name and name not in text else text


def append(fd: int, data: bytes) -> str:
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


def file_key(path: str) -> tuple[int, int, int] | None:
    """(inode, size, mtime) of ``path``, None if it cannot be stat()ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def open_log(path: str) -> tuple[int, str]:
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


def open_alive_fifo(path: str) -> int | None:
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


def open_alive(path: str | os.PathLike[str]) -> int | None:
    """A read end of the supervisor's ``alive.fifo`` (without waiting for a writer),
    or None if there is none to open."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd
