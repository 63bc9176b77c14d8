"""``distspec builtins``: the built-in components and the known schedulers."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    from distspec.cli._shared import print_json
    from distspec.components.loader import builtin_names
    from distspec.schedulers._registry import SchedulerRegistry

    components = builtin_names()
    schedulers = SchedulerRegistry(use_entry_points=False).builtin_names()
    if args.json:
        print_json({"components": components, "schedulers": schedulers})
        return 0
    print("components:")
    for name in components:
        print(f"  {name}")
    print("schedulers:")
    for name in schedulers:
        print(f"  {name}")
    print("\n`distspec run COMPONENT --help` shows a component's parameters;")
    print("`distspec runopts SCHED` a scheduler's options.")
    return 0
