"""distspec: compile a distributed PyTorch job, written once as a typed component, into a
real job on the local machine, Slurm, PBS or Kubernetes.

The public surface is small and imports nothing heavy::

    from distspec import AppDef, Role, Resource, Runner

Python functions run as jobs with :func:`submit` (a :class:`Job` future) or the
:func:`distributed` decorator, and once per item with ``distspec.map`` (see
docs/callables.md)::

    distspec.submit(lambda: 6 * 7, j="1x2").result()  # 42
    [job.result() for job in distspec.map(abs, [-1, -2])]  # [1, 2]
"""

from __future__ import annotations

import sys as _sys


def _interrupted_at_startup(signum: int, frame: object) -> None:
    """SIGINT while the ``distspec`` command still imports: one line, exit 130, no
    traceback (nothing has been written or started yet)."""
    _exit_interrupted()


def _exit_interrupted() -> None:
    """End the process at once with ``distspec: interrupted`` and exit code 130
    (also what ``distspec.cli.main.run`` does on a Ctrl-C while flushing at exit)."""
    import os

    try:
        os.write(2, b"distspec: interrupted\n")
    except OSError:
        pass
    os._exit(130)


def _quiet_startup_interrupts() -> None:
    """Install :func:`_interrupted_at_startup` for SIGINT, unless SIGINT is not
    Python's (ignored, as in a job a shell started in the background);
    ``distspec.cli.main.run`` puts Python's back once the CLI has imported."""
    import _signal  # type: ignore[import-not-found]  # built in, loaded: `signal` imports enum

    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _interrupted_at_startup)


# The `distspec` console script imports this package first, so this is the first line
# of distspec's that it runs (`python -m distspec` calls it in distspec/__main__.py).
if getattr(_sys, "argv", None) and _sys.argv[0].replace("\\", "/").rpartition("/")[2] in (
    "distspec",
    "distspec.exe",
):
    _quiet_startup_interrupts()

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

# Python callables (distspec.callables), imported on first use. ``distspec.map``
# (distspec.callables_map) is not in __all__: `from distspec import *` would hide the
# builtin map.
_CALLABLES = ("Job", "distributed", "submit")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.callables import Job, distributed, submit
    from distspec.callables_map import map as map
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
    if name == "map":
        from distspec.callables_map import map

        return map
    if name == "RemoteError":
        from distspec.errors import RemoteError

        return RemoteError
    if name in __all__:
        from distspec import specs

        return getattr(specs, name)
    raise AttributeError(f"module 'distspec' has no attribute {name!r}")
