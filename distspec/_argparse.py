"""argparse pieces shared by the CLI and the component binder."""

from __future__ import annotations

import argparse
import os

__all__ = ["HelpFormatter"]


def _terminal_width() -> int:
    # What shutil.get_terminal_size does, without importing shutil (and with it bz2,
    # lzma, zlib): argparse builds a formatter for every add_argument, so this runs
    # on every start-up, not only for --help.
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(1).columns
        except (OSError, ValueError):
            columns = 80
    return max(columns - 2, 20)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions and epilogs as written; sizes help to the terminal."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        super().__init__(prog, indent_increment, max_help_position, width or _terminal_width())
