"""Helpers for the snapshot tests: real git repositories made in a temporary folder."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` (no user or system config); its stdout."""
    done = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def write(root: Path, files: dict[str, str | bytes]) -> None:
    """Write ``{relative path: content}`` under root, making folders."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def make_repo(root: Path, files: dict[str, str | bytes], *, commit: bool = True) -> Path:
    """A git repository at root holding ``files``, all committed (or only added)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    write(root, files)
    git(root, "add", "-A")
    if commit:
        git(root, "commit", "-q", "-m", "initial")
    return root
