"""MkDocs hook: the pictures of docs/metrics.md, drawn at build time from real data.

docs/data/ holds what real runs recorded: the metrics histories of a three-point
learning-rate sweep of examples/train_ddp.py (1x2, gloo, on the local backend) and
one of those runs' timeline. The build draws them with distspec's own code, the
same that users run, so the pictures cannot drift from what the tools draw:

- ``img/metrics/sweep-loss.png``: ``distspec plot SWEEP -m loss -o ...``'s figure
  (matplotlib, the ``plot`` extra);
- ``img/metrics/sweep-loss.svg`` and ``img/metrics/timeline.svg``: the charts of
  ``distspec report``;
- the page's ``<!-- picture: terminal-plot -->`` comment becomes the terminal chart
  ``distspec plot`` prints (plotext), as a text block.

Registered in mkdocs.yml (``hooks:``); nothing here runs outside the docs build.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

#: The sweep's points: their learning rate and history file, in point order.
POINTS = ("0.01", "0.05", "0.2")
FOLDER = "img/metrics"
TERMINAL = "<!-- picture: terminal-plot -->"


def _histories(docs: Path) -> list[Any]:
    from distspec.cli._histories import History
    from distspec.metrics import read_records

    return [
        History(
            handle=f"local_cwd://distspec/train_ddp-point{i}",
            label=f"lr={lr}",
            params={"lr": lr},
            records=read_records(str(docs / "data" / f"sweep-lr-{lr}.metrics.jsonl")),
            state="SUCCEEDED",
        )
        for i, lr in enumerate(POINTS)
    ]


def _pictures(docs: Path) -> dict[str, bytes]:
    from distspec.cli import plot
    from distspec.cli._histories import decimate, series
    from distspec.report import Curve, line_chart, timeline_chart
    from distspec.timeline import Event

    histories = _histories(docs)
    curves = plot.curves(histories, ["loss"])
    figure = plot.figure(
        curves, title="loss", xlabel="step", ylabel="loss", log=True, width=900, height=420
    )
    png = io.BytesIO()
    figure.savefig(png, format="png")
    svg_curves = []
    for h in histories:
        xs, ys = series(h.records, "loss")
        svg_curves.append(Curve(h.label, *decimate(xs, ys)))
    chart = line_chart(svg_curves, title="loss", log=True, legend=True)
    events = [
        Event(e["name"], e["time"], e["detail"], e["phase"])
        for e in json.loads((docs / "data" / "train_ddp.timeline.json").read_text())
    ]
    return {
        f"{FOLDER}/sweep-loss.png": png.getvalue(),
        f"{FOLDER}/sweep-loss.svg": chart.encode(),
        f"{FOLDER}/timeline.svg": timeline_chart(events).encode(),
    }


def on_files(files: Any, config: Any) -> Any:
    """Add the drawn pictures to the site's files."""
    from mkdocs.structure.files import File

    for path, content in _pictures(Path(config["docs_dir"])).items():
        files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Put the terminal chart where the page asks for it."""
    if TERMINAL not in markdown:
        return markdown
    from distspec.cli import plot

    curves = plot.curves(_histories(Path(config["docs_dir"])), ["loss"])
    text = plot.terminal_chart(
        curves, title="loss", xlabel="step", log=True, width=88, height=22, colour=False
    )
    return markdown.replace(TERMINAL, f"```text\n$ distspec plot $SWEEP -m loss\n{text}\n```")
