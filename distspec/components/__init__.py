"""Components: typed functions that return an AppDef, and the machinery around them.

- :mod:`distspec.components.dist` — ``dist.ddp`` and ``dist.spmd`` (torchrun on every node)
- :mod:`distspec.components.utils` — ``utils.echo``, ``sh``, ``python``, ``touch``, ``copy``
- :mod:`distspec.components.loader` — name → :class:`~distspec.components.loader.Component`
  (builtin | ``path/file.py:fn`` | ``pkg.mod:fn`` | entry point ``distspec.components``)
- :mod:`distspec.components.binder` — signature + docstring → command line → AppDef

Importing this package imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
