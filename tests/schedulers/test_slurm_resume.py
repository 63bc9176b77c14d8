"""Slurm's requeue lets the job save first, and a requeued job resumes from its checkpoint.

The script's trap and requeue rules run under a fake srun and scontrol (fast); then the
real thing on the local two-node cluster: a train_ddp job sent the requeue signal twice
saves each time, is requeued twice and finishes every step, never starting from step 0
(about 2 minutes on an idle cluster; its waits allow for other jobs holding the nodes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppDef, AppState, Role
from tests.schedulers.test_slurm import _run_script
from tests.slurm_cluster import submitted, until, use_slurm_cluster

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _script(tmp_path: Path, command: str, **opts: str) -> str:
    app = AppDef(name="rq", roles=(Role(name="r", entrypoint="bash", args=("-c", command)),))
    sched = SlurmScheduler(state_dir=tmp_path / "state")
    options = sched.parse_options({"job_dir": str(tmp_path / "jobs"), "requeue": "true", **opts})
    text = sched.compile(app, options, app_id="rq-1").render()
    # Under the fake srun, signal the batch shell, as Slurm's --signal=B: does.
    return text.replace("#!/bin/bash\n", "#!/bin/bash\nexport FAKE_BATCH_PID=$$\n", 1)


def _run(
    text: str, tmp_path: Path, *, restarts: int = 0, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = {"SLURM_RESTART_COUNT": str(restarts)}
    return _run_script(text, tmp_path, nodes=1, timeout=timeout, extra_env=env)


def _requeues(tmp_path: Path) -> list[str]:
    log = tmp_path / "scontrol.log"
    return log.read_text().splitlines() if log.exists() else []


# -- the script's rules, under a fake srun ------------------------------------------------


@pytest.mark.parametrize("retries", [0, 1], ids=["plain", "retry-loop"])
def test_the_signal_raises_the_flag_and_the_job_is_requeued_after_its_step(
    tmp_path: Path, retries: int
) -> None:
    # The step sees the flag (as distspec.runtime's `preempted` does), saves, exits 0.
    command = (
        'kill -USR1 $FAKE_BATCH_PID; until [[ -e "$DISTSPEC_JOB_DIR/preempt" ]]; do sleep 0.05; '
        'done; touch "$DISTSPEC_JOB_DIR/preempt.seen"; sleep 0.3; echo saved > "$DISTSPEC_JOB_DIR/saved"'
    )
    # With the role's max_retries, the script's retry loop waits for the step.
    text = _script_with_retries(tmp_path, command) if retries else _script(tmp_path, command)
    proc = _run(text, tmp_path)
    folder = tmp_path / "jobs" / "rq-42"
    assert proc.returncode == 0, proc.stderr
    assert (folder / "saved").exists()  # not killed by an early requeue
    assert _requeues(tmp_path) == ["requeue 42"], proc.stderr
    assert (folder / "restart_reason").read_text() == "time-limit\n"
    assert "SIGUSR1 before the time limit: job 42 may save and stop" in proc.stderr
    assert "attempt failed" not in proc.stderr  # a requeue, not a retry


def _script_with_retries(tmp_path: Path, command: str) -> str:
    app = AppDef(
        name="rq",
        roles=(Role(name="r", entrypoint="bash", args=("-c", command), max_retries=1),),
    )
    sched = SlurmScheduler(state_dir=tmp_path / "state")
    options = sched.parse_options({"job_dir": str(tmp_path / "jobs"), "requeue": "true"})
    text = sched.compile(app, options, app_id="rq-1").render()
    assert "distspec_requeued && break" in text
    return text.replace("#!/bin/bash\n", "#!/bin/bash\nexport FAKE_BATCH_PID=$$\n", 1)


def test_a_step_that_finishes_without_seeing_the_flag_is_not_requeued(tmp_path: Path) -> None:
    proc = _run(_script(tmp_path, "kill -USR1 $FAKE_BATCH_PID; sleep 0.3"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _requeues(tmp_path) == []
    assert "finished before it saw SIGUSR1: not requeueing it" in proc.stderr


def test_a_step_that_ignores_the_flag_is_requeued_at_the_deadline(tmp_path: Path) -> None:
    # requeue_before=4: the step has 2 s; the fake scontrol does not kill it, so the log
    # shows when the timer asked for the requeue, while the step still ran.
    command = 'kill -USR1 $FAKE_BATCH_PID; sleep 4; echo "$(date +%s.%N)" > "$DISTSPEC_JOB_DIR/end"'
    started = time.time()
    proc = _run(_script(tmp_path, command, requeue_before="4"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    requeued = (tmp_path / "jobs" / "rq-42" / "requeues").stat().st_mtime
    end = float((tmp_path / "jobs" / "rq-42" / "end").read_text())
    assert 1.5 < requeued - started < end - started, (requeued - started, end - started)
    # The timer's requeue only: the step never saw the flag, so its end asks for none
    # (under Slurm the requeue has killed it by then).
    assert _requeues(tmp_path) == ["requeue 42"], proc.stderr


def test_a_requeued_run_clears_the_flag_and_keeps_or_says_its_reason(tmp_path: Path) -> None:
    folder = tmp_path / "jobs" / "rq-42"
    folder.mkdir(parents=True)
    # Requeued by this trap: the flag is there, the reason it wrote is kept.
    (folder / "preempt").touch()
    (folder / "preempt.seen").touch()
    (folder / "restart_reason").write_text("time-limit\n")
    seen = 'ls "$DISTSPEC_JOB_DIR" > "$DISTSPEC_JOB_DIR/seen"'
    proc = _run(_script(tmp_path, seen), tmp_path, restarts=1)
    assert proc.returncode == 0, proc.stderr
    listed = (folder / "seen").read_text().split()
    assert "preempt" not in listed and "preempt.seen" not in listed
    assert (folder / "restart_reason").read_text() == "time-limit\n"
    # Requeued by Slurm itself (no flag): why is not known.
    proc = _run(_script(tmp_path, seen), tmp_path, restarts=2)
    assert proc.returncode == 0, proc.stderr
    assert (folder / "restart_reason").read_text() == "unknown\n"


@pytest.mark.parametrize("hung", [False, True])
def test_the_retry_loop_says_failed_rank_or_hang(tmp_path: Path, hung: bool) -> None:
    # Attempt 0 fails (after the watchdog's mark, when hung); attempt 1 records the reason.
    mark = (
        'mkdir -p "$DISTSPEC_JOB_DIR/hang"; touch "$DISTSPEC_JOB_DIR/hang/hung"; ' if hung else ""
    )
    command = (
        'if [[ $(< "$DISTSPEC_JOB_DIR/attempt") == 0 ]]; then sleep 0.05; '
        f"{mark}exit 3; fi; "
        'cp "$DISTSPEC_JOB_DIR/restart_reason" "$DISTSPEC_JOB_DIR/reason-seen"'
    )
    app = AppDef(
        name="rq",
        roles=(Role(name="r", entrypoint="bash", args=("-c", command), max_retries=1),),
    )
    sched = SlurmScheduler(state_dir=tmp_path / "state")
    options = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    proc = _run(sched.compile(app, options, app_id="rq-1").render(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = (tmp_path / "jobs" / "rq-42" / "reason-seen").read_text()
    assert seen == ("hang\n" if hung else "failed-rank\n")


# -- the real cluster -----------------------------------------------------------------------


@pytest.fixture
def cluster() -> None:
    use_slurm_cluster()


@pytest.mark.slurm
@pytest.mark.torch
def test_a_requeued_job_saves_on_the_signal_and_resumes_twice(
    cluster: None, state_dir: Path
) -> None:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    marker = f"resume-{uuid.uuid4().hex[:8]}"
    steps = 200
    proc = subprocess.run(
        [str(BIN / "distspec"), "run", "-s", "slurm", "-cfg", "requeue=true,time=10",
         "dist.ddp", "-j", "2x2", "--name", marker, "--script", "examples/train_ddp.py", "--",
         "--steps", str(steps), "--log-every", "10", "--save-every", "50",
         "--step-delay", "0.04", "--checkpoint", "none"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job, folder = submitted(proc.stdout, state_dir)
    sched = SlurmScheduler(state_dir=state_dir)

    def rank0_log() -> str:
        logs = sorted(folder.glob("*-0.log"))
        return logs[0].read_text(errors="replace") if logs else ""

    def trained_past(step: int, run: int) -> Callable[[], bool]:
        def check() -> bool:
            status = sched.describe(job)
            assert status is not None
            if status.is_terminal:
                pytest.fail(f"job {job} ended early: {status.format()}\n{rank0_log()[-3000:]}")
            # The log is appended to across runs: look at this run's part.
            part = rank0_log().split("training: world_size=4")
            if len(part) < run + 2:
                return False
            return any(int(n) >= step for n in re.findall(r"step +([0-9]+)  loss", part[run + 1]))

        return check

    def requeued(count: int) -> Callable[[], bool]:
        def check() -> bool:
            status = sched.describe(job)
            assert status is not None
            if status.num_restarts >= count and status.state is AppState.PENDING:
                # A requeued job waits for a begin time Slurm sets cred_expire + 1 s ahead
                # (31 s here); start it sooner, as the test's only shortcut. Not in the
                # second the last run ended: slurmd revoked that run's credential, and a
                # new one of the same second counts as revoked too (the job FAILED with
                # "Job credential revoked" without running).
                time.sleep(3)
                subprocess.run(
                    ["scontrol", "update", f"JobId={job}", "StartTime=now"],
                    capture_output=True,
                    check=False,
                )
                return True
            return status.num_restarts >= count and status.state is AppState.RUNNING

        return check

    try:
        for run in range(2):
            # Generous: the cluster is shared, and the job may wait for other jobs' nodes.
            until(trained_past(20, run), f"run {run} to train", timeout=300)
            # What Slurm does requeue_before seconds ahead of the time limit.
            subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
            until(requeued(run + 1), f"requeue {run + 1}: {sched.describe(job)}", timeout=90)
        status = sched.wait(job, timeout=300)
        assert status is not None and status.state is AppState.SUCCEEDED, status
    finally:
        sched.cancel(job)
    log = rank0_log()
    batch_log = next(folder.parent.glob(f"{marker}-{job}.out")).read_text()
    assert batch_log.count(f"requeueing job {job}") == 2, batch_log
    saved = [int(n) for n in re.findall(r"pre-empted at step ([0-9]+): saved, stopping", log)]
    resumed = re.findall(r"resuming from step ([0-9]+) \(attempt ([0-9]+), reason (\S+)\)", log)
    assert len(saved) == 2 and saved[0] < saved[1], log[-3000:]
    assert resumed == [(str(saved[0]), "1", "time-limit"), (str(saved[1]), "2", "time-limit")], log[
        -3000:
    ]
    # Every step trained once and in order: never again from step 1.
    printed = [int(n) for n in re.findall(r"step +([0-9]+)  loss", log)]
    assert printed.count(1) == 1 and printed[-1] == steps, printed
    assert "done: loss" in log
