"""The third-party workload corpus: scripts written the way PyTorch, Lightning,
transformers and Accelerate document them, which know nothing of distspec.

Each script under ``workloads/`` trains a few steps on synthetic data, prints
``rank R done: trained S steps`` on every rank, and with ``--fail-rank R`` makes
rank R raise ValueError after (or in) its first step. The tests run them through
``distspec run`` (local_cwd, Slurm) and ``distspec launch`` (in ``salloc``) and
check what a user would: exit 0 and every rank trained, or a non-zero exit that
names the failing rank and quotes its traceback, with nothing left behind.

The libraries come from the ``thirdparty`` extra (``scripts/dev-setup`` installs
it); a workload whose library is missing skips with the reason.

Time: these tests start about 30 jobs of 2-4 processes, each importing torch and
its library, so CI runs a subset by default: every workload's success on every
path, and each workload's failing variant on one path. ``DISTSPEC_TEST_THIRDPARTY=full``
runs the whole matrix (``=0`` none of it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "BIN",
    "STEPS",
    "WORKLOADS",
    "Workload",
    "done_ranks",
    "in_matrix",
    "leftover_processes",
    "stage",
    "wait_no_leftovers",
]

BIN = Path(sys.executable).parent
FOLDER = Path(__file__).resolve().parent / "workloads"
DONE = re.compile(r"rank (\d+) done: trained (\d+) steps")
STEPS = 3


@dataclass(frozen=True)
class Workload:
    name: str
    module: str  # the library it needs
    #: where its failing variant runs by default (the full matrix runs it everywhere)
    fails_on: str

    @property
    def script(self) -> Path:
        return FOLDER / f"{self.name}.py"

    def missing(self) -> str | None:
        """Why this workload cannot run here, or None."""
        for module in ("torch", self.module):
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install -e '.[thirdparty]')"
        return None


WORKLOADS = (
    Workload("torchrun_ddp", "torch", fails_on="slurm"),
    Workload("lightning_ddp", "lightning", fails_on="local_cwd"),
    Workload("transformers_gpt2", "transformers", fails_on="slurm"),
    Workload("accelerate_ddp", "accelerate", fails_on="local_cwd"),
)


def in_matrix(workload: Workload, where: str, *, failing: bool) -> None:
    """Skip this case when the library is missing, or it is outside the matrix chosen by
    ``DISTSPEC_TEST_THIRDPARTY`` (default: every success, each failure on one path)."""
    reason = workload.missing()
    if reason:
        pytest.skip(reason)
    mode = os.environ.get("DISTSPEC_TEST_THIRDPARTY", "default")
    if mode == "0":
        pytest.skip("the third-party corpus is off (DISTSPEC_TEST_THIRDPARTY=0)")
    if mode != "full" and failing and workload.fails_on != where:
        pytest.skip(
            f"{workload.name}'s failing variant runs on {workload.fails_on} by default, "
            "to keep CI's time; DISTSPEC_TEST_THIRDPARTY=full runs it here too"
        )


def stage(workload: Workload, tmp_path: Path) -> Path:
    """A copy of the workload in a folder named uniquely, so that its path marks this
    test's processes and nothing else's."""
    folder = tmp_path / f"tp-{uuid.uuid4().hex[:10]}"
    folder.mkdir()
    return Path(shutil.copy(workload.script, folder))


def done_ranks(text: str, steps: int = STEPS) -> list[int]:
    """The ranks that printed ``rank R done: trained STEPS steps``, sorted."""
    return sorted({int(r) for r, s in DONE.findall(text) if int(s) == steps})


def leftover_processes(marker: str) -> list[str]:
    """The live (not zombie) processes whose command line holds ``marker``
    (the cluster's nodes are namespaces of this machine: their processes are here too)."""
    out = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True, check=True)
    return [
        line
        for line in out.stdout.splitlines()
        if marker in line and not line.lstrip().startswith("Z")
    ]


def wait_no_leftovers(marker: str, timeout: float = 30) -> None:
    """Fail when processes holding ``marker`` outlive ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := leftover_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"processes left behind: {left}"
