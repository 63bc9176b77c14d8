"""``distspec plot HANDLE...``: the metrics runs recorded (``distspec.runtime.log``),
drawn as curves in one chart: in the terminal (plotext), or into a picture file with
``-o chart.png`` (matplotlib, ``pip install 'distspec[plot]'``).

A sweep's handle stands for its points, each curve labelled by the values that vary
(``lr=0.1 bs=32``); a run's handle by its app id. The default metric is the one the
summary of ``run --wait`` shows (``loss``, see :func:`distspec.metrics.main_metric`).
Each curve is thinned to at most :data:`MAX_POINTS` points (the lowest and highest
value of each stretch, see :func:`distspec.cli._histories.decimate`), so a million
steps draw as fast as a hundred; NaN and infinities are gaps; where the job restarted
(``attempt``), the curve starts again and a dashed line marks the place.

Exit codes: 0 drawn; 1 no run recorded metrics, or none of their values can be drawn
(one line); 2 a malformed or unknown handle, a metric no run recorded, an output file
that cannot be written or whose extension is no picture format, ``-o`` without
matplotlib, a bad ``--width``/``--height``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from distspec.frozen import field, frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from matplotlib.figure import Figure

    from distspec.cli._histories import History
    from distspec.metrics import Record

EPILOG = """\
without -o the chart is drawn in the terminal (no colours when the output is not a
terminal or NO_COLOR is set); -o writes a picture, its format from the extension
(png, svg, pdf, ...; needs pip install 'distspec[plot]'). See docs/metrics.md. e.g.

  distspec plot local_cwd://distspec/train_ddp-1a2b3c4d
  distspec plot local_cwd://distspec/sweep-train-1a2b3c4d -m loss -o loss.png   # every point
  distspec plot local_cwd://distspec/train-1a2b3c4d local_cwd://distspec/train-5e6f7a8b --x time --log
"""

#: The most points of one curve handed to the plotting library.
MAX_POINTS = 2000

#: Terminal colours of the curves (256-colour codes), in turn.
_COLOURS = (12, 10, 9, 14, 13, 11, 4, 2, 1, 3, 5, 6)
#: Terminal markers of the curves when there are no colours, in turn.
_MARKERS = ("hd", "•", "+", "x", "o", "*", "#", "@", "%", "=")


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec plot`` to ``parser``."""
    parser.epilog = EPILOG
    parser.add_argument(
        "handle",
        nargs="+",
        metavar="HANDLE",
        help="a run's handle (SCHEDULER://SESSION/APP_ID, as `run` printed it), or a "
        "sweep's: each of its points",
    )
    parser.add_argument(
        "-m",
        "--metric",
        action="append",
        metavar="NAME",
        help="draw this metric (repeat for more); default: loss, or the first metric "
        "the first run recorded",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the chart to FILE (.png, .svg, .pdf, ...) with matplotlib instead "
        "of drawing it in the terminal",
    )
    parser.add_argument(
        "--x",
        choices=("step", "time"),
        default="step",
        help="the x axis: the step, or the time since the run's first record (default: step)",
    )
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument(
        "--log",
        dest="scale",
        action="store_const",
        const="log",
        help="a log scale for the values (default: when all are positive and span two "
        "orders of magnitude or more)",
    )
    scale.add_argument(
        "--linear", dest="scale", action="store_const", const="linear", help="a linear scale"
    )
    parser.add_argument(
        "--width",
        type=int,
        metavar="W",
        help="columns in the terminal (default: its width); pixels with -o (default 1000)",
    )
    parser.add_argument(
        "--height",
        type=int,
        metavar="H",
        help="rows in the terminal (default: its height); pixels with -o (default 600)",
    )


@frozen
class Curve:
    """One metric of one run, thinned for drawing."""

    label: str
    handle: str
    metric: str
    segments: list[tuple[int, list[float], list[float]]] = field(default_factory=list)
    """``(attempt, xs, ys)`` of each stretch of one attempt, in order, as recorded
    (NaN and infinities included), each at most :data:`MAX_POINTS` long together."""

    @property
    def starts(self) -> list[tuple[int, float]]:
        """``(attempt, x)`` where each attempt after the first begins."""
        return [(a, xs[0]) for a, xs, _ in self.segments[1:] if xs]


def main(args: argparse.Namespace) -> int:
    """Run ``distspec plot`` with the parsed ``args``; returns the exit code."""
    from distspec.cli._histories import load_histories, metrics_path
    from distspec.cli._shared import make_runner
    from distspec.errors import UsageError
    from distspec.metrics import wide_range

    for name in ("width", "height"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name} must be >= 1, got {value}")
    if args.output is not None:
        _check_output(args.output)
    runner = make_runner()
    histories = load_histories(runner, args.handle)
    runs = [h for h in histories if h.records]
    if not runs:
        if len(histories) == 1:
            h = histories[0]
            path = metrics_path(runner, h.handle)
            if path is None:  # the wording of distspec metrics
                _say(
                    f"{h.handle} has no job folder: metrics are recorded in a job folder "
                    "(on Kubernetes, -cfg job_dir; see docs/metrics.md)"
                )
            else:
                _say(
                    f"{h.handle} recorded no metrics ({path} "
                    f"{'is empty' if os.path.exists(path) else 'does not exist'}; a job "
                    "records them with distspec.runtime.log(step=..., loss=...))"
                )
        else:
            _say(
                f"none of the {len(histories)} runs recorded metrics (a job records them "
                "with distspec.runtime.log(step=..., loss=...))"
            )
        return 1
    for h in histories:
        if not h.records:
            _say(f"{h.handle} recorded no metrics; drawing the others")
    metrics = list(dict.fromkeys(args.metric or [_main_metric(runs[0].records)]))
    drawn = curves(runs, metrics, args.x)
    for metric in metrics:
        lacking = [
            h.handle
            for h in runs
            if not any(c.handle == h.handle and c.metric == metric for c in drawn)
        ]
        if len(lacking) == len(runs):
            recorded = list(dict.fromkeys(n for h in runs for n in _names(h.records)))
            if len(runs) == 1:
                said = f"{runs[0].handle} recorded no metric {metric!r}; it recorded: "
            else:
                said = f"no run recorded a metric {metric!r}; they recorded: "
            raise UsageError(said + ", ".join(recorded))
        for handle in lacking:
            _say(f"{handle} recorded no {metric!r}; drawing the others")
    values = [y for c in drawn for _, _, ys in c.segments for y in ys if math.isfinite(y)]
    log = args.scale == "log" or (args.scale is None and wide_range(values))
    drawable = [y for y in values if y > 0 or not log]
    if not drawable:
        what = "positive value" if values else "finite value"
        _say(
            f"nothing to draw: no {what} of {', '.join(metrics)} was recorded"
            + (" (a log scale shows positive values only)" if values else "")
        )
        return 1
    if log and len(drawable) < len(values):
        _say("values <= 0 are not drawn on a log scale")
    title = ", ".join(metrics)
    xlabel, drawn = _x_unit(args.x, drawn)
    if args.output is not None:
        fig = figure(
            drawn,
            title=title,
            xlabel=xlabel,
            ylabel=metrics[0] if len(metrics) == 1 else "value",
            log=log,
            width=args.width or 1000,
            height=args.height or 600,
        )
        fig.savefig(args.output)
        return 0
    import shutil

    columns, lines = shutil.get_terminal_size()
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    text = terminal_chart(
        drawn,
        title=title + (" (log scale)" if log else ""),
        xlabel=xlabel,
        log=log,
        width=args.width or columns,
        height=args.height or max(10, lines - 2),
        colour=colour,
    )
    sys.stdout.write(text + "\n")
    return 0


def curves(histories: Sequence[History], metrics: Sequence[str], x: str = "step") -> list[Curve]:
    """A curve for each of ``metrics`` that each of ``histories`` recorded, each
    thinned to :data:`MAX_POINTS` points; labelled ``label: metric`` when there are
    several runs and several metrics, by the metric alone for one run and several
    metrics, else by the run's label."""
    from distspec.cli._histories import by_attempt, decimate

    runs = [h for h in histories if h.records]
    out = []
    for h in runs:
        for metric in metrics:
            parts = by_attempt(h.records, metric, x)
            if not parts:
                continue
            total = sum(len(xs) for _, xs, _ in parts)
            segments = []
            for attempt, xs, ys in parts:
                budget = max(5, MAX_POINTS * len(xs) // total)
                segments.append((attempt, *decimate(xs, ys, budget)))
            if len(metrics) > 1 and len(runs) > 1:
                label = f"{h.label}: {metric}"
            elif len(metrics) > 1:
                label = metric
            else:
                label = h.label
            out.append(Curve(label=label, handle=h.handle, metric=metric, segments=segments))
    return out


def figure(
    curves: Sequence[Curve],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    log: bool,
    width: int = 1000,
    height: int = 600,
) -> Figure:
    """The chart as a matplotlib figure (Agg, no window) of ``width`` x ``height``
    pixels: one line per curve, NaN, infinities (and values <= 0 on a log scale) left
    out as gaps, a dashed line where each new attempt starts."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width / 100, height / 100), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    marked = False
    points = 0
    for i, curve in enumerate(curves):
        colour = f"C{i % 10}"
        n = sum(len(xs) for _, xs, _ in curve.segments)
        points += n
        for j, (_, xs, ys) in enumerate(curve.segments):
            shown = [y if math.isfinite(y) and (y > 0 or not log) else math.nan for y in ys]
            ax.plot(
                xs,
                shown,
                color=colour,
                linewidth=1.2,
                marker="o" if n <= 100 else None,
                markersize=2.5,
                label=curve.label if j == 0 else "_nolegend_",
            )
        for _, x in curve.starts:
            ax.axvline(
                x,
                color=colour,
                linestyle="--",
                linewidth=0.9,
                alpha=0.8,
                label="_nolegend_" if marked else "new attempt",
            )
            marked = True
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    # "best" weighs every vertex against each place: slow for many long curves.
    ax.legend(loc="best" if points <= 20_000 else "upper right", fontsize="small")
    fig.tight_layout()
    return fig


def terminal_chart(
    curves: Sequence[Curve],
    *,
    title: str,
    xlabel: str,
    log: bool,
    width: int,
    height: int,
    colour: bool,
) -> str:
    """The chart as text for a terminal of ``width`` x ``height`` cells (plotext):
    axes with ticks, the title, a legend, a dotted line where each new attempt
    starts; ANSI colours only if ``colour`` (else each curve its own marker)."""
    plotext = _plotext()
    fig = plotext.figure
    fig.clear()
    fig.theme("colorless")  # first: a theme resets the title and labels
    plotext.terminal.limit(False, False)  # our size, not the terminal plotext sees
    fig.plot_size(width, height)
    runs: list[tuple[int, list[list[tuple[float, float]]]]] = []  # curve index, its pieces
    for i, curve in enumerate(curves):
        pieces: list[list[tuple[float, float]]] = []
        for _, xs, ys in curve.segments:
            piece: list[tuple[float, float]] = []
            for x, y in zip(xs, ys, strict=True):
                if math.isfinite(y) and (y > 0 or not log):
                    piece.append((x, math.log10(y) if log else y))
                elif piece:
                    pieces.append(piece)
                    piece = []
            if piece:
                pieces.append(piece)
        runs.append((i, pieces))
    xs_all = [p[0] for _, pieces in runs for piece in pieces for p in piece]
    ys_all = [p[1] for _, pieces in runs for piece in pieces for p in piece]
    xlo, xhi = _span(min(xs_all), max(xs_all))
    ylo, yhi = _span(min(ys_all), max(ys_all))

    def marker(i: int, symbol: str | None = None) -> object:
        if colour:
            return plotext.marker(symbol or "hd", pixel=_COLOURS[i % len(_COLOURS)])
        return plotext.marker(symbol or _MARKERS[i % len(_MARKERS)])

    for i, pieces in runs:
        labelled = False
        for piece in pieces:
            signal = fig.signal([p[0] for p in piece], [p[1] for p in piece], marker=marker(i))
            if not labelled:
                signal.label(curves[i].label)
                labelled = True
            fig.draw(signal.lines())
    marked = False
    for i, curve in enumerate(curves):
        for _, x in curve.starts:
            line = fig.signal([x, x], [ylo, yhi], marker=marker(i, "┊"))
            if not marked:
                line.label("new attempt")
                marked = True
            fig.draw(line.lines())
    fig.title(title)
    fig.label(xlabel, "x")
    fig.ruler("x").lim(xlo, xhi)
    fig.ruler("y").lim(ylo, yhi)
    xticks = _ticks(xlo, xhi, max(2, width // 14))
    fig.ruler("x").ticks(xticks, [_tick_text(v) for v in xticks])
    if log:
        decades = list(range(math.ceil(ylo), math.floor(yhi) + 1))
        yticks = [float(d) for d in decades] if len(decades) >= 2 else _ticks(ylo, yhi, 4)
        fig.ruler("y").ticks(yticks, [_tick_text(10**v) for v in yticks])
    else:
        yticks = _ticks(ylo, yhi, max(2, height // 3))
        fig.ruler("y").ticks(yticks, [_tick_text(v) for v in yticks])
    # The legend in the right corner (top or bottom) that the curves leave emptier.
    xmid, ymid = (xlo + xhi) / 2, (ylo + yhi) / 2
    right = [y for x, y in zip(xs_all, ys_all, strict=True) if x >= xmid]
    top = sum(1 for y in right if y >= ymid) <= sum(1 for y in right if y < ymid)
    fig.legend(
        x=xhi, y=yhi if top else ylo, ha="right", va="top" if top else "bottom", relative=True
    )
    return str(fig.build().string(colorless=not colour)).rstrip("\n")


def _check_output(path: str) -> None:
    """Refuse, before anything is read, an output file that cannot be written or has
    no picture format, and ``-o`` without matplotlib."""
    from distspec.errors import UsageError

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"-o {path} is a directory: name a file in it, e.g. {path}/chart.png")
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {path}: there is no directory {folder}")
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would hang, a device
        raise UsageError(f"-o {path} is not a regular file (a device or a pipe): name a file")
    if not os.access(path if os.path.exists(path) else folder, os.W_OK):
        raise UsageError(f"cannot write {path}: permission denied")
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise UsageError(
            f"writing {path} needs matplotlib: pip install 'distspec[plot]' (without -o the "
            "chart is drawn in the terminal)"
        ) from None
    formats = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in formats:
        what = f"extension .{ext}" if ext else "no extension"
        raise UsageError(
            f"-o {path} has {what}: name a picture file, ending in "
            + ", ".join(f".{e}" for e in sorted(formats))
        )


def _plotext() -> Any:
    from distspec.errors import UsageError

    try:
        import plotext  # type: ignore[import-untyped]
    except ImportError:
        raise UsageError(
            "the terminal chart needs plotext: pip install 'plotext>=6,<7' (or write a "
            "picture with -o chart.png)"
        ) from None
    version = str(getattr(plotext, "__version__", "0"))
    major = version.split(".", maxsplit=1)[0]
    if not major.isdigit() or int(major) < 6:
        raise UsageError(
            f"the terminal chart needs plotext 6, this is plotext {version}: "
            "pip install 'plotext>=6,<7'"
        )
    return plotext


def _main_metric(records: Sequence[Record]) -> str:
    """:func:`distspec.metrics.main_metric` of the metrics ``records`` have; ``loss``
    found without looking at every record."""
    from distspec.metrics import main_metric

    if any("loss" in r.metrics for r in records):
        return "loss"
    return main_metric(_names(records)) or ""


def _names(records: Sequence[Record]) -> list[str]:
    """The metrics recorded, in the order they first appear (as
    :func:`distspec.metrics.metric_names`, the loop in C: a million records)."""
    from itertools import chain
    from operator import attrgetter

    return list(dict.fromkeys(chain.from_iterable(map(attrgetter("metrics"), records))))


def _x_unit(x: str, curves: list[Curve]) -> tuple[str, list[Curve]]:
    """The x axis's label, and for ``time`` the curves in a unit that fits their span
    (seconds, minutes or hours)."""
    if x != "time":
        return "step", curves
    span = max((v for c in curves for _, xs, _ in c.segments for v in xs), default=0.0)
    unit, scale = ("s", 1.0) if span < 120 else ("min", 60.0) if span < 7200 else ("h", 3600.0)
    if scale != 1.0:
        curves = [
            Curve(
                label=c.label,
                handle=c.handle,
                metric=c.metric,
                segments=[(a, [v / scale for v in xs], ys) for a, xs, ys in c.segments],
            )
            for c in curves
        ]
    return f"time ({unit})", curves


def _span(lo: float, hi: float) -> tuple[float, float]:
    """An axis's range for values from ``lo`` to ``hi``; one value gets room around it."""
    if hi > lo:
        return lo, hi
    pad = abs(lo) * 0.1 or 1.0
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float, count: int) -> list[float]:
    """About ``count`` round positions (1, 2 or 5 times a power of ten apart) from
    ``lo`` to ``hi``."""
    count = max(count, 1)
    power = 10 ** math.floor(math.log10((hi - lo) / count))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda s: abs((hi - lo) / s - count))
    first = math.ceil(lo / step)
    return [k * step for k in range(first, math.floor(hi / step) + 1)]


def _tick_text(value: float) -> str:
    """A tick's label: a whole number in full (below a billion: a step), else as
    ``distspec metrics`` shows values."""
    from distspec.metrics import value_text

    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return value_text(value)


def _say(line: str) -> None:
    print(f"distspec plot: {line}", file=sys.stderr)
