"""Python callables on the local two-node Slurm cluster (scripts/slurm-cluster), through
sbatch and through Slurm's PBS wrappers (qsub; not a PBS server, see
tests/schedulers/test_pbs_cluster.py), with real torchrun and gloo across the nodes
n0 and n1. The job folder under the state dir is on the file system the nodes share.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import distspec
from distspec.errors import RemoteError
from tests.slurm_cluster import require_slurm_cluster

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.runtime import Dist

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _cluster(state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_slurm_cluster()
    # sbatch passes the submitter's environment on: torchrun must be on its PATH.
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ.get('PATH', '')}")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


def _options() -> dict[str, Any]:
    # A port of its own, so a concurrent multi-node job on the cluster cannot collide.
    return {"rdzv_port": random.randint(20000, 29000)}


def all_reduce_sum(dist: Dist) -> tuple[float, str, int]:
    import socket

    import torch
    import torch.distributed as td

    t = torch.tensor([float(dist.rank + 1)])
    td.all_reduce(t)
    return t.item(), socket.gethostname(), dist.node_rank


def world_size() -> int:
    from distspec.runtime import current

    return current().world_size


def raise_on_node_1(dist: Dist) -> str:
    if dist.node_rank == 1:
        raise KeyError(f"rank {dist.rank} has no key")
    return "ok"


def test_slurm_2x2_all_reduce_returns_the_sum() -> None:
    job = distspec.submit(all_reduce_sum, j="2x2", scheduler="slurm", options=_options())
    try:
        results = job.results(timeout=600)
    finally:
        if not job.done():
            job.cancel()
    assert [r[0] for r in results] == [10.0] * 4  # 1 + 2 + 3 + 4
    assert sorted({r[1] for r in results}) == ["n0", "n1"]
    assert [r[2] for r in results] == [0, 0, 1, 1]
    assert job.result() == results[0]


def test_slurm_raise_on_one_node_comes_back() -> None:
    job = distspec.submit(raise_on_node_1, j="2x2", scheduler="slurm", options=_options())
    try:
        with pytest.raises(RemoteError) as info:
            job.result(timeout=600)
    finally:
        if not job.done():
            job.cancel()
    err = info.value
    assert err.type_name == "KeyError"
    assert err.rank in (2, 3)
    assert err.host == "n1"
    assert "raise_on_node_1" in err.remote_traceback


@pytest.fixture
def pbs() -> None:
    if shutil.which("qsub") is None:
        pytest.skip("Slurm's PBS wrappers (qsub) are not installed")


@pytest.mark.usefixtures("pbs")
def test_pbs_one_node() -> None:
    job = distspec.submit(world_size, j="1x2", scheduler="pbs")
    try:
        assert job.results(timeout=600) == [2, 2]
    finally:
        if not job.done():
            job.cancel()


@pytest.mark.usefixtures("pbs")
def test_pbs_two_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The wrappers have no pbsdsh; their mpiexec (mpiexec.slurm, around srun) starts one
    # task per node. /usr/bin/mpiexec is Open MPI's here once it is installed, so the
    # wrappers' is put first on the PATH the job inherits.
    wrapper = Path("/usr/bin/mpiexec.slurm")
    if not wrapper.exists():
        pytest.skip("the PBS wrappers' mpiexec.slurm is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpiexec").symlink_to(wrapper)
    # It runs the srun beside itself.
    (bin_dir / "srun").symlink_to(shutil.which("srun") or "/usr/bin/srun")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    job = distspec.submit(
        all_reduce_sum,
        j="2x1",
        scheduler="pbs",
        cfg={"launcher": "mpiexec", "mpiexec_args": ""},
        options=_options(),
    )
    try:
        results = job.results(timeout=600)
    finally:
        if not job.done():
            job.cancel()
    assert [r[0] for r in results] == [3.0, 3.0]
    assert [r[1] for r in results] == ["n0", "n1"]
