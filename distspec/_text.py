"""Making user-supplied text safe to print in a message.

A value a user typed (or a file or variable supplied) can hold control characters
(an ESC that starts a terminal escape sequence, a carriage return that overwrites
the line) or Unicode bidirectional overrides (U+202E turns ``exe.txt`` into what
reads as ``txt.exe``). :func:`escape` writes each character that is not printable
as a visible escape (``\\x1b``, ``\\u202e``); every printable character, non-ASCII
letters included, stays as it is.

:func:`quote` is the form messages quote a value in (``'value'``, escaped);
``repr`` of a ``str`` escapes the same characters, so ``{value!r}`` in a message is
already safe. ``distspec.cli.main`` passes every error line through :func:`escape`
as a backstop for text that reached a message unquoted.
"""

from __future__ import annotations

__all__ = ["escape", "quote"]


def escape(text: str, *, keep: str = "") -> str:
    """``text`` with every character that is not printable written as an escape
    (``\\n``, ``\\x1b``, ``\\u202e``): control characters, bidi overrides and
    marks, other format characters, separators; the rule ``repr`` uses, and
    :func:`distspec._arguments.show`'s. The characters in ``keep`` (``"\\n"`` for a
    multi-line message) stay as they are."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def quote(text: object) -> str:
    """``'text'``, escaped as :func:`escape` does: how a message shows a value."""
    return "'" + escape(str(text)) + "'"
