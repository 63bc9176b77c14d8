"""Copy a job's Python environment to each node's local disk (run option ``env_to_local``).

The batch script (:mod:`distspec.schedulers.batch.envcopy` writes those lines) runs,
in the job and with the environment's own Python::

    python -m distspec.runtime.envcopy fingerprint PREFIX          # -> "HASH BYTES"
    python -m distspec.runtime.envcopy check DIR BYTES             # on every node
    python -m distspec.runtime.envcopy pack PREFIX CACHE HASH      # -> the tar's path
    python -m distspec.runtime.envcopy unpack TAR DEST PREFIX [--timeline FILE]  # each node

- **fingerprint**: a cheap content hash of the environment: the relative path, size
  and modification time of every file and the target of every link (``__pycache__``
  left out: Python writes those as it imports), hashed with SHA-256; and the bytes the
  files take, ``__pycache__`` included (they are packed too). It reads no file's content.
- **check**: fail (exit 2, one line naming the node) unless DIR exists, is writable
  and has room for BYTES, before anything is packed or copied. First it removes what
  is left of the copies of ended jobs (``distspec-env-*.removing``: a keeper renames a
  copy so before deleting it, and may be killed before it is done).
- **pack**: ``CACHE/HASH.tar``, written by the ``tar`` program (about twice as fast as
  :mod:`tarfile` on a 2 GB environment with torch) to a temporary name and renamed,
  so a job never sees a partial file and two jobs packing at once both succeed; an
  existing one is reused.
- **unpack**: extract ``TAR`` (the node-local copy the scheduler broadcast, or the
  shared cache itself) into ``DEST``, remove a node-local tar, and fix the copy
  up so it runs from its new place: ``#!`` lines and ``activate`` scripts in ``bin/``,
  ``.pth`` files and absolute links that named the old prefix now name the new one.
  ``pyvenv.cfg``'s ``home`` (the base interpreter) must exist on the node: else exit 2
  with a line that says so. Appends an ``env_ready`` event to the job's timeline.

Each failure the job should stop on is one line on stderr and exit code 2.
Standard library only; nothing else of distspec is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "EnvError",
    "Fingerprint",
    "check_dir",
    "fingerprint",
    "fix_up",
    "main",
    "pack",
    "unpack",
]

#: Directories whose content Python derives from the rest (byte code): not fingerprinted.
_DERIVED = frozenset({"__pycache__"})
#: Extra room asked of a node beyond the environment's own bytes (file system slack).
_SLACK = 1.1


class EnvError(Exception):
    """A failure that ends the job with one line (exit code 2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """An environment's content hash (hex) and the bytes of its files."""

    hash: str
    bytes: int
    files: int


def _log(message: str) -> None:
    print(f"distspec: {message}", file=sys.stderr, flush=True)


def _node() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def fingerprint(prefix: str | os.PathLike[str]) -> Fingerprint:
    """The environment's fingerprint (see the module's docstring): one ``lstat`` per
    entry, in a sorted walk, so the same tree gives the same hash."""
    digest = hashlib.sha256()
    total = 0
    count = 0
    root = os.fspath(prefix)

    def walk(path: str, rel: str) -> None:
        nonlocal total, count
        with os.scandir(path) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            name = f"{rel}{entry.name}"
            st = entry.stat(follow_symlinks=False)
            if entry.is_symlink():
                digest.update(
                    f"L\0{name}\0{os.readlink(entry.path)}\n".encode(errors="surrogateescape")
                )
            elif entry.is_dir(follow_symlinks=False):
                if entry.name in _DERIVED:
                    # Not hashed, but packed and unpacked: their bytes count.
                    size, files = _du(entry.path)
                    total += size
                    count += files
                    continue
                digest.update(f"D\0{name}\n".encode(errors="surrogateescape"))
                walk(entry.path, name + "/")
            else:
                if not entry.name.endswith(".pyc"):
                    digest.update(
                        f"F\0{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode & 0o777}\n".encode(
                            errors="surrogateescape"
                        )
                    )
                total += st.st_size
                count += 1

    walk(root, "")
    return Fingerprint(hash=digest.hexdigest()[:20], bytes=total, files=count)


def _du(path: str) -> tuple[int, int]:
    """The bytes and number of the files under ``path`` (links not followed)."""
    total = count = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue  # removed meanwhile (Python rewrites byte code as it imports)
            count += 1
    return total, count


def check_dir(directory: str | os.PathLike[str], need: int) -> None:
    """Raise EnvError unless ``directory`` exists, is writable and has ``need`` bytes
    free (plus some slack), naming this node."""
    path = os.fspath(directory)
    where = f"node {_node()}: env_to_local={path}"
    if not os.path.isdir(path):
        raise EnvError(f"{where} is not a directory there (it must exist on every node)")
    _sweep(path)
    if not os.access(path, os.W_OK | os.X_OK):
        raise EnvError(f"{where} is not writable")
    free = shutil.disk_usage(path).free
    if free < need * _SLACK:
        raise EnvError(
            f"{where} has {free / 1e9:.2f} GB free; the environment needs {need * _SLACK / 1e9:.2f} GB"
        )


def _sweep(path: str) -> None:
    """Finish removing the copies ended jobs renamed to ``distspec-env-<id>.removing``
    (their keeper was killed, after Slurm's KillWait, before ``rm`` was done)."""
    for gone in Path(path).glob("distspec-env-*.removing"):
        _log(f"removing {gone}, left by an ended job on {_node()}")
        shutil.rmtree(gone, ignore_errors=True)


def pack(
    prefix: str | os.PathLike[str], cache: str | os.PathLike[str], expected: str | None = None
) -> Path:
    """``<cache>/<hash>.tar`` of ``prefix``: reused when there, else written atomically.

    ``expected`` is the hash :func:`fingerprint` gave before (the job's check ran with
    its size): when that tar exists, the environment is not walked again.
    """
    cache_dir = Path(cache)
    cache_dir.mkdir(parents=True, exist_ok=True)
    if expected:
        target = cache_dir / f"{expected}.tar"
        if target.is_file():
            _log(f"reused cached environment {expected} ({target})")
            return target
    start = time.monotonic()
    found = fingerprint(prefix)
    target = cache_dir / f"{found.hash}.tar"
    if target.is_file():
        _log(f"reused cached environment {found.hash} ({target})")
        return target
    if expected and found.hash != expected:
        _log(f"the environment changed since its fingerprint: packing it as {found.hash}")
    tmp = cache_dir / f".{found.hash}.tar.{socket.gethostname()}.{os.getpid()}"
    try:
        # --hard-dereference: a hard link is stored as a file, so no entry depends on
        # another's; sparse and extended attributes are not needed by Python.
        done = subprocess.run(
            ["tar", "--create", "--file", str(tmp), "--directory", os.fspath(prefix), "."],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise EnvError(f"tar could not pack {os.fspath(prefix)}: {done.stderr.strip()}")
        # Another job may have renamed its own tar of the same content there: either is good.
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _log(
        f"packed environment {found.hash} in {time.monotonic() - start:.1f} s "
        f"({found.files} files, {found.bytes / 1e9:.2f} GB) to {target}"
    )
    return target


def _prefix_pattern(old: list[str]) -> re.Pattern[bytes]:
    """The old prefix(es) where they end a path component: ``/a/env`` but not ``/a/env2``."""
    words = "|".join(
        re.escape(os.fsencode(p)).decode("latin-1") for p in sorted(old, key=len, reverse=True)
    )
    return re.compile(f"(?:{words})(?=[/'\"\\s]|$)".encode("latin-1"), re.MULTILINE)


def _rewrite(path: Path, pattern: re.Pattern[bytes], new: bytes) -> bool:
    data = path.read_bytes()
    fixed = pattern.sub(new.replace(b"\\", b"\\\\"), data)
    if fixed == data:
        return False
    mode = path.stat().st_mode
    path.write_bytes(fixed)
    os.chmod(path, mode)
    return True


def fix_up(dest: str | os.PathLike[str], old_prefix: str, *, new_prefix: str | None = None) -> int:
    """Make the copy at ``dest`` of the environment at ``old_prefix`` run from
    ``new_prefix`` (default: ``dest``, where it is); the number of files and links
    changed. Raises EnvError when the base interpreter (``pyvenv.cfg``'s ``home``) is
    missing on this node."""
    root = Path(dest)
    target = new_prefix or str(root)
    olds = [old_prefix.rstrip("/") or "/"]
    real = os.path.realpath(old_prefix)
    if real not in olds:
        olds.append(real)
    pattern = _prefix_pattern(olds)
    new = os.fsencode(target)
    changed = 0
    bin_dir = root / "bin"
    if bin_dir.is_dir():
        for entry in os.scandir(bin_dir):
            path = Path(entry.path)
            if entry.is_symlink():
                continue
            if not entry.is_file() or entry.stat().st_size > 1 << 20:
                continue
            with open(path, "rb") as f:
                head = f.read(2)
            if head == b"#!" or entry.name.startswith("activate"):
                changed += _rewrite(path, pattern, new)
    for pth in root.glob("lib*/python*/site-packages/*.pth"):
        if pth.is_file() and not pth.is_symlink():
            changed += _rewrite(pth, pattern, new)
    cfg = root / "pyvenv.cfg"
    if cfg.is_file():
        changed += _rewrite(cfg, pattern, new)
    changed += _relink(root, olds, target)
    _check_base(root)
    return changed


def _relink(root: Path, olds: list[str], target_root: str) -> int:
    """Point absolute links into the old prefix at the same place in the copy."""
    changed = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                continue
            target = os.readlink(path)
            for old in olds:
                if target == old or target.startswith(old.rstrip("/") + "/"):
                    os.unlink(path)
                    os.symlink(target_root + target[len(old.rstrip("/")) :], path)
                    changed += 1
                    break
    return changed


def _check_base(root: Path) -> None:
    cfg = root / "pyvenv.cfg"
    home = ""
    if cfg.is_file():
        for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "home":
                home = value.strip()
    python = root / "bin" / "python"
    if not os.path.exists(python):
        link = os.readlink(python) if python.is_symlink() else "(missing)"
        raise EnvError(
            f"node {_node()}: the environment's base interpreter is missing: "
            f"{python} -> {link}"
            + (f" (pyvenv.cfg home = {home})" if home else "")
            + "; install the same Python at that path on every node"
        )


def _record(timeline: str | None, event: dict[str, object]) -> None:
    if not timeline:
        return
    try:
        with open(timeline, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")
    except OSError:
        pass  # informational only: never fail a job over it


_MARKER = ".distspec-env"


def _ready(dest: Path, marker: str) -> bool:
    try:
        return (dest / _MARKER).read_text(encoding="utf-8") == marker + "\n"
    except OSError:
        return False


def _extract(tar_path: Path, dest: Path, old_prefix: str, marker: str) -> int:
    """Extract into a folder beside ``dest``, fix it up for ``dest``, mark it done and
    rename it to ``dest``: a copy is at ``dest`` whole or not at all."""
    tmp = dest.with_name(f".{dest.name}.{socket.gethostname()}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    try:
        done = subprocess.run(
            ["tar", "--extract", "--file", str(tar_path), "--directory", str(tmp)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise EnvError(
                f"node {_node()}: tar could not unpack {tar_path}: {done.stderr.strip()}"
            )
        changed = fix_up(tmp, old_prefix, new_prefix=str(dest))
        (tmp / _MARKER).write_text(marker + "\n", encoding="utf-8")
        if not _ready(dest, marker):
            shutil.rmtree(dest, ignore_errors=True)  # a partial or stale copy
            try:
                os.rename(tmp, dest)
            except OSError:
                if not _ready(dest, marker):  # else another node sharing the folder won
                    raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return changed


def unpack(
    tar: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    old_prefix: str,
    timeline: str | None = None,
    source: str | None = None,
) -> Path:
    """Extract ``tar`` into ``dest`` (emptied first), remove the tar when it is
    ``<dest>.tar`` (a node-local copy, never the shared cache), fix the copy up
    (:func:`fix_up`) and append ``env_ready`` to ``timeline``. ``source`` names the
    content (the cached tar's path, whose name is the hash; default: ``tar``): a copy of
    the same source already at ``dest`` is kept."""
    start = time.monotonic()
    tar_path = Path(tar)
    dest = Path(dest)
    marker = source or str(tar_path)
    if _ready(dest, marker):
        # Several "nodes" sharing one directory (a test cluster on one machine), or a
        # requeued job whose earlier run unpacked the same tar: it is there already.
        changed = 0
        _log(f"environment on {_node()} is at {dest} already")
    else:
        try:
            changed = _extract(tar_path, dest, old_prefix, marker)
        except EnvError:
            if not _ready(dest, marker):
                raise
            changed = 0  # another node sharing the folder finished it (and took the tar)
    if tar_path == dest.with_name(dest.name + ".tar"):
        tar_path.unlink(missing_ok=True)  # the node-local copy: its room is the copy's now
    seconds = time.monotonic() - start
    _record(
        timeline,
        {
            "event": "env_ready",
            "node": _node(),
            "time": time.time(),
            "seconds": round(seconds, 3),
            "path": str(dest),
        },
    )
    _log(f"environment ready on {_node()} at {dest} in {seconds:.1f} s ({changed} paths fixed up)")
    return dest


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring); 2 on an :class:`EnvError`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m distspec.runtime.envcopy")
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("fingerprint")
    p.add_argument("prefix")
    p = sub.add_parser("check")
    p.add_argument("dir")
    p.add_argument("bytes", type=int)
    p = sub.add_parser("pack")
    p.add_argument("prefix")
    p.add_argument("cache")
    p.add_argument("hash", nargs="?")
    p.add_argument("--timeline")
    p = sub.add_parser("unpack")
    p.add_argument("tar")
    p.add_argument("dest")
    p.add_argument("prefix")
    p.add_argument("--timeline")
    p.add_argument("--source")
    args = parser.parse_args(argv)
    try:
        if args.verb == "fingerprint":
            found = fingerprint(args.prefix)
            print(found.hash, found.bytes)
        elif args.verb == "check":
            check_dir(args.dir, args.bytes)
        elif args.verb == "pack":
            start = time.time()
            reused = bool(args.hash) and (Path(args.cache) / f"{args.hash}.tar").is_file()
            target = pack(args.prefix, args.cache, args.hash)
            _record(
                args.timeline,
                {
                    "event": "env_packed",
                    "time": time.time(),
                    "seconds": round(time.time() - start, 3),
                    "reused": reused,
                    "hash": target.stem,
                },
            )
            print(target)
        else:
            unpack(args.tar, args.dest, args.prefix, args.timeline, args.source)
    except EnvError as e:
        _log(f"env_to_local: {e}")
        return 2
    except OSError as e:
        _log(f"env_to_local: node {_node()}: {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
