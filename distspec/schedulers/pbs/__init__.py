"""PBS (OpenPBS, PBS Pro, Torque): one qsub script per AppDef, one process per node.

- :mod:`.options`: :class:`PbsOptions` (``-cfg``) and their checks;
- :mod:`.script`: the pure compile step, AppDef + options -> the qsub script;
- :mod:`.status`: PBS's job states and what qstat prints, read;
- :mod:`.scheduler`: :class:`PbsScheduler`, which runs qsub, qstat and qdel.

What Slurm and PBS share (the job folder, :class:`BatchScheduler`) is in
:mod:`distspec.schedulers.batch`.

The names below are imported on first use (PEP 562), so importing the package costs
nothing; ``distspec.schedulers.pbs:PbsScheduler`` is the registry's string.
"""

from __future__ import annotations

from distspec._lazy import lazy_getattr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.schedulers.pbs.options import Launcher, PbsOptions, ResourceStyle
    from distspec.schedulers.pbs.scheduler import PbsScheduler
    from distspec.schedulers.pbs.status import PBS_STATES, parse_qstat_full

__all__ = [
    "PBS_STATES",
    "Launcher",
    "PbsOptions",
    "PbsScheduler",
    "ResourceStyle",
    "parse_qstat_full",
]

__getattr__ = lazy_getattr(
    __name__,
    {
        "PBS_STATES": "status",
        "Launcher": "options",
        "PbsOptions": "options",
        "PbsScheduler": "scheduler",
        "ResourceStyle": "options",
        "parse_qstat_full": "status",
    },
)
