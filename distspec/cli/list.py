"""``distspec list -s SCHED``."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("-s", "--scheduler", help="which backend (default: the configured one)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    from distspec.cli._shared import make_runner, print_json
    from distspec.specs.handles import AppHandle

    runner = make_runner()
    scheduler = args.scheduler or runner.config.scheduler
    apps = runner.list(scheduler)
    rows = [
        (AppHandle(scheduler=scheduler, session=runner.session, app_id=a.app_id).format(), a)
        for a in apps
    ]
    if args.json:
        print_json(
            [
                {
                    "handle": h,
                    "app_id": a.app_id,
                    "name": a.name,
                    "state": a.state.value,
                    "detail": a.detail,
                }
                for h, a in rows
            ]
        )
        return 0
    if not rows:
        print(f"no apps on {scheduler}")
        return 0
    width = max(len(h) for h, _ in rows)
    for handle, app in rows:
        print(
            f"{handle:<{width}}  {app.state.value:<10}  {app.name}"
            + (f"  {app.detail}" if app.detail else "")
        )
    return 0
