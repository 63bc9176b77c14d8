"""A griffe extension for the docs site: Sphinx roles in docstrings become inline code.

distspec's docstrings are Google style but cross-reference with Sphinx roles
(``:func:`submit```, ``:class:`Runner```, ``:data:`EXIT_CODES```), which Markdown
would show as written. mkdocs.yml loads this file for mkdocstrings; it rewrites
each role to plain inline code (``submit()``, ``Runner``) and touches nothing else.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["SphinxRoles"]

_ROLE = re.compile(r":(?:py:)?(func|meth|class|data|attr|mod|exc|obj|const):`~?([^`]+)`")


def _replace(match: re.Match[str]) -> str:
    role, target = match.groups()
    name = target.rsplit(" <", 1)[0]  # :func:`title <target>`
    suffix = "()" if role in ("func", "meth") and not name.endswith(")") else ""
    return f"`{name}{suffix}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ":`" in obj.docstring.value:
            obj.docstring.value = _ROLE.sub(_replace, obj.docstring.value)
