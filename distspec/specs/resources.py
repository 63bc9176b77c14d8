"""Named host types for ``-h NAME``: built-ins plus plugins.

Plugins register a zero-argument callable returning a :class:`Resource` under
the entry-point group ``distspec.named_resources``. Entry points are read only
when a name is not a built-in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from distspec.errors import SpecError
from distspec.specs.app import Resource

__all__ = ["BUILTIN_RESOURCES", "NamedResources"]

_GIB = 1024

BUILTIN_RESOURCES: Mapping[str, Resource] = {
    "cpu.small": Resource(cpu=2, mem_mb=4 * _GIB),
    "cpu.medium": Resource(cpu=8, mem_mb=32 * _GIB),
    "cpu.large": Resource(cpu=32, mem_mb=128 * _GIB),
    "gpu.small": Resource(cpu=8, gpu=1, mem_mb=64 * _GIB),
    "gpu.medium": Resource(cpu=32, gpu=4, mem_mb=256 * _GIB),
    "gpu.large": Resource(cpu=64, gpu=8, mem_mb=1024 * _GIB),
}

ENTRY_POINT_GROUP = "distspec.named_resources"


class NamedResources:
    """Look up a named resource; built-ins are never hidden by plugins."""

    def __init__(
        self,
        builtins: Mapping[str, Resource] = BUILTIN_RESOURCES,
        extra: Mapping[str, Callable[[], Resource]] | None = None,
    ) -> None:
        self._builtins = dict(builtins)
        self._extra = dict(extra or {})

    def names(self) -> list[str]:
        return sorted({*self._builtins, *self._extra, *self._plugin_names()})

    def get(self, name: str) -> Resource:
        if name in self._builtins:
            return self._builtins[name]
        if name in self._extra:
            return self._extra[name]()
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == name:
                factory = ep.load()
                resource = factory()
                if not isinstance(resource, Resource):
                    raise SpecError(
                        f"named resource {name!r} ({ep.value}) did not return a Resource"
                    )
                return resource
        from distspec.specs.options import did_you_mean

        raise SpecError(
            f"unknown named resource {name!r}{did_you_mean(name, self.names())}; "
            f"known: {', '.join(self.names())}"
        )

    @staticmethod
    def _plugin_names() -> list[str]:
        from importlib.metadata import entry_points

        return [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)]
