"""``distspec list [-s SCHED]``: the apps a scheduler knows, newest first, with their
submission time and duration; ``--state`` and ``--limit`` narrow it down."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.schedulers.api import AppSummary
    from distspec.specs.state import AppState


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec list`` to ``parser``."""
    from distspec.cli._shared import add_scheduler

    add_scheduler(parser, "which backend (default: the configured one)")
    parser.add_argument(
        "--state",
        action="append",
        metavar="STATE[,STATE]",
        help="only apps in these states (succeeded, failed, cancelled, running, pending, "
        "...; 'ended' for the three final ones); repeatable",
    )
    parser.add_argument("-n", "--limit", type=int, metavar="N", help="only the newest N apps")
    parser.add_argument("-q", "--quiet", action="store_true", help="print the handles only")
    parser.add_argument(
        "-x",
        "--expand",
        action="store_true",
        help="list each sweep's points under it (by default a sweep is one line, with counts)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def parse_states(values: list[str] | None) -> frozenset[AppState] | None:
    """``--state`` values as AppStates (``ended`` = the final ones); None: no filter."""
    from distspec.errors import UsageError
    from distspec.specs.state import AppState

    if not values:
        return None
    found: set[AppState] = set()
    for value in values:
        for word in value.split(","):
            key = word.strip().upper()
            if key == "ENDED":
                found |= {s for s in AppState if s.is_terminal}
            elif key in AppState.__members__:
                found.add(AppState[key])
            else:
                names = ", ".join(s.value.lower() for s in AppState)
                raise UsageError(f"--state {word!r}: use one of {names}, or ended")
    return frozenset(found)


def times(app: AppSummary) -> tuple[float | None, float | None]:
    """(submitted, ended) POSIX times where the backend gives them."""

    def number(key: str) -> float | None:
        text = app.extra.get(key)
        try:
            return float(text) if text else None
        except ValueError:
            return None

    return number("submitted"), number("ended")


def _with_sweeps(
    runner: Any, scheduler: str, apps: list[AppSummary], *, expand: bool
) -> list[AppSummary]:
    """``apps`` with the points of each recorded sweep folded into one line for the
    sweep, where its newest point was (with ``expand``: that line, then its points)."""
    from distspec.frozen import frozendict
    from distspec.schedulers.api import AppSummary
    from distspec.sweep.record import all_sweeps, counts, overall

    sweeps = all_sweeps(runner, scheduler)
    if not sweeps:
        return apps
    owner = {app_id: record for record in sweeps for app_id in record.app_ids()}
    members: dict[str, list[AppSummary]] = {}
    for app in apps:
        record = owner.get(app.app_id)
        if record is not None:
            members.setdefault(record.sweep_id, []).append(app)
    out: list[AppSummary] = []
    shown: set[str] = set()
    for app in apps:
        record = owner.get(app.app_id)
        if record is None:
            out.append(app)
            continue
        if record.sweep_id in shown:
            continue
        shown.add(record.sweep_id)
        points = members[record.sweep_id]
        found = [_Listed(p.state) for p in points]
        missing = len(record.app_ids()) - len(points)
        tally = counts(found)
        if missing:
            tally["NOT LISTED"] = missing
        text = ", ".join(f"{n} {state}" for state, n in sorted(tally.items()))
        submitted = min((times(p)[0] or 0.0 for p in points), default=0.0) or None
        ended = max((times(p)[1] or 0.0 for p in points), default=0.0) or None
        extra = {"submitted": str(submitted)} if submitted else {}
        state = overall(found)
        if ended and state.is_terminal:
            extra["ended"] = str(ended)
        out.append(
            AppSummary(
                app_id=record.sweep_id,
                name=str(record.data.get("name") or ""),
                state=state,
                detail=f"sweep of {len(record.app_ids())} points: {text}",
                extra=frozendict(extra),
            )
        )
        if expand:
            out += points
    return out


class _Listed:
    """A listed point as :func:`distspec.sweep.record.counts` reads a status."""

    def __init__(self, state: AppState) -> None:
        self.state = state


def main(args: argparse.Namespace) -> int:
    """Run ``distspec list`` with the parsed ``args``; returns the exit code."""
    import time

    from distspec.cli._shared import make_runner, print_json
    from distspec.cli.status import duration_text
    from distspec.errors import UsageError
    from distspec.specs.handles import AppHandle

    if args.limit is not None and args.limit < 0:
        raise UsageError(f"--limit must be >= 0, got {args.limit}")
    states = parse_states(args.state)
    runner = make_runner()
    scheduler = args.scheduler or runner.config.scheduler
    apps = _with_sweeps(runner, scheduler, runner.list(scheduler), expand=args.expand)
    apps = [a for a in apps if states is None or a.state in states]
    if args.limit is not None:
        apps = apps[: args.limit]
    now = time.time()
    rows = []
    for app in apps:
        name = AppHandle(scheduler=scheduler, session=runner.session, app_id=app.app_id).format()
        submitted, ended = times(app)
        took = None
        if submitted is not None:
            took = (ended if ended is not None else now) - submitted
        rows.append((name, app, submitted, ended, took))
    if args.json:
        print_json(
            [
                {
                    "handle": h,
                    "app_id": a.app_id,
                    "name": a.name,
                    "state": a.state.value,
                    "detail": a.detail,
                    "submitted": submitted,
                    "ended": ended,
                    "duration": took,
                }
                for h, a, submitted, ended, took in rows
            ]
        )
        return 0
    if args.quiet:
        if rows:
            print("\n".join(h for h, *_ in rows))
        return 0
    if not rows:
        print(f"no apps on {scheduler}" + (" in those states" if states else ""))
        return 0
    width = max(len(h) for h, *_ in rows)
    lines = [f"{'HANDLE':<{width}}  {'STATE':<10}  {'SUBMITTED':<16}  {'DURATION':>9}  NAME"]
    for handle, app, submitted, _, took in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(submitted)) if submitted else "-"
        lines.append(
            f"{handle:<{width}}  {app.state.value:<10}  {when:<16}  {duration_text(took):>9}  "
            f"{app.name}" + (f"  {app.detail}" if app.detail else "")
        )
    print("\n".join(lines))
    return 0
