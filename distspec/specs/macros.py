"""Placeholders in a role's args and env that each backend fills in.

``${app_id}``, ``${replica_id}``, ``${num_replicas}``, ``${rank0_host}``,
``${rdzv_port}`` and ``${img_root}`` are the macros. A backend maps every macro either to a literal
value known at compile time or to a runtime expression (``$SLURM_NODEID``),
which is what keeps a 1024-node request the size of a 2-node one. Any other
``${...}`` text is left alone.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

__all__ = ["Macro", "find", "split", "substitute"]


class Macro(str, enum.Enum):
    """The macros a role may use."""

    APP_ID = "app_id"
    REPLICA_ID = "replica_id"
    NUM_REPLICAS = "num_replicas"
    RANK0_HOST = "rank0_host"
    #: The job's rendezvous port on the rank-0 host: one per job where jobs may share
    #: a host (Slurm, PBS, local), so two jobs whose first node is the same do not meet.
    RDZV_PORT = "rdzv_port"
    IMG_ROOT = "img_root"

    @property
    def token(self) -> str:
        """How the macro is written: ``${name}``."""
        return "${" + self.value + "}"


_BY_NAME = {m.value: m for m in Macro}


def split(text: str) -> list[str | Macro]:
    """``text`` as alternating literal pieces and macros, in order; no empty pieces."""
    parts: list[str | Macro] = []
    literal = search = 0  # where the pending literal starts; where to look next
    while (start := text.find("${", search)) >= 0:
        end = text.find("}", start + 2)
        if end < 0:
            break
        macro = _BY_NAME.get(text[start + 2 : end])
        if macro is None:  # "${other}" or "${${app_id}": look again one character on
            search = start + 1
            continue
        if start > literal:
            parts.append(text[literal:start])
        parts.append(macro)
        literal = search = end + 1
    if literal < len(text):
        parts.append(text[literal:])
    return parts


def find(text: str) -> set[Macro]:
    """The macros that ``text`` uses."""
    return {p for p in split(text) if isinstance(p, Macro)} if "${" in text else set()


def substitute(text: str, values: Mapping[Macro, str]) -> str:
    """Replace each macro in ``text`` that ``values`` names; others stay as written."""
    if "${" not in text:
        return text
    return "".join(values.get(p, p.token) if isinstance(p, Macro) else p for p in split(text))
