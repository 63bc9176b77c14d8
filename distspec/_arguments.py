"""Checks of the Python API's arguments (``distspec.submit``, ``Job``, ``Runner``).

A value of the wrong type or out of range raises :class:`~distspec.errors.ArgumentError`
at the call, naming the function, the argument and the value, before anything is
written or submitted: ``distspec.submit: seed=-1: give an integer in 0..2**63-1``.
Values are shown by :func:`show` (escaped, shortened); a value that may be a secret
is never shown.

Imports nothing heavy: :class:`~distspec.runner.Runner` uses it on the CLI's path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from distspec.errors import ArgumentError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

__all__ = [
    "MAX_SECONDS",
    "cfg_values",
    "fail",
    "integer",
    "kind",
    "mapping",
    "number",
    "sequence",
    "show",
    "string",
    "timeout",
]

#: The longest duration a timeout may be: ``datetime.timedelta``'s limit (999999999
#: days), which torch's process group timeout goes through.
MAX_SECONDS = 999_999_999 * 86_400.0

_SHOWN = 60


def show(value: object, limit: int = _SHOWN) -> str:
    """``value`` as an error message shows it: its repr, at most about ``limit``
    characters, with every character that is not printable escaped (control
    characters, bidi overrides), also from a ``__repr__`` of the user's own. A repr
    that raises shows the type."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        # repr() of an int of more than 4300 digits raises (sys.int_info's limit).
        text = f"<an int of {value.bit_length()} bits>"
    elif isinstance(value, str):
        text = repr(value if len(value) <= limit else value[:limit])
        if len(value) > limit:
            text += f"... ({len(value)} characters)"
    else:
        import reprlib

        shorter = reprlib.Repr()
        shorter.maxstring = shorter.maxother = limit
        shorter.maxlong = 40
        try:
            text = shorter.repr(value)
        except Exception:
            text = f"<{type(value).__name__} object>"
        if len(text) > 2 * limit:
            text = text[: 2 * limit] + "..."
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def fail(where: str, argument: str, value: Any, why: str, *, secret: bool = False) -> NoReturn:
    """Raise ``ArgumentError("WHERE: ARGUMENT=VALUE: WHY")``; ``secret`` hides the value."""
    shown = "<hidden>" if secret else show(value)
    prefix = f"{where}: " if where else ""
    raise ArgumentError(
        f"{prefix}{argument}={shown}: {why}",
        argument=argument,
        value="" if secret else shown,
    )


def kind(value: object) -> str:
    """``a list``, ``an int``: the type of ``value`` as a message names it."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def integer(
    value: Any,
    where: str,
    argument: str,
    *,
    lo: int | None = None,
    hi: int | None = None,
    optional: bool = False,
) -> int | None:
    """``value`` as an int in ``lo..hi`` (None when ``optional``); a bool, a float or a
    string is refused (an int-like such as ``numpy.int64`` is taken)."""
    if value is None and optional:
        return None
    span = f" in {lo}..{hi}" if lo is not None and hi is not None else ""
    if lo is not None and hi is None:
        span = f" >= {lo}"
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        what = "an integer" + span + (" or None" if optional else "")
        fail(where, argument, value, f"give {what}, not {kind(value)}")
    import operator

    number = operator.index(value)
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        fail(where, argument, value, f"give an integer{span}")
    return number


def number(
    value: Any,
    where: str,
    argument: str,
    *,
    positive: bool = False,
    optional: bool = False,
    unit: str = "seconds",
    hi: float = MAX_SECONDS,
) -> float | None:
    """``value`` as a finite float >= 0 (> 0 with ``positive``, at most ``hi``), None
    when ``optional``; a bool or a string is refused, NaN and infinity too."""
    if value is None and optional:
        return None
    bound = "> 0" if positive else ">= 0"
    what = f"a finite number of {unit} {bound}" + (" or None" if optional else "")
    if isinstance(value, (bool, str, bytes)):
        fail(where, argument, value, f"give {what}, not {kind(value)}")
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        fail(where, argument, value, f"give {what}, not {kind(value)}")
    if not math.isfinite(result) or result < 0 or (positive and result == 0):
        fail(where, argument, value, f"give {what}")
    if result > hi:
        fail(where, argument, value, f"give {what}, at most {hi:g}")
    return result


def timeout(value: Any, where: str, argument: str = "timeout") -> float | None:
    """A wait's timeout: None (no limit) or a finite number of seconds >= 0."""
    return number(value, where, argument, optional=True)


def string(
    value: Any,
    where: str,
    argument: str,
    *,
    optional: bool = False,
    empty: bool = False,
    limit: int | None = None,
) -> str | None:
    """``value`` as a str (None when ``optional``; "" only with ``empty``), of at most
    ``limit`` characters."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        what = "a str" + (" or None" if optional else "")
        fail(where, argument, value, f"give {what}, not {kind(value)}")
    if not empty and not value.strip():
        fail(where, argument, value, "may not be empty")
    if limit is not None and len(value) > limit:
        fail(where, argument, value, f"at most {limit} characters")
    return value


def mapping(value: Any, where: str, argument: str, *, optional: bool = True) -> dict[str, Any]:
    """``value`` as a dict with str keys ({} for None when ``optional``). The message
    names the type and the bad key, never a value: a mapping may hold secrets."""
    prefix = f"{where}: " if where else ""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise ArgumentError(
            f"{prefix}{argument}: give a mapping (a dict), not {kind(value)}", argument=argument
        )
    for key in value:
        if not isinstance(key, str):
            raise ArgumentError(
                f"{prefix}{argument}: the key {show(key)} is {kind(key)}; keys are str",
                argument=argument,
            )
    return dict(value)


def sequence(value: Any, where: str, argument: str) -> tuple[Any, ...]:
    """``value`` as a tuple: a list, tuple or other sequence, not a str, bytes or mapping."""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Sequence):
        fail(where, argument, value, f"give a list or tuple, not {kind(value)}")
    return tuple(value)


def cfg_values(cfg: Mapping[str, Any], specs: Sequence[Any], scheduler: str) -> None:
    """Refuse a typed ``cfg`` value (from Python, not a ``-cfg`` string) whose Python
    type cannot mean the option's: ``True`` for a number, ``3.5`` for an int, a list
    for a string. Strings are parsed as ``-cfg`` parses them; unknown keys are left to
    the option parser (it suggests the closest name). A secret option's value is never
    shown.

    Raises:
        OptionError: naming the scheduler, the option and the type.
    """
    from distspec.errors import OptionError

    by_name = {s.name: s for s in specs}
    for key, value in cfg.items():
        spec = by_name.get(key.replace("-", "_"))
        if spec is None or value is None or isinstance(value, str):
            continue
        want = _cfg_problem(spec, value)
        if want:
            secret = "secret" in spec.name
            shown = "<hidden>" if secret else show(value)
            raise OptionError(
                f"{scheduler}: option {spec.name}={shown}: give {want}, not {kind(value)}",
                option=spec.name,
                value="" if secret else shown,
                scheduler=scheduler,
            )


def _cfg_problem(spec: Any, value: Any) -> str:
    """What ``value`` should have been for ``spec`` (an OptionSpec), or ""."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec.kind == "bool":
        return "" if isinstance(value, bool) else "True or False"
    if spec.kind == "int":
        integral = number and (isinstance(value, int) or float(value).is_integer())
        return "" if integral else "an integer"
    if spec.kind == "float":
        return "" if number else "a number"
    if spec.kind == "str":
        return "" if number else "a str"
    if spec.kind == "enum":
        ok = spec.enum_type is not None and isinstance(value, spec.enum_type)
        return "" if ok else f"one of {', '.join(spec.choices)}"
    if spec.kind == "list":
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return "" if ok else "a list of str"
    if spec.kind == "dict":
        ok = isinstance(value, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
        return "" if ok else "a dict of str to str"
    return ""
