"""``run --wait --log`` on the real local Slurm cluster: 4 ranks on 2 nodes print a
numbered sequence each; every line arrives once, in order, prefixed with its replica
(node) and global rank, read from the job folder's per-replica files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_follow import NUMBERED, numbered
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = pytest.mark.slurm
BIN = Path(sys.executable).parent


def test_slurm_job_streams_every_rank_exactly_once(tmp_path: Path, state_dir: Path) -> None:
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    lines = 200
    (tmp_path / "count.py").write_text(NUMBERED.format(lines=lines))
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [
            str(BIN / "distspec"),
            "run",
            "-s",
            "slurm",
            "--wait",
            "--log",
            "dist.ddp",
            "-j",
            "2x2",
            "--script",
            "count.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    handle = re.search(r"slurm://\S+", proc.stdout)
    try:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        numbered(proc.stdout, 4, lines)
        # Both nodes' files were followed.
        assert set(re.findall(r"^count/([01]) rank \d\|", proc.stdout, re.M)) == {"0", "1"}
        assert re.search(r"SUCCEEDED in [\d.]+s", proc.stderr), proc.stderr
    finally:
        if handle:
            subprocess.run(["scancel", handle.group(0).rsplit("/", 1)[1]], check=False)


def test_slurm_job_streams_into_a_pipe_without_log(tmp_path: Path, state_dir: Path) -> None:
    # `run --wait` streams on every backend by default, also when stdout is a pipe
    # (CI logs, `| tee`); it used to stream Slurm jobs only on a terminal or with --log.
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}

    def run_wait(*flags: str) -> subprocess.CompletedProcess[str]:
        argv = ["run", "-s", "slurm", "--wait", *flags, "utils.sh", "--", "echo hi $((6*7))"]
        return subprocess.run(
            [str(BIN / "distspec"), *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )

    proc = run_wait()
    handle = re.search(r"slurm://\S+", proc.stdout)
    try:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        assert "sh/0| hi 42" in proc.stdout.splitlines(), proc.stdout
        quiet = run_wait("--no-log")
        assert quiet.returncode == 0, quiet.stderr
        assert "hi 42" not in quiet.stdout
    finally:
        if handle:
            subprocess.run(["scancel", handle.group(0).rsplit("/", 1)[1]], check=False)
