"""Fetch a code snapshot's archive into the pod and start the job's command from it.

A Kubernetes job that runs from a snapshot (``-cfg snapshot=on,job_dir=URL``) starts
every container as::

    python -m distspec.runtime.unpack ARCHIVE_URL DEST -- COMMAND [ARGS...]

which

1. fetches ``ARCHIVE_URL`` (any fsspec URL: ``s3://``, ``gs://``, ``file://``; the
   image needs distspec, fsspec and the URL's filesystem library, e.g. ``s3fs``) and
   unpacks it into ``DEST``, unless ``DEST`` exists already (another container of the
   same pod or node unpacked it: the folder is named after the snapshot's content
   hash, so what is there is what would be unpacked);
2. puts ``$DISTSPEC_SNAPSHOT_PYTHONPATH`` (the snapshot's import folders) in front of
   the image's own ``PYTHONPATH`` and removes the former from the environment;
3. replaces itself with ``COMMAND`` (``exec``: signals and the exit code are the
   command's own).

Unpacking is safe and atomic: members go into a temporary folder beside ``DEST`` that
is renamed to ``DEST`` when complete (containers racing on one node: one rename wins,
the others drop theirs); a member whose path is absolute, climbs out with ``..`` or
passes through a symbolic link, a hard link, a device or a FIFO, and a relative link
whose target leaves ``DEST``, are refused and nothing is left behind. A link to an
absolute path is kept as it is: the snapshot stores a link that pointed outside the
submitter's tree (``data -> /scratch/data``) as its absolute target, which means the
same data where the pod mounts it at the same path.

Exit status when the command does not start: 1 when the archive cannot be fetched
(the Job may retry the pod), 2 for a bad archive or bad arguments (retrying cannot
help: the Job fails at once), 127 when ``COMMAND`` is not found.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import tarfile
    from collections.abc import Sequence
    from typing import IO

__all__ = ["PYTHONPATH_ENV", "UnsafeArchive", "main", "unpack", "unpack_stream"]

#: The container's environment variable holding the snapshot's import folders, put in
#: front of the image's ``PYTHONPATH`` before the command starts.
PYTHONPATH_ENV = "DISTSPEC_SNAPSHOT_PYTHONPATH"

_PROG = "distspec.runtime.unpack"


class UnsafeArchive(ValueError):
    """The archive has a member that could write outside the destination folder."""


def _check_name(name: str, links: set[str]) -> str:
    """``name`` as a relative path inside the destination, or UnsafeArchive."""
    if not name or name.startswith("/") or "\\" in name:
        raise UnsafeArchive(f"member {name!r}: not a relative path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafeArchive(f"member {name!r}: climbs out of the destination")
    for i in range(1, len(parts)):
        if "/".join(parts[:i]) in links:
            raise UnsafeArchive(f"member {name!r}: passes through a symbolic link")
    return "/".join(parts)


def unpack_stream(fileobj: IO[bytes], dest: str) -> None:
    """Unpack the ``.tar.gz`` read from ``fileobj`` (streamed: read once, in order) into
    the folder ``dest``, which must exist and be empty.

    Raises:
        UnsafeArchive: a member could write outside ``dest`` (see the module's docstring).
        OSError, tarfile.TarError: the archive cannot be read or written out.
    """
    import shutil
    import tarfile

    links: set[str] = set()
    dirs: list[tuple[str, int]] = []
    with tarfile.open(fileobj=fileobj, mode="r|gz") as tar:
        member: tarfile.TarInfo
        for member in tar:
            rel = _check_name(member.name, links)
            path = os.path.join(dest, rel)
            if os.path.lexists(path) and not member.isdir():
                raise UnsafeArchive(f"member {rel!r}: appears twice")
            parent = os.path.dirname(path)
            if member.isdir():
                os.makedirs(path, exist_ok=True)
                dirs.append((path, member.mode & 0o777 | 0o700))
            elif member.isreg():
                os.makedirs(parent, exist_ok=True)
                src = tar.extractfile(member)
                if src is None:  # pragma: no cover - a regular member always has data
                    raise UnsafeArchive(f"member {rel!r}: no data")
                mode = 0o755 if member.mode & 0o111 else 0o644
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(path, mode)
            elif member.issym():
                target = member.linkname
                if not target:
                    raise UnsafeArchive(f"member {rel!r}: a link to nothing")
                if not target.startswith("/"):
                    inside = os.path.normpath(os.path.join(os.path.dirname(rel), target))
                    if inside == ".." or inside.startswith("../"):
                        raise UnsafeArchive(
                            f"member {rel!r}: link to {target!r} leaves the destination"
                        )
                os.makedirs(parent, exist_ok=True)
                os.symlink(target, path)
                links.add(rel)
            else:
                kind = "hard link" if member.islnk() else "special file"
                raise UnsafeArchive(f"member {rel!r}: a {kind}, which a snapshot never holds")
    for path, mode in reversed(dirs):
        os.chmod(path, mode)


def unpack(url: str, dest: str) -> bool:
    """Unpack the archive at ``url`` (an fsspec URL or a local path) into ``dest``,
    atomically; nothing to do when ``dest`` exists. Returns whether this call unpacked it.

    Raises:
        UnsafeArchive: the archive could write outside ``dest``; nothing is left behind.
        OSError, tarfile.TarError: it cannot be fetched, read or written; nothing is
            left behind.
    """
    import shutil
    import tempfile

    dest = os.path.abspath(dest)
    if os.path.isdir(dest):
        return False
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{os.path.basename(dest)}-", dir=parent)
    try:
        if "://" in url:
            import fsspec

            with fsspec.open(url, "rb") as f:
                unpack_stream(f, tmp)
        else:
            with open(url, "rb") as f:
                unpack_stream(f, tmp)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not os.path.isdir(dest):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another container won the race
            return False
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    snap = env.pop(PYTHONPATH_ENV, "")
    if snap:
        image = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = f"{snap}{os.pathsep}{image}" if image else snap
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m distspec.runtime.unpack URL DEST -- COMMAND [ARGS...]``: unpack, then
    exec ``COMMAND``; returns an exit status only when the command could not start."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[2] != "--":
        print(f"usage: python -m {_PROG} URL DEST -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    url, dest, command = args[0], args[1], args[3:]
    try:
        unpack(url, dest)
    except UnsafeArchive as e:
        print(f"{_PROG}: refusing {url}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # fetch or disk trouble: the Job may retry the pod
        print(f"{_PROG}: cannot unpack {url} into {dest}: {e}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, _environment())
    except OSError as e:
        print(f"{_PROG}: cannot run {command[0]!r}: {e}", file=sys.stderr)
        return 127
    return 127  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main())
