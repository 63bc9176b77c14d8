"""``distspec report``'s page: one self-contained HTML file for a run or a sweep.

Everything is in the file: the charts are inline SVG drawn here (no script, no
font, no stylesheet fetched), so the page opens offline, from a mail attachment or
a CI artifact, in any browser. Standard library only.

The page has, in order: the run's (or sweep's) state; a chart per metric with every
run's curve (a sweep's points labelled by their values); a table of the last values;
for a single run its timeline (:mod:`distspec.timeline`) drawn as a bar of phases;
its final state as ``describe`` prints it; and its provenance record.
"""

from __future__ import annotations

import html
import itertools
import math
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from distspec.timeline import Event

__all__ = ["Curve", "line_chart", "nice_ticks", "page", "timeline_chart"]

#: Curve colours (colour-blind safe, Okabe and Ito), used in turn.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#f0e442", "#000000")

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328;
       margin: 2em auto; max-width: 1000px; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 2em;
  border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
.state { display: inline-block; padding: .1em .6em; border-radius: 1em; color: #fff;
         font-weight: 600; font-size: .9em; }
.SUCCEEDED { background: #1a7f37; } .FAILED { background: #cf222e; }
.CANCELLED { background: #6e7781; } .RUNNING, .PENDING, .SUBMITTED { background: #0969da; }
.UNKNOWN { background: #9a6700; }
table { border-collapse: collapse; margin: .5em 0; } td, th { padding: .2em .8em;
  border-bottom: 1px solid #eaeef2; text-align: left; } td.num { text-align: right;
  font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: 12.5px; }
.legend span { display: inline-block; margin-right: 1.2em; white-space: nowrap; }
.swatch { display: inline-block; width: 1.4em; height: .25em; vertical-align: middle;
          margin-right: .4em; }
.chart { display: block; margin: .5em 0; }
.muted { color: #656d76; }
"""


class Curve:
    """One line of a chart: its label, x and y values (NaN/inf: a gap), and the x
    values where a new attempt of the run began (drawn as dashed lines)."""

    __slots__ = ("label", "restarts", "xs", "ys")

    def __init__(
        self,
        label: str,
        xs: Sequence[float],
        ys: Sequence[float],
        restarts: Sequence[float] = (),
    ) -> None:
        self.label = label
        self.xs = list(xs)
        self.ys = list(ys)
        self.restarts = list(restarts)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) covering
    ``low``..``high``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high <= low:
        return [low]
    raw = (high - low) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(0.0 if abs(value) < step * 1e-9 else value)
        value += step
    return ticks


def _tick_text(value: float) -> str:
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e5:
        return f"{value:.6g}"
    return f"{value:.0e}".replace("e+0", "e").replace("e-0", "e-")


def line_chart(
    curves: Sequence[Curve],
    *,
    title: str,
    log: bool = False,
    x_label: str = "step",
    width: int = 900,
    height: int = 320,
    legend: bool = False,
) -> str:
    """An SVG line chart of ``curves`` (the page's own drawing: axes with round
    ticks, a log y scale when ``log``, gaps where a value is not finite); ``legend``:
    the curves' labels in its top right corner (the page puts its own under it)."""
    left, right, top, bottom = 70, 20, 30, 42
    plot_w, plot_h = width - left - right, height - top - bottom

    def usable(y: float) -> bool:
        return math.isfinite(y) and (y > 0 or not log)

    xs = [x for c in curves for x in c.xs if math.isfinite(x)]
    ys = [y for c in curves for y in c.ys if usable(y)]
    parts = [
        f'<svg class="chart" data-metric="{html.escape(title)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{html.escape(title)}">',
        f'<text x="{left}" y="18" font-size="14" font-weight="600">{html.escape(title)}'
        + (' <tspan fill="#656d76" font-weight="400">(log scale)</tspan>' if log else "")
        + "</text>",
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" '
        'stroke="#d0d7de"/>',
    ]
    if not xs or not ys:
        parts.append(
            f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" text-anchor="middle" '
            'fill="#656d76">no finite values</text></svg>'
        )
        return "".join(parts)
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    fy = math.log10 if log else (lambda v: v)
    y0, y1 = fy(min(ys)), fy(max(ys))
    if y1 == y0:
        y0, y1 = y0 - (abs(y0) or 1) * 0.1, y1 + (abs(y1) or 1) * 0.1
    pad = (y1 - y0) * 0.05
    y0, y1 = y0 - pad, y1 + pad

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + (1 - (fy(y) - y0) / (y1 - y0)) * plot_h

    # Grid and ticks.
    if log:
        yticks = [10.0**k for k in range(math.ceil(y0), math.floor(y1) + 1)]
        if len(yticks) < 2:
            yticks = [10**v for v in nice_ticks(y0, y1)]
    else:
        yticks = nice_ticks(y0, y1)
    for v in yticks:
        y = py(v)
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
            f'fill="#656d76">{_tick_text(v)}</text>'
        )
    for v in nice_ticks(x0, x1, 6):
        x = px(v)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#f3f4f6"/>'
            f'<text x="{x:.1f}" y="{top + plot_h + 16}" font-size="11" text-anchor="middle" '
            f'fill="#656d76">{_tick_text(v)}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2}" y="{height - 6}" font-size="12" text-anchor="middle" '
        f'fill="#656d76">{html.escape(x_label)}</text>'
    )
    for i, curve in enumerate(curves):
        color = PALETTE[i % len(PALETTE)]
        for x in curve.restarts:
            parts.append(
                f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top}" y2="{top + plot_h}" '
                f'stroke="{color}" stroke-dasharray="4 3" opacity=".6"/>'
            )
        runs: list[list[str]] = [[]]
        for x, y in zip(curve.xs, curve.ys, strict=False):
            if math.isfinite(x) and usable(y):
                runs[-1].append(f"{px(x):.1f},{py(y):.1f}")
            elif runs[-1]:
                runs.append([])
        for points in runs:
            if len(points) == 1:
                cx, cy = points[0].split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{color}"/>')
            elif points:
                parts.append(
                    f'<polyline fill="none" stroke="{color}" stroke-width="1.8" '
                    f'stroke-linejoin="round" points="{" ".join(points)}"/>'
                )
    if legend:
        longest = max(len(c.label) for c in curves)
        box_w, box_h = 34 + 7 * longest, 8 + 16 * len(curves)
        bx, by = left + plot_w - box_w - 8, top + 8
        parts.append(
            f'<rect x="{bx}" y="{by}" width="{box_w}" height="{box_h}" fill="#fff" '
            'fill-opacity=".9" stroke="#d0d7de"/>'
        )
        for i, curve in enumerate(curves):
            y = by + 14 + 16 * i
            parts.append(
                f'<line x1="{bx + 6}" x2="{bx + 24}" y1="{y - 4}" y2="{y - 4}" '
                f'stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="2.5"/>'
                f'<text x="{bx + 30}" y="{y}" font-size="11.5">{html.escape(curve.label)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def legend(labels: Sequence[str]) -> str:
    """The HTML legend under a chart: a colour swatch and each curve's label."""
    items = "".join(
        f'<span><i class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></i>'
        f"{html.escape(label)}</span>"
        for i, label in enumerate(labels)
    )
    return f'<div class="legend">{items}</div>'


#: The colour of each phase of the timeline bar, by the event that ends it.
_PHASE_COLOURS = {
    "started": "#d0d7de",
    "launchers up": "#e69f00",
    "process group up": "#56b4e9",
    "first metric": "#009e73",
    "ended": "#0072b2",
}


def _length(seconds: float) -> str:
    from distspec.timeline import _length as length

    return length(seconds)


def timeline_chart(events: Sequence[Event], width: int = 900) -> str:
    """The run's phases as one horizontal bar (each segment as long as its phase, at
    least 2 px) with the events' names under it."""
    if len(events) < 2:
        return ""
    left, right = 10, 10
    bar_w = width - left - right
    start, end = events[0].time, events[-1].time
    span = max(end - start, 1e-9)
    height = 40 + 18 * len(events)
    parts = [
        f'<svg class="chart timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="timeline">'
    ]
    for before, event in itertools.pairwise(events):
        x = left + (before.time - start) / span * bar_w
        w = max(2.0, (event.time - before.time) / span * bar_w)
        color = _PHASE_COLOURS.get(event.name, "#8c959f")
        title = html.escape(
            f"{event.phase or event.name}: {_length(event.time - before.time)}", quote=False
        )
        parts.append(
            f'<rect x="{x:.1f}" y="8" width="{w:.1f}" height="20" fill="{color}">'
            f"<title>{title}</title></rect>"
        )
    for i, event in enumerate(events):
        x = left + (event.time - start) / span * bar_w
        y = 46 + 18 * i
        anchor = "end" if x > width * 0.6 else "start"
        gap = "" if i == 0 else f" +{_length(event.time - events[i - 1].time)}"
        text = html.escape(f"{event.name}{gap}")
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="28" y2="{y - 4}" stroke="#8c959f"/>'
            f'<text x="{x + (-4 if anchor == "end" else 4):.1f}" y="{y}" font-size="11.5" '
            f'text-anchor="{anchor}">{text}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def timeline_table(events: Sequence[Event]) -> str:
    """The timeline's events as a table: clock time, name, the phase before it."""
    rows = []
    for i, e in enumerate(events):
        clock = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.time))
        gap = "" if i == 0 else f"+{_length(e.time - events[i - 1].time)}"
        rows.append(
            f"<tr><td>{clock}</td><td>{html.escape(e.name)}</td><td class='num'>{gap}</td>"
            f"<td class='muted'>{html.escape(e.phase if i else '')}</td>"
            f"<td>{html.escape(e.detail)}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool]) -> str:
    """An HTML table of text cells (escaped here)."""
    out = ["<table><tr>"]
    out += [f"<th>{html.escape(h)}</th>" for h in head]
    out.append("</tr>")
    for row in rows:
        out.append("<tr>")
        out += [
            f"<td class='num'>{html.escape(c)}</td>" if n else f"<td>{html.escape(c)}</td>"
            for c, n in zip(row, numeric, strict=True)
        ]
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def page(title: str, state: str, subtitle: str, sections: Sequence[tuple[str, str]]) -> str:
    """The whole HTML document: a heading with the state, then each ``(heading, html)``."""
    body = [
        f"<h1>{html.escape(title)} <span class='state {html.escape(state)}'>"
        f"{html.escape(state)}</span></h1>",
        f"<div class='muted'>{html.escape(subtitle)}</div>",
    ]
    for heading, content in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>{content}")
    made = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    body.append(f"<p class='muted'>made by distspec report at {html.escape(made)}</p>")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
