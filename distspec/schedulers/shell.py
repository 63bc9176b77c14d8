"""How a role's text becomes a job script's text: each macro as a literal or as a
shell expression the job evaluates, every word quoted so it comes back byte-identical.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from distspec.frozen import frozen, frozendict, replace
from distspec.specs import macros
from distspec.specs.app import Role
from distspec.specs.macros import Macro

__all__ = ["MacroValues", "ShellExpr", "shell_join", "shell_word", "substitute_role", "used_macros"]


@frozen(kw_only=False)
class ShellExpr:
    """A value only known when the job runs: a shell expression that is safe inside
    double quotes, such as ``$SLURM_NODEID`` or ``$(hostname)``."""

    expr: str


#: Per backend: each macro to a literal string or to a runtime shell expression.
MacroValues = Mapping[Macro, "str | ShellExpr"]


def shell_word(text: str, values: MacroValues) -> str:
    """``text`` as one shell word: literal parts single-quoted, runtime macros double-quoted.

    Any string survives: quotes, ``$``, backticks, newlines, unicode, the empty string.
    """
    pieces: list[str] = []
    literal = ""
    for part in macros.split(text):
        value = values.get(part, part.token) if isinstance(part, Macro) else part
        if isinstance(value, ShellExpr):
            if literal:
                pieces.append(shlex.quote(literal))
                literal = ""
            pieces.append(f'"{value.expr}"')
        else:
            literal += value
    if literal or not pieces:
        pieces.append(shlex.quote(literal))
    return "".join(pieces)


def shell_join(argv: Sequence[str], values: MacroValues) -> str:
    """A command line whose words come back byte-identical through ``bash -c``."""
    return " ".join(shell_word(arg, values) for arg in argv)


def substitute_role(role: Role, values: Mapping[Macro, str]) -> Role:
    """``role`` with every macro in args and env replaced by a literal value."""
    return replace(
        role,
        args=tuple(macros.substitute(a, values) for a in role.args),
        env=frozendict({k: macros.substitute(v, values) for k, v in role.env.items()}),
    )


def used_macros(role: Role) -> set[Macro]:
    """Every macro the role's entrypoint, args and env use."""
    found: set[Macro] = set()
    for text in (role.entrypoint, *role.args, *role.env.values()):
        found |= macros.find(text)
    return found
