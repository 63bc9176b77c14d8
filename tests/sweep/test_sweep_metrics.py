"""A sweep's points record metrics: the sweep's table shows each point's last value of
the main metric, ``describe --sort`` orders the points by any metric (numbers
compared), ``--json`` carries them; a metric no point recorded is one line, exit 2."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from tests.sweep.test_sweep_cli import cli

#: Point lr records 50 steps: loss 1 / (1 + lr * step), acc lr * step / 10.
SCRIPT = """\
import sys
from distspec.runtime import log
lr = float(sys.argv[1])
for step in range(1, 51):
    log(step=step, loss=1.0 / (1 + lr * step), acc=lr * step / 10)
"""


def run_sweep(tmp_path: Path) -> str:
    """Run the three-point sweep; its handle."""
    (tmp_path / "m.py").write_text(SCRIPT)
    command = f"{shlex.quote(sys.executable)} m.py {{{{lr}}}}"
    proc = cli(
        "run", "--wait", "--no-log", "--sweep", "lr=0.1,0.5,0.2", "utils.sh", "--", command,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # The end-of-sweep table has the main metric's last value per point.
    head = next(line for line in proc.stderr.splitlines() if line.startswith("POINT"))
    assert head.split() == ["POINT", "VALUES", "STATE", "TIME", "LOSS", "HANDLE"]
    return proc.stdout.split()[0]


def test_the_sweep_table_shows_and_sorts_by_a_metric(state_dir: Path, tmp_path: Path) -> None:
    handle = run_sweep(tmp_path)
    table = cli("describe", handle, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[2:]]
    # In point order, with the last loss: 1 / (1 + 50 lr).
    assert [(r[1], r[4]) for r in rows] == [
        ("lr=0.1", "0.1667"),
        ("lr=0.5", "0.03846"),
        ("lr=0.2", "0.09091"),
    ]

    by_loss = cli("describe", handle, "--sort", "loss", cwd=tmp_path)
    assert [line.split()[1] for line in by_loss.stdout.splitlines()[2:]] == [
        "lr=0.5",
        "lr=0.2",
        "lr=0.1",
    ]
    by_acc = cli("describe", handle, "--sort=-acc", cwd=tmp_path)
    rows = [line.split() for line in by_acc.stdout.splitlines()[1:]]
    assert rows[0][4] == "ACC"
    assert [(r[1], r[4]) for r in rows[1:]] == [
        ("lr=0.5", "2.5"),
        ("lr=0.2", "1"),
        ("lr=0.1", "0.5"),
    ]

    described = json.loads(cli("describe", handle, "--json", "--sort", "loss", cwd=tmp_path).stdout)
    assert [p["index"] for p in described["points"]] == [1, 2, 0]
    assert [p["metrics"]["acc"] for p in described["points"]] == [2.5, 1.0, 0.5]

    unknown = cli("describe", handle, "--sort", "accuracy", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().endswith(
        "no point of " + handle + " recorded a metric 'accuracy'; they recorded: acc, loss"
    )
    point = described["points"][0]["handle"]
    not_a_sweep = cli("describe", point, "--sort", "loss", cwd=tmp_path)
    assert not_a_sweep.returncode == 2
    assert not_a_sweep.stderr.strip().endswith(
        f"--sort orders a sweep's points; {point} is not a sweep"
    )
