"""TorchX's CLI spellings that distspec's CLI accepts as they are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_scheduler_args_is_cfg(tmp_path: Path) -> None:
    """TorchX's own Slurm test (scripts/slurmtest.sh) spells -cfg --scheduler_args."""
    (tmp_path / "main.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "TORCHX"))}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "distspec",
            "run",
            "--dryrun",
            "--scheduler",
            "slurm",
            "--scheduler_args",
            "partition=compute,time=10",
            "dist.ddp",
            "-j",
            "2x1",
            "--script",
            "main.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --partition=compute" in proc.stdout
    assert "#SBATCH --time=10" in proc.stdout
