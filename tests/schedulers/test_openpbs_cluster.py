"""The PBS backend against a real OpenPBS server: scripts/pbs-cluster's two hosts,
pbs0 (pbs_server, pbs_sched, pbs_comm, a MoM) and pbs1 (a MoM), each in its own
network namespace on this machine.

Unlike Slurm's PBS wrappers (tests/schedulers/test_pbs_cluster.py), this is PBS
itself: its own ``qsub``/``qstat -x``/``qdel``, ``$PBS_NODEFILE``, ``pbsdsh`` through
the MoMs' task manager, ``Exit_status`` and the ``select``/``place`` dialect. The
client commands reach the server through ``scripts/pbs-cluster bin`` first on PATH;
jobs get that PATH through ``#PBS -V``. Without OpenPBS's source archive these tests
skip and say why.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from distspec.schedulers.api import Dependency, Points
from distspec.schedulers.pbs import PbsScheduler
from distspec.specs import AppDef, AppState, Role
from tests.openpbs_cluster import require_openpbs_cluster
from tests.schedulers.batch_apps import FAILING_RANK, FAILING_RANK_CASES, processes_with

pytestmark = [pytest.mark.openpbs, pytest.mark.slow]

BIN = Path(sys.executable).parent
HOSTS = ("pbs0", "pbs1")
WORKLOAD = Path(__file__).resolve().parents[1] / "thirdparty" / "workloads" / "torchrun_ddp.py"


@pytest.fixture
def pbs_path(monkeypatch: pytest.MonkeyPatch) -> str:
    """PATH with the cluster's client commands first, then this venv's."""
    bin_dir = require_openpbs_cluster()
    path = f"{bin_dir}:{BIN}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    return path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where qsub runs: an empty folder, so nothing lands in the repository."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def sched(pbs_path: str, state_dir: Path, workdir: Path) -> PbsScheduler:
    return PbsScheduler(state_dir=state_dir)


def _until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.2)


def _run(sched: PbsScheduler, app: AppDef, after: tuple[Dependency, ...] = (), **opts: str) -> str:
    request = sched.compile(
        app, sched.parse_options(opts), app_id=f"{app.name}-{uuid.uuid4().hex[:8]}", after=after
    )
    return sched.submit(request)


def _folder(sched: PbsScheduler, job: str) -> Path:
    paths = sched.job_paths(job)
    assert paths is not None, job
    return Path(paths.folder)


def _bash(name: str, script: str, *args: str, nodes: int = 1) -> AppDef:
    return AppDef(
        name=name,
        roles=(
            Role(name="r", entrypoint="bash", args=("-c", script, "x", *args), num_replicas=nodes),
        ),
    )


def _qstat_jobs(path: str) -> str:
    """``qstat`` of the jobs still queued or running (not the finished history)."""
    out = subprocess.run(
        ["qstat"], env={**os.environ, "PATH": path}, capture_output=True, text=True, check=False
    )
    return out.stdout


def _distspec(workdir: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_job_runs_on_a_pbs_host_in_the_submit_folder(sched: PbsScheduler, workdir: Path) -> None:
    app = _bash(
        "hello",
        'echo "replica $1 of $2 app $3 rank0 $4 in $PWD"; echo "to stderr" >&2',
        "${replica_id}",
        "${num_replicas}",
        "${app_id}",
        "${rank0_host}",
    )
    job = _run(sched, app)
    assert re.fullmatch(r"\d+\.pbs0", job), job  # OpenPBS's own job ids
    status = sched.wait(job, timeout=90)
    assert status is not None and status.state is AppState.SUCCEEDED, status
    replica = status.roles[0].replicas[0]
    assert (replica.exit_code, replica.state) == (0, AppState.SUCCEEDED)
    assert replica.hostname in HOSTS, replica
    lines = list(sched.log_iter(job, "r", 0))
    assert lines == [f"replica 0 of 1 app {job} rank0 {replica.hostname} in {workdir}", "to stderr"]
    assert list(workdir.iterdir()) == []  # the output went to the job's -o file


def test_a_failing_job_has_its_exit_status(sched: PbsScheduler) -> None:
    job = _run(sched, _bash("fails", "echo about to fail; exit 7"))
    status = sched.wait(job, timeout=90)
    assert status is not None and status.state is AppState.FAILED, status
    failed = status.first_failure()
    assert failed is not None and failed.exit_code == 7, status
    assert list(sched.log_iter(job, "r", 0)) == ["about to fail"]
    # The finished job stays in the server's history (job_history_enable).
    described = sched.describe(job)
    assert described is not None


def test_qdel_ends_a_two_host_job_everywhere(sched: PbsScheduler, pbs_path: str) -> None:
    marker = f"distspec-openpbs-{uuid.uuid4().hex}"
    app = _bash("sleeper", 'echo "on $(hostname)"; exec -a "$1" sleep 300', marker, nodes=2)
    job = _run(sched, app)
    record = sched._record(job)
    assert record is not None
    _until(
        lambda: all(Path(record.folder, f"r-{i}.host").exists() for i in (0, 1)),
        "both replicas to start",
        timeout=90,
    )
    _until(lambda: len(processes_with(marker)) == 2, "a sleeper on each host")
    hosts = sorted(Path(record.folder, f"r-{i}.host").read_text().strip() for i in (0, 1))
    assert hosts == list(HOSTS)  # place=scatter: one replica per host
    sched.cancel(job)
    status = sched.wait(job, timeout=90)
    assert status is not None and status.state is AppState.CANCELLED, status
    _until(lambda: not processes_with(marker), "the sleepers on both hosts to be killed")
    _until(lambda: job.split(".")[0] not in _qstat_jobs(pbs_path), "qstat to forget the job")


@pytest.mark.torch
def test_two_host_ddp_through_pbsdsh(pbs_path: str, state_dir: Path, workdir: Path) -> None:
    """Third-party training code (never imports distspec) as dist.ddp 2x2 across pbs0
    and pbs1: pbsdsh starts torchrun on each host through the MoMs."""
    run = _distspec(
        workdir, "run", "-s", "pbs", "--wait", "dist.ddp", "-j", "2x2", "--script", str(WORKLOAD),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    handle = re.search(r"pbs://\S+", run.stdout + run.stderr)
    assert handle, run.stdout + run.stderr
    logs = _distspec(workdir, "log", handle.group(0), timeout=60).stdout
    ranks = {int(m) for m in re.findall(r"rank (\d) \(local [01]\) of 4 joined", logs)}
    assert ranks == {0, 1, 2, 3}, logs
    described = _distspec(workdir, "describe", handle.group(0), timeout=60)
    assert described.returncode == 0, described.stderr
    assert "pbs0" in described.stdout and "pbs1" in described.stdout, described.stdout
    listed = _distspec(workdir, "list", "-s", "pbs", "--json", timeout=60)
    job = handle.group(0).rsplit("/", 1)[1]
    row = next(r for r in json.loads(listed.stdout) if r["app_id"] == job)
    assert row["state"] == "SUCCEEDED", row


@pytest.mark.torch
@pytest.mark.parametrize(("how", "code", "said"), FAILING_RANK_CASES)
def test_run_wait_names_the_failing_rank(
    pbs_path: str, state_dir: Path, workdir: Path, how: str, code: int, said: str
) -> None:
    (workdir / "fail.py").write_text(FAILING_RANK)
    run = _distspec(
        workdir, "run", "-s", "pbs", "--wait", "dist.ddp", "-j", "1x2", "--script", "fail.py",
        "--", how,
    )  # fmt: skip
    assert run.returncode == code, run.stdout + run.stderr
    assert re.search(rf"FAILED after \S+: \S+/0 rank 1 on pbs[01] {re.escape(said)}", run.stderr), (
        run.stderr
    )
    if how == "raise":
        assert "ValueError: the real error" in run.stderr, run.stderr


def test_an_array_job_runs_each_point_in_its_own_folder_one_at_a_time(
    sched: PbsScheduler,
) -> None:
    """``#PBS -J 0-2%1`` on the real server: one qsub, subjobs ``N[k].pbs0``, one at a
    time; each reads its own line of the points file, runs in its own folder and is
    described, logged and judged alone (the third fails)."""
    app = _bash(
        "sweep",
        'echo "x=$1 index=$DISTSPEC_SWEEP_INDEX app=$2"; sleep 1; exit $(( $1 == 13 ? 3 : 0 ))',
        "{{x}}",
        "${app_id}",
    )
    points = Points(names=("x",), values=(("11",), ("12",), ("13",)), first=5, max_parallel=1)
    request = sched.compile_array(
        app, sched.parse_options({}), app_id=f"sweep-{uuid.uuid4().hex[:8]}", points=points
    )
    array = sched.submit(request)
    assert re.fullmatch(r"\d+\[\]\.pbs0", array), array  # OpenPBS's array id
    jobs = [sched.point_id(array, request, i) for i in range(5, 8)]
    number = array.split("[")[0]
    assert jobs == [f"{number}[{k}].pbs0" for k in range(3)]
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
    spans = sorted(
        (
            (_folder(sched, job) / "r-0.start").stat().st_mtime,
            (_folder(sched, job) / "exit").stat().st_mtime,
        )
        for job in jobs
    )
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans)), spans


def test_after_waits_for_its_condition_and_an_unmeetable_one_never_runs(
    sched: PbsScheduler,
) -> None:
    """``#PBS -W depend=`` on the real server: afterok waits for the other job's end,
    afternotok on a failed job runs, and the server deletes an afterok on a failed job."""
    first = _run(sched, _bash("first", "sleep 2; echo first"))
    fails = _run(sched, _bash("fails", "exit 4"))
    then = _run(sched, _bash("then", "echo then"), after=(Dependency(first, "ok"),))
    never = _run(sched, _bash("never", "echo never"), after=(Dependency(fails, "ok"),))
    rescue = _run(sched, _bash("rescue", "echo rescue"), after=(Dependency(fails, "failed"),))

    status = sched.wait(then, timeout=120)
    assert status is not None and status.state is AppState.SUCCEEDED, status
    started = (_folder(sched, then) / "r-0.start").stat().st_mtime
    assert started >= (_folder(sched, first) / "exit").stat().st_mtime
    status = sched.wait(rescue, timeout=120)
    assert status is not None and status.state is AppState.SUCCEEDED, status

    status = sched.wait(never, timeout=120)
    assert status is not None and status.state is AppState.CANCELLED, status
    assert not _folder(sched, never).exists()  # it never ran


def test_walltime_ends_the_job(sched: PbsScheduler) -> None:
    """The server ends a job past its walltime (``-l walltime``) with SIGTERM and
    Exit_status -29: ended from outside (cancelled, as Slurm's TIMEOUT), saying why."""
    marker = f"distspec-openpbs-{uuid.uuid4().hex}"
    job = _run(
        sched, _bash("slow", 'echo started; exec -a "$1" sleep 300', marker), walltime="00:00:05"
    )
    status = sched.wait(job, timeout=120)
    assert status is not None and status.state is AppState.CANCELLED, status
    assert status.msg == "the job exceeded its walltime (Exit_status -29)", status.msg
    _until(lambda: not processes_with(marker), "the sleeper to be killed")
    assert next(iter(sched.log_iter(job, "r", 0))) == "started"


@pytest.mark.torch
def test_a_callable_runs_across_both_hosts(pbs_path: str, state_dir: Path, workdir: Path) -> None:
    import distspec
    from distspec.errors import RemoteError
    from tests.test_callables_cluster import all_reduce_sum, raise_on_node_1

    job = distspec.submit(all_reduce_sum, j="2x2", scheduler="pbs")
    try:
        results = job.results(timeout=300)
    finally:
        if not job.done():
            job.cancel()
    assert [r[0] for r in results] == [10.0] * 4  # 1 + 2 + 3 + 4
    assert sorted({r[1] for r in results}) == list(HOSTS)
    job = distspec.submit(raise_on_node_1, j="2x2", scheduler="pbs")
    try:
        with pytest.raises(RemoteError) as info:
            job.result(timeout=300)
    finally:
        if not job.done():
            job.cancel()
    assert info.value.type_name == "KeyError" and info.value.host == "pbs1"


@pytest.mark.torch
def test_launch_inside_a_pbs_job(pbs_path: str, workdir: Path) -> None:
    """``distspec launch --launcher torchrun`` in a hand-written qsub script: the hosts
    from ``$PBS_NODEFILE``, one torchrun per host through ``pbsdsh -u``."""
    allreduce = Path(__file__).resolve().parents[1] / "data" / "launch" / "allreduce.py"
    script = workdir / "job.pbs"
    script.write_text(
        "\n".join(
            [
                "#!/bin/bash",
                "#PBS -l select=2:ncpus=2:mpiprocs=2",
                "#PBS -l place=scatter",
                "#PBS -V",
                "#PBS -j oe",
                f"#PBS -o {workdir}/job.log",
                'export PATH="$PBS_O_PATH"',
                f"cd {workdir}",
                f"distspec launch --launcher torchrun -- python {allreduce} > launch.out 2>&1",
                "echo $? > launch.rc",
                "",
            ]
        )
    )
    job = subprocess.run(
        ["qsub", str(script)], capture_output=True, text=True, check=True
    ).stdout.strip()
    _until((workdir / "launch.rc").exists, f"job {job} to end", timeout=180)
    out = (workdir / "launch.out").read_text()
    assert (workdir / "launch.rc").read_text().strip() == "0", out
    assert out.startswith(f"{BIN / 'python'} -m distspec.runtime.pbsdsh_hosts 0,2 -- "), out
    # Tasks that pbsdsh starts write to the job's output file (PBS's task manager), not
    # to launch's: the MoM copies it to -o when the job ends.
    log = workdir / "job.log"
    _until(log.exists, f"job {job}'s output file", timeout=60)
    text = log.read_text()
    results = sorted(re.findall(r"^allreduce rank=(\d) world=4 host=(\S+) .* sum=10$", text, re.M))
    assert results == [("0", "pbs0"), ("1", "pbs0"), ("2", "pbs1"), ("3", "pbs1")], text
