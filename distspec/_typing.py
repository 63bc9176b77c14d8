"""What distspec needs of ``typing`` at run time, without importing ``typing``.

``import typing`` costs ~4 ms of CPU on this machine kind (Python 3.11): a tenth
of what a dry run may spend over the CLI floor (docs/contributing/performance.md). Nothing on
the dry-run path needs it at run time, so no module on that path imports it:

- each module says ``TYPE_CHECKING = False`` (mypy and ruff treat that name as
  ``typing.TYPE_CHECKING``) and imports annotation-only names under it;
- the few names a class statement needs (``Generic``, ``Protocol``, ``TypeVar``)
  come from here in the ``else`` branch of that block: stand-ins that make
  ``class C(Generic[T])`` and ``C[X]`` work and mean nothing;
- annotations are evaluated from their text in the defining module's globals
  (the binder, ``specs.options``) and taken apart by :func:`union_members`,
  which knows ``typing.Optional`` only when the code that wrote it has imported
  ``typing`` already.
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Generic", "Protocol", "TypeVar", "union_members"]


class Generic:
    """Run-time stand-in for ``typing.Generic``: subscripting gives the class back."""

    __slots__ = ()

    def __class_getitem__(cls, params: object) -> type:
        return cls


#: Protocols are never checked with isinstance here; a plain base is enough.
Protocol = Generic


def TypeVar(name: str, *constraints: object, **options: object) -> str:
    """Run-time stand-in for ``typing.TypeVar``: only its name is kept."""
    return name


def union_members(tp: Any) -> tuple[Any, ...] | None:
    """The members of ``X | Y`` or ``typing.Union[X, Y]`` (``Optional[X]``); None when
    ``tp`` is not a union."""
    if isinstance(tp, types.UnionType):
        return tuple(tp.__args__)
    typing = sys.modules.get("typing")  # a typing.Union exists only once typing is loaded
    if typing is not None and getattr(tp, "__origin__", None) is typing.Union:
        return tuple(tp.__args__)
    return None
