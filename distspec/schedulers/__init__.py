"""Scheduler backends. Import one through :class:`SchedulerRegistry`, never eagerly.

Importing this package imports nothing else (a local run's supervisor imports its
own modules from below it and must start fast); the registry comes on first use.
"""

from __future__ import annotations

from distspec._lazy import lazy_getattr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.schedulers._registry import SchedulerRegistry

__all__ = ["SchedulerRegistry"]

__getattr__ = lazy_getattr(__name__, {"SchedulerRegistry": "_registry"})
