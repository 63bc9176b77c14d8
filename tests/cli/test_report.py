"""``distspec report``: the HTML page of a real run and of a real sweep, opened in a real
headless browser (Chromium from Debian): every chart is laid out with a non-zero
size, and the screenshot has the curves' colour in it (not a blank page). The page's
numbers are the recorded ones; bad output paths and metrics are one line, exit 2,
with nothing written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_follow import cli, needs_torch
from tests.cli.test_metrics_cli import SCRIPT
from tests.sweep.test_sweep_metrics import run_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH (Debian's chromium package; scripts/test installs it)",
)

#: Added to a copy of the page by the test only: measures each chart once laid out.
MEASURE = """<script>
document.body.setAttribute("data-charts", JSON.stringify(
  [...document.querySelectorAll("svg.chart")].map(e => {
    const r = e.getBoundingClientRect();
    return {metric: e.getAttribute("data-metric"), width: r.width, height: r.height,
            lines: e.querySelectorAll("polyline").length};
  })));
</script></body>"""


def browse(page: Path, tmp_path: Path) -> tuple[list[dict[str, object]], Path]:
    """Open ``page`` in headless Chromium: each chart's laid-out size, and a screenshot."""
    assert CHROMIUM is not None
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE))
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    env = {**os.environ, "HOME": str(tmp_path)}  # its profile, not the user's
    dom = subprocess.run(
        [*base, "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    found = re.search(r'data-charts="([^"]*)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    charts = json.loads(found.group(1).replace("&quot;", '"'))
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1100,1300", page.as_uri()],
        capture_output=True, timeout=60, env=env, check=True,
    )  # fmt: skip
    return charts, shot


def curve_pixels(shot: Path, rgb: tuple[int, int, int]) -> int:
    """How many pixels of the screenshot are (about) the colour ``rgb``."""
    image = pytest.importorskip("matplotlib.image").imread(str(shot))
    pixels = (image[..., :3] * 255).round()
    near = (abs(pixels - rgb) <= 40).all(axis=-1)
    return int(near.sum())


@needs_torch
@needs_chromium
@pytest.mark.torch
def test_a_runs_report_renders_in_a_browser(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SCRIPT)
    proc = cli("run", "--wait", "dist.ddp", "-j", "1x2", "--script", "m.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.splitlines()[0]

    made = cli("report", handle, "-o", "r.html", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stderr.startswith("distspec report: wrote r.html (4 chart(s), ")
    page = tmp_path / "r.html"
    text = page.read_text()
    # Self-contained: nothing fetched, no script.
    assert not re.search(r"<script|\bsrc=|<link|https?://(?!www\.w3\.org/2000/svg)", text)
    # The last values, as recorded: loss is the mean of ranks (step + r), top the max.
    last = re.search(r"<h2>Last values</h2><table>(.*?)</table>", text, re.S)
    assert last is not None
    cells = re.findall(r"<t[dh][^>]*>([^<]*)</t[dh]>", last.group(1))
    assert cells[:5] == ["state", "loss", "top", "lr", "bad"]
    assert cells[6:12] == ["SUCCEEDED", "20.5", "21", "2", "1", "20"]
    # The timeline and the provenance are there.
    assert "<h2>Timeline</h2>" in text and "process group up" in text
    assert "<h2>Provenance</h2>" in text and "dist.ddp -j 1x2 --script m.py" in text

    charts, shot = browse(page, tmp_path)
    assert [c["metric"] for c in charts[:4]] == ["loss", "top", "lr", "bad"]
    for chart in charts:
        assert chart["width"] > 100 and chart["height"] > 50, chart
    assert charts[0]["lines"] == 1
    assert charts[3]["lines"] == 2  # bad: a gap at step 5's NaN
    assert curve_pixels(shot, (0, 114, 178)) > 500  # the first curve's colour


@needs_chromium
def test_a_sweeps_report_overlays_its_points(state_dir: Path, tmp_path: Path) -> None:
    handle = run_sweep(tmp_path)
    made = cli("report", handle, "-o", "sweep.html", "-m", "loss", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    page = tmp_path / "sweep.html"
    text = page.read_text()
    legend = re.findall(r'<i class="swatch"[^>]*></i>([^<]*)</span>', text)
    assert legend == ["lr=0.1", "lr=0.5", "lr=0.2"]
    points = re.search(r"<h2>Points</h2>.*?<table>(.*?)</table>", text, re.S)
    assert points is not None
    rows = re.findall(r"<tr><td>(lr=[\d.]+)</td><td>SUCCEEDED</td><td class='num'>([^<]*)<", text)
    assert rows == [("lr=0.5", "0.03846"), ("lr=0.2", "0.09091"), ("lr=0.1", "0.1667")]

    charts, shot = browse(page, tmp_path)
    assert len(charts) == 1 and charts[0]["lines"] == 3
    assert charts[0]["width"] > 100 and charts[0]["height"] > 50
    for colour in [(0, 114, 178), (230, 159, 0), (0, 158, 115)]:  # one per point
        assert curve_pixels(shot, colour) > 100, colour


def test_bad_reports_are_one_line_and_write_nothing(state_dir: Path, tmp_path: Path) -> None:
    proc = cli("run", "--wait", "utils.sh", "--", "echo hi", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.splitlines()[0]
    (tmp_path / "adir").mkdir()
    os.mkfifo(tmp_path / "fifo.html")
    cases = [
        (["-o", "missing/r.html"], "the folder"),
        (["-o", "adir"], "is a folder"),
        (["-o", "fifo.html"], "is not a regular file"),  # no hang on the pipe
        (["-o", "/dev/null"], "is not a regular file"),  # never renamed over a device
        (["-m", "loss", "-o", "r.html"], "recorded no metric 'loss'; it recorded: nothing"),
    ]
    for extra, said in cases:
        got = cli("report", handle, *extra, cwd=tmp_path)
        assert got.returncode == 2, got.stderr
        assert len(got.stderr.strip().splitlines()) == 1 and said in got.stderr, got.stderr
    unknown = cli("report", "local_cwd://distspec/nope-12345678", "-o", "r.html", cwd=tmp_path)
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "missing").exists()
    # A run without metrics still gets its page: the state, the timeline, no charts.
    plain = cli("report", handle, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    written = tmp_path / (handle.rsplit("/", 1)[1] + ".html")
    assert "No metrics recorded" in written.read_text()
    assert "no metrics recorded" in plain.stderr
