"""``distspec runopts [SCHED]``: a scheduler's run options, derived from its declaration."""

from __future__ import annotations

import argparse
import textwrap


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec runopts`` to ``parser``."""
    parser.add_argument("scheduler", nargs="?", help="one scheduler (default: all built-ins)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    """Run ``distspec runopts`` with the parsed ``args``; returns the exit code."""
    from distspec.cli._shared import print_json
    from distspec.errors import SchedulerError
    from distspec.schedulers._registry import SchedulerRegistry

    registry = SchedulerRegistry()
    names = [args.scheduler] if args.scheduler else registry.builtin_names()
    out: dict[str, list[dict[str, object]]] = {}
    for name in names:
        try:
            cls = registry.get(name)
        except SchedulerError as e:
            if args.scheduler:
                raise
            print(f"{name}: unavailable ({e})")
            continue
        specs = cls.run_opts()
        if args.json:
            out[name] = [
                {
                    "name": s.name,
                    "type": s.type_name,
                    "default": s.format(s.default),
                    "help": s.help,
                }
                for s in specs
            ]
            continue
        print(f"{name}:")
        for s in specs:
            default = s.format(s.default)
            print(f"  {s.name} ({s.type_name})" + (f" [default: {default}]" if default else ""))
            for line in textwrap.wrap(s.help, 76):
                print(f"      {line}")
        print()
    if args.json:
        print_json(out)
    return 0
