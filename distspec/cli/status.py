"""``distspec status HANDLE`` (one line) and ``distspec describe HANDLE`` (every replica)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    from distspec.cli._shared import add_handle

    add_handle(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    from distspec.cli._shared import make_runner, print_json

    status = make_runner().status(args.handle)
    if args.json:
        print_json({"handle": args.handle, **status.to_dict()})
    elif args.verb == "status":
        print(status.state.value + (f": {status.msg}" if status.msg else ""))
    else:
        print(f"handle: {args.handle}")
        print(status.format())
    return 0
