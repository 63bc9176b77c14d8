"""The content-addressed snapshot store: file contents kept once, each snapshot a tree
of hard links to them.

Layout under the store's root::

    objects/ab/<sha256>[x]      file contents, read-only (0444; 0555 and an ``x`` suffix
                                for executables, whose mode the links share)
    trees/<tree id>/...         one snapshot: hard links to objects (copies where a link
                                cannot be made: EXDEV, EPERM, EMLINK), links, dirs 0755
    manifests/<tree id>.json    the entries of a tree (for copy_tree_from and archive)
    statcache/<key>             per base: path -> (size, mtime, ctime, inode), sha256 (marshal)
    archives/<tree id>.tar.gz   a deterministic archive of a tree, made on demand

:meth:`Store.plan` hashes (a file whose stat the cache knows costs a stat) and names
the tree; it writes nothing but the stat cache. :meth:`Store.materialize` returns at
once when the tree exists; else it stores the missing objects (a temporary name, then a
link to the final name: a finished object is never replaced) and builds the tree under
``trees/.tmp-*`` before renaming it into place, so a tree path that exists is complete.
Any number of processes may materialize the same tree at once: one rename wins, the
rest drop theirs. On a full disk or any other OSError, what the call made is removed
and :class:`~distspec.errors.SnapshotError` raised.
"""

from __future__ import annotations

import errno
import hashlib
import os
import time

from distspec._files import write_atomic
from distspec.errors import SnapshotError
from distspec.snapshot._fileops import (
    _Build,
    _hash_file,
    _map,
    _rmtree,
    _tmp_name,
    _unique_bytes,
    _unreadable,
    copy_in,
    link_or_copy,
    write_tar,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import TypeVar

    from distspec.snapshot.files import Entry, Listing

    _T = TypeVar("_T")

__all__ = ["Plan", "Store"]

# A stat the cache (or materialize's copy check) trusts must be older than the listing
# by this much: a file written twice within one timestamp tick keeps its stat.
_RACY_NS = 1_000_000_000


class Plan:
    """A planned snapshot: what :meth:`Store.materialize` builds (no copy made yet).

    Attributes:
        tree_id: first 20 hex digits of sha256 over the sorted entries (path, kind,
            execute bit, content hash or link target).
        base: the absolute base directory the files come from.
        entries: the entries, sorted by path, each file's ``digest`` filled.
        files: how many files.
        bytes: their total size.
        untracked: paths taken that git does not track.
        submodules: ``(path, commit)`` of each submodule taken.
        git: whether git listed the files.
    """

    __slots__ = (
        "_cache_update",
        "_stats",
        "_trusted_before",
        "base",
        "bytes",
        "entries",
        "files",
        "git",
        "submodules",
        "tree_id",
        "untracked",
    )

    def __init__(
        self,
        *,
        tree_id: str,
        base: str,
        entries: tuple[Entry, ...],
        untracked: tuple[str, ...] = (),
        submodules: tuple[tuple[str, str], ...] = (),
        git: bool = False,
        stats: dict[str, tuple[int, int, int, int]] | None = None,
        trusted_before: int = 0,
    ) -> None:
        self.tree_id = tree_id
        self.base = base
        self.entries = entries
        self.files = sum(1 for e in entries if e.kind == "file")
        self.bytes = sum(e.size for e in entries)
        self.untracked = untracked
        self.submodules = submodules
        self.git = git
        # path -> (size, mtime_ns, ctime_ns, inode) as planned; a stat with mtime and
        # ctime before _trusted_before (ns) is old enough to trust.
        self._stats = stats or {}
        self._trusted_before = trusted_before
        # The stat cache as this plan would leave it (None: unchanged), written by
        # Store.remember (a dry run plans without writing anything).
        self._cache_update: dict[str, tuple[tuple[int, int, int, int], str]] | None = None

    def __repr__(self) -> str:
        return f"Plan({self.tree_id}, {self.base!r}, {self.files} files, {self.bytes} bytes)"


def tree_id_of(entries: Iterable[Entry]) -> str:
    """The tree id of sorted entries: first 20 hex of sha256 over (path, kind, x, hash/target)."""
    text = "".join(
        f"{e.path}\0{e.kind}\0{'x' if e.executable else '-'}\0{e.digest or e.target}\n"
        for e in entries
    )
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:20]


def _check_id(tree_id: str) -> str:
    """``tree_id`` if it is one (20 hex digits), else a SnapshotError: it names a path."""
    if len(tree_id) != 20 or tree_id.strip("0123456789abcdef"):
        raise SnapshotError(f"not a snapshot id: {tree_id!r} (20 hex digits)")
    return tree_id


def _object_key(entry: Entry) -> str:
    return entry.digest + ("x" if entry.executable else "")


class Store:
    """A content-addressed store of snapshots under ``root`` (module docstring: layout).

    Args:
        root: the store's folder (made on first use), e.g. ``<state dir>/snapshots``.
    """

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    # -- paths -------------------------------------------------------------------------

    def tree_path(self, tree_id: str) -> str:
        """The folder of the tree ``tree_id`` (whether or not it exists).

        Raises:
            SnapshotError: ``tree_id`` is not 20 hex digits.
        """
        return os.path.join(self.root, "trees", _check_id(tree_id))

    def exists(self, tree_id: str) -> bool:
        """Whether the tree ``tree_id`` is materialized (a tree path that exists is complete).

        Raises:
            SnapshotError: ``tree_id`` is not 20 hex digits.
        """
        return os.path.isdir(self.tree_path(tree_id))

    def _object_path(self, key: str) -> str:
        return os.path.join(self.root, "objects", key[:2], key)

    def _manifest_path(self, tree_id: str) -> str:
        return os.path.join(self.root, "manifests", f"{tree_id}.json")

    def _statcache_path(self, base: str) -> str:
        key = hashlib.sha256(os.fsencode(base)).hexdigest()[:20]
        return os.path.join(self.root, "statcache", key)

    # -- plan --------------------------------------------------------------------------

    def _load_statcache(self, base: str) -> dict[str, tuple[tuple[int, int, int, int], str]]:
        import marshal  # built in: nothing to load

        try:
            with open(self._statcache_path(base), "rb") as f:
                cache = marshal.loads(f.read())  # marshal.load(f) reads in tiny pieces
        except (OSError, EOFError, ValueError, TypeError):
            return {}  # none yet, or damaged: only a slower plan
        return cache if isinstance(cache, dict) else {}

    def _save_statcache(
        self, base: str, cache: dict[str, tuple[tuple[int, int, int, int], str]]
    ) -> None:
        import marshal

        path = self._statcache_path(base)
        tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(marshal.dumps(cache))
            os.replace(tmp, path)
        except OSError:
            try:  # the cache only saves time: a full disk here is not an error
                os.unlink(tmp)
            except OSError:
                pass

    def plan(self, listing: Listing, *, save: bool = True) -> Plan:
        """Hash every file of ``listing`` and name its tree; copies nothing.

        A file whose size, mtime, ctime and inode match the stat cache is not read. The
        cache is updated (only with files older than the listing by a second, so a file
        rewritten within one timestamp tick is never trusted); with ``save`` False the
        update waits for :meth:`remember` (a dry run writes nothing).

        Args:
            listing: what :func:`distspec.snapshot.files.collect` returned.
            save: write the stat cache's update now.

        Returns:
            The plan, with each file entry's ``digest`` filled and the tree id.

        Raises:
            SnapshotError: a file cannot be read (the message names it and how to exclude it).
        """
        from distspec.snapshot.files import Entry

        base = listing.base
        update = None
        cache = self._load_statcache(base)
        stats = dict(listing.stats)
        digests: dict[str, str] = {}
        todo: list[str] = []
        todo_bytes = 0
        for e in listing.entries:
            if e[1] != "file":
                continue
            path = e[0]
            st = stats.get(path)
            if st is None:  # a listing made by hand: stat now
                s = os.lstat(os.path.join(base, path))
                st = stats[path] = (s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino)
            hit = cache.get(path)
            if hit is not None and hit[0] == st:
                digests[path] = hit[1]
            else:
                todo.append(path)
                todo_bytes += st[0]
        trusted_before = listing.time_ns - _RACY_NS
        if todo:

            def digest_of(rel: str) -> str:
                try:
                    return _hash_file(os.path.join(base, rel))
                except OSError as e:
                    raise _unreadable(base, rel, e) from e

            for rel, digest in zip(todo, _map(digest_of, todo, todo_bytes), strict=True):
                digests[rel] = digest
            # Only stats old enough are kept: a file written twice within one
            # timestamp tick keeps its stat, and must be hashed again next time.
            fresh = {
                p: (st, digests[p])
                for p, st in stats.items()
                if p in digests and st[1] < trusted_before and st[2] < trusted_before
            }
            if fresh != {p: cache[p] for p in cache if p in stats}:
                update = fresh
        entries = tuple(
            Entry(e[0], "file", e[2], e[3], "", digests[e[0]]) if e[1] == "file" else e
            for e in listing.entries
        )
        plan = Plan(
            tree_id=tree_id_of(entries),
            base=base,
            entries=entries,
            untracked=listing.untracked,
            submodules=listing.submodules,
            git=listing.git,
            stats=stats,
            trusted_before=trusted_before,
        )
        plan._cache_update = update
        if save:
            self.remember(plan)
        return plan

    def remember(self, plan: Plan) -> None:
        """Write the stat cache update ``plan`` computed (a no-op when there is none)."""
        if plan._cache_update is not None:
            self._save_statcache(plan.base, plan._cache_update)
            plan._cache_update = None

    # -- materialize -------------------------------------------------------------------

    def _failed(self, base: str, e: OSError) -> SnapshotError:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "no space left" if e.errno == errno.ENOSPC else "disk quota exceeded"
            return SnapshotError(
                f"{what} on the device of {self.root} while snapshotting {base} into it; "
                "nothing was submitted"
            )
        where = f" ({e.filename})" if e.filename else ""
        return SnapshotError(
            f"cannot snapshot {base} into {self.root}: {e.strerror or e}{where}; "
            "nothing was submitted"
        )

    def _build(
        self,
        tree_id: str,
        entries: tuple[Entry, ...],
        base: str,
        source: Callable[[Entry], str],
        trusted: Callable[[Entry], tuple[int, int, int, int] | None],
    ) -> str:
        tree = self.tree_path(tree_id)
        if os.path.isdir(tree):
            try:
                os.utime(tree)  # in use again: gc's grace starts over
                return tree
            except FileNotFoundError:
                pass  # gc took it just now: build it again
        build = _Build()
        try:
            trees = os.path.join(self.root, "trees")
            objects = os.path.join(self.root, "objects")
            os.makedirs(trees, exist_ok=True)
            build.tree = tmp_tree = _tmp_name(trees)
            os.mkdir(tmp_tree, 0o755)
            made: set[str] = set()
            for e in entries:
                parent = e.path.rpartition("/")[0]
                if parent and parent not in made:
                    os.makedirs(f"{tmp_tree}/{parent}", 0o755, exist_ok=True)
                    made.add(parent)
            shards: set[str] = set()
            first: dict[str, Entry] = {}  # object key -> the first entry holding it
            later: list[Entry] = []
            for e in entries:
                if e.kind == "link":
                    os.symlink(e.target, f"{tmp_tree}/{e.path}")
                elif e.size == 0:  # made, not linked: a tree may hold thousands (EMLINK)
                    fd = os.open(
                        f"{tmp_tree}/{e.path}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600
                    )
                    os.fchmod(fd, 0o555 if e.executable else 0o444)
                    os.close(fd)
                elif _object_key(e) in first:
                    later.append(e)
                else:
                    first[_object_key(e)] = e

            def place(e: Entry) -> str:
                # The object if the store has it; else the content is copied into the
                # tree and that file linked as the object (a link never replaces one).
                key = _object_key(e)
                obj = f"{objects}/{key[:2]}/{key}"
                dest = f"{tmp_tree}/{e.path}"
                if key[:2] not in empty_shards:  # else nothing to link: skip the try
                    try:
                        link_or_copy(obj, dest, e)
                        return key
                    except FileNotFoundError:
                        pass
                copy_in(base, e, source(e), dest, trusted(e))
                if key[:2] not in shards:
                    os.makedirs(f"{objects}/{key[:2]}", exist_ok=True)
                    shards.add(key[:2])
                try:
                    os.link(dest, obj)
                    build.objects.append(obj)
                except FileExistsError:  # another process stored it first: share that one
                    os.unlink(dest)
                    link_or_copy(obj, dest, e)
                return key

            firsts = list(first.values())
            # Shards (objects/ab) that do not exist yet hold nothing: in a new store,
            # no link is tried for an object that cannot be there (one stat a shard).
            empty_shards = {k[:2] for k in first if not os.path.isdir(f"{objects}/{k[:2]}")}
            _map(place, firsts, sum(e.size for e in firsts))
            for e in later:
                key = _object_key(e)
                link_or_copy(f"{objects}/{key[:2]}/{key}", f"{tmp_tree}/{e.path}", e)
            self._write_manifest(tree_id, base, entries)
            try:
                os.rename(tmp_tree, tree)
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                _rmtree(tmp_tree)  # another process made it first
            build.tree = None
            return tree
        except OSError as e:
            build.undo()
            raise self._failed(base, e) from e
        except BaseException:
            build.undo()
            raise

    def materialize(self, plan: Plan) -> str:
        """Build the tree of ``plan`` (or find it built) and return its path.

        Args:
            plan: what :meth:`plan` returned.

        Returns:
            The tree's path, complete.

        Raises:
            SnapshotError: a full disk or another OSError (everything this call made is
                removed first), or a file that changed since it was planned.
        """
        stats = plan._stats
        before = plan._trusted_before
        base = plan.base

        def trusted(e: Entry) -> tuple[int, int, int, int] | None:
            st = stats.get(e.path)
            return st if st is not None and st[1] < before and st[2] < before else None

        return self._build(
            plan.tree_id, plan.entries, base, lambda e: os.path.join(base, e.path), trusted
        )

    # -- manifests, copies between stores, archives ------------------------------------

    def _write_manifest(self, tree_id: str, base: str, entries: tuple[Entry, ...]) -> None:
        import json

        # Rewritten by every build (a few ms): a gc that removed the tree may have
        # removed the manifest too while this build ran.
        path = self._manifest_path(tree_id)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = {
            "tree_id": tree_id,
            "base": base,
            "entries": [
                [e.path, e.kind, e.size, e.executable, e.target, e.digest] for e in entries
            ],
        }
        text = json.dumps(data, separators=(",", ":"))  # dump() encodes in Python
        write_atomic(path, text.encode("utf-8", "surrogateescape"))

    def entries(self, tree_id: str) -> tuple[Entry, ...]:
        """The entries of a materialized tree, from its manifest.

        Raises:
            SnapshotError: the tree is not in this store (never made, or pruned).
        """
        import json

        from distspec.snapshot.files import Entry

        if not self.exists(tree_id):
            raise SnapshotError(f"snapshot {tree_id} is not in {self.root} (pruned?)")
        try:
            with open(
                self._manifest_path(tree_id), encoding="utf-8", errors="surrogateescape"
            ) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise SnapshotError(
                f"snapshot {tree_id} in {self.root} has no readable manifest"
            ) from e
        entries = tuple(Entry(*row) for row in data["entries"])
        if tree_id_of(entries) != tree_id:
            raise SnapshotError(f"snapshot {tree_id} in {self.root}: its manifest does not match")
        return entries

    def copy_tree_from(self, other: Store, tree_id: str) -> str:
        """Materialize here a tree of another store (a rerun in another state directory):
        objects this store has already are not copied again.

        Args:
            other: the store that holds the tree.
            tree_id: the tree.

        Returns:
            The tree's path in this store.

        Raises:
            SnapshotError: the tree is not in ``other``, or the copy failed (full disk...).
        """
        if self.exists(tree_id):
            try:
                os.utime(self.tree_path(tree_id))  # in use again: gc's grace starts over
                return self.tree_path(tree_id)
            except FileNotFoundError:
                pass  # gc took it just now: copy it again
        entries = other.entries(tree_id)
        src_tree = other.tree_path(tree_id)

        def source(e: Entry) -> str:
            obj = other._object_path(_object_key(e))
            return obj if os.path.exists(obj) else os.path.join(src_tree, e.path)

        return self._build(tree_id, entries, src_tree, source, lambda e: None)

    def archive(self, tree_id: str) -> str:
        """A deterministic ``.tar.gz`` of a tree (sorted, mtime 0, owner 0, modes 0644 /
        0755), made once and kept under ``archives/``; its path.

        Raises:
            SnapshotError: the tree is not in this store, or the archive cannot be written.
        """
        out = os.path.join(self.root, "archives", f"{_check_id(tree_id)}.tar.gz")
        if os.path.exists(out):
            return out
        entries = self.entries(tree_id)
        tree = self.tree_path(tree_id)
        folder = os.path.dirname(out)
        tmp = ""
        try:
            os.makedirs(folder, exist_ok=True)
            tmp = _tmp_name(folder)
            write_tar(tmp, tree, entries)
            os.replace(tmp, out)
        except OSError as e:
            if tmp:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            raise self._failed(tree, e) from e
        return out

    # -- gc ----------------------------------------------------------------------------

    def gc(self, live: set[str], *, grace: float = 3600.0) -> tuple[tuple[str, ...], int]:
        """Delete trees not in ``live`` and untouched for ``grace`` seconds, then objects
        only the store holds (link count 1) older than ``grace``, and stale temporaries.

        A tree reused by :meth:`materialize` counts as touched then; one reused while gc
        removes it is put back (or built again by that call).

        Args:
            live: tree ids still used by the runs kept.
            grace: seconds a tree or object is kept however unused (protects snapshots
                being made now, not yet recorded by a run).

        Returns:
            ``(removed tree ids, bytes freed)``.
        """
        now = time.time()
        removed: list[str] = []
        freed = 0
        trees = os.path.join(self.root, "trees")
        try:
            names = sorted(os.listdir(trees))
        except FileNotFoundError:
            names = []
        for name in names:
            path = os.path.join(trees, name)
            try:
                age = now - os.lstat(path).st_mtime
            except FileNotFoundError:
                continue
            if age < grace or (name in live and not name.startswith(".")):
                continue
            if name.startswith("."):  # a temporary left by a process that died
                freed += _unique_bytes(path)
                _rmtree(path)
                continue
            trash = _tmp_name(trees)
            try:
                os.rename(path, trash)
            except OSError:
                continue
            if now - os.lstat(trash).st_mtime < grace:  # materialize reused it meanwhile
                try:
                    os.rename(trash, path)
                    continue
                except OSError:
                    pass  # already built again: drop this copy
            freed += _unique_bytes(trash)
            _rmtree(trash)
            removed.append(name)
            if os.path.exists(path):
                continue  # built again meanwhile: its manifest and archive are its own
            for extra in (
                self._manifest_path(name),
                os.path.join(self.root, "archives", f"{name}.tar.gz"),
            ):
                try:
                    size = os.lstat(extra).st_size
                    os.unlink(extra)
                    freed += size
                except OSError:
                    pass
        objects = os.path.join(self.root, "objects")
        try:
            shards = os.listdir(objects)
        except FileNotFoundError:
            shards = []
        for shard in shards:
            folder = os.path.join(objects, shard)
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                path = os.path.join(folder, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue
                if now - st.st_mtime < grace or (st.st_nlink > 1 and not name.startswith(".")):
                    continue
                try:
                    os.unlink(path)
                    freed += st.st_size
                except OSError:
                    pass
        return tuple(removed), freed
