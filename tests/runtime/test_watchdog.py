"""The hang watchdog (``-cfg watchdog``): its rules, and real hung jobs on local_cwd.

The jobs are real torchrun runs with gloo: one rank never reaches a collective the
others wait in. The Slurm 2x2 case is in tests/schedulers/test_slurm_watchdog.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distspec.errors import UsageError
from distspec.hangs import HUNG_EXIT, Hang, read_hang, summary_lines
from distspec.runtime import progress
from distspec.runtime.watchdog import Watchdog, where
from distspec.specs.faults import parse_period

BIN = Path(sys.executable).parent

#: In the style of PyTorch's examples: torchrun's variables, no distspec. Rank 1
#: stops before the fourth all_reduce; the others wait in it.
HANGS = """\
import os, sys, time
import torch
import torch.distributed as dist


def train_step():
    t = torch.ones(1)
    dist.all_reduce(t)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(3):
        train_step()
        print(f"rank {rank} step {step}", flush=True)
    if rank == 1:
        time.sleep(100000)
    train_step()


main()
"""

#: Uses the runtime's heartbeats; rank 1 stops beating but keeps printing, which the
#: watchdog must not take for progress once heartbeats are what it judges by.
NOISY = """\
import time
import torch
import torch.distributed as dist
from distspec.runtime import init

with init(backend="gloo") as d:
    for step in range(3):
        t = torch.ones(1)
        dist.all_reduce(t)
        d.heartbeat()
    if d.rank == 1:
        while True:
            print("still here, doing nothing useful", flush=True)
            time.sleep(0.5)
    dist.all_reduce(torch.ones(1))
"""

#: Slow but steady: a line every 3 s for 24 s, under a 10 s watchdog.
SLOW = """\
import os, time
for i in range(8):
    print(f"rank {os.environ.get('RANK')} step {i}", flush=True)
    time.sleep(3)
"""


# -- rules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900), ("90s", 90), ("1h30m", 5400), ("600", 600), ("2d", 172800), ("10.5s", 10.5)],
)
def test_periods(text: str, seconds: float) -> None:
    assert parse_period(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5", "9s", "31d", "nan", "1e9", "5m5m", "m", "10 m", "x"])
def test_bad_periods_are_one_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match=r"^watchdog="):
        parse_period(text)


def _frame(name: str, file: str, line: int) -> dict[str, object]:
    return {"name": name, "file": file, "line": line}


def test_where_names_the_call_through_a_decorator() -> None:
    site = "/venv/lib/python3.11/site-packages/torch/distributed"
    frames = [
        _frame("all_reduce", f"{site}/distributed_c10d.py", 2800),
        _frame("_exception_logger.<locals>.wrapper", f"{site}/c10d_logger.py", 81),
        _frame("train_step", "/work/train.py", 88),
        _frame("main", "/work/train.py", 100),
    ]
    assert where(frames) == {
        "file": "train.py",
        "path": "/work/train.py",
        "line": 88,
        "function": "train_step",
        "call": "all_reduce",
    }
    # Blocked in the user's own frame (a C call py-spy does not show).
    own = where([_frame("main", "/work/train.py", 18)])
    assert own is not None and (own["call"], own["line"]) == ("main", 18)


def test_summary_groups_ranks_by_place() -> None:
    def proc(rank: int, line: int, call: str) -> dict[str, object]:
        place = {"file": "train.py", "line": line, "call": call}
        return {"rank": rank, "host": f"n{rank // 2}", "pid": 100 + rank, "where": place}

    hang = Hang(
        {"time": 1.0, "period": 900, "mode": "heartbeat"},
        [
            proc(0, 88, "all_reduce"),
            proc(2, 61, "__next__"),
            proc(1, 88, "all_reduce"),
            proc(3, 88, "all_reduce"),
        ],
    )
    assert hang.headline() == "no rank made progress for 15m (no heartbeat from any rank)"
    assert summary_lines(hang) == [
        "ranks 0-1,3 in all_reduce at train.py:88 (on n0,n1)",
        "rank 2 in __next__ at train.py:61 (on n1)",
    ]


def test_heartbeats_win_over_output(tmp_path: Path) -> None:
    """Once a rank has beaten, output is no longer progress; before, it is."""
    dog = Watchdog(["true"], 10, key="r-0", replicas=1, folder=tmp_path)
    dog.last_output = dog.start + 5
    assert dog.progress() == ("output", dog.start + 5)
    beats = tmp_path / progress.BEATS_DIR
    beats.mkdir(parents=True)
    (beats / "rank-0").touch()
    os.utime(beats / "rank-0", (dog.start + 2, dog.start + 2))
    assert dog.progress() == ("heartbeat", dog.start + 2)
    # A beat of an earlier attempt (before this watchdog started) does not count.
    os.utime(beats / "rank-0", (dog.start - 60, dog.start - 60))
    assert dog.progress()[0] == "output"


def test_a_url_job_folder_gets_each_pod_s_stacks(tmp_path: Path) -> None:
    """Kubernetes' job_dir is an fsspec URL: each pod's watchdog copies its record and
    stacks there under its own name."""
    import fsspec

    url = f"memory://wd-{os.getpid()}/job"
    dog = Watchdog(["true"], 10, key="trainer-1", replicas=1, folder=tmp_path, upload=url)
    (tmp_path / "hang" / "stacks").mkdir(parents=True)
    (tmp_path / "hang" / "hung").write_text('{"period": 10}')
    (tmp_path / "hang" / "stacks" / "trainer-1.txt").write_text("--- rank 1, pid 7\n")
    (tmp_path / "hang" / "stacks" / "trainer-1.json").write_text("[]")
    dog._upload()
    fs = fsspec.filesystem("memory")
    root = f"/wd-{os.getpid()}/job/hang"
    assert fs.cat(f"{root}/stacks/trainer-1.txt") == b"--- rank 1, pid 7\n"
    assert fs.cat(f"{root}/hung-trainer-1") == b'{"period": 10}'
    assert fs.exists(f"{root}/stacks/trainer-1.json")


def test_heartbeat_marks_this_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTSPEC_JOB_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    calls: list[int] = []
    monkeypatch.setattr(progress, "HOOKS", [lambda: calls.append(1)])
    # Without the watchdog nothing is written (the hooks still run).
    monkeypatch.delenv(progress.WATCHDOG_ENV, raising=False)
    monkeypatch.setattr(progress, "_state", {"last": 0.0, "path": None, "set_up": False})
    progress.beat(now=1000.0)
    assert not (tmp_path / "hang").exists() and calls == [1]
    calls.clear()
    monkeypatch.setenv(progress.WATCHDOG_ENV, "10")
    monkeypatch.setattr(progress, "_state", {"last": 0.0, "path": None, "set_up": False})
    progress.beat(now=1000.0)
    mark = tmp_path / progress.BEATS_DIR / "rank-3"
    assert mark.exists()
    progress.beat(now=1000.5)  # within a second: no write, hooks still run
    progress.beat(now=2000.0)
    assert mark.stat().st_mtime == 2000.0
    assert calls == [1, 1, 1]


# -- real jobs ------------------------------------------------------------------------


def run_watched(
    tmp_path: Path,
    script: str,
    period: str,
    *,
    scheduler: str = "local_cwd",
    shape: str = "1x2",
    timeout: float = 240,
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``distspec run --wait`` of ``script`` as a dist.ddp job under ``-cfg watchdog``:
    (the process, seconds it took)."""
    (tmp_path / "job.py").write_text(script)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "distspec"), "run", "--wait", "-s", scheduler, "-cfg", f"watchdog={period}",
         "dist.ddp", "-j", shape, "--script", "job.py"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    return proc, time.monotonic() - started


def processes_with(variable: str) -> list[int]:
    """The live (not zombie) processes whose environment has ``variable`` (``NAME=value``),
    on this machine and the local clusters' nodes (network namespaces of this machine:
    their processes are visible here)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if variable.encode() in environ and state != "Z":
            found.append(int(pid))
    return found


def _run_dir(proc: subprocess.CompletedProcess[str]) -> Path:
    match = re.search(r"run directory: (\S+)", proc.stderr)
    assert match, proc.stderr
    return Path(match.group(1))


def test_a_hung_collective_is_reported_with_every_rank_s_stack(
    tmp_path: Path, state_dir: Path
) -> None:
    proc, took = run_watched(tmp_path, HANGS, "10s")
    assert proc.returncode == HUNG_EXIT, proc.stderr
    assert re.search(r"HUNG after \S+: no rank made progress for 10s", proc.stderr), proc.stderr
    # Rank 0 waits in the all_reduce train_step makes; rank 1 sleeps in main.
    assert re.search(r"\n  rank 0 in all_reduce at job\.py:8 ", proc.stderr), proc.stderr
    assert re.search(r"\n  rank 1 in main at job\.py:18 ", proc.stderr), proc.stderr
    assert took < 10 + 60, took  # the period, torch's start-up and the stop, not the limit
    folder = _run_dir(proc)
    hang = read_hang(folder)
    assert hang is not None and hang.mode == "output"
    ranks = {p["rank"]: p for p in hang.processes if p["rank"] is not None}
    assert sorted(ranks) == [0, 1]
    assert all(p["tool"] == "py-spy" and p["threads"] for p in ranks.values()), ranks
    text = (folder / "hang" / "stacks" / "job-0.txt").read_text()
    assert "all_reduce" in text and "--- rank 1, pid" in text, text
    assert not processes_with(f"DISTSPEC_APP_ID={folder.name}"), (
        "a process of the hung job is still running"
    )
    status = json.loads((folder / "state.json").read_text())
    assert status["state"] == "FAILED", status
    # distspec status says why, and --exit-status gives the watchdog's code.
    handle = re.search(r"local_cwd://\S+", proc.stdout + proc.stderr)
    assert handle, proc.stdout + proc.stderr
    said = subprocess.run(
        [str(BIN / "distspec"), "status", "--exit-status", handle.group(0)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
    )  # fmt: skip
    assert said.returncode == HUNG_EXIT, said.stdout + said.stderr
    assert said.stdout.startswith("FAILED: hung: no rank made progress for 10s"), said.stdout


def test_heartbeats_make_output_no_longer_count(tmp_path: Path, state_dir: Path) -> None:
    proc, _ = run_watched(tmp_path, NOISY, "10s")
    assert proc.returncode == HUNG_EXIT, proc.stderr
    assert "(no heartbeat from any rank)" in proc.stderr, proc.stderr
    assert re.search(r"\n  rank 0 in all_reduce at job\.py:15 ", proc.stderr), proc.stderr
    assert re.search(r"\n  rank 1 in <module> at job\.py:1[34] ", proc.stderr), proc.stderr


def test_slow_steady_progress_is_not_a_hang(tmp_path: Path, state_dir: Path) -> None:
    proc, took = run_watched(tmp_path, SLOW, "10s")
    assert proc.returncode == 0, proc.stderr
    assert "HUNG" not in proc.stderr and took > 20, (took, proc.stderr)
    assert read_hang(_run_dir(proc)) is None


def test_a_wrapped_torchrun_is_still_torchrun_to_the_backends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kubernetes refuses a static rendezvous for a job whose pods are replaced alone;
    under the watchdog the role's entrypoint is python, yet the check still applies."""
    from distspec.cli.main import main
    from distspec.specs.app import AppDef, Role
    from distspec.specs.faults import FaultOptions, apply, launcher

    role = Role(name="r", entrypoint="torchrun", args=("--nnodes", "2", "t.py"))
    app = AppDef(name="a", roles=(role,))
    opts = FaultOptions(watchdog="5m")
    wrapped = apply(app, opts, shared_files=True, python=sys.executable).roles[0]
    assert (wrapped.entrypoint, launcher(wrapped), launcher(role)) == (
        sys.executable,
        "torchrun",
        "torchrun",
    )
    assert wrapped.args[-3:] == ("--nnodes", "2", "t.py")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    argv = ["run", "--dryrun", "-s", "kubernetes", "-cfg", "watchdog=5m", "dist.ddp"]
    argv += ["-j", "2x2", "--max_retries", "2", "--image", "img:1", "--script", "t.py"]
    assert main([*argv, "--rdzv_backend", "static"]) == 2
    assert "static rendezvous cannot take the new pod in" in capsys.readouterr().err
