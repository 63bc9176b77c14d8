"""Slurm: one sbatch script per AppDef, one srun step per role, one task per node.

- :mod:`.options`: :class:`SlurmOptions` (``-cfg``) and their checks;
- :mod:`.script`: the pure compile step, AppDef + options -> the sbatch script;
- :mod:`.status`: Slurm's job states and what sacct, scontrol and squeue print, read;
- :mod:`.scheduler`: :class:`SlurmScheduler`, which runs sbatch, sacct, scontrol,
  squeue and scancel.

What Slurm and PBS share (the job folder, :class:`BatchScheduler`) is in
:mod:`distspec.schedulers.batch`.

The names below are imported on first use (PEP 562), so importing the package costs
nothing; ``distspec.schedulers.slurm:SlurmScheduler`` is the registry's string.
"""

from __future__ import annotations

from distspec._lazy import lazy_getattr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.schedulers.slurm.options import GpuFlag, SlurmOptions
    from distspec.schedulers.slurm.scheduler import SlurmScheduler
    from distspec.schedulers.slurm.status import SLURM_STATES, expand_hostlist

__all__ = ["SLURM_STATES", "GpuFlag", "SlurmOptions", "SlurmScheduler", "expand_hostlist"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "SLURM_STATES": "status",
        "GpuFlag": "options",
        "SlurmOptions": "options",
        "SlurmScheduler": "scheduler",
        "expand_hostlist": "status",
    },
)
