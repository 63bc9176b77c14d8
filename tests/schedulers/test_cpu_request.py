"""A CPU-only torchrun job asks Slurm and PBS for one CPU per process.

Without ``--cpu``/``-h``, ``dist.ddp -j 2x8`` used to request no CPUs, so the cluster's
default applied (often one CPU per task) and, where cores are confined, the 8
workers of a node shared one core. Now the request is the processes per node
(Slurm ``--cpus-per-task=8`` for the one task per node, also on the srun step; PBS
``ncpus=8`` / ``ppn=8``); GPU jobs and explicit ``--cpu`` are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from distspec.components.binder import bind
from distspec.components.loader import load
from distspec.schedulers.pbs import PbsScheduler
from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppDef
from tests.schedulers.batch_apps import APP_ID, JOB_DIR, STATE_DIR, bash_n


def ddp(*argv: str) -> AppDef:
    return bind(load("dist.ddp"), ["--script", "train.py", *argv])


def dry(scheduler: type[Any], app: AppDef, **opts: Any) -> str:
    sched = scheduler(state_dir=STATE_DIR)
    options = sched.parse_options({"job_dir": JOB_DIR, **opts})
    text: str = sched.compile(app, options, app_id=APP_ID).render()
    return text


def test_slurm_cpu_only_job_requests_a_cpu_per_process(
    golden: Callable[[str, str], None],
) -> None:
    text = dry(SlurmScheduler, ddp("-j", "2x8"))
    golden("slurm/ddp_2x8_cpu_only.sbatch", text)
    bash_n(text)
    assert "#SBATCH --cpus-per-task=8\n" in text
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "--cpus-per-task=8" in srun


def test_pbs_cpu_only_job_requests_a_cpu_per_process(golden: Callable[[str, str], None]) -> None:
    text = dry(PbsScheduler, ddp("-j", "2x8"))
    golden("pbs/ddp_2x8_cpu_only.pbs", text)
    bash_n(text)
    assert "#PBS -l select=2:ncpus=8:mpiprocs=1" in text
    assert "#PBS -l nodes=2:ppn=8" in dry(PbsScheduler, ddp("-j", "2x8"), resource_style="nodes")


@pytest.mark.parametrize(
    ("argv", "slurm", "pbs"),
    [
        (["-j", "2x8", "--cpu", "4"], "--cpus-per-task=4", "ncpus=4"),
        (["-j", "2x8", "--gpu", "8"], None, None),
        (["-j", "1x3"], "--cpus-per-task=3", "ncpus=3"),
    ],
)
def test_explicit_cpu_wins_and_gpu_jobs_request_none(
    argv: list[str], slurm: str | None, pbs: str | None
) -> None:
    text = dry(SlurmScheduler, ddp(*argv))
    if slurm is None:
        assert "--cpus-per-task" not in text
    else:
        assert f"#SBATCH {slurm}\n" in text
    text = dry(PbsScheduler, ddp(*argv))
    if pbs is None:
        assert "ncpus" not in text
    else:
        assert pbs in text


def test_a_plain_command_requests_nothing() -> None:
    app = bind(load("utils.sh"), ["--", "hostname"])
    assert "--cpus-per-task" not in dry(SlurmScheduler, app)
    assert "ncpus" not in dry(PbsScheduler, app)
