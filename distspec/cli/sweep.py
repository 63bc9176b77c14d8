"""``distspec run --sweep``: compile, submit and follow a sweep (:mod:`distspec.sweep`)."""

from __future__ import annotations

import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import TextIO

    from distspec.components.loader import Component
    from distspec.runner import Runner
    from distspec.specs.state import AppStatus
    from distspec.sweep.plan import SweepRequest
    from distspec.sweep.record import SweepRecord

__all__ = [
    "follow_sweep",
    "last_metrics",
    "metric_column",
    "points_table",
    "rerun_failed",
    "run_sweep",
    "show_or_submit",
    "sorted_rows",
]

#: A live table shows at most this many points (the running and failed ones first).
LIVE_ROWS = 20
#: The final summary lists every point up to this many, else the ones that did not succeed.
SUMMARY_ROWS = 50


def run_sweep(
    runner: Runner,
    component: Component,
    scheduler: str,
    cfg: dict[str, str],
    args: argparse.Namespace,
) -> int:
    """``run`` with ``--sweep``/``--sweep-file``: dry run, submit, or submit and follow."""
    from distspec.components.binder import ComponentHelp
    from distspec.errors import UsageError
    from distspec.sweep.plan import plan_sweep
    from distspec.sweep.spec import check_size, parse

    if args.output and not args.dryrun:
        raise UsageError("-o/--output writes a dry run's files; add --dryrun")
    sweep = parse(args.sweep, zip=args.zip, file=args.sweep_file)
    check_size(sweep, yes=args.yes)
    try:
        request = plan_sweep(
            runner,
            component,
            args.component_args,
            sweep,
            scheduler,
            cfg,
            max_parallel=args.max_parallel,
            after=runner.dependencies(scheduler, args.after),
            prog=f"distspec run {args.component}",
            keep_out=[args.output] if args.output else [],
        )
    except ComponentHelp as help_:
        print(help_.text)
        return 0
    return show_or_submit(runner, request, args)


def show_or_submit(runner: Runner, request: SweepRequest, args: argparse.Namespace) -> int:
    """Print a compiled sweep (``--dryrun``), submit it, or submit and follow it."""
    from distspec.cli._shared import print_json

    sweep = request.sweep
    scheduler = request.scheduler
    if args.dryrun:
        if args.output:
            _write(runner, request, args.output)
            return 0
        if args.json:
            print_json(
                {
                    "sweep_id": request.sweep_id,
                    "scheduler": scheduler,
                    "names": list(sweep.names),
                    "points": [sweep.values(i) for i in range(len(sweep))],
                    "arrays": request.arrays,
                    "requests": [
                        {"app_id": r.app_id, "argv": list(r.argv), "files": dict(r.files)}
                        for r in request.requests
                    ],
                }
            )
        else:
            sys.stdout.write(request.render())
        return 0
    from distspec.sweep.submit import submit_sweep

    record = submit_sweep(runner, request)
    if args.json and not args.wait:
        print_json({"handle": record.handle, "points": record.handles})
        return 0
    out = sys.stderr if args.json else sys.stdout
    out.write(record.handle + "\n")
    out.flush()
    if not args.wait:
        return 0
    cancel = runner.scheduler(scheduler).capabilities.interactive or args.cancel_on_interrupt
    try:
        code = follow_sweep(runner, record, sys.stderr)
    except KeyboardInterrupt:
        from distspec.runner import cancel_interrupted, tell

        if cancel:
            cancel_interrupted(lambda: runner.cancel(record.handle), record.handle)
            return 130
        tell(
            f"distspec: stopped following; the sweep goes on. Follow it with "
            f"`distspec status {record.handle}`, cancel it with `distspec cancel {record.handle}`"
        )
        return 130
    if args.json:
        status = runner.status(record.handle)
        print_json({"handle": record.handle, "status": status.to_dict()})
    return code


def _write(runner: Runner, request: SweepRequest, output: str) -> None:
    """``--dryrun -o DIR`` of a sweep: one array's files in DIR (each array's, or each
    point's, in a folder of its own when there are several), each with its
    ``submit.sh``; the snapshot the jobs run is taken now, as for one job."""
    import os

    from distspec.errors import UsageError

    several = len(request.requests) > 1
    for n, req in enumerate(request.requests):
        name = req.app_id if request.arrays else f"point-{n}"
        folder = os.path.join(output, name) if several else output
        try:
            written = req.write(folder)
        except OSError as e:
            raise UsageError(
                f"-o {output}: cannot write the dry run there: {e.strerror or e}"
            ) from None
        for path in written:
            print(path)
    snapshot = request.requests[0].snapshot
    if snapshot is not None:
        from distspec.runner import tell
        from distspec.snapshot.policy import take

        tell(f"distspec: the jobs run the code snapshot {take(snapshot)}")
        staged = runner.scheduler(request.scheduler).stage_snapshot(request.requests[0])
        if staged:
            tell(f"distspec: the code snapshot is {staged}")
    if request.max_parallel and several and not request.arrays:
        from distspec.runner import tell

        tell(
            f"distspec: --max-parallel {request.max_parallel} is kept by submit's dependencies; "
            "the folders here submit every point at once"
        )


def rerun_failed(runner: Runner, args: argparse.Namespace, cfg: dict[str, str]) -> int:
    """``distspec rerun --failed SWEEP``: the points that did not succeed, again, from the
    sweep's snapshot, as a new sweep (which records the one it repeats)."""
    import os

    from distspec.components.loader import load
    from distspec.errors import UsageError
    from distspec.runner import tell
    from distspec.sweep.plan import plan_sweep

    record = runner.sweep(args.handle)
    if record is None:
        raise UsageError(
            f"--failed: no such sweep {args.handle} (give the handle `run --sweep` printed)"
        )
    if record.data.get("component") == "distspec.map":
        raise UsageError(
            f"{record.handle} is a distspec.map, whose items were pickled, not recorded: call "
            "distspec.map again with the items whose jobs failed"
        )
    if args.after_dashes is not None:
        raise UsageError("--failed reruns points as they were: leave out the words after --")
    states = record.states(runner)
    failed = [i for i, s in enumerate(states) if s is None or s.state.value != "SUCCEEDED"]
    if not failed:
        raise UsageError(f"every point of {record.handle} succeeded: nothing to rerun")
    running = [i for i in failed if states[i] is not None and not states[i].is_terminal]  # type: ignore[union-attr]
    if running:
        raise UsageError(
            f"{record.handle}: point(s) {', '.join(map(str, running[:10]))} have not ended; "
            "wait for the sweep to end (or cancel it) before rerunning its failures"
        )
    where = str(record.data.get("cwd") or os.getcwd())
    if where != os.getcwd():
        if not os.path.isdir(where):
            raise UsageError(f"{record.handle} was submitted from {where}, which is gone")
        os.chdir(where)
    scheduler = args.scheduler or record.scheduler
    options = {**(record.data.get("cfg") or {}), **cfg}
    snapshot = None
    prov = runner.provenance(record.handle)
    snap = prov.get("snapshot") if prov else None
    if isinstance(snap, dict) and os.path.isdir(str(snap.get("path"))):
        from distspec.snapshot.rerun import _reused

        options.pop("snapshot", None)
        snapshot = _reused(runner, scheduler, options, snap, prov or {})
    elif not args.dryrun:
        tell(
            f"distspec: {record.handle} ran without a kept snapshot: the rerun runs the code as it is now"
        )
    component = load(str(record.data["component"]))
    request = plan_sweep(
        runner,
        component,
        [str(a) for a in record.data.get("args") or []],
        record.sweep.subset(failed),
        scheduler,
        options,
        max_parallel=record.data.get("max_parallel"),
        snapshot=snapshot,
        rerun_of=record.handle,
        prog=f"distspec run {component.name}",
    )
    if not args.dryrun:
        tell(
            f"distspec: rerunning {len(failed)} of {len(states)} points of {record.handle}: {', '.join(map(str, failed[:20]))}"
        )
    return show_or_submit(runner, request, args)


def _duration(status: AppStatus | None) -> str:
    from distspec.cli.status import duration_text

    return "-" if status is None else duration_text(status.duration)


def points_table(
    record: SweepRecord,
    states: Sequence[AppStatus | None],
    rows: Sequence[int] | None = None,
    metric: tuple[str, Sequence[float | None]] | None = None,
) -> list[str]:
    """One line per point (``rows``: which, in that order; all by default): index,
    values, state, duration, ``metric``'s last value when given (its name and one value
    per point, None where it recorded none), handle."""
    from distspec.metrics import value_text

    sweep = record.sweep
    chosen = range(len(states)) if rows is None else rows
    lines: list[str] = []
    head = ["POINT", "VALUES", "STATE", "TIME", "HANDLE"]
    if metric is not None:
        head.insert(4, metric[0].upper())
    cells = []
    for i in chosen:
        status = states[i]
        values = " ".join(f"{k}={v}" for k, v in sweep.values(i).items())
        state = status.state.value if status is not None else "UNKNOWN"
        row = [str(i), values, state, _duration(status), record.handles[i]]
        if metric is not None:
            last = metric[1][i]
            row.insert(4, "-" if last is None else value_text(last))
        cells.append(row)
    if not cells:
        return lines
    widths = [max(len(c[j]) for c in [head, *cells]) for j in range(len(head))]
    for row in [head, *cells]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def last_metrics(runner: Runner, record: SweepRecord) -> list[dict[str, float]]:
    """Each point's last value of every metric it recorded (:mod:`distspec.metrics`);
    {} for a point without metrics or whose job folder cannot be read."""
    from distspec.metrics import read_history

    out: list[dict[str, float]] = []
    for handle in record.handles:
        last: dict[str, float] = {}
        try:
            folder = runner.job_folder(handle)
            for r in read_history(folder) if folder is not None else []:
                last.update(r.metrics)
        except Exception:  # a point gone, a store that cannot be read: nothing to show
            pass
        out.append(last)
    return out


def metric_column(
    lasts: Sequence[dict[str, float]], name: str | None = None
) -> tuple[str, list[float | None]] | None:
    """The column :func:`points_table` shows: ``name``'s last values, by default the
    main metric's (:func:`distspec.metrics.main_metric`); None when no point has it."""
    from distspec.metrics import main_metric

    if name is None:
        seen = dict.fromkeys(n for last in lasts for n in last)
        name = main_metric(list(seen))
    if name is None or not any(name in last for last in lasts):
        return None
    return name, [last.get(name) for last in lasts]


def sorted_rows(column: tuple[str, Sequence[float | None]], descending: bool) -> list[int]:
    """The points ordered by their value in ``column``; those without one (or NaN) last."""
    import math

    def key(i: int) -> tuple[int, float]:
        v = column[1][i]
        if v is None or math.isnan(v):
            return (1, 0.0)
        return (0, -v if descending else v)

    return sorted(range(len(column[1])), key=key)


def _live_rows(states: Sequence[AppStatus | None]) -> list[int]:
    """The points a live table shows: running, then failed, then the rest, in order."""

    def rank(i: int) -> int:
        s = states[i]
        if s is None:
            return 2
        return {"RUNNING": 0, "FAILED": 1}.get(s.state.value, 3 if s.state.is_terminal else 2)

    return sorted(sorted(range(len(states)), key=rank)[:LIVE_ROWS])


def follow_sweep(runner: Runner, record: SweepRecord, err: TextIO, poll: float = 1.0) -> int:
    """Show the sweep until every point has ended: on a terminal a table redrawn in
    place, elsewhere a line per point whose state changed; then a summary. Returns 0
    when every point succeeded, else 1."""
    from distspec.sweep.record import counts, sweep_status

    live = err.isatty()
    seen: dict[int, str] = {}
    drawn = 0
    began = time.monotonic()
    while True:
        states = record.states(runner)
        if live:
            lines = points_table(record, states, _live_rows(states))
            lines.append(_counts_line(counts(states)))
            if drawn:
                err.write(f"\x1b[{drawn}F\x1b[J")
            err.write("\n".join(lines) + "\n")
            drawn = len(lines)
        else:
            sweep = record.sweep
            for i, status in enumerate(states):
                state = status.state.value if status is not None else "UNKNOWN"
                if seen.get(i) != state:
                    seen[i] = state
                    values = " ".join(f"{k}={v}" for k, v in sweep.values(i).items())
                    err.write(f"distspec: point {i} ({values}): {state}\n")
        err.flush()
        overall = sweep_status(states)
        if overall.is_terminal:
            break
        time.sleep(poll)
    failed = [i for i, s in enumerate(states) if s is None or s.state.value != "SUCCEEDED"]
    rows = None if len(states) <= SUMMARY_ROWS else failed
    if not live or rows is not None:
        column = metric_column(last_metrics(runner, record))
        err.write("\n".join(points_table(record, states, rows, column)) + "\n")
    elapsed = time.monotonic() - began
    err.write(
        f"distspec: sweep {record.handle} {overall.state.value} after {elapsed:.1f}s: "
        f"{_counts_line(counts(states))}\n"
    )
    if failed:
        err.write(
            f"distspec: {len(failed)} point(s) did not succeed; see a point's output with "
            f"`distspec log HANDLE`, run them again with `distspec rerun --failed {record.handle}`\n"
        )
    err.flush()
    return 1 if failed else 0


def _counts_line(found: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(found.items()))
