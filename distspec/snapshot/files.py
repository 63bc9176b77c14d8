"""What a snapshot takes: the list of files (and links) under a base directory.

In a git repository (base holds a ``.git`` entry) the files are those one
``git ls-files -z -t --cached --others --exclude-standard`` lists: what git tracks
plus untracked files it does not ignore. Paths listed but missing on disk (deleted,
not yet committed) are left out. A submodule, or an untracked repository nested
inside, is listed the same way in its own right and its commit recorded. Outside a
repository the tree is walked, leaving out :data:`DEFAULT_EXCLUDES`. In both modes
``exclude`` globs leave out more (matched against the relative path and each of its
components), and a tree over ``max_bytes`` is refused with the largest top-level
entries named.

Symbolic links are kept as links, never followed: a link to something the snapshot
takes becomes a relative link inside it; a link to anything else (outside base, or
inside but not taken) points to its absolute resolved target, so ``data ->
/scratch/data`` keeps meaning the same data; a dangling link is kept as it is.
Sockets, FIFOs and devices are left out (git does the same). Nothing here reads a
file's contents: :mod:`distspec.snapshot.store` does, and reports an unreadable one.
"""

from __future__ import annotations

import os
import stat
import time

from distspec.errors import SnapshotError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import NamedTuple

__all__ = ["DEFAULT_EXCLUDES", "Entry", "Listing", "collect", "find_base"]

#: What a plain walk (no git repository) leaves out: names matched against each
#: path component. Git mode follows .gitignore instead.
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    "*.pyc",
    ".venv",
    "venv",
    "node_modules",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".ipynb_checkpoints",
    "*.egg-info",
    "wandb",
    "lightning_logs",
    "mlruns",
    ".DS_Store",
    # What a home directory holds besides code (a script kept in $HOME/project/ with
    # no repository is snapshotted by walking that folder; these never belong in it).
    ".cache",
    ".local",
    ".conda",
    ".config",
    ".npm",
    ".cargo",
    ".rustup",
    ".idea",
    ".vscode",
)

_FIX = (
    "exclude them with .gitignore or -cfg snapshot_exclude=PATTERN, or raise -cfg snapshot_max_mb=N"
)

if TYPE_CHECKING:

    class _EntryBase(NamedTuple):
        path: str
        kind: str
        size: int
        executable: bool = False
        target: str = ""
        digest: str = ""

else:
    from collections import namedtuple

    _EntryBase = namedtuple(
        "_EntryBase",
        ("path", "kind", "size", "executable", "target", "digest"),
        defaults=(False, "", ""),
    )


class Entry(_EntryBase):
    """One thing a snapshot takes (an immutable tuple: thousands are made per snapshot).

    Attributes:
        path: relative posix path under the base directory.
        kind: ``"file"`` or ``"link"``.
        size: bytes (0 for a link).
        executable: the owner's execute bit (files).
        target: a link's target as the snapshot stores it ("" for a file).
        digest: the content's sha256 in hex, filled by ``Store.plan`` ("" before).
    """

    __slots__ = ()


class Listing:
    """What :func:`collect` found under a base directory.

    Attributes:
        base: the absolute base directory.
        git: whether git listed the files (else a plain walk).
        entries: the entries, sorted by path.
        untracked: paths taken that git does not track (git mode).
        submodules: ``(path, commit)`` of each submodule or nested repository taken.
        bytes: total size of the files.
        stats: ``path -> (size, mtime_ns, ctime_ns, inode)`` as listed (for the store's
            stat cache and its check that nothing changed).
        time_ns: when the listing started (wall clock, ns).
    """

    __slots__ = ("base", "bytes", "entries", "git", "stats", "submodules", "time_ns", "untracked")

    def __init__(
        self,
        *,
        base: str,
        git: bool,
        entries: tuple[Entry, ...],
        untracked: tuple[str, ...] = (),
        submodules: tuple[tuple[str, str], ...] = (),
        stats: dict[str, tuple[int, int, int, int]] | None = None,
        time_ns: int = 0,
    ) -> None:
        self.base = base
        self.git = git
        self.entries = entries
        self.untracked = untracked
        self.submodules = submodules
        self.bytes = sum(e.size for e in entries)
        self.stats = stats or {}
        self.time_ns = time_ns

    def __repr__(self) -> str:
        mode = "git" if self.git else "walk"
        return f"Listing({self.base!r}, {mode}, {len(self.entries)} entries, {self.bytes} bytes)"


def find_base(path: str | None = None) -> tuple[str, bool]:
    """The base directory for a snapshot of ``path``: the top level of the git
    repository holding it, or else the path itself (its folder for a file).

    Walks up looking for a ``.git`` entry (a folder, or the file of a submodule or
    worktree) instead of running ``git rev-parse --show-toplevel``: the same answer
    for those layouts, ~50x faster (no process).

    Args:
        path: a file or folder; the working directory when None.

    Returns:
        ``(base, is_git)``, base absolute.
    """
    start = os.path.abspath(path if path is not None else os.getcwd())
    if not os.path.isdir(start):
        start = os.path.dirname(start)
    here = start
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return here, True
        parent = os.path.dirname(here)
        if parent == here:
            return start, False
        here = parent


def _matcher(patterns: Sequence[str]) -> Callable[[str], bool] | None:
    """A test of a relative path against fnmatch globs: the path itself or any component."""
    if not patterns:
        return None
    import fnmatch
    import re

    regex = re.compile("|".join(f"(?:{fnmatch.translate(p.rstrip('/'))})" for p in patterns))

    def excluded(rel: str) -> bool:
        if regex.match(rel):
            return True
        return "/" in rel and any(regex.match(part) for part in rel.split("/"))

    return excluded


def _git(args: list[str], cwd: str) -> bytes:
    import subprocess

    done = subprocess.run(
        ["git", "-C", cwd, *args], capture_output=True, check=False, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip().splitlines()
        detail = err[-1] if err else f"exit code {done.returncode}"
        raise SnapshotError(f"git ls-files failed in {cwd}: {detail}")
    return done.stdout


def _git_commit(repo: str) -> str:
    import subprocess

    done = subprocess.run(
        ["git", "-C", repo, "rev-parse", "--verify", "-q", "HEAD"],
        capture_output=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return done.stdout.decode().strip() if done.returncode == 0 else ""


class _Collector:
    """Accumulates entries from git listings or a walk (one per collect call)."""

    def __init__(self, base: str, excluded: Callable[[str], bool] | None) -> None:
        self.base = base
        self.excluded = excluded
        self.files: dict[str, Entry] = {}
        self.links: dict[str, str] = {}  # path -> raw target
        self.stats: dict[str, tuple[int, int, int, int]] = {}
        self.untracked: list[str] = []
        self.submodules: list[tuple[str, str]] = []

    def add(self, rel: str, st: os.stat_result) -> bool:
        """Record ``rel`` from its lstat; False for what a snapshot does not take."""
        mode = st.st_mode
        if stat.S_ISREG(mode):
            self.files[rel] = Entry(rel, "file", st.st_size, bool(mode & 0o100))
            self.stats[rel] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            return True
        if stat.S_ISLNK(mode):
            self.links[rel] = os.readlink(os.path.join(self.base, rel))
            return True
        return False

    def git(self, prefix: str) -> None:
        """Take what git lists in the repository at ``base/prefix`` ("" for base)."""
        root = os.path.join(self.base, prefix) if prefix else self.base
        out = _git(["ls-files", "-z", "-t", "--cached", "--others", "--exclude-standard"], root)
        base = self.base
        lstat = os.lstat
        excluded = self.excluded
        files = self.files
        stats = self.stats
        untracked = self.untracked
        is_reg = stat.S_ISREG
        new = tuple.__new__
        seen: set[str] = set()
        for record in os.fsdecode(out).split("\0"):
            if not record:
                continue
            if record[0] == "M":  # an unmerged path is listed once per stage
                if record in seen:
                    continue
                seen.add(record)
            rel = prefix + record[2:].rstrip("/")
            if excluded is not None and excluded(rel):
                continue
            try:
                st = lstat(f"{base}/{rel}")
            except (FileNotFoundError, NotADirectoryError):
                continue  # listed by git, deleted on disk
            mode = st.st_mode
            if is_reg(mode):  # the common case, inlined: thousands of files
                files[rel] = new(Entry, (rel, "file", st.st_size, bool(mode & 0o100), "", ""))
                stats[rel] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                if record[0] == "?":
                    untracked.append(rel)
            elif stat.S_ISDIR(mode):
                # A gitlink (submodule) or an untracked repository nested inside; an
                # uninitialised submodule (no .git) has nothing to take.
                if os.path.lexists(f"{base}/{rel}/.git"):
                    self.submodules.append((rel, _git_commit(f"{base}/{rel}")))
                    self.git(rel + "/")
                    if record[0] == "?":
                        untracked.extend(
                            p for p in (*self.files, *self.links) if p.startswith(rel + "/")
                        )
            elif self.add(rel, st) and record[0] == "?":
                untracked.append(rel)

    def walk(self, rel_dir: str, limit: int) -> None:
        """Take everything under ``base/rel_dir`` but the default and given excludes,
        stopping once the files take more than ``limit`` bytes (the size cap then
        refuses the snapshot: a folder such as a home directory is not walked whole)."""
        default = _default_excluded
        excluded = self.excluded
        stack = [rel_dir]
        total = 0
        while stack and total <= limit:
            current = stack.pop()
            with os.scandir(os.path.join(self.base, current) if current else self.base) as it:
                for item in it:
                    name = item.name
                    if default(name):
                        continue
                    rel = f"{current}/{name}" if current else name
                    if excluded is not None and excluded(rel):
                        continue
                    st = item.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(rel)
                    elif self.add(rel, st):
                        total += st.st_size

    def link_entries(self) -> list[Entry]:
        """The links, their targets rewritten by the symlink policy (module docstring)."""
        if not self.links:
            return []
        base_real = os.path.realpath(self.base)
        taken_dirs: set[str] = set()
        for path in (*self.files, *self.links):
            parts = path.split("/")[:-1]
            for i in range(len(parts)):
                taken_dirs.add("/".join(parts[: i + 1]))
        entries = []
        for rel, raw in self.links.items():
            full = os.path.join(self.base, rel)
            if not os.path.exists(full):
                entries.append(Entry(rel, "link", 0, False, raw))  # dangling: as it is
                continue
            real = os.path.realpath(full)
            inside = real == base_real or real.startswith(base_real + os.sep)
            target_rel = os.path.relpath(real, base_real).replace(os.sep, "/") if inside else ""
            if inside and (
                target_rel in self.files
                or target_rel in taken_dirs
                or target_rel == "."
                or target_rel in self.links
            ):
                link_dir = os.path.join(base_real, os.path.dirname(rel))
                target = os.path.relpath(real, link_dir).replace(os.sep, "/")
            else:
                target = real
            entries.append(Entry(rel, "link", 0, False, target))
        return entries


_default_matcher: list[Callable[[str], bool]] = []


def _default_excluded(name: str) -> bool:
    """Whether a plain walk leaves out a file or folder of this name."""
    if not _default_matcher:
        matcher = _matcher(DEFAULT_EXCLUDES)
        assert matcher is not None
        _default_matcher.append(matcher)
    return _default_matcher[0](name)


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _check_size(base: str, entries: list[Entry], max_bytes: int, *, walked: bool) -> None:
    total = sum(e.size for e in entries)
    if total <= max_bytes:
        return
    top: dict[str, int] = {}
    for e in entries:
        head, sep, _ = e.path.partition("/")
        key = head + sep
        top[key] = top.get(key, 0) + e.size
    largest = sorted(top.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    named = ", ".join(f"{name} ({_human(size)})" for name, size in largest)
    if walked:  # the walk stopped at the cap: the total is what it had seen by then
        size = f"more than the cap of {_human(max_bytes)} (walk stopped at {_human(total)})"
    else:
        size = f"{_human(total)}, over the cap of {_human(max_bytes)}"
    fix = _FIX.replace(".gitignore or ", "") if walked else _FIX  # no repository: no .gitignore
    raise SnapshotError(f"the snapshot of {base} would take {size}; largest: {named}; {fix}")


def _check_plain_base(base: str) -> None:
    """Refuse to walk ``/``. A home folder is walked like any other (its caches and
    tool folders are excluded, and the walk stops at the size cap with the largest
    entries named)."""
    if base == "/":
        raise SnapshotError(
            "/ is not in a git repository and is the root folder: a snapshot would copy all "
            "of it; keep the code in a folder of its own (or a git repository), or run "
            "without one: -cfg snapshot=off"
        )


def _path_of(entry: Entry) -> str:
    return entry[0]


def collect(base: str, *, exclude: Sequence[str] = (), max_bytes: int) -> Listing:
    """List what a snapshot of ``base`` takes (module docstring: the rules).

    Args:
        base: the base directory (see :func:`find_base`); git mode when it holds ``.git``.
        exclude: extra fnmatch globs, matched against each relative path and each of its
            components (``-cfg snapshot_exclude``).
        max_bytes: the size cap (``-cfg snapshot_max_mb``).

    Returns:
        The listing, entries sorted by path.

    Raises:
        SnapshotError: the files take more than ``max_bytes`` (the message names the three
            largest top-level entries and how to leave them out), git failed, or base is
            not a readable directory.
    """
    started = time.time_ns()
    base = os.path.abspath(base)
    if not os.path.isdir(base):
        raise SnapshotError(f"cannot snapshot {base}: not a directory")
    collector = _Collector(base, _matcher(exclude))
    git = os.path.lexists(os.path.join(base, ".git"))
    try:
        if git:
            try:
                collector.git("")
            except FileNotFoundError:
                git = False  # no git installed: a plain walk
                collector = _Collector(base, collector.excluded)
        if not git:
            _check_plain_base(base)
            collector.walk("", max_bytes)
    except PermissionError as e:
        where = e.filename or base
        raise SnapshotError(
            f"cannot list {where} to snapshot it ({e.strerror}); exclude it with "
            "-cfg snapshot_exclude=PATTERN"
        ) from e
    entries = list(collector.files.values())
    entries.extend(collector.link_entries())
    entries.sort(key=_path_of)
    _check_size(base, entries, max_bytes, walked=not git)
    return Listing(
        base=base,
        git=git,
        entries=tuple(entries),
        untracked=tuple(sorted(collector.untracked)),
        submodules=tuple(sorted(collector.submodules)),
        stats=collector.stats,
        time_ns=started,
    )
