"""Placeholders in a role's args and env that each backend fills in.

``${app_id}``, ``${replica_id}``, ``${num_replicas}``, ``${rank0_host}`` and
``${img_root}`` are the macros. A backend maps every macro either to a literal
value known at compile time or to a runtime expression (``$SLURM_NODEID``),
which is what keeps a 1024-node request the size of a 2-node one. Any other
``${...}`` text is left alone.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping

__all__ = ["Macro", "find", "split", "substitute"]


class Macro(str, enum.Enum):
    """The macros a role may use."""

    APP_ID = "app_id"
    REPLICA_ID = "replica_id"
    NUM_REPLICAS = "num_replicas"
    RANK0_HOST = "rank0_host"
    IMG_ROOT = "img_root"

    @property
    def token(self) -> str:
        """How the macro is written: ``${name}``."""
        return "${" + self.value + "}"


_PATTERN = re.compile(r"\$\{(" + "|".join(m.value for m in Macro) + r")\}")


def find(text: str) -> set[Macro]:
    """The macros that ``text`` uses."""
    return {Macro(m.group(1)) for m in _PATTERN.finditer(text)}


def split(text: str) -> list[str | Macro]:
    """``text`` as alternating literal pieces and macros, in order; no empty pieces."""
    parts: list[str | Macro] = []
    pos = 0
    for match in _PATTERN.finditer(text):
        if match.start() > pos:
            parts.append(text[pos : match.start()])
        parts.append(Macro(match.group(1)))
        pos = match.end()
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def substitute(text: str, values: Mapping[Macro, str]) -> str:
    """Replace each macro in ``text`` that ``values`` names; others stay as written."""
    return _PATTERN.sub(lambda m: values.get(Macro(m.group(1)), m.group(0)), text)
