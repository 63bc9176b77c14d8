"""`scripts/sim_rendezvous` still runs, prints its table and writes its JSON.

A check that the simulation has not rotted, not a benchmark: nothing here looks at
a time, except the fit, which is checked on made-up points.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "scripts" / "sim_rendezvous"


def load_sim() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("sim_rendezvous", str(SIM))
    spec = importlib.util.spec_from_loader("sim_rendezvous", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_fit_recovers_a_line_and_a_power() -> None:
    sim = load_sim()
    line = sim.fit([(16, 1.0 + 0.5 * 16), (64, 1.0 + 0.5 * 64), (256, 1.0 + 0.5 * 256)])
    assert line["a"] == pytest.approx(1.0) and line["b"] == pytest.approx(0.5)
    power = sim.fit([(n, 0.01 * n**2) for n in (16, 64, 256)])
    assert power["c"] == pytest.approx(0.01) and power["k"] == pytest.approx(2.0)
    assert sim.fit([(16, 1.0)]) is None


def test_settings_are_distspecs() -> None:
    sim = load_sim()
    assert sim.settings("static", 16) == {"timeout": 900}
    assert sim.settings("static", 4096) == {"timeout": 1608}
    assert sim.settings("c10d", 4096) == {"join_timeout": 1608, "read_timeout": 160}


def test_importing_it_is_cheap() -> None:
    code = (
        "import importlib.machinery as m, importlib.util as u, sys;"
        f"l = m.SourceFileLoader('sim', {str(SIM)!r});"
        "s = u.spec_from_loader('sim', l); l.exec_module(u.module_from_spec(s));"
        "print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_eight_nodes_both_backends(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the simulation runs torch's rendezvous code")
    out = tmp_path / "sim.json"
    proc = subprocess.run(
        [sys.executable, str(SIM), "--nodes", "4", "8", "--nproc-per-node", "2",
         "--max-seconds", "60", "--json", str(out)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    got = [(r["backend"], r["nodes"], r["failed"]) for r in data["results"]]
    assert got == [("static", 4, 0), ("static", 8, 0), ("c10d", 4, 0), ("c10d", 8, 0)]
    for r in data["results"]:
        assert set(r["phases"]) == {"rendezvous", "ranks", "barrier"}
        assert r["seconds"] == max(r["phases"].values()) >= 0
    assert set(data["fits"]) == {"static", "c10d"}
    assert all(set(f) == {"a", "b", "c", "k"} for f in data["fits"].values())
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| backend | nodes |") and len(rows) == 1 + 4
    assert proc.stdout.count("fit ") == 2


def test_help() -> None:
    proc = subprocess.run(
        [sys.executable, str(SIM), "--help"], capture_output=True, text=True, check=True
    )
    assert "--nodes" in proc.stdout and "--json" in proc.stdout
