"""Typed run options: declared once as a frozen dataclass, everything else derived.

A backend declares its options like this::

    @frozen
    class SlurmOptions:
        partition: str | None = option(None, "Partition to submit to.")
        exclusive: bool = option(False, "Ask for whole nodes.")

Parsing ``-cfg k=v,...`` strings, type checks, did-you-mean suggestions,
``distspec runopts`` and ``distspec configure`` all come from that one class.

String syntax for values: booleans ``true/false/yes/no/1/0``; lists are
``a;b;c``; mappings are ``k=v;k2=v2``.
"""

from __future__ import annotations

import enum
import math
import re
import sys
from collections.abc import Mapping

from distspec._typing import union_members
from distspec.errors import OptionError
from distspec.frozen import MISSING, FrozenDict, field, fields, frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, TypeVar

    T = TypeVar("T")

__all__ = [
    "OptionSpec",
    "did_you_mean",
    "option",
    "option_specs",
    "options_to_strings",
    "parse_cfg",
    "parse_options",
]


def option(default: Any, help: str) -> Any:
    """A field that is a run option with ``help`` text, for an ``@frozen`` options class
    or a ``dataclasses`` one.

    A ``@dataclass`` decorator is evaluated before the class body it decorates, so
    ``dataclasses`` is loaded by the time its options are declared: they get a
    ``dataclasses.field``. Otherwise (``@frozen``, which also accepts that) the field
    comes from :mod:`distspec.frozen` and ``dataclasses`` stays unimported.
    """
    dc = sys.modules.get("dataclasses")
    if dc is not None:
        return dc.field(default=default, metadata={"help": help})
    return field(default=default, metadata={"help": help})


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` when a close match exists, else ``""``."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


@frozen(kw_only=False)
class OptionSpec:
    """One option, as derived from its dataclass field."""

    name: str
    kind: str  # str, int, float, bool, list, dict, enum
    optional: bool
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    enum_type: type[enum.Enum] | None = None

    @property
    def type_name(self) -> str:
        """The type as ``distspec runopts`` shows it (the choices, if any; ``?`` when optional)."""
        base = {"list": "list (a;b)", "dict": "map (k=v;k2=v2)"}.get(self.kind, self.kind)
        if self.choices:
            base = "|".join(self.choices)
        return f"{base}?" if self.optional else base

    def parse(self, value: Any, *, scheduler: str = "") -> Any:
        """Coerce a string (or an already typed value from a TOML config) to this option's type."""
        if value is None:
            if self.optional:
                return None
            raise self._bad(value, "may not be empty", scheduler)
        if self.optional and isinstance(value, str) and value == "":
            return None
        try:
            return self._coerce(value)
        except (ValueError, TypeError) as e:
            why = "malformed (not shown: it may be a secret)" if "secret" in self.name else str(e)
            raise self._bad(value, why, scheduler) from None

    def _coerce(self, value: Any) -> Any:
        kind = self.kind
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in {"true", "yes", "1", "on"}:
                return True
            if text in {"false", "no", "0", "off"}:
                return False
            raise ValueError("expected true or false")
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError("expected an integer")
            return int(value)
        if kind == "float":
            # Float run options are durations (grace_period): nan, inf and negative
            # values would make the cancel path wait forever or not at all.
            number = float(value)
            if not math.isfinite(number) or number < 0:
                raise ValueError("expected a finite number of seconds >= 0")
            return number
        if kind == "str":
            return str(value)
        if kind == "enum":
            assert self.enum_type is not None
            try:
                return self.enum_type(str(value))
            except ValueError:
                raise ValueError(f"expected one of {', '.join(self.choices)}") from None
        if kind == "list":
            if isinstance(value, (list, tuple)):
                return tuple(str(v) for v in value)
            return tuple(p for p in str(value).split(";") if p)
        if kind == "dict":
            if isinstance(value, Mapping):
                return FrozenDict({str(k): str(v) for k, v in value.items()})
            out: dict[str, str] = {}
            for item in str(value).split(";"):
                if not item:
                    continue
                key, sep, val = item.partition("=")
                if not sep or not key:
                    raise ValueError(f"expected k=v;k2=v2, got {item!r}")
                out[key] = val
            return FrozenDict(out)
        raise TypeError(f"unsupported option kind {kind}")

    def format(self, value: Any) -> str:
        """The string form that :meth:`parse` turns back into ``value``."""
        if value is None:
            return ""
        if self.kind == "bool":
            return "true" if value else "false"
        if self.kind == "enum":
            return str(value.value)
        if self.kind == "list":
            return ";".join(value)
        if self.kind == "dict":
            return ";".join(f"{k}={v}" for k, v in value.items())
        return str(value)

    def _bad(self, value: Any, why: str, scheduler: str) -> OptionError:
        # A secret option's value may be the secret itself, pasted by mistake: never echo it.
        shown = "<hidden>" if "secret" in self.name else repr(value)
        return OptionError(
            f"{scheduler + ': ' if scheduler else ''}option {self.name}={shown}: {why}",
            option=self.name,
            value="" if "secret" in self.name else str(value),
            scheduler=scheduler,
        )


_SPECS: dict[type, tuple[OptionSpec, ...]] = {}


def option_specs(cls: type) -> tuple[OptionSpec, ...]:
    """The options that ``cls`` declares, in field order."""
    cached = _SPECS.get(cls)
    if cached is not None:
        return cached
    dc = sys.modules.get("dataclasses")  # a dataclasses options class has its MISSING
    specs = []
    for f in fields(cls):
        kind, optional, enum_type = _classify(_annotation(cls, f.name), cls, f.name)
        choices = tuple(str(m.value) for m in enum_type) if enum_type else ()
        missing = f.default is MISSING or (dc is not None and f.default is dc.MISSING)
        default = None if missing else f.default
        specs.append(
            OptionSpec(
                name=f.name,
                kind=kind,
                optional=optional,
                default=default,
                help=f.metadata.get("help", ""),
                choices=choices,
                enum_type=enum_type,
            )
        )
    # A class's own options first, then those it inherits (the snapshot's, shared by
    # every backend), so ``distspec runopts`` leads with what is particular to it.
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 -- no inspect
    result = tuple(sorted(specs, key=lambda s: s.name not in own))
    _SPECS[cls] = result
    return result


def _annotation(cls: type, name: str) -> Any:
    """The evaluated annotation of field ``name``, from the class in ``cls``'s MRO that
    declares it (what ``typing.get_type_hints`` would give, without importing typing)."""
    for klass in cls.__mro__:
        declared = klass.__dict__.get("__annotations__", {})  # noqa: RUF063 -- no inspect
        if name in declared:
            annotation = declared[name]
            if not isinstance(annotation, str):
                return annotation
            scope = vars(sys.modules[klass.__module__])
            try:
                return eval(annotation, scope, dict(vars(klass)))
            except Exception as e:
                raise TypeError(
                    f"{cls.__name__}.{name}: cannot evaluate {annotation!r}: {e}"
                ) from e
    raise TypeError(f"{cls.__name__}.{name}: no annotation")


def _classify(tp: Any, cls: type, name: str) -> tuple[str, bool, type[enum.Enum] | None]:
    optional = False
    members = union_members(tp)
    if members is not None:
        args = [a for a in members if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{cls.__name__}.{name}: unions other than X | None are not options")
        optional, tp = True, args[0]
    origin = getattr(tp, "__origin__", None)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "enum", optional, tp
    if tp in (bool, int, float, str):
        return tp.__name__, optional, None
    if origin is tuple:
        return "list", optional, None
    if origin in (FrozenDict, dict, Mapping) or tp is FrozenDict:
        return "dict", optional, None
    raise TypeError(f"{cls.__name__}.{name}: unsupported option type {tp!r}")


def parse_options(cls: type[T], raw: Mapping[str, Any], *, scheduler: str = "") -> T:
    """Build ``cls`` from ``raw`` (strings or typed values); unknown keys are errors."""
    specs = {s.name: s for s in option_specs(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        spec = specs.get(name)
        if spec is None:
            where = f"{scheduler}: " if scheduler else ""
            raise OptionError(
                f"{where}unknown option {key!r}{did_you_mean(name, specs)}; "
                f"see `distspec runopts {scheduler}`".rstrip(),
                option=key,
                scheduler=scheduler,
            )
        kwargs[name] = spec.parse(value, scheduler=scheduler)
    return cls(**kwargs)


def options_to_strings(opts: Any) -> dict[str, str]:
    """Every option of ``opts`` as the string that parses back to it."""
    return {s.name: s.format(getattr(opts, s.name)) for s in option_specs(type(opts))}


_NEXT_KEY = r",(?=\s*[A-Za-z_][A-Za-z0-9_-]*=)"


def parse_cfg(text: str) -> dict[str, str]:
    """Split ``k=v,k2=v2`` into a dict.

    A comma starts a new pair only when ``key=`` follows it, so values may
    themselves contain commas (``exclude=n1,n2,time=1:00:00``).
    """
    out: dict[str, str] = {}
    if not text.strip():
        return out
    for pair in re.compile(_NEXT_KEY).split(text):
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise OptionError(
                f"malformed -cfg item {pair!r}: expected key=value[,key=value...]", value=pair
            )
        out[key] = value
    return out
