"""distspec: compile a distributed PyTorch job, written once as a typed component, into a
real job on the local machine, Slurm, PBS or Kubernetes.

The public surface is small and imports nothing heavy::

    from distspec import AppDef, Role, Resource, Runner
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = [
    "AppDef",
    "AppHandle",
    "AppState",
    "AppStatus",
    "Resource",
    "RetryPolicy",
    "Role",
    "Runner",
    "Topology",
    "__version__",
]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
    if name in __all__:
        from distspec import specs

        return getattr(specs, name)
    raise AttributeError(f"module 'distspec' has no attribute {name!r}")
