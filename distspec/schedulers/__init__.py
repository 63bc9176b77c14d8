"""Scheduler backends. Import one through :class:`SchedulerRegistry`, never eagerly."""

from __future__ import annotations

from distspec.schedulers._registry import SchedulerRegistry

__all__ = ["SchedulerRegistry"]
