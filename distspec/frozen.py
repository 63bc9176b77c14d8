"""Frozen building blocks: the ``@frozen`` record decorator and ``FrozenDict``.

``@frozen`` makes a frozen, slotted, keyword-only record that behaves like
``@dataclass(frozen=True, slots=True, kw_only=True)``, without importing
``dataclasses`` (which imports ``inspect``: ~8 ms of start-up on this machine
kind) and without ``exec`` (``dataclasses`` compiles six generated methods per
class: ~0.7 ms a class, and a dry run defines about twenty). The methods are
written once, here, as closures over the field names.

What users see is a dataclass all the same. ``dataclasses.fields``,
``replace``, ``asdict``, ``astuple`` and ``is_dataclass`` work: the class's
``__dataclass_fields__`` and ``__dataclass_params__`` are built from the
record's own fields the first time something asks for them, importing
``dataclasses`` only then. Instances pickle, copy and compare like a frozen
dataclass's; assigning a field raises ``dataclasses.FrozenInstanceError``;
type checkers see the decorator through ``dataclass_transform``. Methods the
class body defines itself (``__repr__``, ``__eq__``, ``__hash__``) are kept.
Inside distspec, :func:`fields` and :func:`replace` here do the same as their
``dataclasses`` namesakes without that import.

Supported: fields with defaults or ``field(default_factory=..., repr=...,
compare=..., hash=..., init=..., metadata=...)``, ``ClassVar`` annotations
(not fields), ``__post_init__``, inheritance between records. Not supported
(an error, not a surprise): ``InitVar``, ``order=True``, a base class that is a
``dataclasses`` dataclass.

``FrozenDict`` is a small immutable mapping for record fields.
``types.MappingProxyType`` breaks ``asdict``, ``deepcopy``, ``pickle`` and
``json``; this one is hashable, picklable and compares equal to a dict with
the same items.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from operator import attrgetter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Generic, TypeVar, overload

    from typing_extensions import dataclass_transform
else:
    from distspec._typing import Generic, TypeVar

__all__ = ["MISSING", "Field", "FrozenDict", "field", "fields", "frozen", "frozendict", "replace"]

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


class _Missing:
    """No default: the field is required."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


#: The default of a field without one (``dataclasses.MISSING`` plays the same role there).
MISSING: Any = _Missing()


class Field:
    """One field of a record, as :func:`field` declares it and :func:`fields` returns it."""

    __slots__ = (
        "compare",
        "default",
        "default_factory",
        "hash",
        "init",
        "metadata",
        "name",
        "repr",
        "type",
    )

    def __init__(
        self,
        *,
        default: Any = MISSING,
        default_factory: Any = MISSING,
        init: bool = True,
        repr: bool = True,
        compare: bool = True,
        hash: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.repr = repr
        self.compare = compare
        self.hash = hash
        self.metadata: Mapping[str, Any] = FrozenDict(metadata or {})

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, type={self.type!r}, default={self.default!r})"


def field(
    *,
    default: Any = MISSING,
    default_factory: Any = MISSING,
    init: bool = True,
    repr: bool = True,
    compare: bool = True,
    hash: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Any:
    """A field with more than a plain default, like ``dataclasses.field``."""
    return Field(
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        compare=compare,
        hash=hash,
        metadata=metadata,
    )


def fields(record: Any) -> tuple[Field, ...]:
    """The fields of a record class or instance, in order (``dataclasses.fields``)."""
    cls = record if isinstance(record, type) else type(record)
    found = getattr(cls, "__frozen_fields__", None)
    if found is None:
        import dataclasses  # a dataclass from elsewhere (a plugin's options, say)

        return tuple(dataclasses.fields(record))  # type: ignore[arg-type]
    return tuple(found.values())


def replace(record: _T, /, **changes: Any) -> _T:
    """A copy of ``record`` with ``changes`` (``dataclasses.replace``)."""
    cls: Any = type(record)
    if getattr(cls, "__frozen_fields__", None) is None:
        import dataclasses

        return dataclasses.replace(record, **changes)  # type: ignore[type-var]
    for f in cls.__frozen_fields__.values():
        if not f.init:
            if f.name in changes:
                raise ValueError(
                    f"field {f.name!r} is declared with init=False; it cannot be replaced"
                )
        elif f.name not in changes:
            changes[f.name] = getattr(record, f.name)
    return cls(**changes)  # type: ignore[no-any-return]


class _DataclassView:
    """A record's ``__dataclass_fields__`` or ``__dataclass_params__``: what
    ``dataclasses`` reads, built from the record's fields when first asked for and
    then stored on the class in place of this descriptor."""

    __slots__ = ("attr",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.attr = name

    def __get__(self, obj: object, owner: type) -> Any:
        import dataclasses

        record: Any = owner
        view: dict[str, Any] = {}
        for f in record.__frozen_fields__.values():
            d: Any = dataclasses.field(
                default=dataclasses.MISSING if f.default is MISSING else f.default,
                default_factory=(
                    dataclasses.MISSING if f.default_factory is MISSING else f.default_factory
                ),
                init=f.init,
                repr=f.repr,
                hash=f.hash,
                compare=f.compare,
                metadata=dict(f.metadata) or None,
                kw_only=record.__frozen_kw_only__,
            )
            d.name, d.type = f.name, f.type
            d._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # what fields() reads
            view[f.name] = d
        # The params of an empty class made with the same flags by dataclasses itself.
        template: Any = dataclasses.dataclass(
            frozen=True, slots=True, kw_only=record.__frozen_kw_only__
        )(type("_Template", (), {"__doc__": "-"}))
        params = template.__dataclass_params__
        type.__setattr__(owner, "__dataclass_fields__", view)
        type.__setattr__(owner, "__dataclass_params__", params)
        return view if self.attr == "__dataclass_fields__" else params


if TYPE_CHECKING:

    @overload
    def frozen(cls: type[_T], /) -> type[_T]: ...

    @overload
    def frozen(*, kw_only: bool = True) -> Callable[[type[_T]], type[_T]]: ...

    @dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
    def frozen(cls: type[_T] | None = None, /, *, kw_only: bool = True) -> Any:
        """Make ``cls`` a frozen, slotted record; ``kw_only=False`` allows positional
        arguments (in field order) too."""

else:

    def frozen(cls=None, /, *, kw_only=True):
        """Make ``cls`` a frozen, slotted record; ``kw_only=False`` allows positional
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


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar"))
    typing = sys.modules.get("typing")  # a real ClassVar exists only once typing is loaded
    return typing is not None and (
        annotation is typing.ClassVar or getattr(annotation, "__origin__", None) is typing.ClassVar
    )


def _collect(cls: type) -> dict[str, Field]:
    """The record's fields: its bases' (records only) first, then its own annotations."""
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        if "__dataclass_fields__" in base.__dict__ and "__frozen_fields__" not in base.__dict__:
            raise TypeError(
                f"{cls.__qualname__}: @frozen cannot extend the dataclass {base.__qualname__}"
            )
        found.update(base.__dict__.get("__frozen_fields__", {}))
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 -- inspect is what we avoid
    dc = sys.modules.get("dataclasses")  # a dataclasses.field() exists only once it is loaded
    for name, annotation in own.items():
        if _is_classvar(annotation):
            continue
        if isinstance(annotation, str) and annotation.startswith(
            ("InitVar", "dataclasses.InitVar")
        ):
            raise TypeError(f"{cls.__qualname__}.{name}: @frozen records do not support InitVar")
        value = cls.__dict__.get(name, MISSING)
        if dc is not None and isinstance(value, dc.Field):
            value = _from_dataclasses_field(value, dc)
        f = value if isinstance(value, Field) else Field(default=value)
        if f.default is not MISSING and type(f.default).__hash__ is None:
            raise ValueError(
                f"{cls.__qualname__}.{name}: mutable default {type(f.default).__name__} "
                "is not allowed: use default_factory"
            )
        f.name, f.type = name, annotation
        found[name] = f
    return found


def _from_dataclasses_field(d: Any, dc: Any) -> Field:
    return Field(
        default=MISSING if d.default is dc.MISSING else d.default,
        default_factory=MISSING if d.default_factory is dc.MISSING else d.default_factory,
        init=d.init,
        repr=d.repr,
        compare=d.compare,
        hash=d.hash,
        metadata=d.metadata,
    )


def _repoint_class_cells(values: Iterable[Any], old: type, new: type) -> None:
    """Methods that use zero-argument ``super()`` (or ``__class__``) hold a cell
    with the class they were defined in; point those at the slotted class."""
    for value in values:
        if isinstance(value, property):
            functions = [value.fget, value.fset, value.fdel]
        else:
            functions = [getattr(value, "__func__", value)]  # classmethod, staticmethod
        for fn in functions:
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    if cell.cell_contents is old:
                        cell.cell_contents = new
                except ValueError:  # an empty cell
                    continue


def _build(cls: type, kw_only: bool) -> type:
    all_fields = _collect(cls)
    own = set(cls.__dict__)
    if cls.__dict__.get("__hash__", 0) is None and "__eq__" in own:
        own.discard("__hash__")  # the None Python sets beside an __eq__ is not a choice
    # The slotted class: a new class whose __slots__ hold this class's own fields
    # (a base record's slots hold its fields); class attributes of the same names
    # (the defaults) must go, and live on in the fields.
    namespace = {
        k: v
        for k, v in cls.__dict__.items()
        if k not in all_fields and k not in ("__dict__", "__weakref__")
    }
    inherited = {n for base in cls.__mro__[1:] for n in base.__dict__.get("__slots__", ())}
    namespace["__slots__"] = tuple(n for n in all_fields if n not in inherited)
    namespace["__frozen_fields__"] = all_fields
    namespace["__frozen_kw_only__"] = kw_only
    namespace["__match_args__"] = (
        () if kw_only else tuple(n for n, f in all_fields.items() if f.init)
    )
    namespace["__dataclass_fields__"] = _DataclassView()
    namespace["__dataclass_params__"] = _DataclassView()
    if not namespace.get("__doc__"):
        namespace["__doc__"] = cls.__name__
    original, cls = cls, type(cls)(cls.__name__, cls.__bases__, namespace)
    _repoint_class_cells(namespace.values(), original, cls)

    values = tuple(all_fields.values())
    qualname = cls.__qualname__
    init_names = tuple(f.name for f in values if f.init)
    defaults = {f.name: f.default for f in values if f.default is not MISSING}
    factories = {f.name: f.default_factory for f in values if f.default_factory is not MISSING}
    if not kw_only:
        seen_default = ""
        for name in init_names:
            if name in defaults or name in factories:
                seen_default = name
            elif seen_default:
                raise TypeError(
                    f"{qualname}: non-default field {name!r} follows default field {seen_default!r}"
                )
    no_init = tuple(f.name for f in values if not f.init)
    for name in no_init:
        if name not in defaults and name not in factories:
            raise TypeError(f"{qualname}.{name}: a field with init=False needs a default")
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

    repr_names = tuple(f.name for f in values if f.repr)

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in repr_names)
        return f"{type(self).__qualname__}({inner})"

    compared = _getter(tuple(f.name for f in values if f.compare))

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(compared(self) == compared(other))
        return NotImplemented

    hashed = _getter(tuple(f.name for f in values if (f.compare if f.hash is None else f.hash)))

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    def __setattr__(self: Any, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self: Any, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    all_names = tuple(f.name for f in values)
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
