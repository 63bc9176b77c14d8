"""``distspec log HANDLE [ROLE[/REPLICA]]``: a job's output, each line prefixed
``ROLE/REPLICA rank N|`` (``ROLE/REPLICA|`` for lines of no rank), filtered by replica,
global rank, regex, time and count; ``-f`` follows until the job ends."""

from __future__ import annotations

import argparse
import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: The largest --tail, --rank and --replica accepted (2^31 - 1).
_MAX_COUNT = 2**31 - 1


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec log`` to ``parser``."""
    from distspec.cli._shared import add_handle

    add_handle(parser)
    parser.add_argument("which", nargs="?", metavar="ROLE[/REPLICA]", help="default: every replica")
    parser.add_argument(
        "-f",
        "-t",  # TorchX's `log -t` follows; distspec's --tail N stays "the last N lines"
        "--follow",
        action="store_true",
        help="keep printing new lines until the app ends (-t: TorchX's spelling)",
    )
    parser.add_argument(
        "--rank",
        type=int,
        metavar="N",
        help="only the lines of global rank N (torchrun's workers; see docs/cli.md)",
    )
    parser.add_argument(
        "--replica", type=int, metavar="I", help="only replica I (of every role, or of ROLE)"
    )
    parser.add_argument(
        "--tail",
        type=int,
        metavar="N",
        help="only the last N lines of each replica (with -f: then follow)",
    )
    parser.add_argument(
        "--raw", action="store_true", help="print the text alone, without the ROLE/REPLICA prefix"
    )
    parser.add_argument(
        "--regex", metavar="RE", help="only lines that match RE (Python regex, searched)"
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="only lines written after WHEN: a duration ago (30s, 10m, 2h, 1d) or an ISO time",
    )


def parse_since(text: str) -> float:
    """A POSIX time from ``30s``/``10m``/``2h``/``1d`` ago or an ISO 8601 timestamp."""
    import time

    from distspec.errors import UsageError

    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if match:
        scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
        return time.time() - float(match.group(1)) * scale
    from datetime import datetime

    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UsageError(f"--since {text!r}: expected 30s, 10m, 2h, 1d or an ISO time") from None


def main(args: argparse.Namespace) -> int:
    """Run ``distspec log`` with the parsed ``args``; returns the exit code."""
    from distspec.cli._shared import make_runner
    from distspec.errors import UsageError

    # Negative numbers are refused, not read as "none" or counted from the end; the
    # ceiling keeps an absurd count (10^30) from reaching a C-sized buffer.
    for flag, value in (("--tail", args.tail), ("--rank", args.rank), ("--replica", args.replica)):
        if value is not None and not 0 <= value <= _MAX_COUNT:
            raise UsageError(f"{flag} must be in 0..{_MAX_COUNT}, got {value}")
    role = replica = None
    if args.which:
        role, _, rep = args.which.partition("/")
        if rep:
            if not (rep.isascii() and rep.isdigit()):  # "²".isdigit() is True
                raise UsageError(f"replica must be a number in ROLE/REPLICA, got {args.which!r}")
            replica = int(rep)
            if replica > _MAX_COUNT:
                raise UsageError(f"replica in ROLE/REPLICA must be at most {_MAX_COUNT}")
    if args.replica is not None:
        if replica is not None and replica != args.replica:
            raise UsageError(f"--replica {args.replica} contradicts {args.which}")
        replica = args.replica
    if args.regex:
        try:
            re.compile(args.regex)
        except re.error as e:
            raise UsageError(f"--regex {args.regex!r}: {e}") from None
    since = parse_since(args.since) if args.since else None
    runner = make_runner()
    sweep = runner.sweep(args.handle)
    if sweep is not None:
        return _sweep_log(runner, sweep, args, role or None, replica, since)
    lines = runner.log_lines(
        args.handle,
        role or None,
        replica,
        regex=args.regex,
        tail=args.tail,
        since=since,
        follow=args.follow,
        rank=args.rank,
    )
    out = sys.stdout
    for line in lines:
        out.write((line.text if args.raw else line.format()) + "\n")
        if args.follow:
            out.flush()
    return 0


def _sweep_log(
    runner: Any,
    sweep: Any,
    args: argparse.Namespace,
    role: str | None,
    replica: int | None,
    since: float | None,
) -> int:
    """``log`` of a sweep: each point's lines in point order, each line led by
    ``point I|`` (with ``--raw``, the text alone). Following is one point's."""
    from distspec.errors import AppNotFound, UsageError

    if args.follow:
        raise UsageError(
            f"{args.handle} is a sweep: follow one point's log (`distspec describe "
            f"{args.handle}` lists their handles)"
        )
    out = sys.stdout
    for index, handle in enumerate(sweep.handles):
        try:
            lines = runner.log_lines(
                handle, role, replica, regex=args.regex, tail=args.tail, since=since, rank=args.rank
            )
            for line in lines:
                out.write((line.text if args.raw else f"point {index}|{line.format()}") + "\n")
        except (AppNotFound, UsageError) as e:  # a point not started yet, or forgotten
            if not args.raw:
                out.write(f"point {index}| (no log: {e})\n")
    return 0
