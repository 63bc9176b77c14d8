"""``list`` (newest first, times, --state, --limit) and ``prune`` (never a running run)
on real local runs, and on a state directory of 1,000 runs (copies of a real ended
run's directory with their times moved back; the benchmark is scripts/bench_list)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from distspec.schedulers.local.files import read_json, write_json_atomic


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run(cwd: Path, *args: str) -> str:
    proc = cli("run", *args, cwd=cwd)
    assert proc.returncode in (0, 7), proc.stderr
    return proc.stdout.split()[0]


def test_list_and_prune_real_runs(state_dir: Path, tmp_path: Path) -> None:
    ok = run(tmp_path, "--wait", "--no-log", "utils.sh", "--", "true")
    bad = run(tmp_path, "--wait", "--no-log", "utils.sh", "--", "exit 7")
    running = run(tmp_path, "utils.sh", "--", "exec sleep 600")
    try:
        rows = json.loads(cli("list", "--json", cwd=tmp_path).stdout)
        assert [r["handle"] for r in rows] == [running, bad, ok]  # newest first
        assert rows[0]["state"] == "RUNNING" and rows[0]["ended"] is None
        assert rows[2]["submitted"] <= rows[1]["submitted"] <= rows[0]["submitted"]
        assert rows[2]["duration"] >= 0
        table = cli("list", cwd=tmp_path).stdout.splitlines()
        assert table[0].split() == ["HANDLE", "STATE", "SUBMITTED", "DURATION", "NAME"]
        assert table[1].startswith(running) and "RUNNING" in table[1]
        assert cli("list", "-n", "1", cwd=tmp_path).stdout.count("local_cwd://") == 1
        failed = cli("list", "--state", "failed", cwd=tmp_path).stdout
        assert bad in failed and ok not in failed and running not in failed
        ended = cli("list", "--state", "ended", cwd=tmp_path).stdout
        assert bad in ended and ok in ended and running not in ended
        assert cli("list", "--state", "done", cwd=tmp_path).returncode == 2

        dry = cli("prune", "--dry-run", cwd=tmp_path)
        assert dry.returncode == 0, dry.stderr
        assert f"would delete {ok}" in dry.stdout and f"would delete {bad}" in dry.stdout
        assert running not in dry.stdout
        assert len(list((state_dir / "local_cwd").iterdir())) == 3
        assert "deleted 0 run(s)" in cli("prune", "--older-than", "1h", cwd=tmp_path).stdout
        only_failed = cli("prune", "--state", "failed", cwd=tmp_path).stdout
        assert f"deleted {bad}" in only_failed and ok not in only_failed
        everything = cli("prune", cwd=tmp_path).stdout
        assert f"deleted {ok}" in everything and running not in everything
        left = [p.name for p in (state_dir / "local_cwd").iterdir()]
        assert left == [running.rsplit("/", 1)[1]]
        assert cli("status", running, cwd=tmp_path).stdout.strip() == "RUNNING"
        assert cli("prune", "--state", "running", cwd=tmp_path).returncode == 2
    finally:
        cli("cancel", running, cwd=tmp_path)


def make_runs(state_dir: Path, template: Path, count: int, old: int) -> list[str]:
    """``count`` copies of the ended run ``template``, one minute apart, the ``old``
    oldest of them ended 30 days ago; returns their ids, newest first."""
    now = time.time()
    ids = []
    for i in range(count):
        app_id = f"copy-{i:08x}"
        target = state_dir / "local_cwd" / app_id
        shutil.copytree(template, target)
        data = read_json(str(target / "state.json"))
        data["app_id"] = app_id
        data["created"] = now - 60 * (count - i) - (30 * 86400 if i < old else 0)
        data["ended"] = data["created"] + 1
        write_json_atomic(str(target / "state.json"), data)
        ids.append(app_id)
    return ids[::-1]


def test_a_thousand_runs_stay_usable(state_dir: Path, tmp_path: Path) -> None:
    real = run(tmp_path, "--wait", "--no-log", "utils.echo", "--msg", "hi")
    template = tmp_path / "template"
    ignore = shutil.ignore_patterns("alive.fifo")  # the supervisor's FIFO: not a file
    shutil.copytree(state_dir / "local_cwd" / real.rsplit("/", 1)[1], template, ignore=ignore)
    shutil.rmtree(state_dir / "local_cwd")
    ids = make_runs(state_dir, template, 1000, old=400)
    newest = cli("list", "-n", "5", "--json", cwd=tmp_path)
    assert newest.returncode == 0, newest.stderr
    assert [r["app_id"] for r in json.loads(newest.stdout)] == ids[:5]
    assert cli("list", cwd=tmp_path).stdout.count("\n") == 1001  # header + every run
    dry = cli("prune", "--older-than", "7d", "--dry-run", cwd=tmp_path).stdout
    assert dry.splitlines()[-1] == "would delete 400 run(s)"
    pruned = cli("prune", "--older-than", "7d", cwd=tmp_path).stdout
    assert pruned.splitlines()[-1] == "deleted 400 run(s)"
    assert sorted(p.name for p in (state_dir / "local_cwd").iterdir()) == sorted(ids[:600])
