"""Slurm: one sbatch script per AppDef, one srun step per role, one task per node.

- :mod:`.script`: the options and the pure compile step, AppDef + options -> the
  sbatch script;
- :mod:`.scheduler`: :class:`SlurmScheduler`, which runs sbatch, sacct, scontrol,
  squeue and scancel.

The names below are imported on first use (PEP 562), so importing the package costs
nothing; ``distspec.schedulers.slurm:SlurmScheduler`` is the registry's string.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.schedulers.slurm.scheduler import (
        SLURM_STATES,
        GpuFlag,
        SlurmOptions,
        SlurmScheduler,
        expand_hostlist,
    )

__all__ = ["SLURM_STATES", "GpuFlag", "SlurmOptions", "SlurmScheduler", "expand_hostlist"]

_WHERE = {
    "SLURM_STATES": "scheduler",
    "GpuFlag": "scheduler",
    "SlurmOptions": "scheduler",
    "SlurmScheduler": "scheduler",
    "expand_hostlist": "scheduler",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
