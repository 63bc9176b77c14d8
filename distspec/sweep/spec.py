"""A sweep's definition: ``--sweep NAME=VALUES`` (repeatable) and ``--sweep-file FILE``.

NAME is an ASCII Python identifier but ``INDEX`` (``DISTSPEC_SWEEP_INDEX`` is the
point's index), written ``{{NAME}}`` where its value goes. VALUES is one of:

- ``adam,sgd``: a list, split on commas; values as written (one with a comma, or an
  empty one, goes in a file);
- ``range:START:STOP[:STEP]``: integers, as Python's ``range`` (STOP excluded; STEP
  may be negative, ``range:3:0:-1`` is 3, 2, 1; not 0);
- ``lin:START:STOP:NUM``: NUM evenly spaced numbers, both ends included (NUM 1: START);
- ``log:START:STOP:NUM``: NUM geometrically spaced numbers, both ends included, START
  and STOP > 0 (``log:1e-5:1e-2:4`` is 1e-05, 0.0001, 0.001, 0.01).

An integer (``range``, an int in a file) is written in full, any other number as
``format(x, ".12g")`` writes it: 12 significant digits, no trailing zeros, exponent
form below 1e-4 and from 1e12 (0.1, 2.5, 100, 1e-05, 1e+12); ``lin`` computes exactly,
so ``lin:0:1:11`` is 0, 0.1, ..., 1 without float noise. Definitions form a cartesian
product in the order given (the last varies fastest), or with ``zip=True`` go value by
value (all of one length).

A sweep file (``.json``, ``.yaml``/``.yml``, ``.toml``) holds either a mapping of
variable to list of values (a product, or value by value where the file says ``mode:
zip``; a ``mode`` whose value is a string is this setting, not a variable), or a list
of points, each naming the same variables: a list of mappings, or a top-level
``points`` list of them (``[[points]]`` tables in TOML). A value is a string (as is),
an int, a float (as above) or a boolean (``true``/``false``). With definitions too,
the sweep is the product of the file's points (varying slowest) and theirs.

Every mistake is a one-line :class:`~distspec.errors.UsageError` saying what to write
instead. Nothing beyond distspec's core is imported until a function needs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from distspec.errors import UsageError
from distspec.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fractions import Fraction
    from typing import Any

__all__ = ["MAX_POINTS", "Sweep", "check_size", "check_used", "from_json", "parse", "to_json"]

#: More points than this need confirmation (``--yes``): a typo'd range is not a thousand jobs.
MAX_POINTS = 1000
_MOST = 100_000  # points distspec holds in one sweep at all, confirmed or not
_MAX_FILE_BYTES = 16 << 20
_Points = list[tuple[str, ...]]
_Factor = tuple[tuple[str, ...], _Points]  # some variables and their points
_zip = zip  # ``parse`` has a parameter named ``zip``
_WANT = {  # what a bound of range/lin/log must be
    "NUM": "a positive integer (how many values)",
    "range": "an integer (lin:START:STOP:NUM spaces any numbers)",
}


@frozen
class Sweep:
    """A sweep's points: ``names`` are the variables in definition order; each point
    holds their values, as strings, in that order."""

    names: tuple[str, ...]
    points: tuple[tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.points)

    def values(self, i: int) -> dict[str, str]:
        """Point ``i``'s values by variable name."""
        return dict(zip(self.names, self.points[i], strict=True))

    def subset(self, indices: Sequence[int]) -> Sweep:
        """The points at ``indices``, in that order (``rerun --failed``).

        Raises:
            IndexError: an index outside ``0 <= i < len(self)``.
        """
        bad = [i for i in indices if not 0 <= i < len(self.points)]
        if bad:
            raise IndexError(f"no sweep point {bad[0]}: the sweep has {len(self.points)}")
        return Sweep(names=self.names, points=tuple(self.points[i] for i in indices))


def parse(defs: Sequence[str], *, zip: bool = False, file: str | None = None) -> Sweep:
    """The sweep that the definitions ``defs`` (``--sweep``) and the sweep ``file`` describe.

    Raises:
        UsageError: a malformed definition or file, a variable defined twice, an
            empty sweep, or one of more than 100,000 points.
    """
    factors = [] if file is None else [_read_file(file)]
    seen = dict.fromkeys(factors[0][0] if factors else (), f"sweep file {file}")
    parsed = [_definition(text) for text in defs]
    for (name, _), text in _zip(parsed, defs, strict=True):
        if name in seen:
            raise UsageError(
                f"sweep variable {name!r} is defined twice ({seen[name]} and --sweep {text!r}):"
                " define it once, with all its values"
            )
        seen[name] = f"--sweep {text!r}"
    if zip and not parsed:
        raise UsageError("zip combines --sweep definitions; a sweep file says mode: zip itself")
    if parsed:
        factors.append(_combine(parsed, "--sweep with zip" if zip else ""))
    if not factors:
        raise UsageError("an empty sweep: give --sweep NAME=VALUES or --sweep-file FILE")
    names, points = _product(factors)
    return Sweep(names=names, points=tuple(points))


def check_used(texts: Iterable[str], sweep: Sweep) -> None:
    """Check that every ``{{name}}`` in ``texts`` (every argument and environment
    value the component gets) is a variable of ``sweep``, and every variable is used.

    Raises:
        UsageError: an undefined ``{{name}}`` (with a did-you-mean), or a variable
            that no text uses.
    """
    from distspec.specs.placeholders import find

    used: set[str] = set().union(*map(find, texts))
    unknown = sorted(used.difference(sweep.names))
    if unknown:
        import difflib

        shown = []
        for name in unknown:
            close = difflib.get_close_matches(name, sweep.names, n=1, cutoff=0.6)
            shown.append(_token(name) + (f" (did you mean {_token(close[0])}?)" if close else ""))
        s = "s" if len(unknown) > 1 else ""
        raise UsageError(
            f"undefined sweep variable{s} {', '.join(shown)}; defined: {', '.join(sweep.names)}"
        )
    unused = [name for name in sweep.names if name not in used]
    if unused:
        one = len(unused) == 1
        raise UsageError(
            f"sweep variable{'' if one else 's'} {', '.join(unused)} {'is' if one else 'are'}"
            f" defined but not used: put {', '.join(map(_token, unused))} where"
            f" {'its value goes' if one else 'their values go'}"
        )


def check_size(sweep: Sweep, *, yes: bool) -> None:
    """Refuse a sweep of more than :data:`MAX_POINTS` points unless ``yes``.

    Raises:
        UsageError: too many points, unconfirmed.
    """
    if len(sweep) > MAX_POINTS and not yes:
        n = len(sweep)
        raise UsageError(f"the sweep has {n} points, over {MAX_POINTS}: add --yes to run them all")


def to_json(sweep: Sweep) -> dict[str, Any]:
    """``sweep`` as JSON data, for the sweep's record (:func:`from_json` reads it back)."""
    return {"names": list(sweep.names), "points": [list(p) for p in sweep.points]}


def from_json(data: Any) -> Sweep:
    """The sweep that :func:`to_json` wrote.

    Raises:
        ValueError: ``data`` is not such a record.
    """
    names: Any = data.get("names") if isinstance(data, dict) else None
    points: Any = data.get("points") if isinstance(data, dict) else None
    rows = [names, *points] if isinstance(names, list) and isinstance(points, list) else [None]
    if not all(
        isinstance(row, list) and len(row) == len(names) and all(isinstance(v, str) for v in row)
        for row in rows
    ):
        raise ValueError("not a sweep record: expected names and points, lists of strings")
    return Sweep(names=tuple(names), points=tuple(tuple(p) for p in points))


def _token(name: str) -> str:
    return "{{" + name + "}}"


def _check_name(name: object, where: str) -> str:
    if not (isinstance(name, str) and name.isascii() and name.isidentifier()):
        raise UsageError(f"{where}: {name!r} is not a variable name: use letters, digits and _")
    if name == "INDEX":
        raise UsageError(f"{where}: INDEX is taken (DISTSPEC_SWEEP_INDEX): choose another name")
    return name


def _definition(text: str) -> tuple[str, list[str]]:
    """``NAME=VALUES`` as the name and its values."""
    where = f"--sweep {text!r}"
    name, eq, spec = text.partition("=")
    if not eq:
        raise UsageError(f"{where} has no '=': write NAME=VALUES (lr=1e-4,1e-3 or s=range:0:4)")
    _check_name(name, where)
    kind, colon, rest = spec.partition(":")
    if colon and kind in ("range", "lin", "log"):
        return name, _numbers(kind, rest.split(":"), where)
    values = spec.split(",")
    if not spec:
        raise UsageError(f"{where} has no values (an empty sweep): write {name}=V1,V2,...")
    if "" in values:
        raise UsageError(f"{where} has an empty value: drop the extra comma (or use a file)")
    return name, values


def _numbers(kind: str, args: list[str], where: str) -> list[str]:
    """The values of ``range:...``, ``lin:...`` or ``log:...`` (after the colon: ``args``)."""
    import math
    from fractions import Fraction

    labels = ["START", "STOP", "STEP" if kind == "range" else "NUM"]
    if len(args) != 3 and not (kind == "range" and len(args) == 2):
        form = "range:START:STOP[:STEP]" if kind == "range" else f"{kind}:START:STOP:NUM"
        raise UsageError(f"{where}: write {form}")
    got: list[Any] = []
    for label, arg in _zip(labels, args, strict=False):
        whole = kind == "range" or label == "NUM"
        try:
            got.append(int(arg) if whole else Fraction(arg.strip()))
            if not (whole or math.isfinite(float(arg))):
                raise ValueError(arg)
        except ValueError:
            what = _WANT.get(label) or _WANT.get(kind, "a number, e.g. 0.5 or 1e-4")
            raise UsageError(f"{where}: {label} {arg!r} is not {what}") from None
    if kind == "range":
        if got[2:] == [0]:
            raise UsageError(f"{where}: STEP must not be 0 (a negative STEP counts down)")
        numbers = range(*got)
        if not numbers:
            raise UsageError(f"{where} is empty: STOP is excluded (range:3:0:-1 counts down)")
        if numbers[_MOST:]:  # not len(): it fails from 2**63
            raise UsageError(f"{where}: more than {_MOST} values; a sweep holds at most {_MOST}")
        return [str(n) for n in numbers]
    start, stop, num = got
    if num < 1:
        raise UsageError(f"{where}: NUM {num} is not a positive integer (how many values)")
    _check_count(num)
    if kind == "log" and min(start, stop) <= 0:
        raise UsageError(f"{where}: log needs START and STOP > 0 (lin may cross zero)")
    if num == 1:
        return [_show(start)]
    if kind == "lin":  # exact: lin:0:1:11 is 0.1, 0.2, ..., not 0.30000000000000004
        return [_show(start + (stop - start) * i / (num - 1)) for i in range(num)]
    low, high = math.log10(start), math.log10(stop)
    inner = [_show(10 ** (low + (high - low) * i / (num - 1))) for i in range(1, num - 1)]
    return [_show(start), *inner, _show(stop)]


def _show(x: int | float | Fraction) -> str:
    """A number as a value: an int in full, others with 12 significant digits."""
    return str(x) if isinstance(x, int) else format(float(x), ".12g")


def _check_count(n: int) -> None:
    if n > _MOST:
        raise UsageError(
            f"the sweep would have {n} points; a sweep holds at most {_MOST}: split it"
        )


def _combine(items: list[tuple[str, list[str]]], zipped: str) -> _Factor:
    """Variables and their values as a product, or value by value where ``zipped``
    says what asked for that."""
    if not zipped:
        return _product([((name,), [(v,) for v in values]) for name, values in items])
    if len({len(values) for _, values in items}) > 1:
        each = ", ".join(f"{name} has {len(values)}" for name, values in items)
        raise UsageError(f"{zipped} needs lists of one length: {each}; make them equal")
    names = tuple(name for name, _ in items)
    return names, list(_zip(*(values for _, values in items), strict=True))


def _product(factors: list[_Factor]) -> tuple[tuple[str, ...], _Points]:
    total = 1
    for _, points in factors:
        total *= len(points)
    _check_count(total)
    combined: _Points = [()]
    for _, points in factors:
        combined = [a + b for a in combined for b in points]
    return tuple(name for names, _ in factors for name in names), combined


def _read_file(path: str) -> _Factor:
    where = f"sweep file {path}"
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".json", ".yaml", ".yml", ".toml"):
        raise UsageError(f"{where}: unknown extension {ext!r}; use .json, .yaml, .yml or .toml")
    import stat

    try:
        # O_NONBLOCK: a FIFO named like a sweep file is refused, not waited on forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UsageError(f"{where}: not a regular file")
            data = f.read(_MAX_FILE_BYTES + 1)
        if len(data) > _MAX_FILE_BYTES:
            raise UsageError(f"{where}: larger than {_MAX_FILE_BYTES >> 20} MiB")
        text = data.decode("utf-8")
    except OSError as e:
        raise UsageError(f"{where}: cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not UTF-8 text") from None
    return _layout(_load(text, ext, where), where)


def _load(text: str, ext: str, where: str) -> Any:
    """The data in a file's ``text``; a syntax error names the line where the parser can."""
    if ext == ".json":
        import json

        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"{where}:{e.lineno}: invalid JSON: {e.msg}") from None
    if ext == ".toml":
        import sys

        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10
            import tomli as tomllib
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:  # its message ends "(at line L, column C)"
            line = str(e).rpartition("at line ")[2].split(",")[0]
            at = f":{line}" if line.isdigit() else ""
            raise UsageError(f"{where}{at}: invalid TOML: {e}") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise UsageError(f"{where}{at}: invalid YAML: {problem}") from None


def _layout(data: Any, where: str) -> _Factor:
    """A file's variables and points, from either layout."""
    listed = data.get("points") if isinstance(data, dict) and len(data) == 1 else None
    if isinstance(listed, list) and (not listed or isinstance(listed[0], dict)):
        data = listed  # [[points]] in TOML
    if isinstance(data, list):
        return _points(data, where)
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of variable to values, or a list of points")
    mode = data.get("mode") if isinstance(data.get("mode"), str) else "product"
    if mode not in ("product", "zip"):
        raise UsageError(f"{where}: mode is 'product' or 'zip', not {mode!r}")
    items: list[tuple[str, list[str]]] = []
    for key, values in data.items():
        if key == "mode" and isinstance(values, str):
            continue
        name = _check_name(key, where)
        if not isinstance(values, list):
            raise UsageError(f"{where}: {name} must be a list of values, e.g. {name}: [1, 2]")
        if not values:
            raise UsageError(f"{where}: {name} has no values (an empty sweep)")
        items.append((name, [_scalar(v, name, where) for v in values]))
    if not items:
        raise UsageError(f"{where}: defines no variables (an empty sweep)")
    return _combine(items, f"{where}: mode zip" if mode == "zip" else "")


def _points(data: list[Any], where: str) -> _Factor:
    if not data:
        raise UsageError(f"{where}: has no points (an empty sweep)")
    _check_count(len(data))
    if not isinstance(data[0], dict) or not data[0]:
        raise UsageError(f"{where}: point 1 is not a mapping of variable to value")
    names = tuple(_check_name(key, where) for key in data[0])
    points: _Points = []
    for i, point in enumerate(data, 1):
        if not isinstance(point, dict) or set(point) != set(names):
            names_them = f"point 1 names ({', '.join(names)})"
            raise UsageError(f"{where}: point {i} does not name the variables {names_them}")
        points.append(tuple(_scalar(point[name], name, where) for name in names))
    return names, points


def _scalar(value: Any, name: str, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _show(value)
    if isinstance(value, str):
        return value
    kind = type(value).__name__
    raise UsageError(f"{where}: {name} has a {kind}; values are strings, numbers or booleans")
