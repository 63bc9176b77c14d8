"""``distspec cancel HANDLE``."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec cancel`` to ``parser``."""
    from distspec.cli._shared import add_handle

    add_handle(parser)


def main(args: argparse.Namespace) -> int:
    """Run ``distspec cancel`` with the parsed ``args``; returns the exit code."""
    from distspec.cli._shared import make_runner

    make_runner().cancel(args.handle)
    print(f"cancelled {args.handle}")
    return 0
