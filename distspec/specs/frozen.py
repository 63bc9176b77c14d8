"""Frozen building blocks: the ``@frozen`` record decorator and ``FrozenDict``.

``@frozen`` makes a frozen, slotted, keyword-only dataclass without ``exec``.
``@dataclass(frozen=True, slots=True, kw_only=True)`` writes the source of
``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__`` and
``__delattr__`` for every class and compiles each with ``exec``. On this
machine kind (Python 3.11) that is ~0.7 ms a class, and a dry run defines about
twenty of them: ~15 ms, a third of what the dry run costs over the CLI floor.

``frozen`` lets ``dataclasses`` do the cheap part -- collect the fields, set
``__dataclass_fields__`` and ``__match_args__``, build the slotted class -- and
installs methods written once, here, as closures over the field names. What
comes out *is* a dataclass: ``fields``, ``replace``, ``asdict``, ``astuple`` and
``is_dataclass`` work, instances pickle, copy and compare like a frozen
dataclass's, and assigning to a field raises ``FrozenInstanceError``. Type
checkers see it through ``dataclass_transform`` as a frozen, keyword-only
dataclass. Methods the class body defines itself (``__repr__``, ``__eq__``,
``__hash__``) are kept, as ``dataclasses`` does.

One difference: ``__dataclass_params__`` says ``init=False, repr=False,
eq=False, frozen=False``, because those are the flags ``dataclasses`` was called
with; the behaviour is that of ``True`` for each.

``FrozenDict`` is a small immutable mapping for record fields.
``types.MappingProxyType`` breaks ``asdict``, ``deepcopy``, ``pickle`` and
``json``; this one is hashable, picklable and compares equal to a dict with
the same items.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Generic, TypeVar, overload

    from typing_extensions import dataclass_transform
else:
    from distspec._typing import Generic, TypeVar

__all__ = ["FrozenDict", "frozen", "frozendict"]

K = TypeVar("K")
V = TypeVar("V")
_T = TypeVar("_T")


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


_set = object.__setattr__

if TYPE_CHECKING:

    @overload
    def frozen(cls: type[_T], /) -> type[_T]: ...

    @overload
    def frozen(*, kw_only: bool = True) -> Callable[[type[_T]], type[_T]]: ...

    @dataclass_transform(
        frozen_default=True, kw_only_default=True, field_specifiers=(dataclasses.field,)
    )
    def frozen(cls: type[_T] | None = None, /, *, kw_only: bool = True) -> Any: ...

else:

    def frozen(cls=None, /, *, kw_only=True):
        """Make ``cls`` a frozen, slotted dataclass; ``kw_only=False`` allows positional
        arguments (in field order) too."""
        if cls is None:
            return lambda c: _build(c, kw_only)
        return _build(cls, kw_only)


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """``obj -> (obj.a, obj.b, ...)``; always a tuple, even for one name or none."""
    if len(names) >= 2:
        return attrgetter(*names)  # type: ignore[return-value]
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _build(cls: type, kw_only: bool) -> type:
    annotations = inspect.get_annotations(cls)
    for name, text in annotations.items():
        if isinstance(text, str) and text.startswith(("ClassVar", "typing.ClassVar")):
            # dataclasses spots a string "ClassVar[...]" only when typing is loaded and
            # the class's module has ClassVar bound at run time; an import under
            # TYPE_CHECKING is neither. Hand it the real thing.
            import typing

            cls.__annotations__[name] = typing.ClassVar
    own = set(cls.__dict__)
    if cls.__dict__.get("__hash__", 0) is None and "__eq__" in own:
        own.discard("__hash__")  # the None Python sets beside an __eq__ is not a choice
    if not cls.__dict__.get("__doc__"):
        # dataclasses would compute one from inspect.signature(cls); a name is enough.
        cls.__doc__ = cls.__name__
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, slots=True, kw_only=kw_only)
    fields = dataclasses.fields(cls)
    qualname = cls.__qualname__
    init_names = tuple(f.name for f in fields if f.init)
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    factories = {
        f.name: f.default_factory for f in fields if f.default_factory is not dataclasses.MISSING
    }
    if not kw_only:
        seen_default = ""
        for name in init_names:
            if name in defaults or name in factories:
                seen_default = name
            elif seen_default:
                raise TypeError(
                    f"{qualname}: non-default field {name!r} follows default field {seen_default!r}"
                )
    no_init = tuple(f.name for f in fields if not f.init)
    post_init = getattr(cls, "__post_init__", None)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            if kw_only:
                raise TypeError(
                    f"{qualname}.__init__() takes keyword arguments only, "
                    f"got {len(args)} positional"
                )
            if len(args) > len(init_names):
                raise TypeError(
                    f"{qualname}.__init__() takes at most {len(init_names)} "
                    f"positional arguments, got {len(args)}"
                )
            for name, arg in zip(init_names, args, strict=False):
                if name in kwargs:
                    raise TypeError(f"{qualname}.__init__() got multiple values for {name!r}")
                kwargs[name] = arg
        for name in init_names:
            if name in kwargs:
                _set(self, name, kwargs.pop(name))
            elif name in defaults:
                _set(self, name, defaults[name])
            elif name in factories:
                _set(self, name, factories[name]())
            else:
                raise TypeError(f"{qualname}.__init__() missing required argument: {name!r}")
        if kwargs:
            raise TypeError(
                f"{qualname}.__init__() got an unexpected keyword argument {next(iter(kwargs))!r}"
            )
        for name in no_init:
            _set(self, name, defaults[name] if name in defaults else factories[name]())
        if post_init is not None:
            post_init(self)

    repr_names = tuple(f.name for f in fields if f.repr)

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in repr_names)
        return f"{type(self).__qualname__}({inner})"

    compared = _getter(tuple(f.name for f in fields if f.compare))

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(compared(self) == compared(other))
        return NotImplemented

    hashed = _getter(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    def __setattr__(self: Any, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self: Any, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    all_names = tuple(f.name for f in fields)
    state = _getter(all_names)

    def __getstate__(self: Any) -> tuple[Any, ...]:
        return state(self)

    def __setstate__(self: Any, values: tuple[Any, ...]) -> None:
        for name, item in zip(all_names, values, strict=True):
            _set(self, name, item)

    methods: dict[str, Any] = {
        "__init__": __init__,
        "__repr__": __repr__,
        "__eq__": __eq__,
        "__hash__": __hash__,
        "__setattr__": __setattr__,
        "__delattr__": __delattr__,
        "__getstate__": __getstate__,
        "__setstate__": __setstate__,
    }
    for name, method in methods.items():
        if name in own and name not in ("__setattr__", "__delattr__"):
            continue
        method.__qualname__ = f"{qualname}.{name}"
        setattr(cls, name, method)
    return cls
