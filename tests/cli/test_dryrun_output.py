"""``run --dryrun -o DIR``: DIR/submit.sh submits the written request from the
directory the dry run ran in, so a job's relative paths resolve as with ``run``,
wherever submit.sh is started from. Run for real: local_cwd (the supervisor in the
foreground) and Slurm (sbatch on the local cluster)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.test_cli import distspec
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

BIN = Path(sys.executable).parent


def by_hand(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(
        [str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_local_submit_sh_runs_from_the_dry_run_directory(tmp_path: Path, state_dir: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.py").write_text("import os\nprint('hello from', os.getcwd())\n")
    dry = distspec("run", "--dryrun", "-o", "out", "utils.python", "--script", "hello.py", cwd=work)
    assert dry.returncode == 0, dry.stderr
    script = work / "out" / "submit.sh"
    assert f"cd {work}\n" in script.read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = by_hand(script, elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "out" / "logs" / "hello-0.stdout").read_text() == f"hello from {work}\n"


@pytest.mark.slurm
def test_slurm_submit_sh_runs_from_the_dry_run_directory(tmp_path: Path, state_dir: Path) -> None:
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.txt").write_text("relative file found\n")
    dry = distspec(
        "run", "-s", "slurm", "--dryrun", "-o", "out", "utils.sh", "--", "cat data.txt", cwd=work
    )
    assert dry.returncode == 0, dry.stderr
    done = by_hand(work / "out" / "submit.sh", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    job = done.stdout.strip().split(";")[0]
    assert job.isdigit(), done.stdout
    try:
        for _ in range(600):
            queued = subprocess.run(
                ["squeue", "-h", "-j", job], capture_output=True, text=True, check=False
            )
            if not queued.stdout.strip():
                break
            time.sleep(0.2)
        logs = list((state_dir / "slurm").glob(f"*-{job}/sh-0.log"))
        assert logs, list((state_dir / "slurm").rglob("*"))
        assert re.search(r"^relative file found$", logs[0].read_text(), re.M), logs[0].read_text()
    finally:
        subprocess.run(["scancel", job], capture_output=True, check=False)
