"""Sweep variables in a component's arguments: ``{{name}}``.

A sweep (``distspec run --sweep lr=1e-4,1e-3 ...``) fills each ``{{name}}`` with one
point's value. The double braces cannot be read as a macro (``${app_id}``), a shell
variable (``$X``, ``${X}``) or a format field (``{x}``), and a name is a Python
identifier, so ``{{ x }}`` or ``{{1}}`` are plain text.

A backend that runs many points as one job (a Slurm array) keeps the placeholders in
the job's text and maps each one to a runtime value (:class:`Var` in
:func:`distspec.schedulers.shell.shell_word`); the others get every point filled in.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from distspec.frozen import frozen

__all__ = ["Var", "fill", "find", "split"]

_PATTERN = r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}"


@frozen(kw_only=False)
class Var:
    """One ``{{name}}`` in a text, as :func:`split` gives it."""

    name: str

    @property
    def token(self) -> str:
        """How the variable is written: ``{{name}}``."""
        return "{{" + self.name + "}}"


def find(text: str) -> set[str]:
    """The names of the variables ``text`` uses."""
    return set(re.findall(_PATTERN, text)) if "{{" in text else set()


def split(text: str) -> list[str | Var]:
    """``text`` as alternating literal pieces and variables, in order; no empty pieces."""
    if "{{" not in text:
        return [text] if text else []
    parts: list[str | Var] = []
    for i, piece in enumerate(re.split(_PATTERN, text)):
        if i % 2:
            parts.append(Var(piece))
        elif piece:
            parts.append(piece)
    return parts


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each variable that ``values`` names replaced; others stay as written."""
    if "{{" not in text:
        return text
    return re.sub(_PATTERN, lambda m: values.get(m.group(1), m.group(0)), text)
