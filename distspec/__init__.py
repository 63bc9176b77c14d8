"""distspec: compile a distributed PyTorch job, written once as a typed component, into a
real job on the local machine, Slurm, PBS or Kubernetes.

The public surface is small and imports nothing heavy::

    from distspec import AppDef, Role, Resource, Runner

Python functions run as jobs with :func:`submit` (a :class:`Job` future) or the
:func:`distributed` decorator (see docs/callables.md)::

    distspec.submit(lambda: 6 * 7, j="1x2").result()  # 42
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = [
    "AppDef",
    "AppHandle",
    "AppState",
    "AppStatus",
    "Job",
    "RemoteError",
    "Resource",
    "RetryPolicy",
    "Role",
    "Runner",
    "Topology",
    "__version__",
    "distributed",
    "submit",
]

# Python callables (distspec.callables), imported on first use.
_CALLABLES = ("Job", "distributed", "submit")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.callables import Job, distributed, submit
    from distspec.errors import RemoteError
    from distspec.runner import Runner
    from distspec.specs import (
        AppDef,
        AppHandle,
        AppState,
        AppStatus,
        Resource,
        RetryPolicy,
        Role,
        Topology,
    )


def __getattr__(name: str) -> Any:
    # Lazy, so `import distspec` (and so the CLI) stays cheap.
    if name == "Runner":
        from distspec.runner import Runner

        return Runner
    if name in _CALLABLES:
        from distspec import callables

        return getattr(callables, name)
    if name == "RemoteError":
        from distspec.errors import RemoteError

        return RemoteError
    if name in __all__:
        from distspec import specs

        return getattr(specs, name)
    raise AttributeError(f"module 'distspec' has no attribute {name!r}")
