"""What ran: the provenance record every submitted run keeps in its job folder.

``provenance.json`` says the git commit, branch, whether the tree was dirty (the diff
beside it as ``snapshot.patch``), the untracked files a snapshot took, the command
line, the resolved run options with each value's source, the distspec / Python /
torch versions, the submitting host and user, the snapshot's tree id, and the AppDef
as the component built it (before the snapshot's rewrite), which is what
``distspec rerun`` submits again. What may be a secret is masked as
:data:`distspec.config.MASK` by the rules of :func:`distspec.config.masked`.

Runs only at submit, describe and rerun; never on a dry run's path.
"""

from __future__ import annotations

import os
import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from distspec.snapshot.policy import Snapshot
    from distspec.specs.app import AppDef

__all__ = [
    "PATCH_FILE",
    "RECORD_FILE",
    "GitState",
    "RecordedGit",
    "check_dirty",
    "git_state",
    "mask_argv",
    "mask_env",
    "read",
    "record",
    "recorded_trees",
    "write",
]

RECORD_FILE = "provenance.json"
PATCH_FILE = "snapshot.patch"
VERSION = 1


class GitState:
    """A repository's state at submit: commit, branch, what differs from HEAD."""

    def __init__(
        self,
        base: str,
        *,
        commit: str | None,
        branch: str | None,
        changed: Sequence[str],
        remote: str | None = None,
    ) -> None:
        self.base = base
        self.commit = commit
        self.branch = branch
        self.changed = tuple(changed)
        self.remote = remote
        self._patch: bytes | None = None

    @property
    def dirty(self) -> bool:
        """Whether tracked files differ from HEAD (staged or not)."""
        return bool(self.changed)

    def patch(self) -> bytes:
        """``git diff HEAD --binary``: what the tree has that HEAD has not (b"" when clean)."""
        if self._patch is None:
            self._patch = b""
            if self.dirty:
                args = ["diff", "HEAD", "--binary"] if self.commit else ["diff", "--cached"]
                self._patch = _git(self.base, *args, binary=True) or b""
        return self._patch

    def to_dict(self) -> dict[str, Any]:
        """The record's ``git`` section."""
        return {
            "commit": self.commit,
            "branch": self.branch,
            "remote": self.remote,
            "dirty": self.dirty,
            "changed": list(self.changed),
            "patch": PATCH_FILE if self.dirty else None,
        }


class RecordedGit:
    """The git section of an earlier record, for a rerun of its snapshot: the code is
    that run's, not the working tree's now (its patch stays in that run's folder)."""

    def __init__(self, section: Mapping[str, Any] | None) -> None:
        self.section = dict(section) if section else None

    def patch(self) -> bytes:
        """Nothing: the rerun's code is the snapshot, whose diff the first run kept."""
        return b""

    def to_dict(self) -> dict[str, Any] | None:
        """The record's ``git`` section, as the first run recorded it."""
        return self.section


def _git(base: str, *args: str, binary: bool = False) -> Any:
    """``git -C base ARGS``'s output, or None when git fails or is missing."""
    import subprocess

    try:
        proc = subprocess.run(
            ["git", "-C", base, *args], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout if binary else proc.stdout.decode(errors="replace")


def git_state(base: str) -> GitState | None:
    """The state of the repository at ``base``, or None when it is not one (or git is
    missing). One ``git status`` call; the diff is read only when asked for."""
    out = _git(base, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=no")
    if out is None:
        return None
    commit = branch = None
    changed = []
    for entry in out.split("\0"):
        if entry.startswith("# branch.oid "):
            oid = entry.split(" ", 2)[2]
            commit = None if oid == "(initial)" else oid
        elif entry.startswith("# branch.head "):
            head = entry.split(" ", 2)[2]
            branch = None if head == "(detached)" else head
        elif entry[:2] in ("1 ", "2 ", "u "):
            changed.append(entry.rsplit(" ", 1)[-1] if entry[0] != "2" else entry.split(" ")[-1])
    remote = _git(base, "config", "--get", "remote.origin.url")
    return GitState(
        base,
        commit=commit,
        branch=branch,
        changed=changed,
        remote=_without_credentials(remote.strip()) if remote else None,
    )


def _without_credentials(url: str) -> str:
    """``https://user:token@host/x`` -> ``https://host/x``: a remote's URL may hold a token."""
    return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", url)


def check_dirty(snapshot: Snapshot, state: GitState | None) -> None:
    """Apply ``snapshot_dirty`` to a snapshot of a tree with uncommitted changes:
    ``refuse`` raises, ``warn`` says one line on stderr, ``allow`` says nothing.

    Raises:
        SnapshotError: ``refuse``, and tracked files differ from HEAD.
    """
    if state is None or not state.dirty or snapshot.dirty == "allow":
        return
    count = len(state.changed)
    files = f"{count} file{'s' if count != 1 else ''} ({', '.join(state.changed[:3])}"
    files += (", ...)" if count > 3 else ")") + (" differ" if count != 1 else " differs")
    head = state.commit[:12] if state.commit else "no commit yet"
    if snapshot.dirty == "refuse":
        from distspec.errors import SnapshotError

        raise SnapshotError(
            f"{snapshot.base}: {files} from HEAD ({head}) and -cfg "
            "snapshot_dirty=refuse; commit them, or allow it with -cfg snapshot_dirty=warn"
        )
    from distspec.runner import tell

    tell(
        f"distspec: snapshot of {snapshot.base}: {files} from HEAD ({head}); the job "
        f"runs {'it' if count == 1 else 'them'} as {'it is' if count == 1 else 'they are'} "
        f"now (the diff is kept as {PATCH_FILE} in its job folder)"
    )


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with what may be a secret (``HF_TOKEN``, ``DB_PASSWORD``...) masked."""
    from distspec.config import masked

    return {k: str(masked(k, v)) for k, v in env.items()}


_ASSIGNMENT = re.compile(r"([A-Za-z_][\w.-]*)=([^,]*)")


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the value of every ``KEY=VALUE`` whose key may name a
    secret masked (``--env HF_TOKEN=...``, ``-cfg secret_env=...``)."""
    from distspec.config import MASK, masked

    def hide(m: re.Match[str]) -> str:
        key, value = m.group(1), m.group(2)
        return f"{key}={MASK}" if masked(key, value) != value else m.group(0)

    return [_ASSIGNMENT.sub(hide, word) for word in argv]


def _command_line(argv: Sequence[str] | None) -> list[str]:
    """``argv``, else this process's: ``distspec ...`` rather than the console script's path."""
    words = list(sys.argv if argv is None else argv)
    if argv is None and words and os.path.basename(words[0]) == "distspec":
        words[0] = "distspec"
    return words


def _masked_app(app: AppDef) -> dict[str, Any]:
    data = app.to_dict()
    for role in data.get("roles", []):
        if isinstance(role.get("env"), dict):
            role["env"] = mask_env(role["env"])
    return data


def _versions() -> dict[str, str | None]:
    """distspec's, Python's and torch's versions (torch's from its metadata: not imported)."""
    import platform
    from importlib import metadata

    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("distspec", "torch"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def record(
    *,
    handle: str,
    app: AppDef,
    options: Mapping[str, Any],
    sources: Mapping[str, str],
    snapshot: Snapshot | None,
    state: GitState | RecordedGit | None,
    rerun_of: str | None = None,
    argv: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The provenance record of a run just submitted as ``handle``.

    ``app`` is the AppDef as the component built it; ``options`` the resolved run
    options (as strings) and ``sources`` where each came from.
    """
    import getpass
    import socket
    import time

    from distspec.config import masked

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    config = {
        key: {"value": masked(key, value), "source": sources.get(key, "default")}
        for key, value in options.items()
    }
    snap = None
    if snapshot is not None:
        snap = {
            "id": snapshot.tree_id,
            "store": snapshot.root,
            "path": snapshot.tree,
            "job_path": snapshot.job_path,
            "base": snapshot.base,
            "git": snapshot.git,
            "files": snapshot.files,
            "bytes": snapshot.bytes,
            "untracked": list(snapshot.untracked),
            "submodules": {path: commit for path, commit in snapshot.submodules},
        }
    return {
        "version": VERSION,
        "handle": handle,
        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "user": user,
        "cwd": snapshot.workdir if snapshot is not None else os.getcwd(),
        "argv": mask_argv(_command_line(argv)),
        "versions": _versions(),
        "options": config,
        "snapshot": snap,
        "git": state.to_dict() if state is not None else None,
        "rerun_of": rerun_of,
        "app": _masked_app(app),
    }


def write(folder: str, data: Mapping[str, Any], patch: bytes = b"") -> None:
    """Write the record (and the patch, if any) into the job folder ``folder``: a path
    here (created if the job has not made it yet) or an fsspec URL."""
    import json

    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    if "://" in folder:
        import fsspec

        fs, root = fsspec.core.url_to_fs(folder)
        fs.makedirs(root, exist_ok=True)
        with fs.open(f"{root}/{RECORD_FILE}", "w") as f:
            f.write(text)
        if patch:
            with fs.open(f"{root}/{PATCH_FILE}", "wb") as f:
                f.write(patch)
        return
    from distspec._files import write_atomic

    os.makedirs(folder, mode=0o700, exist_ok=True)
    write_atomic(os.path.join(folder, RECORD_FILE), text.encode())
    if patch:
        write_atomic(os.path.join(folder, PATCH_FILE), patch)


def read(folder: str) -> dict[str, Any] | None:
    """The record in job folder ``folder`` (a path or fsspec URL); None when it has none
    or it cannot be read as one."""
    import json

    try:
        if "://" in folder:
            import fsspec

            with fsspec.open(f"{folder.rstrip('/')}/{RECORD_FILE}", "r") as f:
                data = json.load(f)
        else:
            with open(os.path.join(folder, RECORD_FILE), encoding="utf-8") as f:
                data = json.load(f)
    except (OSError, ValueError):
        return None
    except Exception:  # a remote store's own errors: the record is a courtesy here
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


def recorded_trees(state_dir: str) -> set[str]:
    """The snapshot tree ids that the runs kept under ``state_dir`` record (every
    ``<state_dir>/<backend>/<run>/provenance.json``), so pruning keeps them."""
    import glob
    import json

    live: set[str] = set()
    for path in glob.glob(os.path.join(glob.escape(state_dir), "*", "*", RECORD_FILE)):
        try:
            with open(path, encoding="utf-8") as f:
                snap = json.load(f).get("snapshot")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(snap, dict) and isinstance(snap.get("id"), str):
            live.add(snap["id"])
    return live
