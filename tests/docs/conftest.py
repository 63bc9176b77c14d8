"""Print what the docs snippet test ran and skipped, after the run."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.docs.test_snippets import RESULTS

    if not RESULTS:
        return
    blocks = sum(int(r["blocks"]) for r in RESULTS)  # type: ignore[call-overload]
    commands = sum(int(r["commands"]) for r in RESULTS)  # type: ignore[call-overload]
    skipped = [s for r in RESULTS for s in r["skipped"]]  # type: ignore[attr-defined]
    tr = terminalreporter
    tr.section("docs snippets")
    tr.write_line(
        f"{len(RESULTS)} page runs: {blocks} blocks executed ({commands} console commands), "
        f"{len(skipped)} blocks not run:"
    )
    for line in skipped:
        tr.write_line(f"  {line}")
