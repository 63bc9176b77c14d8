"""The PBS backend through Slurm's PBS wrappers (qsub/qstat/qdel, Debian slurm-wlm-torque)
on the local two-node cluster (scripts/slurm-cluster).

This is not a PBS server: the wrappers translate to sbatch/squeue/scancel, set no
PBS_NODEFILE (the script falls back to their generate_pbs_nodefile), report no exit
status, and have no pbsdsh. Their ``mpiexec`` is a wrapper around ``srun``, so the
multi-node test below runs the ``launcher=mpiexec`` path for real, with the rank from
``SLURM_PROCID`` rather than an MPI's PMI_RANK. The ``pbsdsh`` path is covered only
by tests/schedulers/test_pbs.py (a fake pbsdsh).

Job arrays and dependencies run for real too: sbatch reads the script's ``#PBS -J``
and ``#PBS -t`` lines as ``--array`` and ``#PBS -W depend=`` as ``--dependency``, and
Slurm's spank_pbs plugin sets ``PBS_ARRAY_INDEX`` and ``PBS_ARRAY_ID`` in each task.
The wrappers name no subjob (``1234[7]``): their qstat and qdel know a task by its own
job number, which its job folder records.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from distspec.schedulers.pbs import PbsScheduler
from distspec.specs import AppState
from tests.schedulers.batch_apps import (
    FAILING_RANK,
    FAILING_RANK_CASES,
    assert_private,
    private_modes,
    processes_with,
    report_then_plain,
)
from tests.schedulers.pbs_jobs import (
    HELLO,
    SWEEP,
    bash_app,
    check_hello,
    check_sweep,
    run_dependencies,
    submit,
    submit_array,
    until,
)
from tests.slurm_cluster import require_slurm_cluster

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Where qsub runs: an empty folder, so nothing lands in the repository."""
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def sched(state_dir: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> PbsScheduler:
    require_slurm_cluster()
    if shutil.which("qsub") is None:
        pytest.skip("Slurm's PBS wrappers (qsub) are not installed")
    monkeypatch.chdir(workdir)
    return PbsScheduler(state_dir=state_dir)


def test_one_node_job_succeeds_with_its_logs(sched: PbsScheduler, workdir: Path) -> None:
    job = submit(sched, HELLO)
    assert re.fullmatch(r"n[01]", check_hello(sched, job, workdir))


def test_a_failing_job_is_failed_with_its_exit_code(sched: PbsScheduler) -> None:
    job = submit(sched, bash_app("fails", "echo about to fail; exit 7"))
    status = sched.wait(job, timeout=60)
    assert status is not None and status.state is AppState.FAILED, status
    failed = status.first_failure()
    assert failed is not None and failed.exit_code == 7
    assert "exit status 7" in status.msg
    assert list(sched.log_iter(job, "r", 0)) == ["about to fail"]


def test_qdel_cancels_a_running_job(sched: PbsScheduler) -> None:
    marker = f"distspec-pbs-{uuid.uuid4().hex}"
    job = submit(sched, bash_app("sleeper", 'echo started; exec -a "$1" sleep 300', marker))
    record = sched._record(job)
    assert record is not None
    until(lambda: Path(record.folder, "r-0.host").exists(), "the replica to start")
    sched.cancel(job)
    status = sched.wait(job, timeout=60)
    assert status is not None and status.state is AppState.CANCELLED, status

    until(lambda: not processes_with(marker), "the sleeper to be killed")
    # The script's TERM trap saw the signal, so even a qdel from outside distspec
    # (no cancel marker in this state dir) reads as cancelled.
    assert Path(record.folder, "signal").read_text().strip() == "TERM"
    sched.cancel(job)  # cancelling an ended job is a no-op


def test_two_nodes_through_the_wrappers_mpiexec(
    sched: PbsScheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `mpiexec` on PATH may be MPICH's or Open MPI's (Debian's alternatives pick the
    # last installed): put the wrappers' own first.
    _wrapper_mpiexec(tmp_path, monkeypatch)
    app = bash_app(
        "two",
        'echo "replica $1 on $(hostname) rank0 $2"; exit $(( $1 == 1 ? 5 : 0 ))',
        "${replica_id}",
        "${rank0_host}",
        nodes=2,
    )
    # The wrapper's mpiexec takes no --ppn; srun places one task per node here.
    job = submit(sched, app, launcher="mpiexec", mpiexec_args="")
    status = sched.wait(job, timeout=60)
    assert status is not None and status.state is AppState.FAILED, status
    replicas = status.roles[0].replicas
    assert [(r.exit_code, r.hostname) for r in replicas] == [(0, "n0"), (5, "n1")]
    assert list(sched.log_iter(job, "r", 1)) == ["replica 1 on n1 rank0 n0"]


def _wrapper_mpiexec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put Slurm's own mpiexec wrapper (srun) first on PATH; the job gets it through -V."""
    wrapper = Path("/usr/bin/mpiexec.slurm")
    if not wrapper.exists():
        pytest.skip("Slurm's mpiexec wrapper (/usr/bin/mpiexec.slurm) is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    # A script, not a link: the wrapper runs the srun beside its own path.
    (bin_dir / "mpiexec").write_text(f'#!/bin/sh\nexec {wrapper} "$@"\n')
    (bin_dir / "mpiexec").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_failed_node_ends_the_two_node_job_with_its_code(
    sched: PbsScheduler, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#15: the wrapper's mpiexec (srun) lets the other tasks run on when one fails; the
    script stops them itself. Node 0 would sleep 300 s: the job must end well before
    (wait gives up after 90 s), with node 1's code, and node 0 records no code of its own."""
    _wrapper_mpiexec(tmp_path, monkeypatch)
    marker = f"distspec-pbs-{uuid.uuid4().hex}"
    app = bash_app(
        "failfast",
        'if (( $1 == 0 )); then exec -a "$2" sleep 300; fi; echo "node 1 fails"; exit 9',
        "${replica_id}",
        marker,
        nodes=2,
    )
    job = submit(sched, app, launcher="mpiexec", mpiexec_args="")
    try:
        status = sched.wait(job, timeout=90)
        assert status is not None and status.state is AppState.FAILED, status
    finally:
        sched.cancel(job)
    replicas = status.roles[0].replicas
    assert [(r.exit_code, r.hostname) for r in replicas] == [(None, "n0"), (9, "n1")]
    assert "exit status 9" in status.msg
    record = sched._record(job)
    assert record is not None and Path(record.folder, "exit").read_text() == "9\n"

    until(lambda: not processes_with(marker), "node 0's sleeper to be stopped")


def test_a_retry_reports_the_last_attempts_failure(sched: PbsScheduler, tmp_path: Path) -> None:
    """As on Slurm: attempt 0's real torchrun reports rank 1 exiting 7; attempt 1 fails
    with 4 and no report. The status is attempt 1's."""
    job = submit(sched, report_then_plain(tmp_path))
    status = sched.wait(job, timeout=180)
    assert status is not None and status.state is AppState.FAILED, status
    replica = status.roles[0].replicas[0]
    assert (replica.exit_code, replica.reason) == (4, "exited with 4"), status.format()
    assert status.num_restarts == 1
    log = "\n".join(sched.log_iter(job, "r", 0))
    assert "exitcode  : 7" in log and "attempt 1 fails without a report" in log


def _require_pbs_wrappers() -> None:
    require_slurm_cluster()
    if shutil.which("qsub") is None:
        pytest.skip("Slurm's PBS wrappers (qsub) are not installed")


def _distspec(workdir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The ``distspec`` command run in ``workdir``, with this venv's commands on PATH."""
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_cli_run_wait_and_log(state_dir: Path, workdir: Path) -> None:
    _require_pbs_wrappers()
    run = _distspec(workdir, "run", "-s", "pbs", "--wait", "utils.sh", "echo", "hi from pbs")
    assert run.returncode == 0, run.stdout + run.stderr
    handle = re.search(r"pbs://\S+", run.stdout)
    assert handle, run.stdout
    logs = _distspec(workdir, "log", handle.group(0), timeout=60)
    assert "hi from pbs" in logs.stdout, logs.stdout + logs.stderr
    # list: the qstat table has no times; the record and the job folder give them.
    job = handle.group(0).rsplit("/", 1)[1]
    listed = _distspec(workdir, "list", "-s", "pbs", "--json", timeout=60)
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["app_id"] == job)
    assert row["state"] == "SUCCEEDED", row
    assert row["submitted"] <= row["ended"] and row["duration"] == row["ended"] - row["submitted"]
    assert row["ended"] <= time.time()
    assert list(workdir.iterdir()) == []


def test_a_job_script_that_fails_before_its_replica_shows_its_own_output(
    state_dir: Path, workdir: Path
) -> None:
    """The job's folder does not exist (--image names a missing directory): the batch
    script stops at its `cd`, the replica never starts and leaves no log, so the end of
    `run --wait` quotes what the script itself printed (``<run directory>.out``)."""
    _require_pbs_wrappers()
    missing = workdir / "no-such-dir"
    run = _distspec(
        workdir, "run", "-s", "pbs", "--wait", "utils.sh", "--image", str(missing), "echo", "never"
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "the job script's output" in run.stderr, run.stderr
    assert f"cd: {missing}: No such file or directory" in run.stderr, run.stderr


@pytest.mark.parametrize(("how", "code", "said"), FAILING_RANK_CASES)
def test_run_wait_exits_with_the_ranks_own_code_or_signal(
    state_dir: Path, workdir: Path, how: str, code: int, said: str
) -> None:
    """As on Slurm: the worker's code or signal from torchrun's root-cause report."""
    _require_pbs_wrappers()
    (workdir / "fail.py").write_text(FAILING_RANK)
    run = _distspec(
        workdir, "run", "-s", "pbs", "--wait", "dist.ddp", "-j", "1x2", "--script", "fail.py",
        "--", how,
    )  # fmt: skip
    assert run.returncode == code, run.stdout + run.stderr
    assert re.search(rf"FAILED after \S+: \S+/0 rank 1 on \S+ {re.escape(said)}", run.stderr), (
        run.stderr
    )
    assert "torchrun exited with 1" in run.stderr, run.stderr
    if how == "raise":
        assert "its last line: ValueError: the real error" in run.stderr, run.stderr


def test_job_dir_folder_script_and_record_are_private(sched: PbsScheduler, state_dir: Path) -> None:
    """As on Slurm: 0700 folders, 0600 script and record, whatever the umask."""
    old = os.umask(0o022)
    try:
        job = submit(sched, bash_app("private", "echo hi"))
        status = sched.wait(job, timeout=60)
    finally:
        os.umask(old)
    assert status is not None and status.state is AppState.SUCCEEDED, status
    assert status.location
    modes = private_modes(state_dir, "pbs", status.location)
    assert any(p.endswith(".pbs") for p in modes) and any(p.endswith(".json") for p in modes)
    assert_private(modes)


# -- job arrays and dependencies through the wrappers ------------------------------


@pytest.mark.parametrize("style", ["select", "nodes"])
def test_an_array_job_runs_each_point_in_its_own_folder_one_at_a_time(
    sched: PbsScheduler, style: str
) -> None:
    """sbatch reads ``#PBS -J 0-2%1`` (Torque's ``#PBS -t 0-2%1`` too) as
    ``--array=0-2%1``: one qsub, three points, one at a time; each subjob reads its own
    line of the points file, runs in its own folder and is described, logged and
    judged alone (the third fails). The wrappers name no subjob: each is found by the
    job number its folder recorded."""
    app, points = SWEEP
    array, request = submit_array(sched, app, points, resource_style=style)
    assert array.isdigit(), array  # the wrappers' qsub prints the array's number alone
    jobs = [sched.point_id(array, request, i) for i in range(5, 8)]
    assert jobs == [f"{array}[{k}]" for k in range(3)]
    check_sweep(sched, jobs)


def test_after_waits_for_its_condition_and_a_job_whose_dependency_failed_never_runs(
    sched: PbsScheduler,
) -> None:
    """``#PBS -W depend=`` through sbatch: afterok waits for the other job's end; an
    afterok on a failed job is cancelled (the script's ``#SBATCH
    --kill-on-invalid-dep=yes``: the wrappers would leave it pending forever, as PBS
    would not) and says why; afternotok on the failed job runs."""
    never, fails = run_dependencies(sched)
    status = sched.describe(never)
    assert status is not None
    assert f"it waited for afterok:{fails}, which can no longer be met" in status.msg, status.msg


def test_cli_sweep_on_pbs_runs_one_array(state_dir: Path, workdir: Path) -> None:
    _require_pbs_wrappers()
    run = _distspec(
        workdir,
        "run", "-s", "pbs", "--wait", "--sweep", "x=a,b", "--max-parallel", "1",
        "utils.sh", "--", "echo value {{x}} of point $DISTSPEC_SWEEP_INDEX",
        timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    handle = re.search(r"pbs://\S+/sweep-\S+", run.stdout + run.stderr)
    assert handle, run.stdout + run.stderr
    logs = _distspec(workdir, "log", handle.group(0), timeout=60)
    assert logs.returncode == 0, logs.stderr
    assert "value a of point 0" in logs.stdout and "value b of point 1" in logs.stdout, logs.stdout
