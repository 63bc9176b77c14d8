"""Slurm's own ``srun --container`` for real: ``-cfg container=oci`` on the local
two-node cluster, with runc and an OCI bundle of the podman test image
(``scripts/container-image bundle``; ``oci on`` writes /etc/slurm/oci.conf for the
module and ``oci off`` removes it after).

slurmstepd runs each task through runc in the bundle, with the job's environment and
without ``SLURM_PROCID``/``SLURM_NODEID``/``SLURM_LOCALID``: distspec's batch script
exports the allocation's hosts and each task finds its node index from its hostname
(the bundle keeps the host's UTS and network namespaces). The scripts are third-party
style, as in tests/schedulers/test_podman_slurm_cluster.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.container_image import ranks_in_the_image, require_oci_bundle, slurm_oci_conf
from tests.schedulers.test_podman_slurm_cluster import INSIDE
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def bundle() -> Iterator[Path]:
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    made = require_oci_bundle()
    with slurm_oci_conf():
        yield made


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        cwd=cwd,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _run_2x2(bundle: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (cwd / "inside.py").write_text(INSIDE)
    return _run(
        cwd, "run", "-s", "slurm", "--wait", "-cfg", "container=oci,container_path=/opt/venv/bin",
        "dist.ddp", "-j", "2x2", "--image", str(bundle), *extra, "--script", "inside.py",
    )  # fmt: skip


def test_srun_container_sets_no_task_ids_inside(bundle: Path) -> None:
    """What distspec works around (../shared/reference/containers-local.md): inside a
    runc bundle the job's variables are there, the task's are not."""
    proc = subprocess.run(
        ["srun", "-N2", "--ntasks-per-node=1", f"--container={bundle}", "/bin/bash", "-c",
         'echo "$(hostname) job=${SLURM_JOB_ID:-unset} procid=${SLURM_PROCID:-unset}"'
         ' "venv=$(test -x /opt/venv/bin/python && echo yes)"'],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(proc.stdout.split("\n")[:-1])
    assert [line.split()[0] for line in lines] == ["n0", "n1"], proc.stdout
    assert all(re.fullmatch(r"n\d job=\d+ procid=unset venv=yes", line) for line in lines), lines


def test_ddp_2x2_runs_every_rank_in_the_bundle_on_both_nodes(
    bundle: Path, state_dir: Path, tmp_path: Path
) -> None:
    assert not Path("/opt/venv").exists(), "the host has /opt/venv: the test could not tell"
    run = _run_2x2(bundle, tmp_path)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    handle = re.search(r"slurm://\S+", said)
    assert handle, said
    logs = _run(tmp_path, "log", handle.group(0)).stdout
    # The image's Python (/opt/venv exists only in the bundle) ran every rank, and the
    # all_reduce crossed both nodes.
    by_node = ranks_in_the_image(logs, {"n0", "n1"})
    # Each node's torchrun got its own node rank from its hostname: ranks 0-1 on the
    # first node of the allocation, 2-3 on the second.
    assert by_node["0"] == by_node["1"] != by_node["2"] == by_node["3"], logs


def test_a_failing_rank_in_the_bundle_is_named_with_its_traceback(
    bundle: Path, state_dir: Path, tmp_path: Path
) -> None:
    run = _run_2x2(bundle, tmp_path, "--env", "FAIL_RANK=3")
    said = run.stdout + run.stderr
    assert run.returncode not in (0, 2), said
    assert re.search(r"FAILED after .*rank 3 on n[01]", said), said
    assert "ValueError: rank 3 fails inside the container" in said, said
