"""``distspec prune``: delete the run directories of ended local runs.

Only ``local_cwd`` keeps whole runs (logs included) under the state directory; a run
that has not ended is never touched. Then the code snapshots that no run kept under
the state directory uses any more are deleted (:func:`collect_snapshots`).
"""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

EPILOG = """\
examples:
  distspec prune --older-than 7d --dry-run     what would go
  distspec prune --older-than 2h --state failed,cancelled
"""


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec prune`` to ``parser``."""
    from distspec.cli._shared import add_scheduler
    from distspec.config import DEFAULT_SCHEDULER

    parser.epilog = EPILOG
    add_scheduler(
        parser,
        "the backend whose records to prune (only local_cwd keeps runs here)",
        default=DEFAULT_SCHEDULER,
    )
    parser.add_argument(
        "--older-than",
        metavar="AGE",
        help="only runs that ended longer ago than AGE (30m, 12h, 7d; default: every ended run)",
    )
    parser.add_argument(
        "--state",
        action="append",
        metavar="STATE[,STATE]",
        help="only runs that ended in these states (succeeded, failed, cancelled)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted, delete nothing"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def parse_age(text: str) -> float:
    """Seconds in ``90``, ``30s``, ``10m``, ``12h``, ``7d`` or ``2w``."""
    import re

    from distspec.errors import UsageError

    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw]?)", text.strip())
    if not match:
        raise UsageError(f"--older-than {text!r}: expected a number with s, m, h, d or w (7d)")
    scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]
    return float(match.group(1)) * scale


def main(args: argparse.Namespace) -> int:
    """Run ``distspec prune`` with the parsed ``args``; returns the exit code."""
    from distspec.cli._shared import make_runner, print_json
    from distspec.cli.list import parse_states
    from distspec.errors import UsageError
    from distspec.specs.handles import AppHandle

    older = parse_age(args.older_than) if args.older_than else None
    states = parse_states(args.state)
    if states is not None and any(not s.is_terminal for s in states):
        raise UsageError("--state: prune deletes ended runs only (succeeded, failed, cancelled)")
    runner = make_runner()
    name = args.scheduler
    sched = runner.scheduler(name)
    if not sched.capabilities.prunable:
        prunable = ", ".join(_prunable_builtins(runner))
        raise UsageError(f"{name} keeps no run directories here to prune (only {prunable} does)")
    failed: list[tuple[Any, str]] = []
    gone = sched.prune(
        older_than=older,
        states=states,
        dry_run=args.dry_run,
        on_failure=lambda app, why: failed.append((app, why)),
    )

    def handle(app_id: str) -> str:
        return AppHandle(scheduler=name, session=runner.session, app_id=app_id).format()

    # Only what is really gone is reported as deleted; a run that could not be
    # deleted is named, with why, on stderr, and the exit code is 1.
    if args.json:
        print_json(
            {
                "dry_run": args.dry_run,
                "pruned": [handle(a.app_id) for a in gone],
                "failed": [{"handle": handle(a.app_id), "error": why} for a, why in failed],
            }
        )
        return 1 if failed else 0
    verb = "would delete" if args.dry_run else "deleted"
    for app in gone:
        print(f"{verb} {handle(app.app_id)} ({app.state.value})")
    from distspec._text import escape

    for app, why in failed:
        line = f"could not delete {handle(app.app_id)}: {why}"
        print(f"distspec prune: {escape(line)}", file=sys.stderr)
    tail = f"; {len(failed)} could not be deleted (see above)" if failed else ""
    print(f"{verb} {len(gone)} run(s){tail}")
    if not args.dry_run:
        trees, freed = collect_snapshots(runner.config.state_dir)
        if trees:
            print(f"deleted {len(trees)} snapshot(s) no kept run uses ({freed / 1e6:.1f} MB)")
    return 1 if failed else 0


#: A snapshot no run records is kept this long (it may be one being submitted now).
SNAPSHOT_GRACE = 3600.0


def collect_snapshots(state_dir: str) -> tuple[tuple[str, ...], int]:
    """Delete the snapshots in ``<state_dir>/snapshots`` that no run kept under the state
    directory records (``provenance.json``) and that nothing used for
    :data:`SNAPSHOT_GRACE`; returns (their tree ids, bytes freed)."""
    import os

    from distspec.snapshot.provenance import recorded_trees
    from distspec.snapshot.store import Store

    root = os.path.join(state_dir, "snapshots")
    if not os.path.isdir(root):
        return (), 0
    return Store(root).gc(recorded_trees(state_dir), grace=SNAPSHOT_GRACE)


def _prunable_builtins(runner: Any) -> Iterator[str]:
    """The builtin backends that keep whole runs here (``capabilities.prunable``), in the
    registry's order."""
    from distspec.schedulers._registry import BUILTIN_SCHEDULERS

    return (n for n in BUILTIN_SCHEDULERS if runner.registry.get(n).capabilities.prunable)
