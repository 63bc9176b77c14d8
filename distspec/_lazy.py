"""Lazy re-exports for a package's ``__init__`` (PEP 562).

A package that re-exports names from its modules imports none of them until a name
is used, so importing the package (a backend's, on the dry-run path) costs nothing
more than its ``__init__``.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name of ``where`` from
    the module it names there, on first use.

    In ``package/__init__.py``::

        __getattr__ = lazy_getattr(__name__, {"SlurmScheduler": "scheduler"})

    (with the same names imported under ``TYPE_CHECKING``, for type checkers). A plain
    module name is one of the package's own; a dotted one (``distspec.specs.degrees``)
    is imported as written.
    """

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        full = module if "." in module else f"{package}.{module}"
        return getattr(importlib.import_module(full), name)

    return __getattr__
