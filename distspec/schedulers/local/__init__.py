"""``local_cwd``: every replica on this machine, as a process group, under a detached
supervisor, in the current directory (the default backend).

- :mod:`.scheduler`: :class:`LocalScheduler`, its options, compile, submit and the
  readers (``status``, ``wait``, ``log``, ``cancel``, ``list``, ``prune``);
- :mod:`.records`: the declared shape of ``state.json`` and its validating reader;
- :mod:`.supervisor`: the detached supervisor of one run (standard library only).

The names below are imported on first use (PEP 562), so importing the package costs
nothing (the supervisor imports it too); ``distspec.schedulers.local:LocalScheduler``
is the registry's string.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.schedulers.local.scheduler import LocalOptions, LocalScheduler

__all__ = ["LocalOptions", "LocalScheduler"]

_WHERE = {"LocalOptions": "scheduler", "LocalScheduler": "scheduler"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)
