"""``distspec metrics HANDLE``: the metrics history a job recorded with
``distspec.runtime.log`` (``metrics.jsonl`` in its job folder), as a table or as JSON
lines; ``-f`` follows a running job until it ends.

Exit codes: 0 printed; 1 the job recorded no metrics (one line saying where they
would be); 2 a malformed or unknown handle, a sweep's handle (metrics are per
point), a metric it did not record, a bad ``--tail``.
"""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.metrics import Record

EPILOG = """\
a job records metrics with distspec.runtime.log(step=..., loss=...) (or Dist.log);
see docs/metrics.md. e.g.

  distspec metrics local_cwd://distspec/train_ddp-1a2b3c4d
  distspec metrics local_cwd://distspec/train_ddp-1a2b3c4d -m loss --tail 5
  distspec metrics local_cwd://distspec/train_ddp-1a2b3c4d -f --json   # until the job ends
"""

#: How often -f looks for new records and the job's state (seconds).
_POLL = 1.0


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec metrics`` to ``parser``."""
    from distspec.cli._shared import add_handle

    parser.epilog = EPILOG
    add_handle(parser)
    parser.add_argument(
        "-m",
        "--metric",
        action="append",
        metavar="NAME",
        help="only this metric, and only the records that have it (repeat for more); "
        "default: every one recorded",
    )
    parser.add_argument("--tail", type=int, metavar="N", help="only the last N records")
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per record, as recorded (NaN and infinities as strings)",
    )
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new records until the app ends"
    )


def main(args: argparse.Namespace) -> int:
    """Run ``distspec metrics`` with the parsed ``args``; returns the exit code."""
    import os

    from distspec.cli._shared import make_runner
    from distspec.errors import UsageError
    from distspec.metrics import (
        METRICS_FILE,
        PARTS_DIR,
        metric_names,
        read_history,
        read_records,
    )

    if args.tail is not None and args.tail < 0:
        raise UsageError(f"--tail must be >= 0, got {args.tail}")
    runner = make_runner()
    sweep = runner.sweep(args.handle)
    if sweep is not None:
        raise UsageError(
            f"{args.handle} is a sweep of {len(sweep.handles)} points: give a point's "
            f"handle (distspec describe {args.handle} lists them)"
        )
    runner.status(args.handle)  # AppNotFound (exit 2) for an unknown app
    folder = runner.job_folder(args.handle)
    if folder is None:
        print(
            f"distspec metrics: {args.handle} has no job folder: metrics are recorded in "
            "a job folder (on Kubernetes, -cfg job_dir; see docs/metrics.md)",
            file=sys.stderr,
        )
        return 1
    remote = "://" in folder
    path = f"{folder.rstrip('/')}/{PARTS_DIR}/" if remote else os.path.join(folder, METRICS_FILE)
    if args.follow:
        printer = _Printer(list(args.metric or []), json_lines=args.json, widths=False)
        if remote:
            _follow_remote(runner, args.handle, folder, printer, tail=args.tail)
        else:
            _follow(runner, args.handle, path, printer, tail=args.tail)
        return 0
    try:
        records = read_history(folder) if remote else read_records(path)
    except Exception as e:  # a remote store's own errors (access, network)
        print(
            f"distspec metrics: cannot read {args.handle}'s metrics in {folder}: "
            f"{type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return 1
    if not records:
        print(
            f"distspec metrics: {args.handle} recorded no metrics ({path} "
            f"{'is empty' if os.path.exists(path) else 'does not exist'}; a job records "
            "them with distspec.runtime.log(step=..., loss=...))",
            file=sys.stderr,
        )
        return 1
    names = metric_names(records)
    if args.metric:
        missing = [m for m in args.metric if m not in names]
        if missing:
            raise UsageError(
                f"{args.handle} recorded no metric {missing[0]!r}; it recorded: " + ", ".join(names)
            )
        names = list(args.metric)
        records = [r for r in records if any(n in r.metrics for n in names)]
    if args.tail is not None:
        records = records[len(records) - args.tail :] if args.tail else []
    _Printer(names, json_lines=args.json, widths=True).print(records)
    return 0


class _Printer:
    """Prints records as a table (a header first) or as JSON lines."""

    def __init__(self, names: list[str], *, json_lines: bool, widths: bool) -> None:
        self.names = names
        self.json_lines = json_lines
        self.fit = widths  # size columns to the values (no -f: all are known)
        self.header_done = False

    def print(self, records: list[Record]) -> None:
        import json

        from distspec.metrics import encode_value, value_text

        if self.json_lines:
            for r in records:
                d: dict[str, object] = {"step": r.step, "time": r.time, "attempt": r.attempt}
                d.update((n, encode_value(r.metrics[n])) for n in self.names if n in r.metrics)
                print(json.dumps(d))
            sys.stdout.flush()
            return
        if not records:
            return
        rows = [
            [
                "-" if r.step is None else str(r.step),
                _clock(r.time),
                str(r.attempt),
                *(value_text(r.metrics[n]) if n in r.metrics else "-" for n in self.names),
            ]
            for r in records
        ]
        head = ["step", "time", "attempt", *self.names]
        if self.fit:
            width = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
        else:
            width = [max(len(h), 10) for h in head]
        if not self.header_done:
            print("  ".join(h.rjust(w) for h, w in zip(head, width, strict=True)).rstrip())
            self.header_done = True
        for row in rows:
            print("  ".join(c.rjust(w) for c, w in zip(row, width, strict=True)))
        sys.stdout.flush()


def _clock(stamp: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(stamp))


def _follow(runner: Any, handle: str, path: str, printer: _Printer, *, tail: int | None) -> None:
    """Print the records in ``path`` (the last ``tail`` of those already there), then
    those added to it, until the job has ended and nothing more came. With no metric
    named, the columns are those of the first records seen."""
    import time

    from distspec.metrics import metric_names, parse_line

    offset = 0
    partial = ""
    first = True
    only = list(printer.names)
    while True:
        ended = runner.status(handle).state.is_terminal
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                f.seek(offset)
                data = f.read()
                offset = f.tell()
        except FileNotFoundError:
            data = ""
        lines = (partial + data).split("\n")
        partial = lines.pop()
        records = [r for r in map(parse_line, lines) if r is not None]
        if only:
            records = [r for r in records if any(n in r.metrics for n in only)]
        if first and tail is not None:
            records = records[len(records) - tail :] if tail else []
        first = False
        if records and not printer.names:
            printer.names = metric_names(records)
        printer.print(records)
        if ended and not data:
            return
        time.sleep(_POLL)


def _follow_remote(
    runner: Any, handle: str, folder: str, printer: _Printer, *, tail: int | None
) -> None:
    """:func:`_follow` for a job folder that is a URL, where the runtime ships its
    records in parts every few seconds: the history is read again each time and the
    records not yet printed are printed."""
    import time

    from distspec.metrics import metric_names, read_history

    printed = 0
    first = True
    only = list(printer.names)
    while True:
        ended = runner.status(handle).state.is_terminal
        records = read_history(folder)
        new = records[printed:]
        printed = len(records)
        if only:
            new = [r for r in new if any(n in r.metrics for n in only)]
        if first and tail is not None:
            new = new[len(new) - tail :] if tail else []
        first = False
        if new and not printer.names:
            printer.names = metric_names(new)
        printer.print(new)
        if ended:
            # The last parts go up as the job ends: one more look after they had time.
            time.sleep(_POLL)
            late = read_history(folder)[printed:]
            if only:
                late = [r for r in late if any(n in r.metrics for n in only)]
            printer.print(late)
            return
        time.sleep(_POLL)
