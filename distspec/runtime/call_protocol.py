"""The wire protocol of Python callables: what the submitter (:mod:`distspec.callables`)
and the worker (:mod:`distspec.runtime.call`) exchange through the job directory.

Both sides import this module and nothing else of each other's. It imports only the
standard library (fsspec, for a URL, when a file is read or written), so the worker
loads it inside the job without the CLI.

The job directory is ``$DISTSPEC_JOB_DIR`` (:data:`JOB_DIR_ENV`): a local path
(local_cwd's run directory, the Slurm or PBS job folder on the shared file system) or
any fsspec URL (``s3://bucket/prefix/<app id>``, ``file:///...``; Kubernetes).

Files (protocol version :data:`PROTOCOL_VERSION`), each a cloudpickle of a dict:

``call.pkl`` (:data:`CALL_FILE`), written by the submitter (:func:`payload`)
    ``{"version": 1, "fn": callable, "args": tuple, "kwargs": dict}``
``result-<rank>.pkl`` (:func:`result_file`), written by each rank (:func:`result_record`)
    ``{"version": 1, "rank", "host", "pid", "time", "ok": True, "value"}`` or
    ``{..., "ok": False, "phase": "load"|"init"|"call"|"finish"|"result", "type",
    "message", "traceback", "exception": bytes | None}``
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, TypeGuard

__all__ = [
    "CALL_FILE",
    "ERROR_KEYS",
    "JOB_DIR_ENV",
    "PEER_PHASES",
    "PHASES",
    "PROTOCOL_VERSION",
    "REACH_HINT",
    "exists",
    "is_record",
    "is_url",
    "join",
    "payload",
    "read_bytes",
    "remove",
    "result_file",
    "result_record",
    "write_bytes",
]

#: The environment variable naming the job directory (a path or an fsspec URL).
JOB_DIR_ENV = "DISTSPEC_JOB_DIR"
#: The pickled function and arguments, in the job directory.
CALL_FILE = "call.pkl"
#: The version of these files: the worker refuses a ``call.pkl`` of another.
PROTOCOL_VERSION = 1

#: Where a rank can fail, in order: loading the function, initialising the process
#: group, the call itself, the final barrier, writing the result.
PHASES = ("load", "init", "call", "finish", "result")
#: Phases in which a rank fails because of a peer.
PEER_PHASES = ("init", "finish")
#: What a failed rank's result record holds for the submitter to read.
ERROR_KEYS = ("ok", "type", "message", "traceback", "rank", "host", "phase", "time")
#: What a successful rank's result record holds for the submitter to read.
_OK_KEYS = ("ok", "value")

#: Said when the job directory cannot be reached from where the code runs.
REACH_HINT = (
    " (the job's image needs distspec and the fsspec library of this protocol, e.g. "
    "s3fs for s3://, and credentials for it)"
)


def result_file(rank: int) -> str:
    """The name of rank ``rank``'s result file in the job directory."""
    return f"result-{rank}.pkl"


def payload(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """``call.pkl``'s dict (to be pickled by the submitter)."""
    return {"version": PROTOCOL_VERSION, "fn": fn, "args": tuple(args), "kwargs": dict(kwargs)}


def result_record(rank: int, *, ok: bool, **fields: Any) -> dict[str, Any]:
    """A result record of this process (host, pid and time filled in): ``fields``
    are ``value``, or ``phase``, ``type``, ``message``, ``traceback`` and
    ``exception``."""
    import socket
    import time

    return {
        "version": PROTOCOL_VERSION,
        "rank": rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.time(),
        "ok": ok,
        **fields,
    }


def is_record(data: object) -> TypeGuard[dict[str, Any]]:
    """Whether unpickled ``data`` is a result record the submitter can read."""
    if not isinstance(data, dict):
        return False
    keys = _OK_KEYS if data.get("ok") else ERROR_KEYS
    return all(k in data for k in keys)


# -- the job directory: a path or an fsspec URL -----------------------------------------


def join(job_dir: str, name: str) -> str:
    """``job_dir/name`` for a path or a URL."""
    return job_dir.rstrip("/") + "/" + name


def is_url(path: str) -> bool:
    """Whether ``path`` is an fsspec URL (``s3://...``) rather than a local path."""
    return "://" in path


def read_bytes(path: str) -> bytes:
    """The content of a local file or an fsspec URL (FileNotFoundError when absent)."""
    if is_url(path):
        import fsspec

        with fsspec.open(path, "rb") as f:
            data: bytes = f.read()
            return data
    import stat

    # Never blocks on a FIFO nor reads a device without end (/dev/zero) put there.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(22, "not a regular file", path)  # EINVAL
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    with open(fd, "rb") as f:
        return f.read()


def write_bytes(path: str, data: bytes) -> None:
    """Write a local file atomically (rename), or an fsspec URL (atomic on close for
    object stores)."""
    if is_url(path):
        import fsspec

        with fsspec.open(path, "wb") as f:
            f.write(data)
        return
    from distspec._files import write_atomic

    write_atomic(path, data)


def remove(path: str) -> None:
    """Remove a local file or an fsspec URL; nothing when it does not exist."""
    try:
        if is_url(path):
            import fsspec

            fs, inner = fsspec.core.url_to_fs(path)
            fs.rm(inner)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass
    except ImportError as e:  # fsspec: the protocol's library is not installed
        raise ImportError(f"cannot reach {path}: {e}{REACH_HINT}") from e


def exists(path: str) -> bool:
    """Whether a local file or an fsspec URL exists."""
    if is_url(path):
        import fsspec

        fs, inner = fsspec.core.url_to_fs(path)
        return bool(fs.exists(inner))
    return os.path.exists(path)
