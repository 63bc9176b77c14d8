"""distspec.snapshot.store: plan, materialize, dedup, concurrency, full disks, gc, archives."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

from distspec.errors import SnapshotError
from distspec.snapshot import store as store_mod
from distspec.snapshot.files import collect
from distspec.snapshot.store import Store

from ._repo import make_repo, write

BIG = 10**12
REPO_ROOT = Path(__file__).resolve().parents[2]

FILES: dict[str, str | bytes] = {
    "train.py": "print('v1')\n",
    "pkg/__init__.py": "",
    "pkg/model.py": "W = 1\n" * 100,
    "pkg/copy_of_model.py": "W = 1\n" * 100,  # same content: one object
    "data/blob.bin": os.urandom(300_000),
    "run.sh": "#!/bin/sh\necho hi\n",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo", FILES)
    (root / "run.sh").chmod(0o755)
    os.symlink("pkg/model.py", root / "model_link.py")
    os.symlink("/etc/hostname", root / "outside_link")
    return root


def snapshot(store: Store, base: Path) -> tuple[str, str]:
    plan = store.plan(collect(str(base), max_bytes=BIG))
    return plan.tree_id, store.materialize(plan)


def inodes(root: Path) -> dict[int, int]:
    """inode -> size of every file of the store's trees and objects (a du that counts
    hard links once; the stat cache and manifests are left out)."""
    seen: dict[int, int] = {}
    for folder, _dirs, names in (*os.walk(root / "trees"), *os.walk(root / "objects")):
        for name in names:
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISREG(st.st_mode):
                seen[st.st_ino] = st.st_size
    return seen


def tree_files(tree: Path) -> dict[str, tuple[str, bytes | str, bool]]:
    out: dict[str, tuple[str, bytes | str, bool]] = {}
    for folder, _dirs, names in os.walk(tree):
        for name in names:
            path = Path(folder) / name
            rel = path.relative_to(tree).as_posix()
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path), False)
            else:
                out[rel] = ("file", path.read_bytes(), bool(path.stat().st_mode & 0o100))
    return out


def temporaries(root: Path) -> list[str]:
    """Temporary files or folders anywhere in the store."""
    return [
        os.path.relpath(os.path.join(folder, name), root)
        for folder, dirs, names in os.walk(root)
        for name in dirs + names
        if ".tmp" in name
    ]


def leftovers(root: Path) -> list[str]:
    """Temporaries, trees and objects: what must not remain after a failed first snapshot."""
    found = temporaries(root)
    if (root / "trees").exists():
        found.extend(f"trees/{d}" for d in os.listdir(root / "trees"))
    found.extend(f"objects/{n}" for n in _object_names(root))
    return found


def test_plan_hashes_names_the_tree_and_copies_nothing(repo: Path, tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    plan = store.plan(collect(str(repo), max_bytes=BIG))
    digests = {e.path: e.digest for e in plan.entries if e.kind == "file"}
    for rel, content in FILES.items():
        data = content if isinstance(content, bytes) else content.encode()
        assert digests[rel] == hashlib.sha256(data).hexdigest(), rel
    assert len(plan.tree_id) == 20
    assert plan.files == len(FILES)  # links are entries, not files
    assert plan.git and plan.untracked == ("model_link.py", "outside_link")
    assert not store.exists(plan.tree_id)
    assert not os.path.exists(store.root) or os.listdir(store.root) == ["statcache"]
    assert store.plan(collect(str(repo), max_bytes=BIG)).tree_id == plan.tree_id


def test_tree_id_follows_content_exec_bit_and_link_target(repo: Path, tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))

    def tree_id() -> str:
        return store.plan(collect(str(repo), max_bytes=BIG)).tree_id

    ids = [tree_id()]
    (repo / "train.py").write_text("print('v2')\n")
    ids.append(tree_id())
    (repo / "train.py").chmod(0o755)
    ids.append(tree_id())
    os.unlink(repo / "model_link.py")
    os.symlink("pkg/copy_of_model.py", repo / "model_link.py")
    ids.append(tree_id())
    (repo / "pkg" / "model.py").rename(repo / "pkg" / "model2.py")
    ids.append(tree_id())
    assert len(set(ids)) == len(ids)


def test_materialize_builds_a_complete_read_only_tree(repo: Path, tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    tree_id, path = snapshot(store, repo)
    tree = Path(path)
    assert path == store.tree_path(tree_id) and store.exists(tree_id)
    got = tree_files(tree)
    for rel, content in FILES.items():
        data = content if isinstance(content, bytes) else content.encode()
        assert got[rel][:2] == ("file", data), rel
    assert got["run.sh"][2] and not got["train.py"][2]
    assert got["model_link.py"] == ("link", "pkg/model.py", False)
    assert got["outside_link"] == ("link", "/etc/hostname", False)
    assert (tree / "model_link.py").read_text() == FILES["pkg/model.py"]
    assert stat.S_IMODE((tree / "train.py").stat().st_mode) == 0o444
    assert stat.S_IMODE((tree / "run.sh").stat().st_mode) == 0o555
    # one object per content: the two copies of model.py share an inode
    assert (tree / "pkg/model.py").stat().st_ino == (tree / "pkg/copy_of_model.py").stat().st_ino
    # the live tree changes; the snapshot does not
    (repo / "train.py").write_text("print('v2')\n")
    assert (tree / "train.py").read_text() == "print('v1')\n"


def test_second_snapshot_of_unchanged_code_reads_no_file(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stat cache trusts files older than the listing by _RACY_NS; these were
    # written just now, so trust them (the next test checks the default margin).
    monkeypatch.setattr(store_mod, "_RACY_NS", -(10**9))
    store = Store(str(tmp_path / "store"))
    first = snapshot(store, repo)
    objects_before = sorted(os.listdir(Path(store.root) / "objects"))
    opened: list[str] = []
    real = store_mod._hash_file
    monkeypatch.setattr(store_mod, "_hash_file", lambda p: opened.append(p) or real(p))
    assert snapshot(store, repo) == first
    assert opened == []
    assert sorted(os.listdir(Path(store.root) / "objects")) == objects_before
    (repo / "train.py").write_text("print('v3')\n")
    second = snapshot(store, repo)
    assert opened == [str(repo / "train.py")]
    assert second[0] != first[0]


def test_a_file_written_just_now_is_hashed_again(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"))
    (repo / "train.py").write_text("print('fresh')\n")
    store.plan(collect(str(repo), max_bytes=BIG))
    opened: list[str] = []
    real = store_mod._hash_file
    monkeypatch.setattr(store_mod, "_hash_file", lambda p: opened.append(p) or real(p))
    store.plan(collect(str(repo), max_bytes=BIG))
    assert str(repo / "train.py") in opened


def test_file_changed_after_plan_is_refused_and_nothing_left(repo: Path, tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    plan = store.plan(collect(str(repo), max_bytes=BIG))
    (repo / "train.py").write_text("print('edited after plan')\n")
    with pytest.raises(SnapshotError, match=r"train\.py changed while it was snapshotted"):
        store.materialize(plan)
    assert leftovers(Path(store.root)) == []
    assert not store.exists(plan.tree_id)


def test_unreadable_file_is_named(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # We run as root, for whom chmod 000 changes nothing: make the read fail instead.
    real_open = os.open

    def refusing_open(path: str, flags: int, *args: int) -> int:
        if str(path).endswith("pkg/model.py"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(store_mod.os, "open", refusing_open)
    store = Store(str(tmp_path / "store"))
    with pytest.raises(SnapshotError) as info:
        store.plan(collect(str(repo), max_bytes=BIG))
    message = str(info.value)
    assert f"cannot read {repo}/pkg/model.py" in message
    assert "Permission denied" in message and "snapshot_exclude=pkg/model.py" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway")
def test_unreadable_file_by_permissions(repo: Path, tmp_path: Path) -> None:
    (repo / "pkg" / "model.py").chmod(0)
    with pytest.raises(SnapshotError, match=r"cannot read .*pkg/model\.py"):
        Store(str(tmp_path / "store")).plan(collect(str(repo), max_bytes=BIG))


def test_burst_of_50_snapshots_keeps_one_copy(repo: Path, tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    results = {snapshot(store, repo) for _ in range(50)}
    assert len(results) == 1
    ((tree_id, _path),) = results
    assert os.listdir(Path(store.root) / "trees") == [tree_id]
    content = {c if isinstance(c, bytes) else c.encode() for c in FILES.values() if c}
    used = inodes(Path(store.root))
    assert sum(used.values()) == sum(len(c) for c in content)
    # and 50 trees differing in one small file: the large content is still stored once
    for i in range(50):
        (repo / "train.py").write_text(f"print({i})\n")
        snapshot(store, repo)
    assert len(os.listdir(Path(store.root) / "trees")) == 51
    extra = sum(len(f"print({i})\n") for i in range(50))
    assert sum(inodes(Path(store.root)).values()) == sum(len(c) for c in content) + extra


WORKER = textwrap.dedent(
    """
    import os, sys, time
    from distspec.snapshot.files import collect
    from distspec.snapshot.store import Store
    base, root, go = sys.argv[1:4]
    while not os.path.exists(go):
        time.sleep(0.001)
    plan = Store(root).plan(collect(base, max_bytes=10**12))
    print(plan.tree_id, Store(root).materialize(plan))
    """
)


def test_concurrent_materialize_from_many_processes(repo: Path, tmp_path: Path) -> None:
    write(repo, {f"many/f{i}.py": f"x = {i}\n" * 50 for i in range(200)})
    root = tmp_path / "store"
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(repo), str(root), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(8)
    ]
    time.sleep(0.5)  # let them start; they wait for the go file (no timing is asserted)
    go.write_text("")
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [e for _o, e in outs]
    lines = {o.strip() for o, _e in outs}
    assert len(lines) == 1
    tree_id, path = lines.pop().split(" ", 1)
    assert os.listdir(root / "trees") == [tree_id]
    got = tree_files(Path(path))
    assert got["many/f7.py"] == ("file", b"x = 7\n" * 50, False)
    assert len([p for p in got if p.startswith("many/")]) == 200
    assert temporaries(root) == []
    used = inodes(root)
    unique = {c if isinstance(c, bytes) else c.encode() for c in FILES.values() if c}
    unique |= {(f"x = {i}\n" * 50).encode() for i in range(200)}
    assert sum(used.values()) == sum(len(c) for c in unique)


def _object_names(root: Path) -> list[str]:
    return [n for _f, _d, names in os.walk(root / "objects") for n in names]


@pytest.mark.parametrize("call", ["link", "open", "copy_file_range", "mkdir", "symlink"])
def test_full_disk_leaves_nothing_half_written(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    plan = Store(str(tmp_path / "scratch")).plan(collect(str(repo), max_bytes=BIG))
    real = getattr(os, call)
    calls = [0]
    fail_at = [0]

    def failing(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == fail_at[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(store_mod.os, call, failing)
    Store(str(tmp_path / "count")).materialize(plan)  # how many calls a snapshot makes
    total = calls[0]
    assert total >= 1
    for nth in sorted({1, 2, total // 2, total} - {0}):
        store = Store(str(tmp_path / f"store-{nth}"))
        calls[0], fail_at[0] = 0, nth
        with pytest.raises(SnapshotError) as info:
            store.materialize(plan)
        message = str(info.value)
        assert message.startswith(
            f"no space left on the device of {store.root} while snapshotting {repo}"
        ), (nth, message)
        assert message.endswith("nothing was submitted")
        assert leftovers(Path(store.root)) == [], nth
        fail_at[0] = 0
        path = store.materialize(plan)
        assert tree_files(Path(path))["train.py"] == ("file", b"print('v1')\n", False)


def test_full_disk_keeps_objects_other_trees_use(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"))
    _tree, first = snapshot(store, repo)
    before = set(_object_names(Path(store.root)))
    (repo / "train.py").write_text("print('v2')\n")
    plan = store.plan(collect(str(repo), max_bytes=BIG))
    monkeypatch.setattr(store_mod.os, "rename", _raise(errno.ENOSPC))
    with pytest.raises(SnapshotError, match="no space left"):
        store.materialize(plan)
    assert set(_object_names(Path(store.root))) == before
    assert os.listdir(Path(store.root) / "trees") == [os.path.basename(first)]


def _raise(code: int) -> object:
    def fail(*_args: object, **_kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    return fail


def test_other_os_error_is_one_line(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"))
    plan = store.plan(collect(str(repo), max_bytes=BIG))
    monkeypatch.setattr(store_mod.os, "symlink", _raise(errno.EROFS))
    with pytest.raises(
        SnapshotError, match=r"^cannot snapshot .* Read-only file system; nothing was submitted$"
    ):
        store.materialize(plan)
    assert leftovers(Path(store.root)) == []


def test_real_full_tmpfs(repo: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        store = Store(str(mnt / "store"))
        plan = store.plan(collect(str(repo), max_bytes=BIG))  # 300 KB of data: does not fit
        with pytest.raises(SnapshotError, match="^no space left on the device of"):
            store.materialize(plan)
        assert leftovers(mnt / "store") == []
        used = sum(
            os.lstat(os.path.join(f, n)).st_size for f, _d, names in os.walk(mnt) for n in names
        )
        assert used < 4096  # the stat cache and manifests, nothing of the tree
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_gc_removes_dead_trees_and_their_objects(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"))
    old_id, old_path = snapshot(store, repo)
    (repo / "train.py").write_text("print('v2')\n" * 1000)
    new_id, new_path = snapshot(store, repo)
    assert store.gc({new_id}, grace=3600) == ((), 0)  # everything is young
    removed, freed = store.gc({new_id}, grace=0)
    assert removed == (old_id,)
    assert freed >= len("print('v1')\n")
    assert not store.exists(old_id) and store.exists(new_id)
    assert tree_files(Path(new_path))["train.py"][1] == b"print('v2')\n" * 1000
    # the objects left are exactly those the live tree links to
    live = {
        os.lstat(os.path.join(f, n)).st_ino for f, _d, names in os.walk(new_path) for n in names
    }
    assert {
        os.lstat(Path(store.root) / "objects" / n[:2] / n).st_ino
        for n in _object_names(Path(store.root))
    } <= live
    assert store.gc(set(), grace=0)[0] == (new_id,)
    assert _object_names(Path(store.root)) == []
    assert old_path != new_path


def test_gc_spares_a_tree_reused_meanwhile(repo: Path, tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    tree_id, path = snapshot(store, repo)
    past = time.time() - 7200
    os.utime(path, (past, past))
    assert snapshot(store, repo) == (tree_id, path)  # reuse: touches the tree
    assert store.gc(set(), grace=3600) == ((), 0)
    assert store.exists(tree_id)


def test_gc_removes_stale_temporaries(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    stale = Path(store.root) / "trees" / ".tmp-1-abc"
    write(stale, {"x.py": "x"})
    past = time.time() - 7200
    os.utime(stale, (past, past))
    fresh = Path(store.root) / "trees" / ".tmp-2-def"
    fresh.mkdir()
    store.gc(set(), grace=3600)
    assert not stale.exists() and fresh.exists()


def test_copy_tree_from_another_store(repo: Path, tmp_path: Path) -> None:
    a = Store(str(tmp_path / "a"))
    b = Store(str(tmp_path / "b"))
    tree_id, path = snapshot(a, repo)
    (repo / "train.py").write_text("print('other')\n")
    snapshot(b, repo)  # b already holds every object but train.py's
    copied = b.copy_tree_from(a, tree_id)
    assert copied == b.tree_path(tree_id)
    assert tree_files(Path(copied)) == tree_files(Path(path))
    assert b.entries(tree_id) == a.entries(tree_id)
    assert b.copy_tree_from(a, tree_id) == copied
    with pytest.raises(
        SnapshotError, match=r"snapshot 0123456789abcdef0123 is not in .*\(pruned\?\)"
    ):
        b.copy_tree_from(a, "0123456789abcdef0123")


def test_archive_is_deterministic_and_complete(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = Store(str(tmp_path / "a"))
    tree_id, _path = snapshot(a, repo)
    first = Path(a.archive(tree_id))
    assert a.archive(tree_id) == str(first)
    b = Store(str(tmp_path / "b"))
    b.copy_tree_from(a, tree_id)
    monkeypatch.setattr(time, "time", lambda: 1e9)  # another clock: same bytes
    second = Path(b.archive(tree_id))
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(first.read_bytes())) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 for m in members.values())
        assert members["pkg"].isdir()
        assert (
            members["model_link.py"].issym() and members["model_link.py"].linkname == "pkg/model.py"
        )
        assert members["run.sh"].mode == 0o755 and members["train.py"].mode == 0o644
        f = tar.extractfile("data/blob.bin")
        assert f is not None and f.read() == FILES["data/blob.bin"]
    assert list(members) == sorted(members)


@pytest.mark.parametrize("bad", ["../../etc", "0123456789abcdef012", "0123456789ABCDEF0123", ""])
def test_a_tree_id_is_never_a_path(tmp_path: Path, bad: str) -> None:
    store = Store(str(tmp_path / "store"))
    for call in (store.exists, store.tree_path, store.archive, store.entries):
        with pytest.raises(SnapshotError, match="not a snapshot id"):
            call(bad)
    with pytest.raises(SnapshotError, match="not a snapshot id"):
        store.copy_tree_from(Store(str(tmp_path / "other")), bad)


def test_map_on_threads_keeps_order_and_raises_the_first_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from distspec.snapshot import _fileops

    monkeypatch.setattr(_fileops, "_workers", lambda: 3)
    threads: set[int] = set()

    def name(i: int) -> str:
        import threading

        threads.add(threading.get_ident())
        time.sleep(0.001)  # let the others take items too
        return f"item {i}"

    items = list(range(200))
    assert _fileops._map(name, items, 1 << 40) == [f"item {i}" for i in items]
    assert len(threads) > 1  # it ran on threads
    # Below the size it runs in this thread.
    threads.clear()
    assert _fileops._map(name, items, 10) == [f"item {i}" for i in items]
    assert len(threads) == 1

    done: list[int] = []

    def fails(i: int) -> str:
        if i == 20:
            raise SnapshotError("item 20 is unreadable")
        time.sleep(0.001)
        done.append(i)
        return ""

    with pytest.raises(SnapshotError, match="item 20"):
        _fileops._map(fails, items, 1 << 40)
    assert len(done) < len(items) - 1  # the others stopped early
