"""``distspec plot``: real local runs record metrics with ``distspec.runtime.log``, and
their curves are drawn in the terminal (plotext) and into pictures (matplotlib); the
numbers drawn are the numbers recorded; sweeps, attempts, gaps, a million records and
every mistake a user can make."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distspec.cli._histories import (
    History,
    by_attempt,
    decimate,
    load_histories,
    series,
    shared_prefix,
)
from distspec.metrics import Record, parse_line, read_records
from tests.cli.test_follow import Terminal

#: A job that records ``loss = SCALE / step`` and ``acc = step / STEPS`` for steps
#: FIRST..STEPS, with NaN at step 5 and infinity at step 6 when asked.
SCRIPT = """\
import math, sys
from distspec.runtime import log
scale, steps = float(sys.argv[1]), int(sys.argv[2])
first = int(sys.argv[3]) if len(sys.argv) > 3 else 1
gaps = "gaps" in sys.argv
for step in range(first, steps + 1):
    loss = scale / step
    if gaps and step == 5:
        loss = math.nan
    if gaps and step == 6:
        loss = math.inf
    log(step=step, loss=loss, acc=step / steps)
"""

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def record(tmp_path: Path, *args: str) -> str:
    """Run the script as a real local job (``utils.sh``) with ``args``; its handle."""
    script = tmp_path / "m.py"
    if not script.exists():
        script.write_text(SCRIPT)
    command = " ".join([sys.executable, "m.py", *args])
    proc = cli("run", "--wait", "--no-log", "utils.sh", "--", command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[0]


def histories(*handles: str) -> list[History]:
    from distspec.cli._shared import make_runner

    return load_histories(make_runner(), handles)


def chart_lines(text: str) -> tuple[list[str], list[str]]:
    """The y tick labels (left of ┤) and the x tick labels (the line under └) of a
    terminal chart."""
    lines = text.splitlines()
    yticks = [line.split("┤")[0].strip() for line in lines if "┤" in line]
    below = max(i for i, line in enumerate(lines) if "└" in line) + 1  # the axis, lowest
    return [t for t in yticks if t], lines[below].split()


# -- in the terminal ----------------------------------------------------------------------


def test_a_runs_curve_in_the_terminal(state_dir: Path, tmp_path: Path) -> None:
    handle = record(tmp_path, "1", "200")
    app_id = handle.rsplit("/", 1)[1]
    proc = cli("plot", handle, "--width", "80", "--height", "20", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    assert "\x1b[" not in out  # not a terminal: no colours
    lines = out.splitlines()
    assert len(lines) == 20 and max(len(line) for line in lines) <= 80
    # loss from 1 to 0.005 spans two orders of magnitude: a log scale, in decades.
    assert lines[0].strip() == "loss (log scale)"
    yticks, xticks = chart_lines(out)
    assert yticks == ["1", "0.1", "0.01"]
    assert xticks == ["50", "100", "150", "200"]
    assert lines[-1].strip() == "step"
    assert f"▚ {app_id}" in out  # the legend: the run's app id

    linear = cli("plot", handle, "--linear", "--width", "80", "--height", "20", cwd=tmp_path)
    assert linear.returncode == 0, linear.stderr
    assert linear.stdout.splitlines()[0].strip() == "loss"
    assert chart_lines(linear.stdout)[0] == ["1", "0.8", "0.6", "0.4", "0.2"]

    # acc, named, and the size from the terminal's ($COLUMNS/$LINES, as a shell sets).
    acc = cli(
        "plot", handle, "-m", "acc", "--linear", cwd=tmp_path, env={"COLUMNS": "64", "LINES": "16"}
    )
    assert acc.returncode == 0, acc.stderr
    lines = acc.stdout.splitlines()
    assert lines[0].strip() == "acc" and len(lines) == 14
    assert max(len(line) for line in lines) <= 64
    assert chart_lines(acc.stdout)[0] == ["1", "0.8", "0.6", "0.4", "0.2"]


@pytest.mark.parametrize("no_color", [False, True])
def test_colours_on_a_terminal_unless_no_color(
    no_color: bool, state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = record(tmp_path, "1", "20")
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    term = Terminal(["plot", handle, "--width", "70", "--height", "15"], tmp_path)
    assert term.wait() == 0, term.seen
    assert ("\x1b[" in term.seen) is not no_color, term.seen
    assert "loss" in term.seen and handle.rsplit("/", 1)[1] in term.seen


# -- into a picture -----------------------------------------------------------------------


def test_a_runs_curve_as_a_picture(state_dir: Path, tmp_path: Path) -> None:
    import matplotlib.image

    handle = record(tmp_path, "1", "200")
    out = tmp_path / "loss.png"
    proc = cli("plot", handle, "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    pixels = matplotlib.image.imread(str(out))
    assert pixels.shape[:2] == (600, 1000)
    rgb = pixels[:, :, :3]
    assert rgb.std() > 0.05  # not blank
    # The curve, in matplotlib's first colour (C0, #1f77b4), inside the axes.
    c0 = (0x1F / 255, 0x77 / 255, 0xB4 / 255)
    near = sum(abs(rgb[:, :, k] - c0[k]) < 0.08 for k in range(3)) == 3
    assert near[60:540, 100:950].sum() > 500

    for ext, magic in (("svg", b"<?xml"), ("pdf", b"%PDF")):
        other = tmp_path / f"loss.{ext}"
        proc = cli(
            "plot", handle, "-o", str(other), "--width", "500", "--height", "300", cwd=tmp_path
        )
        assert proc.returncode == 0, proc.stderr
        assert other.read_bytes().startswith(magic)


def test_the_picture_holds_the_numbers_recorded(state_dir: Path, tmp_path: Path) -> None:
    from distspec.cli.plot import curves, figure

    handle = record(tmp_path, "2", "30")
    got = histories(handle)
    assert [(h.handle, h.state, h.params) for h in got] == [(handle, "SUCCEEDED", {})]
    drawn = curves(got, ["loss", "acc"])
    assert [c.label for c in drawn] == ["loss", "acc"]  # one run, two metrics
    fig = figure(drawn, title="loss, acc", xlabel="step", ylabel="value", log=False)
    ax = fig.axes[0]
    assert ax.get_title() == "loss, acc" and ax.get_xlabel() == "step"
    assert ax.get_yscale() == "linear"
    loss, acc = ax.get_lines()
    assert list(loss.get_xdata()) == list(range(1, 31))
    assert list(loss.get_ydata()) == pytest.approx([2 / s for s in range(1, 31)])
    assert list(acc.get_ydata()) == pytest.approx([s / 30 for s in range(1, 31)])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["loss", "acc"]
    assert figure(drawn, title="", xlabel="", ylabel="", log=True).axes[0].get_yscale() == "log"


# -- several runs, a sweep ------------------------------------------------------------------


def test_a_sweeps_points_are_labelled_by_their_values(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(SCRIPT)
    proc = cli(
        "run",
        "--wait",
        "--no-log",
        "--sweep",
        "lr=0.1,0.2",
        "--sweep",
        "n=20",
        "utils.sh",
        "--",
        f"{sys.executable} m.py {{{{lr}}}} {{{{n}}}}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    sweep = proc.stdout.splitlines()[0]
    got = histories(sweep)
    assert [h.label for h in got] == ["lr=0.1", "lr=0.2"]  # n does not vary
    assert [h.params for h in got] == [{"lr": "0.1", "n": "20"}, {"lr": "0.2", "n": "20"}]
    assert [h.state for h in got] == ["SUCCEEDED", "SUCCEEDED"]
    assert [len(h.records) for h in got] == [20, 20]
    assert series(got[1].records, "loss")[1] == pytest.approx([0.2 / s for s in range(1, 21)])

    shown = cli("plot", sweep, "--width", "90", "--height", "20", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "▚ lr=0.1" in shown.stdout and "• lr=0.2" in shown.stdout  # a marker each

    # A point and a run of its own, two metrics: "label: metric".
    own = record(tmp_path, "3", "20")
    got = histories(sweep, got[0].handle, own)  # the point given twice counts once
    assert [h.label for h in got] == ["lr=0.1", "lr=0.2", own.rsplit("/", 1)[1]]
    from distspec.cli.plot import curves

    labels = [c.label for c in curves(got, ["loss", "acc"])]
    assert labels[:2] == ["lr=0.1: loss", "lr=0.1: acc"] and len(labels) == 6
    png = tmp_path / "sweep.png"
    both = cli("plot", sweep, own, "-m", "loss", "-m", "acc", "-o", str(png), cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_runs_sharing_a_name_are_labelled_by_what_differs(state_dir: Path, tmp_path: Path) -> None:
    first, second = record(tmp_path, "1", "10"), record(tmp_path, "2", "10")
    got = histories(first, second)
    ids = [h.rsplit("/", 1)[1] for h in (first, second)]  # sh-1a2b3c4d
    assert [h.label for h in got] == [i.removeprefix("sh-") for i in ids]
    assert shared_prefix(["train_ddp-1a2b", "train_ddp-3c4d"]) == "train_ddp-"
    assert shared_prefix(["train-1a2b", "eval-3c4d"]) == ""
    assert shared_prefix(["train-1a2b"]) == ""
    assert shared_prefix(["a-1", "a-1"]) == "a-"
    assert shared_prefix(["run-", "run-2"]) == ""  # nothing would be left of one


# -- restarts, gaps -------------------------------------------------------------------------


def test_a_new_attempt_is_marked(state_dir: Path, tmp_path: Path) -> None:
    """A job whose workers restart (torchrun's count in the environment) and resume
    from step 10: two attempts, the second one's curve starting again at step 10."""
    from distspec.cli.plot import curves, figure, terminal_chart

    (tmp_path / "m.py").write_text(SCRIPT)
    again = f"TORCHELASTIC_RESTART_COUNT=1 {sys.executable} m.py 0.5 20 10"
    proc = cli(
        "run", "--wait", "--no-log", "utils.sh", "--",
        f"{sys.executable} m.py 1 15 && {again}",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.splitlines()[0]
    records = histories(handle)[0].records
    parts = by_attempt(records, "loss")
    assert [(a, xs[0], xs[-1], len(xs)) for a, xs, _ in parts] == [
        (0, 1.0, 15.0, 15),
        (1, 10.0, 20.0, 11),
    ]
    (curve,) = curves(histories(handle), ["loss"])
    assert curve.starts == [(1, 10.0)]
    ax = figure([curve], title="loss", xlabel="step", ylabel="loss", log=False).axes[0]
    lines = ax.get_lines()
    assert [list(line.get_xdata()) for line in lines[:2]] == [
        list(range(1, 16)),
        list(range(10, 21)),
    ]
    assert list(lines[2].get_xdata()) == [10, 10]  # the dashed line where attempt 1 starts
    assert lines[2].get_linestyle() == "--"
    assert "new attempt" in [t.get_text() for t in ax.get_legend().get_texts()]
    text = terminal_chart(
        [curve], title="loss", xlabel="step", log=False, width=70, height=16, colour=False
    )
    assert "┊ new attempt" in text
    shown = cli("plot", handle, "--width", "70", "--height", "16", cwd=tmp_path)
    assert shown.returncode == 0 and "new attempt" in shown.stdout, shown.stderr


def test_nan_and_infinity_are_gaps(state_dir: Path, tmp_path: Path) -> None:
    from distspec.cli.plot import curves, figure, terminal_chart

    handle = record(tmp_path, "1", "12", "1", "gaps")
    xs, ys = series(histories(handle)[0].records, "loss")
    assert xs == [float(s) for s in range(1, 13)]
    assert math.isnan(ys[4]) and ys[5] == math.inf  # as recorded
    drawn = curves(histories(handle), ["loss"])
    line = figure(drawn, title="", xlabel="", ylabel="", log=False).axes[0].get_lines()[0]
    shown = list(line.get_ydata())
    assert math.isnan(shown[4]) and math.isnan(shown[5])  # not drawn: gaps
    assert shown[:4] + shown[6:] == pytest.approx([1 / s for s in (1, 2, 3, 4, *range(7, 13))])
    text = terminal_chart(
        drawn, title="loss", xlabel="step", log=False, width=60, height=14, colour=False
    )
    assert "inf" not in text and "nan" not in text
    for args in ([], ["-o", str(tmp_path / "gaps.png")], ["--log"]):
        proc = cli("plot", handle, *args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr

    # A metric that is never a number that can be drawn: one line, exit 1.
    (tmp_path / "bad.py").write_text(
        "import math\nfrom distspec.runtime import log\n"
        "for s in range(3):\n    log(step=s, loss=math.nan, lr=-1.0)\n"
    )
    proc = cli(
        "run", "--wait", "--no-log", "utils.sh", "--", f"{sys.executable} bad.py", cwd=tmp_path
    )
    bad = proc.stdout.splitlines()[0]
    for metric, scale, why in (("loss", "--linear", "finite"), ("lr", "--log", "positive")):
        proc = cli("plot", bad, "-m", metric, scale, cwd=tmp_path)
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and f"no {why} value of {metric}" in proc.stderr


# -- mistakes -------------------------------------------------------------------------------


def test_mistakes_are_one_line(state_dir: Path, tmp_path: Path) -> None:
    handle = record(tmp_path, "1", "10")
    ro = tmp_path / "ro"
    ro.mkdir()

    def fails(code: int, *args: str) -> str:
        proc = cli("plot", *args, cwd=tmp_path)
        assert proc.returncode == code, (args, proc.stdout, proc.stderr)
        assert proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
        return proc.stderr

    assert "no such app: local_cwd://distspec/nope" in fails(2, "local_cwd://distspec/nope")
    assert "no such app" in fails(2, handle, "local_cwd://distspec/nope")
    assert (
        fails(2, handle, "-m", "accuracy")
        .strip()
        .endswith("recorded no metric 'accuracy'; it recorded: loss, acc")
    )
    missing = tmp_path / "no" / "such" / "dir" / "x.png"
    assert f"there is no directory {missing.parent}" in fails(2, handle, "-o", str(missing))
    assert "is a directory" in fails(2, handle, "-o", str(tmp_path))
    said = fails(2, handle, "-o", str(tmp_path / "chart.txt"))
    assert "extension .txt" in said and ".png" in said and ".svg" in said
    assert "no extension" in fails(2, handle, "-o", str(tmp_path / "chart"))
    os.mkfifo(tmp_path / "pipe.png")  # matplotlib would wait for a reader forever
    assert "is not a regular file" in fails(2, handle, "-o", str(tmp_path / "pipe.png"))
    (tmp_path / "pipe.png").unlink()
    assert "--width must be >= 1" in fails(2, handle, "--width", "0")
    assert "not allowed with argument" in fails(2, handle, "--log", "--linear")
    if os.geteuid() != 0:  # root writes anywhere
        ro.chmod(0o500)
        assert "permission denied" in fails(2, handle, "-o", str(ro / "x.png"))
    assert not list(tmp_path.glob("**/*.png"))


def test_runs_without_metrics(state_dir: Path, tmp_path: Path) -> None:
    handle = record(tmp_path, "1", "10")
    proc = cli("run", "--wait", "--no-log", "utils.sh", "--", "true", cwd=tmp_path)
    empty = proc.stdout.splitlines()[0]
    alone = cli("plot", empty, cwd=tmp_path)
    assert alone.returncode == 1 and alone.stdout == ""
    # The wording of `distspec metrics`.
    said = cli("metrics", empty, cwd=tmp_path).stderr
    assert alone.stderr == said.replace("distspec metrics:", "distspec plot:")
    assert "metrics.jsonl does not exist" in alone.stderr
    both = cli("plot", empty, handle, "--width", "60", cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    assert both.stderr == f"distspec plot: {empty} recorded no metrics; drawing the others\n"
    assert "loss" in both.stdout
    proc = cli("run", "--wait", "--no-log", "utils.sh", "--", "true", cwd=tmp_path)
    none = cli("plot", empty, proc.stdout.splitlines()[0], cwd=tmp_path)
    assert none.returncode == 1 and none.stdout == ""
    assert none.stderr == (
        "distspec plot: none of the 2 runs recorded metrics (a job records them with "
        "distspec.runtime.log(step=..., loss=...))\n"
    )


def test_without_the_plotting_libraries_a_hint(state_dir: Path, tmp_path: Path) -> None:
    """matplotlib missing for -o, plotext missing or too old for the terminal: one line
    that says what to install, exit 2."""
    handle = record(tmp_path, "1", "10")

    def run_without(module: object, *args: str) -> subprocess.CompletedProcess[str]:
        code = (
            "import sys, types\n"
            f"sys.modules[{module[0]!r}] = {module[1]}\n"  # type: ignore[index]
            "from distspec.cli.main import main\n"
            f"sys.exit(main({list(args)!r}))\n"
        )
        return subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
        )

    proc = run_without(("matplotlib", "None"), "plot", handle, "-o", "x.png")
    assert proc.returncode == 2
    assert "pip install 'distspec[plot]'" in proc.stderr and proc.stderr.count("\n") == 1
    proc = run_without(("plotext", "None"), "plot", handle)
    assert proc.returncode == 2 and "needs plotext" in proc.stderr
    old = "types.SimpleNamespace(__version__='5.3.2')"
    proc = run_without(("plotext", old), "plot", handle)
    assert proc.returncode == 2 and "needs plotext 6, this is plotext 5.3.2" in proc.stderr


def test_help_is_quick_and_imports_no_plotting_library(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom distspec.cli.main import main\n"
        "try:\n    main(['plot', '--help'])\nexcept SystemExit:\n    pass\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('plotext', 'matplotlib')])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert proc.stdout.splitlines()[-1] == "[]"
    assert "distspec plot local_cwd://" in proc.stdout  # the examples


# -- series, decimate, reading --------------------------------------------------------------


def test_series_takes_the_records_that_have_the_metric() -> None:
    records = [
        Record(None, 100.0, 0, {"loss": 1.0}),
        Record(None, 101.5, 0, {"lr": 0.1}),
        Record(7, 103.0, 0, {"loss": 0.5, "lr": 0.1}),
        Record(None, 110.0, 1, {"loss": math.nan}),
    ]
    xs, ys = series(records, "loss")
    assert xs == [0.0, 7.0, 3.0]  # no step: the record's index
    assert ys[:2] == [1.0, 0.5] and math.isnan(ys[2])
    assert series(records, "loss", x="time")[0] == [0.0, 3.0, 10.0]  # seconds since the first
    assert series(records, "lr") == ([1.0, 7.0], [0.1, 0.1])
    assert series(records, "acc") == ([], [])
    assert series([], "loss", x="time") == ([], [])
    with pytest.raises(ValueError, match="step, time"):
        series(records, "loss", x="wall")
    assert [(a, xs) for a, xs, _ in by_attempt(records, "loss")] == [(0, [0.0, 7.0]), (1, [3.0])]
    assert by_attempt(records, "acc") == []


def test_decimate_keeps_the_ends_and_the_extremes() -> None:
    n = 100_000
    xs = [float(i) for i in range(n)]
    ys = [
        math.sin(i / 500) + (5.0 if i == 31_337 else 0.0) - (7.0 if i == 77_777 else 0.0)
        for i in range(n)
    ]
    dx, dy = decimate(xs, ys, 2000)
    assert len(dx) <= 2000 and len(dx) > 1000
    assert dx[0] == 0.0 and dx[-1] == n - 1  # first and last
    assert dx == sorted(dx)  # in order
    assert max(dy) == max(ys) and dx[dy.index(max(dy))] == 31_337  # the spike
    assert min(dy) == min(ys) and dx[dy.index(min(dy))] == 77_777  # the dip
    assert all(ys[int(x)] == y for x, y in zip(dx, dy, strict=True))  # recorded points only
    # A gap stays a gap; short series come back whole.
    ys[50_000] = math.nan
    ys[60_000] = math.inf
    dx, dy = decimate(xs, ys, 2000)
    assert 50_000.0 in dx and math.isnan(dy[dx.index(50_000.0)])
    assert 60_000.0 in dx and dy[dx.index(60_000.0)] == math.inf
    assert max(y for y in dy if math.isfinite(y)) == max(y for y in ys if math.isfinite(y))
    assert decimate([1.0, 2.0], [3.0, 4.0]) == ([1.0, 2.0], [3.0, 4.0])
    assert decimate(xs[:9], [math.nan] * 9, 5)[0][0] == 0.0
    with pytest.raises(ValueError):
        decimate([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        decimate(xs, ys, 4)


def test_read_records_finds_what_parse_line_finds(tmp_path: Path) -> None:
    """The block-at-once reader gives what reading line by line gives, whatever the
    lines: ints and bools for numbers, strings, cut lines, two objects on one line,
    blank lines, in blocks that decode at once and blocks that do not."""
    import random

    odd = [
        '{"step": 1, "time": 2.5, "attempt": 0, "loss": 0.5}',
        '{"step": 2, "time": 2, "attempt": 0, "loss": 1, "b": true, "n": "nan", "x": "no", "l": [1]}',
        '{"step": true, "time": 2.5}',
        '{"step": null, "time": true, "attempt": true, "m": -Infinity}',
        '{"step": 1.0, "time": 2.5}',
        '{"time": "x"}',
        "[1, 2]",
        '"text"',
        "",
        "   ",
        '{"step": 1, "time"',
        '{"step": 1, "time": 1}, {"step": 2, "time": 2}',
        '{"step": 3, "time": 3, "attempt": null}',
        '  {"step": 4, "time": 4}  ',
        '{"step": 5, "time": 5, "step": 6}',
        '{"time": 7, "attempt": 2, "inf": "inf", "ninf": "-inf"}',
        '{"a": 1} {"b": 2}',
        '{"time": 1, "k": {"x": 1}}',
    ]
    good = '{"step": %d, "time": 1.5, "attempt": 0, "loss": 0.25}'
    rng = random.Random(7)
    for trial in range(40):
        lines = [good % i for i in range(rng.choice([0, 10, 5000, 9000]))]
        for _ in range(rng.randint(0, 6)):
            lines.insert(rng.randint(0, len(lines)), rng.choice(odd))
        path = tmp_path / f"m{trial}.jsonl"
        path.write_text("\n".join(lines) + rng.choice(["", "\n"]))
        want = [parse_line(line) for line in path.read_text().splitlines()]

        def rows(rs: list[Record | None]) -> str:
            return json.dumps(
                [(r.step, r.time, r.attempt, repr(type(r.attempt)), r.metrics) for r in rs if r]
            )

        assert rows(read_records(str(path))) == rows(want), lines


@pytest.mark.slow
def test_a_million_records_are_drawn_from_a_few_thousand_points(
    state_dir: Path, tmp_path: Path
) -> None:
    """A history of 1,000,000 steps (the speed is scripts/bench_metrics's business):
    each curve is handed over as at most 2,000 points that keep both ends and the
    extremes, in the terminal and in a picture."""
    from distspec.cli._histories import metrics_path
    from distspec.cli._shared import make_runner
    from distspec.cli.plot import MAX_POINTS, curves, figure, terminal_chart

    handle = record(tmp_path, "1", "3")
    path = metrics_path(make_runner(), handle)
    assert path is not None
    n = 1_000_000
    with open(path, "w") as f:
        f.writelines(
            f'{{"step": {i}, "time": {1e9 + i}, "attempt": 0, "loss": {1 / (i + 1)!r}}}\n'
            for i in range(n)
        )
        f.write('{"step": 1000000, "time": 2e9, "attempt": 0, "loss": 9.5}\n')  # a last spike
    got = histories(handle)
    assert len(got[0].records) == n + 1
    (curve,) = curves(got, ["loss"])
    ((attempt, xs, ys),) = curve.segments
    assert attempt == 0 and len(xs) <= MAX_POINTS
    assert (xs[0], ys[0]) == (0.0, 1.0) and (xs[-1], ys[-1]) == (1e6, 9.5)
    assert min(ys) == 1 / n
    ax = figure([curve], title="loss", xlabel="step", ylabel="loss", log=True).axes[0]
    assert len(ax.get_lines()[0].get_xdata()) == len(xs)
    text = terminal_chart(
        [curve], title="loss", xlabel="step", log=True, width=100, height=25, colour=False
    )
    assert chart_lines(text)[1] == ["0", "200000", "400000", "600000", "800000", "1000000"]
