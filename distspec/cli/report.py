"""``distspec report HANDLE -o report.html``: one self-contained HTML page for a run
or a sweep (:mod:`distspec.report`): its metrics as charts, the last values, the
timeline, the final state and the provenance record, viewable offline.

Exit codes: 0 written; 2 a malformed or unknown handle, a metric no run recorded, an
output path that cannot be written (checked before anything is read).
"""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.cli._histories import History

EPILOG = """\
the page has no script and fetches nothing: open it offline, attach it, keep it as
a CI artifact. e.g.

  distspec report local_cwd://distspec/train_ddp-1a2b3c4d -o report.html
  distspec report local_cwd://distspec/train_ddp-1a2b3c4d -m loss -o loss.html
"""

#: At most this many points per curve on the page (a long history is decimated).
MAX_POINTS = 1500

#: At most this many metrics get a chart each when none is named.
MAX_CHARTS = 12


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec report`` to ``parser``."""
    from distspec.cli._shared import add_handle

    parser.epilog = EPILOG
    add_handle(parser)
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the page (default: <app id>.html here; - for stdout)",
    )
    parser.add_argument(
        "-m",
        "--metric",
        action="append",
        metavar="NAME",
        help="chart only this metric (repeat for more); default: every one recorded, "
        "the main one (loss) first",
    )


def check_output(path: str) -> None:
    """Refuse (UsageError) an output path that cannot be written: a folder, a missing
    or read-only folder, something that is not a regular file (a device, a FIFO).
    Checked before the page is made."""
    import os

    from distspec.errors import UsageError

    if path == "-":
        return
    if os.path.isdir(path):
        raise UsageError(f"-o {path} is a folder: name the file, e.g. -o {path}/report.html")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"-o {path}: the folder {folder} does not exist")
    if os.path.exists(path) and not os.path.isfile(path):
        # The page is written beside it and renamed over it: never over /dev/null.
        raise UsageError(
            f"-o {path} is not a regular file (a device or a pipe): name a file, or - for stdout"
        )
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"-o {path}: cannot write there (permission denied)")


def main(args: argparse.Namespace) -> int:
    """Run ``distspec report`` with the parsed ``args``; returns the exit code."""
    import os

    from distspec.cli._histories import load_histories
    from distspec.cli._shared import make_runner
    from distspec.errors import UsageError
    from distspec.metrics import main_metric, metric_names

    runner = make_runner()
    app_id = args.handle.rstrip("/").rsplit("/", 1)[-1]
    output = args.output or f"{app_id}.html"
    check_output(output)
    sweep = runner.sweep(args.handle)
    histories = load_histories(runner, [args.handle])
    names = metric_names(r for h in histories for r in h.records)
    if args.metric:
        missing = [m for m in args.metric if m not in names]
        if missing:
            recorded = ", ".join(names) if names else "nothing"
            raise UsageError(
                f"{args.handle} recorded no metric {missing[0]!r}; it recorded: {recorded}"
            )
        charted = list(dict.fromkeys(args.metric))
    else:
        main = main_metric(names)
        charted = ([main] if main else []) + [n for n in names if n != main]
        charted = charted[:MAX_CHARTS]
    if sweep is not None:
        text = _sweep_page(runner, args.handle, sweep, histories, charted)
    else:
        text = _run_page(runner, args.handle, histories, charted)
    if output == "-":
        sys.stdout.write(text)
        return 0
    tmp = f"{output}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, output)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise UsageError(f"-o {output}: {e.strerror or e}") from None
    shown = f"{len(charted)} chart(s)" if charted else "no metrics recorded"
    print(f"distspec report: wrote {output} ({shown}, {len(text) / 1024:.0f} KB)", file=sys.stderr)
    return 0


def _charts(histories: list[History], charted: list[str]) -> str:
    """A chart per metric, every history's curve in each, with its legend."""
    from distspec.cli._histories import decimate, series
    from distspec.metrics import wide_range
    from distspec.report import Curve, legend, line_chart

    if not charted:
        return (
            "<p class='muted'>No metrics recorded: a job records them with "
            "<code>distspec.runtime.log(step=..., loss=...)</code>.</p>"
        )
    out = []
    for name in charted:
        curves = []
        for h in histories:
            xs, ys = series(h.records, name)
            if not xs:
                continue
            xs, ys = decimate(xs, ys, MAX_POINTS)
            curves.append(Curve(h.label, xs, ys, _restarts(h, name)))
        if not curves:
            continue
        log = wide_range([y for c in curves for y in c.ys])
        out.append(line_chart(curves, title=name, log=log))
        if len(curves) > 1 or curves[0].label:
            out.append(legend([c.label for c in curves]))
    return "\n".join(out)


def _restarts(history: History, name: str) -> list[float]:
    """The steps where a new attempt's records of ``name`` begin."""
    out: list[float] = []
    before = None
    for i, r in enumerate(history.records):
        if name not in r.metrics:
            continue
        if before is not None and r.attempt != before:
            out.append(float(r.step if r.step is not None else i))
        before = r.attempt
    return out


def _last_values(histories: list[History], charted: list[str]) -> tuple[list[str], list[list[str]]]:
    """The table of each history's last value of each charted metric, and its step."""
    from distspec.metrics import value_text

    head = ["run", "state", *charted, "last step"]
    rows = []
    for h in histories:
        last: dict[str, float] = {}
        step = "-"
        for r in h.records:
            for name in charted:
                if name in r.metrics:
                    last[name] = r.metrics[name]
            if r.step is not None:
                step = str(r.step)
        rows.append(
            [
                h.label or h.handle,
                h.state or "-",
                *(value_text(last[n]) if n in last else "-" for n in charted),
                step if h.records else "-",
            ]
        )
    return head, rows


def _run_page(runner: Any, handle: str, histories: list[History], charted: list[str]) -> str:
    import html

    from distspec.cli.status import describe_text, provenance_text
    from distspec.report import page, table, timeline_chart, timeline_table
    from distspec.timeline import job_timeline

    status = runner.status(handle)
    record = runner.provenance(handle)
    events = job_timeline(status, status.location or None)
    sections = [("Metrics", _charts(histories, charted))]
    if charted:
        head, rows = _last_values(histories, charted)
        sections.append(("Last values", table(head[1:], [r[1:] for r in rows], _numeric(head)[1:])))
    if len(events) > 1:
        sections.append(("Timeline", timeline_chart(events) + timeline_table(events)))
    sections.append(("Final state", f"<pre>{html.escape(describe_text(handle, status))}</pre>"))
    if record is not None:
        sections.append(("Provenance", f"<pre>{html.escape(provenance_text(record))}</pre>"))
    title = handle.rstrip("/").rsplit("/", 1)[-1]
    subtitle = f"{handle} · {status.msg}" if status.msg else handle
    return page(title, status.state.value, subtitle, sections)


def _sweep_page(
    runner: Any, handle: str, sweep: Any, histories: list[History], charted: list[str]
) -> str:
    import html

    from distspec.cli.status import provenance_text
    from distspec.cli.sweep import points_table
    from distspec.report import page, table
    from distspec.sweep.record import sweep_status

    states = sweep.states(runner)
    status = sweep_status(states)
    sections = [("Metrics", _charts(histories, charted))]
    if charted:
        head, rows = _last_values(histories, charted)
        main = charted[0]
        if "loss" in main.lower() or "err" in main.lower():
            order = "lowest"
            rows.sort(key=lambda row: _sort_key(row[2]))
        else:
            order = "highest"
            rows.sort(key=lambda row: _sort_key(row[2], negate=True))
        note = f"<p class='muted'>Sorted by the last {html.escape(main)}, {order} first.</p>"
        sections.append(("Points", note + table(head, rows, _numeric(head))))
    sections.append(
        ("Final state", f"<pre>{html.escape(chr(10).join(points_table(sweep, states)))}</pre>")
    )
    record = runner.provenance(handle)
    if record is not None:
        sections.append(("Provenance", f"<pre>{html.escape(provenance_text(record))}</pre>"))
    title = f"sweep {sweep.sweep_id}"
    return page(title, status.state.value, f"{handle} · {status.msg}", sections)


def _numeric(head: list[str]) -> list[bool]:
    return [h not in ("run", "state") for h in head]


def _sort_key(text: str, *, negate: bool = False) -> tuple[int, float]:
    """Rows with a value first (by it), then those without (``-``, ``nan``)."""
    import math

    try:
        value = float(text)
    except ValueError:
        return (1, 0.0)
    if math.isnan(value):
        return (1, 0.0)
    return (0, -value if negate else value)
