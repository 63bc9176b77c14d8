"""Run tests/runtime/probe.py under a real launcher and read back each rank's report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PROBE = Path(__file__).resolve().parent / "probe.py"
REPO = PROBE.parent.parent.parent
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables (pytest may run inside one)."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GROUP_RANK", "TORCHELASTIC_RUN_ID", "DISTSPEC_DEGREES", "DISTSPEC_JOB_DIR")  # fmt: skip
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("SLURM_", "PMI_", "PALS_", "OMPI_", "PBS_"))
    }
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def reports(stdout: str) -> list[dict[str, object]]:
    """The PROBE lines, sorted by rank."""
    found = [
        json.loads(line.split("PROBE ", 1)[1]) for line in stdout.splitlines() if "PROBE {" in line
    ]
    return sorted(found, key=lambda r: int(r.get("rank", -1)))  # type: ignore[call-overload]


def run(
    argv: Sequence[str], *, timeout: float = 240, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(**env),
        check=False,
    )


def torchrun(
    nproc: int, spec: dict[str, object], **env: str
) -> tuple[list[dict[str, object]], str]:
    proc = run(
        [TORCHRUN, "--standalone", "--nproc_per_node", str(nproc), str(PROBE), json.dumps(spec)],
        OMP_NUM_THREADS="1",
        **env,
    )
    got = reports(proc.stdout)
    assert proc.returncode == 0 and len(got) == nproc, proc.stdout[-3000:] + proc.stderr[-3000:]
    return got, proc.stderr
