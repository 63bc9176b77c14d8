"""A small immutable mapping for dataclass fields.

``types.MappingProxyType`` breaks ``asdict``, ``deepcopy``, ``pickle`` and
``json``; this one is hashable, picklable and compares equal to a dict with
the same items.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["FrozenDict", "frozendict"]

K = TypeVar("K")
V = TypeVar("V")


class FrozenDict(Mapping[K, V], Generic[K, V]):
    """An immutable, hashable mapping that keeps insertion order."""

    __slots__ = ("_data", "_hash")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._data: dict[K, V] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._data,))

    def to_dict(self) -> dict[K, V]:
        """A plain, mutable copy."""
        return dict(self._data)


def frozendict(items: Mapping[K, V] | Iterable[tuple[K, V]] | None = None) -> FrozenDict[K, V]:
    """Freeze ``items``; ``None`` gives an empty mapping. Already-frozen input is returned as is."""
    if isinstance(items, FrozenDict):
        return items
    return FrozenDict(items or ())
