"""Code that runs *inside* the job: who am I, the process group, groups, seeds, the mesh.

::

    from distspec.runtime import init

    with init(seed=0) as dist:          # any launcher: torchrun, srun, mpiexec, PBS, python
        print(dist.rank, dist.world_size, dist.device)

- :func:`detect` → :class:`DistEnv`: rank and sizes from the launcher's environment
  (:mod:`distspec.runtime.env`);
- :func:`init` → :class:`Dist`: device, backend, process group, subgroups, seeds and a
  DeviceMesh from declared parallel degrees (:mod:`distspec.runtime.initialize`; not ``runtime.init``, which would shadow the function);
- :func:`current`: the :class:`Dist` of the innermost active :func:`init`;
- :func:`log` (also ``Dist.log``): a metrics history in the job folder
  (:mod:`distspec.runtime.metrics`), read back by ``distspec metrics``;
- :func:`save_checkpoint`, :func:`load_checkpoint`, :func:`attempt`,
  :func:`restart_reason`, :func:`checkpoint_dir`, :func:`preempted`, :func:`on_preempt`
  (also on :class:`Dist`): restart from the last checkpoint
  (:mod:`distspec.runtime.resume`).

Never imported by the CLI's compile path; torch is imported only inside :func:`init`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distspec._lazy import lazy_getattr
from distspec.errors import RuntimeEnvError

if TYPE_CHECKING:
    from distspec.runtime.env import DistEnv, Launcher, detect
    from distspec.runtime.initialize import Coords, Dist, current, init
    from distspec.runtime.metrics import log
    from distspec.runtime.progress import heartbeat
    from distspec.runtime.resume import (
        attempt,
        checkpoint_dir,
        load_checkpoint,
        on_preempt,
        preempted,
        restart_reason,
        save_checkpoint,
    )
    from distspec.specs.degrees import Degrees

__all__ = [
    "Coords",
    "Degrees",
    "Dist",
    "DistEnv",
    "Launcher",
    "RuntimeEnvError",
    "attempt",
    "checkpoint_dir",
    "current",
    "detect",
    "heartbeat",
    "init",
    "load_checkpoint",
    "log",
    "on_preempt",
    "preempted",
    "restart_reason",
    "save_checkpoint",
]

_LAZY = {
    "DistEnv": "distspec.runtime.env",
    "Launcher": "distspec.runtime.env",
    "detect": "distspec.runtime.env",
    "Coords": "distspec.runtime.initialize",
    "Dist": "distspec.runtime.initialize",
    "current": "distspec.runtime.initialize",
    "init": "distspec.runtime.initialize",
    "log": "distspec.runtime.metrics",
    "heartbeat": "distspec.runtime.progress",
    "attempt": "distspec.runtime.resume",
    "checkpoint_dir": "distspec.runtime.resume",
    "load_checkpoint": "distspec.runtime.resume",
    "on_preempt": "distspec.runtime.resume",
    "preempted": "distspec.runtime.resume",
    "restart_reason": "distspec.runtime.resume",
    "save_checkpoint": "distspec.runtime.resume",
    "Degrees": "distspec.specs.degrees",
}


# Lazy, so `from distspec.runtime import detect` does not import torch.
__getattr__ = lazy_getattr(__name__, _LAZY)
