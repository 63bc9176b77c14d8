"""PBS (OpenPBS, PBS Pro, Torque): one qsub script per AppDef, one process per node.

- :mod:`.script`: the options and the pure compile step, AppDef + options -> the qsub
  script;
- :mod:`.scheduler`: :class:`PbsScheduler`, which runs qsub, qstat and qdel.

The names below are imported on first use (PEP 562), so importing the package costs
nothing; ``distspec.schedulers.pbs:PbsScheduler`` is the registry's string.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.schedulers.pbs.scheduler import (
        PBS_STATES,
        Launcher,
        PbsOptions,
        PbsScheduler,
        ResourceStyle,
        parse_qstat_full,
    )

__all__ = [
    "PBS_STATES",
    "Launcher",
    "PbsOptions",
    "PbsScheduler",
    "ResourceStyle",
    "parse_qstat_full",
]

_WHERE = {
    "PBS_STATES": "scheduler",
    "Launcher": "scheduler",
    "PbsOptions": "scheduler",
    "PbsScheduler": "scheduler",
    "ResourceStyle": "scheduler",
    "parse_qstat_full": "scheduler",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
