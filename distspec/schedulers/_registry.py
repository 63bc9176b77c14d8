"""Which scheduler backends exist: built-ins plus the ``distspec.schedulers`` entry points.

Built-ins are lazy import strings, so listing names imports no backend.
Entry points are read only when a name is not a built-in, or for a full listing.
A plugin never hides a built-in: a clash is an error naming both.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from distspec.errors import SchedulerError, SchedulerNotFound

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.schedulers.api import Scheduler

__all__ = ["BUILTIN_SCHEDULERS", "ENTRY_POINT_GROUP", "SchedulerRegistry"]

ENTRY_POINT_GROUP = "distspec.schedulers"

BUILTIN_SCHEDULERS: Mapping[str, str] = {
    "local_cwd": "distspec.schedulers.local:LocalScheduler",
    "slurm": "distspec.schedulers.slurm:SlurmScheduler",
    "pbs": "distspec.schedulers.pbs:PbsScheduler",
    "kubernetes": "distspec.schedulers.kubernetes:KubernetesScheduler",
}

# What to install when a built-in's optional dependency is missing.
_INSTALL_HINTS: Mapping[str, str] = {"kubernetes": "pip install 'distspec[kubernetes]'"}


class SchedulerRegistry:
    """Maps scheduler names to backend classes, importing one only when asked for it."""

    def __init__(
        self,
        builtins: Mapping[str, str] = BUILTIN_SCHEDULERS,
        *,
        use_entry_points: bool = True,
    ) -> None:
        self._builtins = dict(builtins)
        self._use_entry_points = use_entry_points
        self._plugins: dict[str, Any] | None = None
        self.errors: list[str] = []

    def builtin_names(self) -> list[str]:
        return list(self._builtins)

    def names(self) -> list[str]:
        """Every scheduler name: built-ins first, then plugins."""
        return [*self._builtins, *sorted(self._entry_points())]

    def get(self, name: str) -> type[Scheduler[Any]]:
        """The backend class for ``name``.

        Raises:
            SchedulerNotFound: no such name (with the known ones).
            SchedulerError: the backend exists but cannot be imported.
        """
        target = self._builtins.get(name)
        if target is not None:
            return self._load(name, target)
        ep = self._entry_points().get(name)
        if ep is None:
            from distspec.specs.options import did_you_mean

            raise SchedulerNotFound(
                name, self.names(), did_you_mean(name, self.names()).strip(" ()")
            )
        try:
            cls = ep.load()
        except Exception as e:  # a broken plugin must not take the rest down
            raise SchedulerError(
                f"plugin scheduler {name!r} ({ep.value}) failed to import: {e}"
            ) from e
        return cls  # type: ignore[no-any-return]

    def _load(self, name: str, target: str) -> type[Scheduler[Any]]:
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            hint = _INSTALL_HINTS.get(name)
            extra = f"; install it with {hint}" if hint else ""
            raise SchedulerError(f"scheduler {name!r} cannot be imported: {e}{extra}") from e
        return getattr(module, attr)  # type: ignore[no-any-return]

    def _entry_points(self) -> dict[str, Any]:
        if self._plugins is not None:
            return self._plugins
        self._plugins = {}
        if not self._use_entry_points:
            return self._plugins
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in self._builtins:
                raise SchedulerError(
                    f"plugin scheduler {ep.name!r} ({ep.value}) clashes with the built-in "
                    f"{ep.name!r} ({self._builtins[ep.name]}); rename the plugin's entry point"
                )
            self._plugins[ep.name] = ep
        return self._plugins
