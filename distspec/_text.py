r"""Making user-supplied text safe to print in a message.

A value a user typed (or a file or variable supplied) can hold control characters
(an ESC that starts a terminal escape sequence, a carriage return that overwrites
the line) or Unicode bidirectional overrides (U+202E turns ``exe.txt`` into what
reads as ``txt.exe``). :func:`escape` writes each character that is not printable
as a visible escape (``\x1b``, ``\u202e``); every printable character, non-ASCII
letters included, stays as it is.

:func:`quote` is the form messages quote a value in (``'value'``, escaped);
``repr`` of a ``str`` escapes the same characters, so ``{value!r}`` in a message is
already safe. ``distspec.cli.main`` passes every error line through :func:`escape`
as a backstop for text that reached a message unquoted.
"""

from __future__ import annotations

__all__ = ["escape", "quote", "unrecognized"]


def escape(text: str, *, keep: str = "") -> str:
    r"""``text`` with every character that is not printable written as an escape
    (``\n``, ``\x1b``, ``\u202e``): control characters, bidi overrides and
    marks, other format characters, separators; the rule ``repr`` uses, and
    :func:`distspec._arguments.show`'s. The characters in ``keep`` (``"\n"`` for a
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


def unrecognized(words: list[str]) -> tuple[str, list[str]]:
    """How an "unrecognized arguments" message shows ``words``, and the flags among
    them (without their ``=VALUE``).

    Never a value that may be a secret: ``--env HF_TOKEN=hf_...`` given where there
    is no ``--env`` must not print the token. A flag is shown without its ``=VALUE``;
    a word with ``=`` in it, and every word after an unknown flag (its values,
    perhaps), is counted, not shown.
    """
    shown: list[str] = []
    flags: list[str] = []
    hidden = 0
    for word in words:
        if word.startswith("-") and len(word) > 1:
            flags.append(word.partition("=")[0])
            shown.append(escape(flags[-1]))
        elif flags or "=" in word:
            hidden += 1
        else:
            shown.append(escape(word))
    text = " ".join(shown)
    if hidden:
        more = f"{hidden} more word{'s' if hidden > 1 else ''} (not shown: may be values)"
        text = f"{text} and {more}" if text else more
    return text, flags
