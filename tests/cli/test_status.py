"""``status``/``describe`` on real local jobs: what they show, ``--json``, and the
``--exit-status`` codes scripts rely on; the Python API's ``run_component`` and
``wait(timeout=...)``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from distspec.runner import Runner
from tests.conftest import FakeCommands


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_wait(cwd: Path, *args: str) -> str:
    proc = cli("run", "--wait", "--no-log", *args, cwd=cwd)
    return proc.stdout.split()[0]


def test_describe_shows_times_command_logs_and_run_dir(state_dir: Path, tmp_path: Path) -> None:
    handle = run_wait(tmp_path, "utils.sh", "--num_replicas", "2", "--", "echo hi")
    app_id = handle.rsplit("/", 1)[1]
    run_dir = state_dir / "local_cwd" / app_id
    out = cli("describe", handle, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for label in ("submitted:", "started:", "ended:", "duration:", "supervisor:"):
        assert f"\n{label}" in text, text
    assert f"run dir:    {run_dir}" in text
    assert "  command: sh -c 'echo hi'" in text
    assert f"    log: {run_dir}/logs/sh-1.log" in text
    data = json.loads(cli("describe", handle, "--json", cwd=tmp_path).stdout)
    assert data["state"] == "SUCCEEDED" and data["location"] == str(run_dir)
    assert data["ended"] >= data["started"] >= data["submitted"] > 0
    assert data["duration"] == pytest.approx(data["ended"] - data["started"])
    assert data["roles"][0]["command"] == "sh -c 'echo hi'"
    assert [r["log"] for r in data["roles"][0]["replicas"]] == [
        f"{run_dir}/logs/sh-0.log",
        f"{run_dir}/logs/sh-1.log",
    ]


def test_exit_status_tells_the_state(state_dir: Path, tmp_path: Path) -> None:
    ok = run_wait(tmp_path, "utils.sh", "--", "true")
    bad = run_wait(tmp_path, "utils.sh", "--", "exit 7")
    running = cli("run", "utils.sh", "--", "exec sleep 600", cwd=tmp_path).stdout.strip()
    try:
        for verb in ("status", "describe"):
            assert cli(verb, ok, cwd=tmp_path).returncode == 0
            assert cli(verb, bad, cwd=tmp_path).returncode == 0  # without the flag: described
            assert cli(verb, ok, "--exit-status", cwd=tmp_path).returncode == 0
            assert cli(verb, bad, "--exit-status", cwd=tmp_path).returncode == 1
            assert cli(verb, running, "--exit-status", cwd=tmp_path).returncode == 4
    finally:
        assert cli("cancel", running, cwd=tmp_path).returncode == 0
    assert cli("status", running, "--exit-status", cwd=tmp_path).returncode == 3
    missing = cli("status", "local_cwd://distspec/nothing-00000000", "--exit-status", cwd=tmp_path)
    assert missing.returncode == 2


def test_runner_run_component_and_wait_timeout(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = Runner()
    handle = runner.run_component("utils.sh", ["--", "exec sleep 600"])
    try:
        with pytest.raises(TimeoutError, match="still RUNNING after 0.2s"):
            runner.wait(handle, timeout=0.2)
        assert not runner.status(handle).is_terminal  # the timeout left it running
    finally:
        runner.cancel(handle)
    assert runner.wait(handle, timeout=30).state.value == "CANCELLED"
    done = runner.run_component("utils.echo", ["--msg", "api"], "local_cwd")
    assert runner.wait(done).state.value == "SUCCEEDED"
    assert [ln.text for ln in runner.log_lines(done)] == ["api"]


def test_slurm_describe_reports_times_from_sacct_and_scontrol(
    fake_commands: FakeCommands, tmp_path: Path
) -> None:
    from datetime import datetime

    from distspec.schedulers.slurm import SlurmScheduler

    def at(text: str) -> float:
        return datetime.fromisoformat(text).timestamp()

    sched = SlurmScheduler(run_cmd=fake_commands, state_dir=tmp_path)
    fake_commands.on(
        "sacct",
        stdout="42|train|COMPLETED|0:0|n0|None|2026-01-02T03:04:05|2026-01-02T03:04:15|"
        "2026-01-02T03:05:15\n",
    )
    status = sched.describe("42")
    assert status is not None and status.native_id == "42"
    assert (status.submitted, status.started, status.ended) == (
        at("2026-01-02T03:04:05"),
        at("2026-01-02T03:04:15"),
        at("2026-01-02T03:05:15"),
    )
    assert status.duration == 60.0
    # scontrol (no accounting): a running job's EndTime is its time limit, not an end.
    fresh = SlurmScheduler(run_cmd=fake_commands, state_dir=tmp_path)
    fake_commands.on(
        "sacct", returncode=1, stderr="sacct: error: Slurm accounting storage is disabled\n"
    )
    fake_commands.on(
        "scontrol",
        stdout="JobId=43 JobName=train JobState=RUNNING Reason=None ExitCode=0:0 NodeList=n0 "
        "SubmitTime=2026-01-02T03:04:05 StartTime=2026-01-02T03:04:06 "
        "EndTime=2026-01-03T03:04:06 StdOut=/x/train-43.out\n",
    )
    running = fresh.describe("43")
    assert running is not None
    assert (running.started, running.ended) == (at("2026-01-02T03:04:06"), None)
