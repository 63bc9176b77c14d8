"""How a role's text becomes a job script's text: each macro as a literal or as a
shell expression the job evaluates, every word quoted so it comes back byte-identical.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from distspec.frozen import frozen, frozendict, replace
from distspec.specs import macros, placeholders
from distspec.specs.app import Role
from distspec.specs.macros import Macro
from distspec.specs.placeholders import Var

__all__ = ["MacroValues", "ShellExpr", "shell_join", "shell_word", "substitute_role", "used_macros"]


@frozen(kw_only=False)
class ShellExpr:
    """A value only known when the job runs: a shell expression that is safe inside
    double quotes, such as ``$SLURM_NODEID`` or ``$(hostname)``."""

    expr: str


#: Per backend: each macro to a literal string or to a runtime shell expression; a
#: job that runs many sweep points (an array) also maps each sweep variable
#: (:class:`distspec.specs.placeholders.Var`) to the expression holding its value.
MacroValues = Mapping["Macro | Var", "str | ShellExpr"]


def shell_word(text: str, values: MacroValues) -> str:
    """``text`` as one shell word: literal parts single-quoted, runtime macros double-quoted.

    Any string survives: quotes, ``$``, backticks, newlines, unicode, the empty string.
    """
    pieces: list[str] = []
    literal = ""
    for part in _parts(text, values):
        value = values.get(part, part.token) if isinstance(part, (Macro, Var)) else part
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


def _parts(text: str, values: MacroValues) -> list[str | Macro | Var]:
    """``text`` split into literals and macros, and, where ``values`` maps sweep
    variables, the literals split again around ``{{name}}``."""
    parts = macros.split(text)
    if "{{" not in text or not any(isinstance(key, Var) for key in values):
        return list(parts)
    out: list[str | Macro | Var] = []
    for part in parts:
        out.extend(placeholders.split(part) if not isinstance(part, Macro) else (part,))
    return out


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
