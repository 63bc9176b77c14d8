"""A small YAML writer for manifests: block style, deterministic, no PyYAML.

PyYAML costs ~12 ms to import, as much as everything else a Kubernetes dry run
does, so manifests are written here. Only what manifests hold is supported:
mappings with string keys, lists, strings, ints, floats, bools and None.
Strings are plain where that cannot be misread (no YAML 1.1 booleans, nulls or
numbers) and JSON-quoted otherwise; JSON's escapes are valid in YAML
double-quoted scalars, and the few characters YAML treats specially inside them
are escaped as well.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["dump", "dump_all"]

# Plain (unquoted) strings: [A-Za-z_/][A-Za-z0-9_./@-]* with single inner colons,
# checked with str methods (no regex to compile at start-up).
_PLAIN_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_/"
_PLAIN_CHARS = _PLAIN_FIRST + "0123456789.@-:"
# YAML 1.1 resolves these plain words to booleans or null.
_RESERVED = frozenset(["y", "yes", "n", "no", "true", "false", "on", "off", "null"])
# Inside double quotes YAML folds or rejects these; JSON leaves them raw.
_SPECIAL = "[\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff]"


def _is_plain(text: str) -> bool:
    return (
        text != ""
        and text[0] in _PLAIN_FIRST
        and not text.strip(_PLAIN_CHARS)
        and "::" not in text
        and not text.endswith(":")
    )


def _quote(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    if quoted.isascii() and "\x7f" not in quoted:
        return quoted
    return re.compile(_SPECIAL).sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    if isinstance(value, str):
        if _is_plain(value) and value.lower() not in _RESERVED:
            return value
        return _quote(value)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _lines(value: Any, indent: int, out: list[str]) -> None:
    pad = " " * indent
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"mapping keys must be strings, got {key!r}")
            head = f"{pad}{_scalar(key)}:"
            if isinstance(item, Mapping) and item:
                out.append(head)
                _lines(item, indent + 2, out)
            elif isinstance(item, list) and item:
                out.append(head)
                _lines(item, indent, out)  # a block sequence sits at its key's indent
            else:
                out.append(f"{head} {_inline(item)}")
        return
    for item in value:
        if isinstance(item, (Mapping, list)) and item:
            start = len(out)
            _lines(item, indent + 2, out)
            out[start] = f"{pad}- {out[start][indent + 2 :]}"
        else:
            out.append(f"{pad}- {_inline(item)}")


def _inline(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def dump(doc: Mapping[str, Any]) -> str:
    """One document as block-style YAML text, ending in a newline."""
    out: list[str] = []
    _lines(doc, 0, out)
    return "\n".join(out) + "\n" if out else "{}\n"


def dump_all(docs: Iterable[Mapping[str, Any]]) -> str:
    """Several documents, each introduced by ``---``."""
    return "".join("---\n" + dump(doc) for doc in docs)
