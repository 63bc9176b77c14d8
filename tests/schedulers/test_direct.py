"""Direct launch (``-cfg workers=direct``) without a cluster: Slurm and PBS goldens,
what it refuses, and how the job folder's ``ranks`` file sets the replica count."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from distspec.errors import CompileError
from distspec.schedulers.batch.direct import direct_worker, task_count
from distspec.schedulers.pbs import PbsScheduler
from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppDef, Role
from distspec.specs.topology import Topology
from distspec.torchrun import torchrun_args as real_torchrun_args
from tests.schedulers.batch_apps import app as _app
from tests.schedulers.batch_apps import bash_n, compile_text, trainer_role


def _slurm(app: AppDef, **opts: Any) -> str:
    return compile_text(SlurmScheduler, app, workers="direct", **opts)


def _pbs(app: AppDef, **opts: Any) -> str:
    return compile_text(PbsScheduler, app, workers="direct", **opts)


def _module_role() -> Role:
    args = real_torchrun_args(
        Topology(nodes=2, nproc_per_node=4), module="pkg.train", script_args=("--tag", "a$b")
    )
    return dataclasses.replace(trainer_role(2, 4), args=tuple(args))


GOLDEN_CASES: dict[str, Callable[[], str]] = {
    "slurm/direct_2x8.sbatch": lambda: _slurm(_app(trainer_role(2, 8, gpu=8))),
    "slurm/direct_module_requeue.sbatch": lambda: _slurm(
        _app(_module_role()), requeue="true", rank0_host="{host}-ib"
    ),
    "pbs/direct_2x8_select.pbs": lambda: _pbs(_app(trainer_role(2, 8, gpu=8))),
    "pbs/direct_module_nodes.pbs": lambda: _pbs(
        _app(_module_role()), resource_style="nodes", mpiexec_args="--ppn;1;-bind-to;core"
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_scripts(case: str, golden: Callable[[str, str], None]) -> None:
    text = GOLDEN_CASES[case]()
    golden(case, text)
    bash_n(text)


@pytest.mark.parametrize("compile_", [_slurm, _pbs])
def test_each_rank_runs_torchrun_env_with_the_worker_and_its_prefix(
    compile_: Callable[..., str],
) -> None:
    text = compile_(_app(_module_role()))
    assert "torchrun --" not in text
    assert "python -m distspec.runtime.torchrun_env python -u -m pkg.train --tag " in text
    assert 'sed -u "s/^/[rank$' in text
    assert 'echo 8 > "$DISTSPEC_JOB_DIR/ranks"' in text


def test_slurm_tasks_per_node_and_cpus_share() -> None:
    text = _slurm(_app(trainer_role(2, 8, gpu=8)))
    assert "#SBATCH --ntasks-per-node=8\n#SBATCH --cpus-per-task=2\n" in text
    assert "srun --ntasks-per-node=8 --cpus-per-task=2 " in text


def test_pbs_places_m_ranks_per_host_without_the_default_ppn() -> None:
    text = _pbs(_app(trainer_role(2, 8, gpu=8)))
    assert "mpiprocs=8" in text
    assert "mpiexec -n 16 --ppn 8 " in text and "--ppn 1" not in text


def test_torchrun_default_scripts_do_not_change() -> None:
    role = trainer_role(2, 8, gpu=8)
    for sched in (SlurmScheduler, PbsScheduler):
        assert compile_text(sched, _app(role)) == compile_text(
            sched, _app(role), workers="torchrun"
        )


def _refusal(app: AppDef) -> str:
    with pytest.raises(CompileError) as info:
        _slurm(app)
    text = str(info.value)
    assert "\n" not in text
    with pytest.raises(CompileError):
        _pbs(app)
    return text


def test_refuses_elastic() -> None:
    assert "fixed node count" in _refusal(_app(trainer_role(4, 8, min_nodes=1)))


def test_refuses_torchrun_restarts() -> None:
    args = real_torchrun_args(Topology(nodes=2, nproc_per_node=2), script="t.py", max_restarts=3)
    role = dataclasses.replace(trainer_role(2, 2), args=tuple(args))
    assert "--max_restarts 3" in _refusal(_app(role))


def test_refuses_a_role_that_is_not_torchrun() -> None:
    role = dataclasses.replace(trainer_role(2, 2), entrypoint="python", args=("t.py",))
    assert "applies to torchrun roles" in _refusal(_app(role))


def test_refuses_retries_and_several_roles() -> None:
    assert "max_retries" in _refusal(_app(dataclasses.replace(trainer_role(2, 2), max_retries=1)))
    assert "2 roles" in _refusal(_app(trainer_role(2, 2), trainer_role(1, 1, name="b")))


def test_refuses_local_rank_template() -> None:
    role = dataclasses.replace(
        trainer_role(1, 2), args=("--nnodes", "1", "--nproc_per_node", "2", "t.py", "${local_rank}")
    )
    assert "LOCAL_RANK" in _refusal(_app(role))


def test_dollars_arrive_as_torchrun_would_hand_them() -> None:
    args = real_torchrun_args(
        Topology(nodes=1, nproc_per_node=2), script="t.py", script_args=("$$x", "${local_rank}")
    )
    worker = direct_worker(_app(dataclasses.replace(trainer_role(1, 2), args=tuple(args))), "x")
    assert worker.argv == ("-u", "t.py", "$$x", "${local_rank}")


def test_task_count_reads_the_ranks_file() -> None:
    assert task_count({"ranks": "8"}, 2) == 8
    assert task_count({}, 2) == 2
    assert task_count({"ranks": "x"}, 2) == 2


def test_cli_refusal_is_one_line_and_exit_2(tmp_path: Any) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "distspec",
            "run",
            "-s",
            "slurm",
            "--dryrun",
            "-cfg",
            "workers=direct",
            "dist.ddp",
            "-j",
            "1:2x2",
            "--script",
            "t.py",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "workers=direct" in proc.stderr
