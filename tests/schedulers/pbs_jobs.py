"""What the two real-PBS test modules share: Slurm's PBS wrappers
(tests/schedulers/test_pbs_cluster.py) and the OpenPBS server
(tests/schedulers/test_openpbs_cluster.py) run the same jobs and check the same
things of them, each module adding what its server does differently."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from distspec.schedulers.api import Dependency, Points, Request
from distspec.schedulers.pbs import PbsScheduler
from distspec.specs import AppDef, AppState, Role

__all__ = [
    "SWEEP",
    "bash_app",
    "check_sweep",
    "job_folder",
    "run_dependencies",
    "submit",
    "submit_array",
    "until",
]


def until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll ``check`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.2)


def submit(
    sched: PbsScheduler, app: AppDef, after: tuple[Dependency, ...] = (), **opts: str
) -> str:
    """Compile ``app`` with run options ``opts`` under a fresh app id and qsub it."""
    request = sched.compile(
        app, sched.parse_options(opts), app_id=f"{app.name}-{uuid.uuid4().hex[:8]}", after=after
    )
    return sched.submit(request)


def submit_array(
    sched: PbsScheduler, app: AppDef, points: Points, **opts: str
) -> tuple[str, Request]:
    """Compile ``app`` as a job array of ``points`` and qsub it."""
    request = sched.compile_array(
        app, sched.parse_options(opts), app_id=f"{app.name}-{uuid.uuid4().hex[:8]}", points=points
    )
    return sched.submit(request), request


def bash_app(name: str, script: str, *args: str, nodes: int = 1) -> AppDef:
    """One role ``r`` of ``nodes`` replicas, each running ``bash -c script x args``."""
    return AppDef(
        name=name,
        roles=(
            Role(name="r", entrypoint="bash", args=("-c", script, "x", *args), num_replicas=nodes),
        ),
    )


def job_folder(sched: PbsScheduler, job: str) -> Path:
    paths = sched.job_paths(job)
    assert paths is not None, job
    return Path(paths.folder)


#: Three points, one at a time (``%1``), the third failing with 3.
SWEEP = (
    bash_app(
        "sweep",
        'echo "x=$1 index=$DISTSPEC_SWEEP_INDEX app=$2"; sleep 1; exit $(( $1 == 13 ? 3 : 0 ))',
        "{{x}}",
        "${app_id}",
    ),
    Points(names=("x",), values=(("11",), ("12",), ("13",)), first=5, max_parallel=1),
)


def check_sweep(sched: PbsScheduler, jobs: list[str]) -> None:
    """The points of :data:`SWEEP` ran one at a time, each in its own folder, and each
    is described, logged and judged alone."""
    statuses = [sched.wait(job, timeout=120) for job in jobs]
    assert [s.state if s else None for s in statuses] == [
        AppState.SUCCEEDED,
        AppState.SUCCEEDED,
        AppState.FAILED,
    ], statuses
    failed = statuses[2].first_failure() if statuses[2] else None
    assert failed is not None and failed.exit_code == 3
    for k, job in enumerate(jobs):
        assert list(sched.log_iter(job, "r", 0)) == [f"x={11 + k} index={5 + k} app={job}"]
    # %1: each point started after the one before had ended.
    spans = sorted(
        (
            (job_folder(sched, job) / "r-0.start").stat().st_mtime,
            (job_folder(sched, job) / "exit").stat().st_mtime,
        )
        for job in jobs
    )
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans)), spans
    assert len({job_folder(sched, job) for job in jobs}) == 3


def run_dependencies(sched: PbsScheduler) -> tuple[str, str]:
    """afterok waits for its job's end and afternotok on a failed job runs (both
    checked here); returns ``(never, fails)``: the afterok on the failed job, which the
    caller checks its server's way, and that failed job."""
    first = submit(sched, bash_app("first", "sleep 2; echo first"))
    fails = submit(sched, bash_app("fails", "exit 4"))
    then = submit(sched, bash_app("then", "echo then"), after=(Dependency(first, "ok"),))
    never = submit(sched, bash_app("never", "echo never"), after=(Dependency(fails, "ok"),))
    rescue = submit(sched, bash_app("rescue", "echo rescue"), after=(Dependency(fails, "failed"),))
    status = sched.wait(then, timeout=120)
    assert status is not None and status.state is AppState.SUCCEEDED, status
    started = (job_folder(sched, then) / "r-0.start").stat().st_mtime
    assert started >= (job_folder(sched, first) / "exit").stat().st_mtime
    status = sched.wait(rescue, timeout=120)
    assert status is not None and status.state is AppState.SUCCEEDED, status
    status = sched.wait(never, timeout=120)
    assert status is not None and status.state is AppState.CANCELLED, status
    assert not job_folder(sched, never).exists()  # it never ran
    return never, fails


#: One replica printing its id, the replica count, app id, rank-0 host and folder.
HELLO = bash_app(
    "hello",
    'echo "replica $1 of $2 app $3 rank0 $4 in $PWD"; echo "to stderr" >&2',
    "${replica_id}",
    "${num_replicas}",
    "${app_id}",
    "${rank0_host}",
)


def check_hello(sched: PbsScheduler, job: str, workdir: Path) -> str:
    """:data:`HELLO` succeeded where qsub ran (``$PBS_O_WORKDIR``, not ``$HOME``) with its
    logs back and nothing left in that folder; returns the host it ran on."""
    status = sched.wait(job, timeout=90)
    assert status is not None and status.state is AppState.SUCCEEDED, status
    replica = status.roles[0].replicas[0]
    assert (replica.exit_code, replica.state) == (0, AppState.SUCCEEDED)
    lines = list(sched.log_iter(job, "r", 0))
    assert lines == [f"replica 0 of 1 app {job} rank0 {replica.hostname} in {workdir}", "to stderr"]
    assert list(workdir.iterdir()) == []  # the output went to the job's -o file
    return replica.hostname
