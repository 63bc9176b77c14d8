r"""Turn a component's typed signature and docstring into its command line.

The parameter types a component may use are declared once, in :data:`KINDS`:

=====================  ==============================  =====================================
annotation             on the command line             notes
=====================  ==============================  =====================================
``str``                ``--name VALUE``
``int`` / ``float``    ``--cpu 4`` / ``--lr 0.1``
``bool``               ``--debug`` / ``--no-debug``    also ``--debug true``, ``--debug=0``
``list[str]``          ``--mounts a,b``                comma-separated; repeat to append
``dict[str, str]``     ``--env K=V,K2=V2``             repeat to merge; see escapes below
an ``Enum`` subclass   ``--mode fast``                 a member's value (or its name)
``X | None``           as ``X``                        also ``Optional[X]``; default None
``*args: str``         ``[--] ARGS...``                everything after the component's flags
=====================  ==============================  =====================================

Flag names: a one-letter parameter ``j`` is ``-j``; any other is ``--name``, and
``--name-with-dashes`` is accepted for ``name_with_dashes``; ``mem_mb`` is also
``--memMB`` (TorchX's spelling, :data:`ALIASES`). A parameter without a default is
a required flag. ``--help`` prints the help, built from the docstring; so does a
``-h`` with no value after it (``dist.ddp`` uses ``-h NAME`` for the host type).

Bool flags: ``--debug`` alone, ``--debug VALUE`` or ``--debug=VALUE`` with a truth
value (``true/false``, ``yes/no``, ``on/off``, ``1/0``, any case), and ``--no-debug``.
The word after a bool flag is its value when it is a truth value; any other word
there is an error, not a script argument: TorchX requires ``--debug True``, and
guessing would turn ``--debug True -j 2x8`` or ``--debug False`` into a different
job. Script arguments go after ``--`` (``--debug -- data.csv``).

Escapes in lists and mappings: a backslash before a comma keeps the comma
(``a\,b`` is one item ``a,b``) and ``\\`` is one backslash; any other backslash
is kept as written. In a mapping a comma starts a new pair only when ``KEY=``
follows it, so ``--env PATHS=/a,/b,MODE=x`` is ``{"PATHS": "/a,/b", "MODE": "x"}``;
``--env A=x\,B=y`` is ``{"A": "x,B=y"}``. A value may contain ``=``: the first
``=`` of a pair ends the key.

Script arguments (``*script_args``) are the first positional word and everything
after it, or everything after a ``--`` that comes before the first positional.

``docstring_parser`` is imported only to render ``--help``.
"""

from __future__ import annotations

import argparse
import enum
import math
import re
import types
from collections.abc import Callable, Mapping, Sequence

from distspec._argparse import HelpFormatter
from distspec._typing import union_members
from distspec.errors import ComponentError
from distspec.frozen import frozen, replace
from distspec.specs.app import AppDef

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from distspec.components.loader import Component

__all__ = [
    "ALIASES",
    "KINDS",
    "ComponentHelp",
    "Kind",
    "Param",
    "bind",
    "format_dict",
    "format_list",
    "help_text",
    "params",
    "parse_dict",
    "parse_list",
    "truth",
]


class ComponentHelp(Exception):
    """``--help`` was asked for: the CLI prints :attr:`text` and exits 0.

    Deliberately not a DistspecError: it is not a failure.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(text)


class Kind(str, enum.Enum):
    """The kinds of parameter a component may declare."""

    STR = "str"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    LIST = "list[str]"
    DICT = "dict[str, str]"
    ENUM = "enum"
    ARGS = "*args: str"


#: The one table of supported annotations: the Python type and the kind it binds as.
#: ``X | None`` / ``Optional[X]`` of any of these (except ``*args``) and Enum
#: subclasses are the only other accepted forms; ``typing.List[str]`` and
#: ``typing.Dict[str, str]`` from older code count as ``list[str]`` and ``dict[str, str]``.
KINDS: Mapping[Any, Kind] = types.MappingProxyType(
    {
        str: Kind.STR,
        int: Kind.INT,
        float: Kind.FLOAT,
        bool: Kind.BOOL,
        list[str]: Kind.LIST,
        dict[str, str]: Kind.DICT,
    }
)

_SUPPORTED = (
    "str, int, float, bool, list[str], dict[str, str], an Enum, X | None of those, *args: str"
)


#: Extra spellings of a parameter's flag, for the names TorchX users type.
ALIASES: Mapping[str, tuple[str, ...]] = types.MappingProxyType({"mem_mb": ("--memMB",)})

# alias without dashes -> parameter name, for config keys (``memMB = 4096``)
_ALIASED = {a.lstrip("-"): name for name, aliases in ALIASES.items() for a in aliases}

_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})


def truth(text: str) -> bool | None:
    """``True``/``False`` for a truth value (``true``, ``no``, ``1``, ``OFF``...), else None."""
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


class _Required(enum.Enum):
    REQUIRED = "required"


REQUIRED = _Required.REQUIRED


@frozen
class Param:
    """One component parameter, as the binder sees it."""

    name: str
    kind: Kind
    optional: bool = False
    default: Any = REQUIRED
    enum_type: type[enum.Enum] | None = None
    positional: bool = False  # passed positionally (it precedes *args in the signature)
    aliases: tuple[str, ...] = ()  # from ALIASES, unless another parameter has the name

    @property
    def required(self) -> bool:
        """True when the component gives no default, so the flag must be given."""
        return self.default is REQUIRED

    @property
    def flags(self) -> tuple[str, ...]:
        """Its spellings on the command line: ``-x`` for a one-letter name, else ``--name`` (and
        ``--na-me`` for a name with underscores), then its aliases."""
        if len(self.name) == 1:
            return (f"-{self.name}",)
        dashed = self.name.replace("_", "-")
        own = (f"--{self.name}",) if dashed == self.name else (f"--{self.name}", f"--{dashed}")
        return own + self.aliases

    @property
    def negative_flags(self) -> tuple[str, ...]:
        """``--no-NAME`` for a bool (one-letter ones too: ``-v`` / ``--no-v``)."""
        if self.kind is not Kind.BOOL:
            return ()
        names = {f"--no-{self.name}", f"--no-{self.name.replace('_', '-')}"}
        return tuple(sorted(names))

    @property
    def type_name(self) -> str:
        """The type as messages and ``--help`` show it (``{a,b}`` for an enum; ``| None`` when
        optional)."""
        if self.kind is Kind.ENUM:
            assert self.enum_type is not None
            base = "{" + ",".join(str(m.value) for m in self.enum_type) + "}"
        else:
            base = self.kind.value
        return f"{base} | None" if self.optional else base

    def convert(self, text: str) -> Any:
        """Parse one command-line string into this parameter's type (ValueError if it cannot)."""
        kind = self.kind
        if kind is Kind.STR:
            # An empty value is what an unset shell variable gives (`--script "$S"`);
            # it is refused unless the component's own default is the empty string.
            if not text.strip() and self.default != "":
                raise ValueError("may not be empty")
            return text
        if kind is Kind.INT:
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"expected an integer, got {text!r}") from None
        if kind is Kind.FLOAT:
            try:
                number = float(text)
            except ValueError:
                raise ValueError(f"expected a number, got {text!r}") from None
            if not math.isfinite(number):
                raise ValueError(f"expected a finite number, got {text!r}")
            return number
        if kind is Kind.BOOL:
            value = truth(text)
            if value is None:
                raise ValueError(f"expected true or false, got {text!r}")
            return value
        if kind is Kind.LIST:
            return parse_list(text)
        if kind is Kind.DICT:
            return parse_dict(text)
        if kind is Kind.ENUM:
            assert self.enum_type is not None
            for member in self.enum_type:
                if text == str(member.value) or text == member.name:
                    return member
            choices = ", ".join(str(m.value) for m in self.enum_type)
            raise ValueError(f"expected one of {choices}, got {text!r}")
        raise ValueError(f"{self.name} takes no value")  # pragma: no cover - ARGS

    def coerce(self, value: Any) -> Any:
        """A config default (a string or an already typed value) in this parameter's type."""
        if value is None:
            if self.optional:
                return None
            raise ValueError("may not be empty")
        if isinstance(value, str):
            return self.convert(value)
        kind = self.kind
        if kind is Kind.BOOL and isinstance(value, bool):
            return value
        if kind is Kind.INT and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is Kind.FLOAT and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if (
            kind is Kind.LIST
            and isinstance(value, (list, tuple))
            and all(isinstance(v, str) for v in value)
        ):
            return list(value)
        if kind is Kind.DICT and isinstance(value, Mapping):
            return {str(k): str(v) for k, v in value.items()}
        if kind is Kind.ENUM and self.enum_type is not None and isinstance(value, self.enum_type):
            return value
        raise ValueError(f"expected {self.type_name}, got {value!r}")


# -- escapes ------------------------------------------------------------------

_KEY_AHEAD = r"\s*[A-Za-z_][A-Za-z0-9_.-]*="


def _split(text: str, *, pairs: bool) -> list[str]:
    """Split ``text`` on unescaped commas (for ``pairs``, only before ``KEY=``); keep escapes."""
    pieces: list[str] = []
    start = i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "," and (not pairs or re.compile(_KEY_AHEAD).match(text, i + 1)):
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    pieces.append(text[start:])
    return pieces


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in ",\\":
            out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace(",", "\\,")


def parse_list(text: str) -> list[str]:
    r"""``a,b\,c`` → ``["a", "b,c"]``; empty items are dropped."""
    return [item for item in (_unescape(p) for p in _split(text, pairs=False)) if item]


def format_list(items: Sequence[str]) -> str:
    """The text that :func:`parse_list` turns back into ``items`` (non-empty items)."""
    return ",".join(_escape(i) for i in items)


def parse_dict(text: str) -> dict[str, str]:
    """``K=V,K2=V2`` → a dict; see the module docstring for commas, ``=`` and escapes.

    Raises:
        ValueError: an item without ``=`` or with an empty key.
    """
    out: dict[str, str] = {}
    if not text.strip():
        return out
    for raw in _split(text, pairs=True):
        eq = _find_unescaped(raw, "=")
        key = _unescape(raw[:eq]).strip() if eq >= 0 else ""
        # The entry is not quoted: a mapping's values (--env HF_TOKEN=...) may be
        # secrets, and an entry without '=' may be the value alone.
        if eq < 0:
            raise ValueError(
                "expected KEY=VALUE[,KEY=VALUE...], got an entry without '=' "
                "(not shown: it may be a value)"
            )
        if not key:
            raise ValueError(
                "expected KEY=VALUE[,KEY=VALUE...], got an entry with an empty KEY "
                "(its value is not shown)"
            )
        out[key] = _unescape(raw[eq + 1 :])
    return out


def format_dict(mapping: Mapping[str, str]) -> str:
    """The text that :func:`parse_dict` turns back into ``mapping``.

    Keys must look like identifiers (letters, digits, ``_``, ``.``, ``-``).
    """
    return ",".join(f"{k}={_escape(v)}" for k, v in mapping.items())


def _find_unescaped(text: str, char: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == char:
            return i
        i += 1
    return -1


# -- signature → params ---------------------------------------------------------


def params(component: Component) -> list[Param]:
    """The component's parameters, checked against :data:`KINDS`.

    Raises:
        ComponentError: ``file:line: reason`` for a missing docstring, a missing or
            unsupported annotation, ``**kwargs``, or a parameter named ``help``.
    """
    fn = component.fn
    label = _label(component)

    def reject(reason: str) -> NoReturn:
        raise ComponentError(f"{component.source}: component {label!r}: {reason}")

    if not _docstring(fn).strip() and not _returns_torchx(fn):  # TorchX needs none
        reject("has no docstring; write one with an Args: section, it is the component's --help")
    try:
        signature, hints = _signature(fn)
    except (NameError, SyntaxError, TypeError, ValueError) as e:
        reject(f"cannot read its signature: {e}")
    out: list[Param] = []
    seen_var = False
    for name, how, given in signature:
        if how == "**":
            reject(f"**{name} is not supported; declare each parameter")
        if name == "help":
            reject("a parameter may not be called 'help' (--help prints the help)")
        if name not in hints:
            reject(f"parameter {name!r} has no type annotation")
        hint = hints[name]
        if how == "*":
            if hint is not str:
                reject(f"*{name} must be annotated str, not {_type_text(hint)}")
            out.append(Param(name=name, kind=Kind.ARGS, default=()))
            seen_var = True
            continue
        kind, optional, enum_type = _classify(hint, reject, name)
        out.append(
            Param(
                name=name,
                kind=kind,
                optional=optional,
                default=given,
                enum_type=enum_type,
                positional=how == "positional" and not seen_var,
            )
        )
    names = {p.name for p in out}
    return [
        replace(p, aliases=tuple(a for a in ALIASES[p.name] if a.lstrip("-") not in names))
        if p.name in ALIASES
        else p
        for p in out
    ]


def _docstring(fn: Callable[..., Any]) -> str:
    if isinstance(fn, types.FunctionType):
        return fn.__doc__ or ""
    import inspect  # classes and methods may inherit theirs

    return inspect.getdoc(fn) or ""


_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


def _signature(
    fn: Callable[..., Any],
) -> tuple[list[tuple[str, str, Any]], dict[str, Any]]:
    """``(name, how, default)`` for each parameter in order -- ``how`` is
    ``positional``, ``keyword``, ``*`` or ``**``, ``default`` is :data:`REQUIRED` when
    there is none -- and the evaluated annotations.

    A plain function is read from its code object, as ``inspect.signature`` reads
    it, without importing ``inspect`` (~8 ms of start-up); anything else (a
    wrapped function, a callable object) goes through ``inspect``.
    """
    if not isinstance(fn, types.FunctionType) or hasattr(fn, "__wrapped__"):
        return _signature_by_inspect(fn)
    code = fn.__code__
    names = code.co_varnames
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    first_default = npos - len(defaults)
    out = [
        (name, "positional", defaults[i - first_default] if i >= first_default else REQUIRED)
        for i, name in enumerate(names[:npos])
    ]
    rest = npos + nkw
    if code.co_flags & _CO_VARARGS:
        out.append((names[rest], "*", REQUIRED))
        rest += 1
    out += [(name, "keyword", kwdefaults.get(name, REQUIRED)) for name in names[npos : npos + nkw]]
    if code.co_flags & _CO_VARKEYWORDS:
        out.append((names[rest], "**", REQUIRED))
    hints = {
        name: eval(text, fn.__globals__) if isinstance(text, str) else text
        for name, text in fn.__annotations__.items()
    }
    return out, hints


def _signature_by_inspect(
    fn: Callable[..., Any],
) -> tuple[list[tuple[str, str, Any]], dict[str, Any]]:
    import inspect

    how = {
        inspect.Parameter.POSITIONAL_ONLY: "positional",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.KEYWORD_ONLY: "keyword",
        inspect.Parameter.VAR_POSITIONAL: "*",
        inspect.Parameter.VAR_KEYWORD: "**",
    }
    signature = [
        (p.name, how[p.kind], REQUIRED if p.default is p.empty else p.default)
        for p in inspect.signature(fn).parameters.values()
    ]
    return signature, inspect.get_annotations(fn, eval_str=True)


def _label(component: Component) -> str:
    """The name to show in messages: the function's name when the component was named by path."""
    if ":" in component.name:
        return getattr(component.fn, "__name__", component.name)
    return component.name


def _classify(
    hint: Any, reject: Callable[[str], NoReturn], name: str
) -> tuple[Kind, bool, type[enum.Enum] | None]:
    optional = False
    tp = hint
    members = union_members(tp)
    if members is not None:
        rest = [a for a in members if a is not type(None)]
        if len(rest) != 1 or len(rest) == len(members):
            reject(
                f"parameter {name!r}: unsupported type {_type_text(hint)}; supported: {_SUPPORTED}"
            )
        optional, tp = True, rest[0]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return Kind.ENUM, optional, tp
    origin, args = getattr(tp, "__origin__", None), getattr(tp, "__args__", None)
    if origin in (list, dict) and args and not isinstance(tp, types.GenericAlias):
        tp = origin[args]  # typing.List[str] -> list[str]
    try:
        kind = KINDS.get(tp)
    except TypeError:  # unhashable annotation
        kind = None
    if kind is None:
        reject(f"parameter {name!r}: unsupported type {_type_text(hint)}; supported: {_SUPPORTED}")
    return kind, optional, None


def _type_text(tp: Any) -> str:
    if isinstance(tp, type) and not getattr(tp, "__args__", None):
        return tp.__name__
    return str(tp).replace("typing.", "")


# -- argparse -------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Raises ComponentError (``NAME: message``) instead of printing usage and exiting."""

    component_name = ""

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            self._unrecognized(list(extra))
        return ns

    def _unrecognized(self, extra: list[str]) -> NoReturn:
        """Name the words that are not this component's, never a value that may be a
        secret (:func:`distspec._text.unrecognized`), with a hint."""
        import difflib

        from distspec._text import escape, unrecognized

        text, flags = unrecognized(extra)
        hint = ""
        first = flags[0] if flags else ""
        own = {
            s.lstrip("-"): s
            for action in self._actions
            for s in action.option_strings
            if s not in ("-h", "--help")
        }
        # Compared without the dashes, so that '--lr' is not "close" to '--help'.
        close = difflib.get_close_matches(first.lstrip("-"), list(own), n=1, cutoff=0.6)
        takes_args = any(a.nargs == argparse.REMAINDER for a in self._actions)
        if first and close:
            hint = f" (did you mean {own[close[0]]!r}?)"
        elif first and takes_args:
            hint = f"; put the script's own arguments after --: ... -- {escape(first)} ..."
        raise ComponentError(f"{self.component_name}: unrecognized arguments: {text}{hint}")

    def error(self, message: str) -> NoReturn:
        raise ComponentError(f"{self.component_name}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise ComponentError(f"{self.component_name}: {message or 'argument error'}".strip())


class _HelpRequested(Exception):
    pass


class _HelpAction(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        raise _HelpRequested


class _BoolAction(argparse.Action):
    def __init__(
        self, option_strings: Sequence[str], dest: str, negatives: Sequence[str] = (), **kw: Any
    ):
        self.negatives = frozenset(negatives)
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, option_string not in self.negatives)


class _ValueAction(argparse.Action):
    """Converts with the Param; lists extend and mappings merge when the flag repeats."""

    def __init__(self, option_strings: Sequence[str], dest: str, param: Param, **kw: Any):
        self.param = param
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        try:
            value = self.param.convert(values)
        except ValueError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        previous = getattr(namespace, self.dest, None)
        if self.param.kind is Kind.LIST and isinstance(previous, list):
            value = previous + value
        elif self.param.kind is Kind.DICT and isinstance(previous, dict):
            value = {**previous, **value}
        setattr(namespace, self.dest, value)


def _metavar(p: Param) -> str:
    if p.kind is Kind.LIST:
        return f"{p.name.upper()}[,...]"
    if p.kind is Kind.DICT:
        return "KEY=VALUE[,...]"
    if p.kind is Kind.ENUM:
        assert p.enum_type is not None
        return "{" + ",".join(str(m.value) for m in p.enum_type) + "}"
    return p.name.upper()


def _show(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (list, tuple)):
        return format_list(value) if value else "(none)"
    if isinstance(value, Mapping):
        return format_dict(value) if value else "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return "''"
    return str(value)


def _parser(
    component: Component,
    ps: Sequence[Param],
    prog: str,
    docs: Mapping[str, str] | None = None,
    description: str | None = None,
) -> _Parser:
    parser = _Parser(
        prog=_prog(component, prog),
        add_help=False,
        allow_abbrev=False,
        description=description,
        formatter_class=HelpFormatter,
    )
    parser.component_name = component.name
    parser.add_argument("--help", action=_HelpAction, nargs=0, help="show this help and exit")

    def text(p: Param, extra: str) -> str | None:
        if docs is None:
            return None
        body = docs.get(p.name, "").strip() or "(undocumented)"
        return f"{body} [{extra}]".replace("%", "%%")

    for p in ps:
        if p.kind is Kind.ARGS:
            parser.add_argument(
                p.name,
                nargs=argparse.REMAINDER,
                metavar=p.name.upper(),
                help=text(p, "str, ...: everything after the flags, or after --"),
            )
            continue
        extra = p.type_name + (", required" if p.required else f", default: {_show(p.default)}")
        if p.kind is Kind.BOOL:
            spellings = f"{p.flags[0]} [true|false] or {p.negative_flags[0]}; "
            parser.add_argument(
                *p.flags,
                *p.negative_flags,
                dest=p.name,
                action=_BoolAction,
                negatives=p.negative_flags,
                required=p.required,
                default=argparse.SUPPRESS,
                help=text(p, spellings + extra),
            )
            continue
        parser.add_argument(
            *p.flags,
            dest=p.name,
            action=_ValueAction,
            param=p,
            metavar=_metavar(p),
            required=p.required,
            default=argparse.SUPPRESS,
            help=text(p, extra),
        )
    return parser


def _prog(component: Component, prog: str) -> str:
    """``prog`` followed by the component name, unless ``prog`` already ends with it."""
    if prog.split()[-1:] == [component.name]:
        return prog
    return f"{prog} {component.name}"


def _with_defaults(
    component: Component, ps: list[Param], defaults: Mapping[str, Any] | None
) -> list[Param]:
    if not defaults:
        return ps
    by_name = {p.name: p for p in ps if p.kind is not Kind.ARGS}
    out = {p.name: p for p in ps}
    for key, value in defaults.items():
        name = key.replace("-", "_")
        if name not in by_name:
            name = _ALIASED.get(key, name)
        p = by_name.get(name)
        if p is None:
            from distspec.specs.options import did_you_mean

            raise ComponentError(
                f"default {key!r} for component {component.name!r} is not one of its parameters"
                f"{did_you_mean(name, by_name)}; it has: {', '.join(by_name) or '(none)'}"
            )
        try:
            coerced = p.coerce(value)
        except ValueError as e:
            # A mapping's values (env = HF_TOKEN=...) may be secrets: name the key only.
            shown = f"{key}=..." if p.kind is Kind.DICT else f"{key}={value!r}"
            raise ComponentError(f"default {shown} for component {component.name!r}: {e}") from None
        out[p.name] = replace(p, default=coerced)
    return list(out.values())


def _normalize(component: Component, ps: Sequence[Param], argv: Sequence[str]) -> list[str]:
    """``argv`` with every bool flag in its bare form (``--debug`` / ``--no-debug``).

    Reads the component's own flags only: it stops at ``--`` and at the first
    word that is not a flag (the script arguments start there). A value-less
    ``-h`` (last, or followed by a flag) asks for the help.

    Raises:
        _HelpRequested: ``-h`` without a value.
        ComponentError: a bool flag followed by a word that is not a truth value,
            a truth value after ``--no-NAME``, or ``--NAME=VALUE`` that is not one.
    """
    bools: dict[str, tuple[Param, bool]] = {}
    valued: set[str] = {"--help"}
    for p in ps:
        if p.kind is Kind.BOOL:
            bools.update({f: (p, True) for f in p.flags})
            bools.update({f: (p, False) for f in p.negative_flags})
        elif p.kind is not Kind.ARGS:
            valued.update(p.flags)
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in {"--", "-"} or not word.startswith("-"):
            out.extend(argv[i:])  # `--` or the first script argument: the rest is theirs
            break
        following = argv[i + 1] if i + 1 < len(argv) else None
        flag, eq, value = word.partition("=")
        if flag in bools:
            p, positive = bools[flag]
            if eq:
                given, shown = value, word
                i += 1
            elif following is not None and following != "-" and not following.startswith("-"):
                given, shown = following, f"{word} {following}"
                i += 2
            else:
                out.append(_bool_flag(p, positive))
                i += 1
                continue
            meant = truth(given)
            if meant is None or not positive:
                raise ComponentError(_bool_error(component, p, flag, shown, given, positive))
            out.append(_bool_flag(p, meant))
            continue
        if word == "-h" and (
            following is None or following == "--" or following in bools or following in valued
        ):
            raise _HelpRequested
        if flag in valued and not eq and following is not None:
            out += [word, following]
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def _bool_flag(p: Param, value: bool) -> str:
    return p.flags[0] if value else p.negative_flags[0]


def _bool_error(
    component: Component, p: Param, flag: str, shown: str, given: str, positive: bool
) -> str:
    on, off = p.flags[0], p.negative_flags[0]
    if not positive:
        what = f"{flag} takes no value"
    else:
        what = f"{flag} is a true/false flag and {given!r} is not true or false"
    return (
        f"{component.name}: {shown}: {what}; write {on}, {on} false or {off}, "
        f"and put the script's own arguments after --"
    )


def _plain(text: str) -> str:
    """reStructuredText markup as plain text for ``--help``.

    ````x```` and ```x``` → ``x``; ``:role:`x``` → ``x``; ```text <url>`_`` →
    ``text (url)``; a paragraph ending in ``::`` (a literal block follows) ends
    in ``:``.
    """
    if "`" not in text and "::" not in text:
        return text
    text = re.sub(r"`([^`<]+?)\s*<([^>`]+)>`__?", r"\1 (\2)", text)
    text = re.sub(r":[\w:.-]+:`~?([^`]+)`", r"\1", text)
    text = re.sub(r"``(.+?)``", r"\1", text, flags=re.S)
    text = re.sub(r"(?<![\w`])`([^`\n]+)`(?!`)", r"\1", text)
    return re.sub(r"(\S)::$", r"\1:", text, flags=re.M)


# -- public -----------------------------------------------------------------------


def help_text(
    component: Component,
    prog: str = "distspec run",
    *,
    defaults: Mapping[str, Any] | None = None,
) -> str:
    """The ``--help`` text: the docstring's description, then every parameter with its
    documentation, type and default (``defaults`` from the user's config shown in place).

    Raises:
        ComponentError: the component is malformed (see :func:`params`).
    """
    ps = _with_defaults(component, params(component), defaults)
    import inspect

    import docstring_parser

    doc = docstring_parser.parse(inspect.cleandoc(_docstring(component.fn)))
    docs = {p.arg_name.lstrip("*").split(" ")[0]: _plain(p.description or "") for p in doc.params}
    parts = [_plain(s) for s in (doc.short_description, doc.long_description) if s]
    description = "\n\n".join(parts) + f"\n\ndefined at {component.source}"
    return _parser(component, ps, prog, docs, description).format_help()


def bind(
    component: Component,
    argv: Sequence[str],
    *,
    defaults: Mapping[str, Any] | None = None,
    prog: str = "distspec run",
    scheduler: str | None = None,
) -> AppDef:
    """Parse ``argv`` against the component's signature and call it.

    Args:
        component: what :func:`distspec.components.loader.load` returned.
        argv: the words after the component name.
        defaults: parameter values from the user's config; they replace the
            function's own defaults (strings are parsed as on the command line).
        prog: how the CLI is invoked, for the usage line: ``distspec run``; the
            component name is appended unless ``prog`` already ends with it.
        scheduler: the backend the app is for; only a TorchX AppDef's conversion
            uses it (:mod:`distspec.components.torchx_compat`: what ``image`` means).

    Returns:
        The AppDef the component built (a returned ``torchx.specs.AppDef`` converted).

    Raises:
        ComponentHelp: ``--help`` was given (not an error).
        ComponentError: a malformed component, a bad or missing argument, an unknown
            default key, or a component that returned something other than an AppDef.
        UsageError: whatever the component itself raised for bad values.
    """
    ps, parser = _parsed_signature(component, defaults, prog)
    try:
        ns = parser.parse_args(_normalize(component, ps, argv))
    except _HelpRequested:
        raise ComponentHelp(help_text(component, prog, defaults=defaults)) from None

    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for p in ps:
        if p.kind is Kind.ARGS:
            extra = list(getattr(ns, p.name, []) or [])
            if extra[:1] == ["--"]:
                extra = extra[1:]
            positional.extend(extra)
            continue
        value = getattr(ns, p.name, p.default)
        if p.positional:
            positional.append(value)
        else:
            keywords[p.name] = value
    app = component.fn(*positional, **keywords)  # a UsageError it raises passes through
    if not isinstance(app, AppDef):
        from distspec.components import torchx_compat

        if torchx_compat.is_torchx_appdef(app):  # a TorchX component file, run unchanged
            return torchx_compat.from_torchx(app, component.source, scheduler=scheduler)
        raise ComponentError(
            f"{component.source}: component {_label(component)!r} returned "
            f"{torchx_compat.type_label(app)}, not an AppDef (distspec.specs.AppDef)"
        )
    return app


#: The last component's parameters and parser (a sweep binds one component once per
#: point: building the parser is most of a bind's cost).
_LAST: list[tuple[object, ...]] = []


def _parsed_signature(
    component: Component, defaults: Mapping[str, Any] | None, prog: str
) -> tuple[list[Param], _Parser]:
    """``(params, parser)`` of ``component`` with ``defaults``, reused when the same
    component object is bound again with the same defaults and ``prog``."""
    try:
        key: tuple[object, ...] = (prog, tuple(sorted((defaults or {}).items())))
        hash(key)
    except TypeError:  # a default that is a list or dict: not worth a cache
        key = ()
    if key and _LAST and _LAST[0][0] is component and _LAST[0][1] == key:
        return _LAST[0][2], _LAST[0][3]  # type: ignore[return-value]
    ps = _with_defaults(component, params(component), defaults)
    parser = _parser(component, ps, prog)
    _LAST[:] = [(component, key, ps, parser)] if key else []
    return ps, parser


def _returns_torchx(fn: Callable[..., Any]) -> bool:
    """``fn`` is annotated to return a ``torchx.specs.AppDef`` (imports nothing)."""
    from distspec.components.torchx_compat import returns_torchx_appdef

    return returns_torchx_appdef(fn)
