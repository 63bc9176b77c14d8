"""Find a component by name.

A name is resolved in this order; the first form that matches wins:

1. a builtin name (``dist.ddp``, ``utils.echo``, ...), imported from
   :data:`BUILTIN_COMPONENTS` without looking at anything else;
2. ``path/to/file.py:fn``: the file is imported by path (``sys.path`` is left alone);
3. ``pkg.module:fn``: the module is imported from ``sys.path``;
4. an entry point in the group ``distspec.components``, scanned only for a name
   that is none of the above. An entry point names either one function
   (``train = "mypkg.components:train"`` gives ``train``) or a module
   (``mypkg = "mypkg.components"`` gives ``mypkg.<function>`` for each function in it).

An entry point whose name equals a builtin (or a module entry point that would
shadow a builtin group such as ``dist``) is an error naming both; builtins are
never hidden. Listing names imports nothing.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from types import ModuleType

from distspec.errors import ComponentError
from distspec.frozen import FrozenDict, frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.metadata import EntryPoint
    from typing import Any

__all__ = [
    "BUILTIN_COMPONENTS",
    "ENTRY_POINT_GROUP",
    "Component",
    "ComponentLoader",
    "builtin_names",
    "load",
]

ENTRY_POINT_GROUP = "distspec.components"

#: Builtin component names and the ``module:function`` each is imported from.
BUILTIN_COMPONENTS: Mapping[str, str] = FrozenDict(
    {
        "dist.ddp": "distspec.components.dist:ddp",
        "dist.spmd": "distspec.components.dist:spmd",
        "dist.torchrun": "distspec.components.dist:torchrun",
        "dist.fn": "distspec.components.fn:fn",
        "utils.echo": "distspec.components.utils:echo",
        "utils.sh": "distspec.components.utils:sh",
        "utils.python": "distspec.components.utils:python",
        "utils.touch": "distspec.components.utils:touch",
        "utils.copy": "distspec.components.utils:copy",
    }
)


@frozen
class Component:
    """A loaded component: the name it was asked for, the function, and where it is defined."""

    name: str
    fn: Callable[..., Any]
    source: str  # "file:line" of the function's definition

    @classmethod
    def of(cls, name: str, fn: Callable[..., Any]) -> Component:
        """Wrap ``fn`` under ``name``; its source is read from its code object."""
        return cls(name=name, fn=fn, source=source_of(fn))


def source_of(fn: Callable[..., Any]) -> str:
    """``file:line`` of ``fn``'s definition (through decorators that set ``__wrapped__``)."""
    inner: Any = fn
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    code = getattr(inner, "__code__", None)
    if code is None:
        module = getattr(inner, "__module__", None) or "?"
        return f"{module}:?"
    return f"{code.co_filename}:{code.co_firstlineno}"


def builtin_names() -> list[str]:
    """The builtin component names, sorted. Imports nothing."""
    return sorted(BUILTIN_COMPONENTS)


class ComponentLoader:
    """Resolves component names: builtins first, then paths, modules, entry points."""

    def __init__(self, builtins: Mapping[str, str] = BUILTIN_COMPONENTS) -> None:
        self._builtins = dict(builtins)

    def builtin_names(self) -> list[str]:
        """The builtin component names this loader knows, sorted. Imports nothing."""
        return sorted(self._builtins)

    def plugin_names(self) -> list[str]:
        """Names provided by entry points (``pkg.*`` for a module entry point); imports nothing.

        Raises:
            ComponentError: an entry point clashes with a builtin.
        """
        names = []
        for ep in self._entry_points():
            names.append(ep.name if ep.attr else f"{ep.name}.*")
        return sorted(names)

    def names(self) -> list[str]:
        """Builtin and plugin names, sorted."""
        return sorted({*self._builtins, *self.plugin_names()})

    def load(self, name: str) -> Component:
        """The component called ``name``; see the module docstring for the order.

        Raises:
            ComponentError: nothing by that name, a file or module that does not
                import, a missing function, or an entry point that clashes with a builtin.
        """
        target = self._builtins.get(name)
        if target is not None:
            module_name, _, attr = target.partition(":")
            return self._component(name, importlib.import_module(module_name), attr, target)
        if ":" in name:
            where, _, attr = name.rpartition(":")
            if not where or not attr:
                raise ComponentError(
                    f"malformed component {name!r}: use path/to/file.py:function or pkg.module:function"
                )
            if where.endswith(".py") or "/" in where or os.sep in where:
                return self._component(name, _import_file(where), attr, where)
            return self._component(name, _import_module(where), attr, where)
        return self._load_plugin(name)

    # -- entry points ---------------------------------------------------------

    def _entry_points(self) -> list[EntryPoint]:
        from importlib.metadata import entry_points

        eps = list(entry_points(group=ENTRY_POINT_GROUP))
        for ep in eps:
            clash = self._clash(ep)
            if clash is not None:
                raise ComponentError(
                    f"entry point {ep.name!r} = {ep.value!r} (group {ENTRY_POINT_GROUP}) clashes "
                    f"with builtin component {clash!r} ({self._builtins[clash]}); rename the "
                    "entry point in the plugin's package metadata"
                )
        return eps

    def _clash(self, ep: EntryPoint) -> str | None:
        if ep.attr:
            return ep.name if ep.name in self._builtins else None
        prefix = ep.name + "."
        return next((b for b in sorted(self._builtins) if b.startswith(prefix)), None)

    def _load_plugin(self, name: str) -> Component:
        eps = self._entry_points()
        for ep in eps:
            if ep.name == name and ep.attr:
                fn = _load_entry_point(ep, name)
                return self._wrap(name, fn, ep.value)
            if ep.name == name:
                raise ComponentError(
                    f"entry point {name!r} = {ep.value!r} names a module, not a component; "
                    f"use {name}.<function>"
                )
        for ep in eps:
            prefix = ep.name + "."
            if not ep.attr and name.startswith(prefix):
                module = _load_entry_point(ep, name)
                if not isinstance(module, ModuleType):
                    raise ComponentError(f"entry point {ep.name!r} = {ep.value!r} is not a module")
                return self._component(name, module, name[len(prefix) :], ep.value)
        from distspec.specs.options import did_you_mean

        known = sorted({*self._builtins, *(ep.name for ep in eps if ep.attr)})
        raise ComponentError(
            f"unknown component {name!r}{did_you_mean(name, known)}; run `distspec builtins` "
            "to list components, or name one as path/to/file.py:function or pkg.module:function"
        )

    # -- helpers --------------------------------------------------------------

    def _component(self, name: str, module: ModuleType, attr: str, where: str) -> Component:
        fn = getattr(module, attr, None)
        if fn is None:
            from distspec.specs.options import did_you_mean

            functions = [
                k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
            ]
            raise ComponentError(f"{where} has no function {attr!r}{did_you_mean(attr, functions)}")
        return self._wrap(name, fn, where)

    @staticmethod
    def _wrap(name: str, fn: Any, where: str) -> Component:
        if isinstance(fn, type) or not callable(fn):
            raise ComponentError(f"component {name!r} ({where}) is not a function")
        return Component.of(name, fn)


def _load_entry_point(ep: EntryPoint, name: str) -> Any:
    try:
        return ep.load()
    except Exception as e:  # a broken plugin is reported; the others keep working
        raise ComponentError(
            f"component {name!r}: entry point {ep.name!r} = {ep.value!r} failed to import: "
            f"{type(e).__name__}: {e}"
        ) from e


def _import_module(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        # `python -m` puts the working directory on sys.path, the console script does not:
        # look there too, as a user running from their project expects.
        top = module_name.split(".", 1)[0]
        cwd = os.getcwd()
        here = os.path.isdir(os.path.join(cwd, top)) or os.path.isfile(
            os.path.join(cwd, top + ".py")
        )
        if e.name != top or not here or cwd in sys.path:
            raise ComponentError(f"cannot import module {module_name!r}: {e}") from e
        sys.path.insert(0, cwd)
        try:
            return importlib.import_module(module_name)
        except ImportError as e2:
            raise ComponentError(f"cannot import module {module_name!r}: {e2}") from e2
        finally:
            sys.path.remove(cwd)
    except ImportError as e:
        raise ComponentError(f"cannot import module {module_name!r}: {e}") from e


def _import_file(path: str) -> ModuleType:
    """Import the Python file at ``path`` as a private, uniquely named module."""
    import hashlib
    import importlib.util

    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise ComponentError(f"component file {path!r} does not exist")
    stem = "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(full))[0])
    digest = hashlib.sha1(full.encode()).hexdigest()[:10]
    module_name = f"_distspec_component_{stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, full)
    if spec is None or spec.loader is None:
        raise ComponentError(f"component file {path!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    # Registered so that dataclasses, enums and pickling inside the file work.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (ImportError, SyntaxError) as e:
        sys.modules.pop(module_name, None)
        raise ComponentError(
            f"cannot import component file {path!r}: {type(e).__name__}: {e}"
        ) from e
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load(name: str) -> Component:
    """Load ``name`` with the default loader (builtins, paths, modules, entry points)."""
    return ComponentLoader().load(name)
