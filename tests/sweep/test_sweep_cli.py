"""``distspec run --sweep`` on local_cwd, with real processes: each point runs with its
own values, the sweep's handle works with status/describe/list/cancel, a failing point
fails the sweep and ``rerun --failed`` runs it alone; and the bad inputs (one line,
exit 2, nothing submitted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def runs(state_dir: Path) -> list[Path]:
    folder = state_dir / "local_cwd"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_sweep_runs_every_point_with_its_values(state_dir: Path, tmp_path: Path) -> None:
    script = (
        'echo "point $DISTSPEC_SWEEP_INDEX lr={{lr}} seed={{seed}} env=$DISTSPEC_SWEEP_lr"; '
        '[ "{{lr}}" = 0.2 ] && [ "{{seed}}" = 1 ] && exit 3; true'
    )
    proc = cli(
        "run", "--wait", "--sweep", "lr=0.1,0.2", "--sweep", "seed=range:0:2",
        "utils.sh", "--", script, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    handle = proc.stdout.split()[0]
    assert handle.startswith("local_cwd://") and "/sweep-sh-" in handle
    # the summary: every point, its values and state; the failing one named with the fix
    assert "lr=0.2 seed=1  FAILED" in proc.stderr
    assert proc.stderr.count("SUCCEEDED") >= 3
    assert f"distspec rerun --failed {handle}" in proc.stderr

    described = json.loads(cli("describe", "--json", handle, cwd=tmp_path).stdout)
    assert described["state"] == "FAILED"
    points = described["points"]
    assert [p["values"] for p in points] == [
        {"lr": "0.1", "seed": "0"},
        {"lr": "0.1", "seed": "1"},
        {"lr": "0.2", "seed": "0"},
        {"lr": "0.2", "seed": "1"},
    ]
    for i, point in enumerate(points):
        log = cli("log", point["handle"], cwd=tmp_path).stdout
        v = point["values"]
        assert f"point {i} lr={v['lr']} seed={v['seed']} env={v['lr']}" in log, log
    assert [p["status"]["state"] for p in points] == ["SUCCEEDED"] * 3 + ["FAILED"]

    status = cli("status", "--exit-status", handle, cwd=tmp_path)
    assert status.returncode == 1 and status.stdout.startswith("FAILED: 4 points")
    listed = cli("list", cwd=tmp_path).stdout.splitlines()
    assert len(listed) == 2 and listed[1].startswith(handle), listed  # one line for the sweep
    assert "sweep of 4 points: 1 FAILED, 3 SUCCEEDED" in listed[1]
    expanded = cli("list", "-x", "-q", cwd=tmp_path).stdout.split()
    assert expanded[0] == handle and sorted(expanded[1:]) == sorted(p["handle"] for p in points)

    again = cli("rerun", "--failed", handle, "--wait", cwd=tmp_path)
    assert again.returncode == 1, again.stderr  # the same point fails again
    assert "rerunning 1 of 4 points" in again.stderr
    new = json.loads(cli("describe", "--json", again.stdout.split()[0], cwd=tmp_path).stdout)
    assert [p["values"] for p in new["points"]] == [{"lr": "0.2", "seed": "1"}]
    assert len(runs(state_dir)) == 5


def test_cancel_a_sweep_cancels_every_point(state_dir: Path, tmp_path: Path) -> None:
    proc = cli("run", "--sweep", "n=1,2,3", "utils.sh", "--", "sleep 60 # {{n}}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.strip()
    done = cli("cancel", handle, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    waited = cli("status", handle, cwd=tmp_path)
    described = json.loads(cli("describe", "--json", handle, cwd=tmp_path).stdout)
    states = {p["status"]["state"] for p in described["points"]}
    assert states == {"CANCELLED"}, (states, waited.stdout)


def test_cancel_one_point_leaves_the_others(state_dir: Path, tmp_path: Path) -> None:
    proc = cli("run", "--sweep", "n=1,2", "utils.sh", "--", "sleep 60 # {{n}}", cwd=tmp_path)
    handle = proc.stdout.strip()
    points = json.loads(cli("describe", "--json", handle, cwd=tmp_path).stdout)["points"]
    try:
        assert cli("cancel", points[0]["handle"], cwd=tmp_path).returncode == 0
        after = json.loads(cli("describe", "--json", handle, cwd=tmp_path).stdout)["points"]
        assert after[0]["status"]["state"] == "CANCELLED"
        assert after[1]["status"]["state"] in ("PENDING", "RUNNING")
    finally:
        cli("cancel", handle, cwd=tmp_path)


def test_dry_run_shows_the_first_point_and_submits_nothing(state_dir: Path, tmp_path: Path) -> None:
    proc = cli(
        "run", "--dryrun", "--sweep", "x=a,b,c", "utils.sh", "--", "echo {{x}}", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "# --- point 0 of 3 (x=a) ---" in proc.stdout
    assert '"echo a"' in proc.stdout and "and 2 more job(s), one per point" in proc.stdout
    data = json.loads(
        cli(
            "run", "--dryrun", "--json", "--zip", "--sweep", "x=a,b", "--sweep", "y=1,2",
            "utils.sh", "--", "echo {{x}}{{y}}", cwd=tmp_path,
        ).stdout
    )  # fmt: skip
    assert data["points"] == [{"x": "a", "y": "1"}, {"x": "b", "y": "2"}]
    assert data["arrays"] is False and len(data["requests"]) == 2
    assert runs(state_dir) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "lr=0.1", "utils.sh", "--", "echo {{lrr}}"], "lrr"),
        (["--sweep", "lr=0.1", "utils.sh", "--", "echo hello"], "not used"),
        (["--sweep", "lr=", "utils.sh", "--", "echo {{lr}}"], "lr"),
        (["--sweep", "n=range:a:5", "utils.sh", "--", "echo {{n}}"], "range"),
        (["--sweep", "n=1,2", "--max-parallel", "0", "utils.sh", "--", "echo {{n}}"], ">= 1"),
        (["--max-parallel", "2", "utils.sh", "--", "true"], "--sweep"),
        (["--zip", "utils.sh", "--", "true"], "--sweep"),
        (["-o", "out", "--sweep", "n=1", "utils.sh", "--", "echo {{n}}"], "--dryrun"),
        (["--sweep", "n=range:0:1001", "utils.sh", "--", "echo {{n}}"], "--yes"),
        (["--after", "local_cwd://distspec/nosuch-1234", "utils.sh", "--", "true"], "no such"),
        (["--after", "slurm://distspec/1234", "utils.sh", "--", "true"], "slurm job"),
        (["--after", "local_cwd://distspec/x-1:later", "utils.sh", "--", "true"], "condition"),
        (["--sweep-file", "nosuch.toml", "utils.sh", "--", "echo {{n}}"], "nosuch.toml"),
    ],
)
def test_bad_sweeps_are_one_line_and_submit_nothing(
    args: list[str], message: str, state_dir: Path, tmp_path: Path
) -> None:
    proc = cli("run", *args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert runs(state_dir) == []
    assert not (state_dir / "sweeps").exists()


def test_a_sweeps_log_and_rerun(state_dir: Path, tmp_path: Path) -> None:
    proc = cli("run", "--wait", "--sweep", "n=1", "utils.sh", "--", "echo {{n}}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.split()[0]
    log = cli("log", handle, cwd=tmp_path)
    assert log.returncode == 0 and log.stdout == "point 0|sh/0| 1\n", log
    follow = cli("log", "-f", handle, cwd=tmp_path)
    assert follow.returncode == 2 and "is a sweep: follow one point" in follow.stderr
    rerun = cli("rerun", handle, cwd=tmp_path)
    assert rerun.returncode == 2 and "--failed" in rerun.stderr
    nothing = cli("rerun", "--failed", handle, cwd=tmp_path)
    assert nothing.returncode == 2 and "nothing to rerun" in nothing.stderr


def test_dry_run_o_writes_an_arrays_files_and_copies_its_points(
    state_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "t.py").write_text("print(1)\n")
    proc = cli(
        "run", "--dryrun", "-o", "out", "-s", "slurm", "-cfg", "snapshot=off",
        "--sweep", "n=1,2", "dist.ddp", "-j", "1x1", "--script", "t.py", "--", "{{n}}",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = [Path(p).name for p in proc.stdout.split()]
    assert "submit.sh" in names and len(names) == 3
    (points_file,) = [n for n in names if n.endswith(".points")]
    points = (tmp_path / "out" / points_file).read_text().splitlines()
    assert [line.split()[1] for line in points] == ["DISTSPEC_SWEEP_n=1", "DISTSPEC_SWEEP_n=2"]
    submit = (tmp_path / "out" / "submit.sh").read_text()
    assert f'cp "$here"/{points_file} ' in submit  # where the script reads it


def test_rerun_failed_of_a_map_says_to_call_map_again(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import distspec

    monkeypatch.chdir(tmp_path)
    jobs = distspec.map(abs, [-1], j="1x1")
    assert jobs[0].result(timeout=120) == 1
    proc = cli("rerun", "--failed", str(jobs[0].sweep), cwd=tmp_path)
    assert proc.returncode == 2 and "call distspec.map again" in proc.stderr, proc.stderr


def test_max_parallel_on_local_runs_at_most_k_points_at_once(
    state_dir: Path, tmp_path: Path
) -> None:
    """Each point writes when it started and ended; no instant has more than 2 running."""
    script = "date +%s.%N > {{i}}.start; sleep 0.6; date +%s.%N > {{i}}.end"
    proc = cli(
        "run", "--wait", "--no-log", "--max-parallel", "2", "--sweep", "i=range:0:6",
        "utils.sh", "--", script, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    spans = [
        (float((tmp_path / f"{i}.start").read_text()), float((tmp_path / f"{i}.end").read_text()))
        for i in range(6)
    ]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most == 2, spans  # two lanes: never three, and not one after another either
