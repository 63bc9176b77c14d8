"""Writing a local file whole or not at all.

Standard library only, and nothing of distspec: the local supervisor (started without
``site``) and the in-job runtime import it.
"""

from __future__ import annotations

import os

__all__ = ["write_atomic"]


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it and a rename: a
    reader sees the old content or the new one, never half of it.

    When the write fails (a full disk, a read-only or deleted folder), the temporary
    file is removed before the error is raised: it would keep the space it took, and
    nothing could then record a job's end.
    """
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
