"""examples/train_ddp.py saves its checkpoint into the job folder, not rank 0's
node-local temp directory (which the other nodes, the next attempt and the user
cannot see): ``$DISTSPEC_JOB_DIR/train_ddp.pt``, else the working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "train_ddp.py"


def _train(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "TORCHELASTIC"))}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "2", "--log-every", "1"],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.torch
@pytest.mark.parametrize("job_dir", [True, False])
def test_checkpoint_goes_to_the_job_folder_else_the_working_directory(
    tmp_path: Path, job_dir: bool
) -> None:
    work, folder = tmp_path / "work", tmp_path / "job"
    work.mkdir()
    folder.mkdir()
    proc = _train(work, **({"DISTSPEC_JOB_DIR": str(folder)} if job_dir else {}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = (folder if job_dir else work) / "train_ddp.pt"
    assert f"checkpoint: {expected}" in proc.stdout or f"checkpoint: {expected.name}" in proc.stdout
    assert expected.is_file()
    assert not (work / "train_ddp.pt").exists() or not job_dir
