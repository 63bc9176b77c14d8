"""distspec.snapshot.files: what a snapshot takes, on real git repositories and plain trees."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from distspec.errors import SnapshotError, UsageError
from distspec.snapshot import files as files_mod
from distspec.snapshot.files import collect, find_base

from ._repo import git, make_repo, write

BIG = 10**12


def paths(listing: files_mod.Listing) -> list[str]:
    return [e.path for e in listing.entries]


def test_git_clean_tree_takes_tracked_files_and_leaves_ignored_out(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "r",
        {
            ".gitignore": "data/\n*.ckpt\n",
            "train.py": "print(1)\n",
            "pkg/__init__.py": "",
            "pkg/model.py": "x = 1\n",
        },
    )
    write(repo, {"data/big.bin": b"\0" * 1000, "model.ckpt": "w", "pkg/notes.txt": "n"})
    listing = collect(str(repo), max_bytes=BIG)
    assert listing.git
    assert listing.base == str(repo)
    assert paths(listing) == [
        ".gitignore",
        "pkg/__init__.py",
        "pkg/model.py",
        "pkg/notes.txt",
        "train.py",
    ]
    assert listing.untracked == ("pkg/notes.txt",)
    train = next(e for e in listing.entries if e.path == "train.py")
    assert (train.kind, train.size, train.executable, train.target) == ("file", 9, False, "")
    assert listing.bytes == sum(e.size for e in listing.entries)


def test_git_dirty_tree_deleted_and_executable(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.py": "a", "gone.py": "g", "run.sh": "#!/bin/sh\n"})
    (repo / "run.sh").chmod(0o755)
    (repo / "gone.py").unlink()  # deleted, not committed
    (repo / "a.py").write_text("changed")
    write(repo, {"new/b.py": "b"})
    listing = collect(str(repo), max_bytes=BIG)
    assert paths(listing) == ["a.py", "new/b.py", "run.sh"]
    by_path = {e.path: e for e in listing.entries}
    assert by_path["run.sh"].executable and not by_path["a.py"].executable
    assert by_path["a.py"].size == len("changed")
    assert listing.untracked == ("new/b.py",)


def test_repo_with_no_commit_yet(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.py": "a"}, commit=False)
    write(repo, {"b.py": "b"})
    listing = collect(str(repo), max_bytes=BIG)
    assert paths(listing) == ["a.py", "b.py"]
    assert listing.untracked == ("b.py",)


def test_plain_walk_default_excludes(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "train.py": "t",
            "pkg/m.py": "m",
            "pkg/__pycache__/m.cpython-311.pyc": "c",
            "pkg/old.pyc": "c",
            ".venv/lib/x.py": "v",
            "node_modules/a/index.js": "j",
            "wandb/run/log": "l",
            "thing.egg-info/PKG-INFO": "p",
            ".hg/store": "h",
            "deep/.DS_Store": "d",
        },
    )
    listing = collect(str(tmp_path), max_bytes=BIG)
    assert not listing.git
    assert paths(listing) == ["pkg/m.py", "train.py"]
    assert listing.untracked == ()


def test_exclude_globs_in_both_modes(tmp_path: Path) -> None:
    files = {
        "a.py": "a",
        "ckpt/last.pt": "w",
        "sub/keep.py": "k",
        "sub/drop.txt": "d",
        "x.log": "l",
    }
    repo = make_repo(tmp_path / "r", files)
    write(tmp_path / "plain", files)
    for base in (repo, tmp_path / "plain"):
        listing = collect(str(base), exclude=["ckpt", "*.log", "sub/drop.txt"], max_bytes=BIG)
        got = [p for p in paths(listing) if not p.startswith(".git")]
        assert got == ["a.py", "sub/keep.py"], base


def test_submodule_files_taken_and_commit_recorded(tmp_path: Path) -> None:
    lib = make_repo(tmp_path / "lib", {"lib/__init__.py": "", "lib/core.py": "c = 1\n"})
    repo = make_repo(tmp_path / "r", {"train.py": "t"})
    git(repo, "submodule", "add", "-q", str(lib), "third/lib")
    git(repo, "commit", "-q", "-m", "add lib")
    sub = repo / "third" / "lib"
    write(sub, {"lib/untracked.py": "u"})
    nested = make_repo(repo / "nested", {"n.py": "n"})  # an untracked repo inside
    listing = collect(str(repo), max_bytes=BIG)
    assert paths(listing) == [
        ".gitmodules",
        "nested/n.py",
        "third/lib/lib/__init__.py",
        "third/lib/lib/core.py",
        "third/lib/lib/untracked.py",
        "train.py",
    ]
    head = git(sub, "rev-parse", "HEAD").strip()
    nested_head = git(nested, "rev-parse", "HEAD").strip()
    assert listing.submodules == (("nested", nested_head), ("third/lib", head))
    assert listing.untracked == ("nested/n.py", "third/lib/lib/untracked.py")


def test_uninitialised_submodule_takes_nothing(tmp_path: Path) -> None:
    lib = make_repo(tmp_path / "lib", {"core.py": "c"})
    origin = make_repo(tmp_path / "origin", {"train.py": "t"})
    git(origin, "submodule", "add", "-q", str(lib), "lib")
    git(origin, "commit", "-q", "-m", "lib")
    git(tmp_path, "clone", "-q", str(origin), "clone")  # no --recursive: lib/ stays empty
    listing = collect(str(tmp_path / "clone"), max_bytes=BIG)
    assert paths(listing) == [".gitmodules", "train.py"]
    assert listing.submodules == ()


@pytest.mark.parametrize("mode", ["git", "plain"])
def test_symlink_policy(tmp_path: Path, mode: str) -> None:
    outside = tmp_path / "scratch" / "data"
    outside.mkdir(parents=True)
    (outside / "d.bin").write_text("d")
    base = tmp_path / "r"
    files = {"pkg/real.py": "r", "cfg/a.yaml": "a", "ignored/x": "x"}
    if mode == "git":
        make_repo(base, {**files, ".gitignore": "ignored/\n"})
    else:
        write(base, files)
    os.symlink("real.py", base / "pkg" / "rel_in.py")  # relative, inside
    os.symlink(base / "cfg" / "a.yaml", base / "abs_in.yaml")  # absolute, inside
    os.symlink(outside, base / "data")  # outside: kept pointing at the same data
    os.symlink("nowhere/at/all", base / "dangling")
    os.symlink("pkg", base / "pkg_link")  # a folder link: not followed
    os.symlink("../../r/pkg/real.py", base / "cfg" / "roundabout.py")
    listing = collect(str(base), max_bytes=BIG)
    links = {e.path: e.target for e in listing.entries if e.kind == "link"}
    expected = {
        "pkg/rel_in.py": "real.py",
        "abs_in.yaml": "cfg/a.yaml",
        "data": str(outside.resolve()),
        "dangling": "nowhere/at/all",
        "pkg_link": "pkg",
        "cfg/roundabout.py": "../pkg/real.py",
    }
    if mode == "git":
        os.symlink("ignored/x", base / "to_ignored")  # inside but not taken: absolute
        listing = collect(str(base), max_bytes=BIG)
        links = {e.path: e.target for e in listing.entries if e.kind == "link"}
        expected["to_ignored"] = str((base / "ignored" / "x").resolve())
    assert links == expected
    assert not any(p.startswith(("pkg_link/", "data/")) for p in paths(listing))
    assert all(e.size == 0 and not e.executable for e in listing.entries if e.kind == "link")


def test_special_files_left_out(tmp_path: Path) -> None:
    write(tmp_path, {"a.py": "a"})
    os.mkfifo(tmp_path / "fifo")
    assert paths(collect(str(tmp_path), max_bytes=BIG)) == ["a.py"]
    make_repo(tmp_path / "r", {"a.py": "a"})
    os.mkfifo(tmp_path / "r" / "fifo")
    assert paths(collect(str(tmp_path / "r"), max_bytes=BIG)) == ["a.py"]


def test_size_cap_names_the_three_largest_top_level_entries(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "r",
        {
            "data/a.bin": b"x" * 400_000,
            "data/b.bin": b"x" * 300_000,
            "ckpt.pt": b"x" * 500_000,
            "src/m.py": b"x" * 200_000,
            "small.py": b"x" * 10,
        },
    )
    with pytest.raises(SnapshotError) as info:
        collect(str(repo), max_bytes=1_000_000)
    message = str(info.value)
    assert isinstance(info.value, UsageError)
    assert "\n" not in message
    assert "1.4 MB" in message and "1.0 MB" in message
    assert "largest: data/ (700.0 KB), ckpt.pt (500.0 KB), src/ (200.0 KB);" in message
    assert "small.py" not in message
    assert "-cfg snapshot_exclude=PATTERN" in message and "snapshot_max_mb" in message
    assert collect(str(repo), exclude=["data"], max_bytes=1_000_000).bytes == 700_010


def test_unlistable_folder_is_a_snapshot_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # We run as root, for whom chmod 000 stops nothing: make scandir refuse instead.
    write(tmp_path, {"a.py": "a", "secret/k": "k"})
    real = os.scandir

    def scandir(path: str) -> object:
        if str(path).endswith("secret"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(files_mod.os, "scandir", scandir)
    with pytest.raises(
        SnapshotError, match=r"cannot list .*secret .*Permission denied.*snapshot_exclude"
    ):
        collect(str(tmp_path), max_bytes=BIG)


def test_no_git_installed_falls_back_to_a_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "r", {"a.py": "a", ".gitignore": "data/\n"})
    write(repo, {"data/x": "x"})
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    listing = collect(str(repo), max_bytes=BIG)
    assert not listing.git
    assert paths(listing) == [".gitignore", "a.py", "data/x"]


def test_git_failure_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / ".git").write_text("gitdir: /nonexistent/here\n")  # a broken .git file
    with pytest.raises(SnapshotError, match=r"^git ls-files failed in .*r: ") as info:
        collect(str(tmp_path / "r"), max_bytes=BIG)
    assert "\n" not in str(info.value)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="not a directory"):
        collect(str(tmp_path / "missing"), max_bytes=BIG)


def test_find_base_matches_git_rev_parse(tmp_path: Path) -> None:
    lib = make_repo(tmp_path / "lib", {"core.py": "c"})
    repo = make_repo(tmp_path / "r", {"src/pkg/train.py": "t"})
    git(repo, "submodule", "add", "-q", str(lib), "lib")
    plain = tmp_path / "plain" / "sub"
    plain.mkdir(parents=True)
    (plain / "s.py").write_text("s")
    for start in (repo / "src" / "pkg" / "train.py", repo / "src", repo, repo / "lib" / "core.py"):
        base, is_git = find_base(str(start))
        folder = start if start.is_dir() else start.parent
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert (base, is_git) == (top, True), start
    assert find_base(str(plain / "s.py")) == (str(plain), False)
    assert find_base(str(plain)) == (str(plain), False)


def test_find_base_defaults_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_repo(tmp_path / "r", {"a/b.py": "b"})
    monkeypatch.chdir(tmp_path / "r" / "a")
    assert find_base() == (str(tmp_path / "r"), True)


def test_a_plain_walk_stops_at_the_cap_and_refuses_a_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "plain"
    write(plain, {f"d{i}/f.bin": b"\0" * 4000 for i in range(50)})
    seen: list[str] = []
    real = os.scandir

    def counting(path: str):  # type: ignore[no-untyped-def]
        seen.append(path)
        return real(path)

    monkeypatch.setattr(files_mod.os, "scandir", counting)
    with pytest.raises(SnapshotError, match=r"more than the cap of 10.0 KB \(walk stopped at"):
        collect(str(plain), max_bytes=10_000)
    assert len(seen) < 10  # it did not walk all 51 folders to say no
    monkeypatch.setattr(files_mod.os, "scandir", real)
    home = tmp_path / "home"
    write(home, {"train.py": "print(1)\n", ".cache/pip/x": "y"})
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(SnapshotError, match="is the root folder: a snapshot would copy all"):
        collect("/", max_bytes=BIG)
    # A home folder is walked without the folders it holds besides code.
    assert paths(collect(str(home), max_bytes=BIG)) == ["train.py"]
    project = home / "project"
    write(project, {"train.py": "1", ".cache/x": "2", ".local/lib/y.py": "3"})
    assert paths(collect(str(project), max_bytes=BIG)) == ["train.py"]
