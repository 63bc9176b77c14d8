"""Importable functions for ``dist.fn --fn tests.callables_app:NAME`` (tests/test_callables.py)."""

from __future__ import annotations

__all__ = ["join_words"]


def join_words(*words: str) -> str:
    """The words joined by dashes, and the world size: ``a-b-2`` on 2 ranks."""
    from distspec.runtime import current

    return "-".join([*words, str(current().world_size)])
