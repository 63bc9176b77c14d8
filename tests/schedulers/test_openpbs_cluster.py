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

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from distspec.schedulers.pbs import PbsScheduler
from distspec.specs import AppState
from tests.openpbs_cluster import require_openpbs_cluster
from tests.schedulers.batch_apps import FAILING_RANK, FAILING_RANK_CASES, processes_with
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

pytestmark = [pytest.mark.openpbs, pytest.mark.slow]

BIN = Path(sys.executable).parent
HOSTS = ("pbs0", "pbs1")
WORKLOAD = Path(__file__).resolve().parents[1] / "thirdparty" / "workloads" / "torchrun_ddp.py"


#: What runs on the hosts between jobs: OpenPBS's daemons and its datastore.
DAEMONS = {"pbs_comm", "pbs_mom", "pbs_sched", "pbs_ds_monitor", "postgres", "pbs_server.bin"}


def _left_on_the_hosts(bin_dir: Path, path: str) -> list[str]:
    """Jobs the server has not finished, and processes in the hosts' namespaces that
    are neither a daemon nor a namespace's anchor."""
    state = bin_dir.parent
    jobs = subprocess.run(
        ["qselect", "-s", "QRHTWEB"], env={**os.environ, "PATH": path},
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    left = [f"job {job}" for job in jobs]
    for host in HOSTS:
        anchor = (state / "run" / f"{host}.pid").read_text().strip()
        pids = subprocess.run(
            ["ip", "netns", "pids", f"distspec-{host}"], capture_output=True, text=True, check=False
        ).stdout.split()
        for pid in pids:
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if pid != anchor and comm not in DAEMONS:
                left.append(f"{host}: {pid} {comm}")
    return left


@pytest.fixture
def pbs_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """PATH with the cluster's client commands first, then this venv's. After the test,
    no job of it is left in the server and no process of it on either host."""
    bin_dir = require_openpbs_cluster()
    path = f"{bin_dir}:{BIN}:{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    yield path
    deadline = time.monotonic() + 60
    while (left := _left_on_the_hosts(bin_dir, path)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"left behind on the OpenPBS cluster: {left}"


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
    job = submit(sched, HELLO)
    assert re.fullmatch(r"\d+\.pbs0", job), job  # OpenPBS's own job ids
    assert check_hello(sched, job, workdir) in HOSTS


def test_a_failing_job_has_its_exit_status(sched: PbsScheduler) -> None:
    job = submit(sched, bash_app("fails", "echo about to fail; exit 7"))
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
    app = bash_app("sleeper", 'echo "on $(hostname)"; exec -a "$1" sleep 300', marker, nodes=2)
    job = submit(sched, app)
    record = sched._record(job)
    assert record is not None
    until(
        lambda: all(Path(record.folder, f"r-{i}.host").exists() for i in (0, 1)),
        "both replicas to start",
        timeout=90,
    )
    until(lambda: len(processes_with(marker)) == 2, "a sleeper on each host")
    hosts = sorted(Path(record.folder, f"r-{i}.host").read_text().strip() for i in (0, 1))
    assert hosts == list(HOSTS)  # place=scatter: one replica per host
    sched.cancel(job)
    status = sched.wait(job, timeout=90)
    assert status is not None and status.state is AppState.CANCELLED, status
    until(lambda: not processes_with(marker), "the sleepers on both hosts to be killed")
    until(lambda: job.split(".")[0] not in _qstat_jobs(pbs_path), "qstat to forget the job")


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
    app, points = SWEEP
    array, request = submit_array(sched, app, points)
    assert re.fullmatch(r"\d+\[\]\.pbs0", array), array  # OpenPBS's array id
    jobs = [sched.point_id(array, request, i) for i in range(5, 8)]
    number = array.split("[")[0]
    assert jobs == [f"{number}[{k}].pbs0" for k in range(3)]
    check_sweep(sched, jobs)


def test_after_waits_for_its_condition_and_an_unmeetable_one_never_runs(
    sched: PbsScheduler,
) -> None:
    """``#PBS -W depend=`` on the real server: afterok waits for the other job's end,
    afternotok on a failed job runs, and the server deletes an afterok on a failed job."""
    never, _ = run_dependencies(sched)
    status = sched.describe(never)
    assert status is not None
    assert "deleted before it started: it waited for afterok:" in status.msg, status.msg


def test_walltime_ends_the_job(sched: PbsScheduler) -> None:
    """The server ends a job past its walltime (``-l walltime``) with SIGTERM and
    Exit_status -29: ended from outside (cancelled, as Slurm's TIMEOUT), saying why."""
    marker = f"distspec-openpbs-{uuid.uuid4().hex}"
    job = submit(
        sched, bash_app("slow", 'echo started; exec -a "$1" sleep 300', marker), walltime="00:00:05"
    )
    status = sched.wait(job, timeout=120)
    assert status is not None and status.state is AppState.CANCELLED, status
    assert status.msg == "the job exceeded its walltime (Exit_status -29)", status.msg
    until(lambda: not processes_with(marker), "the sleeper to be killed")
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
    until((workdir / "launch.rc").exists, f"job {job} to end", timeout=180)
    out = (workdir / "launch.out").read_text()
    assert (workdir / "launch.rc").read_text().strip() == "0", out
    assert out.startswith(f"{BIN / 'python'} -m distspec.runtime.pbsdsh_hosts 0,2 -- "), out
    # Tasks that pbsdsh starts write to the job's output file (PBS's task manager), not
    # to launch's: the MoM copies it to -o when the job ends.
    log = workdir / "job.log"
    until(log.exists, f"job {job}'s output file", timeout=60)
    text = log.read_text()
    results = sorted(re.findall(r"^allreduce rank=(\d) world=4 host=(\S+) .* sum=10$", text, re.M))
    assert results == [("0", "pbs0"), ("1", "pbs0"), ("2", "pbs1"), ("3", "pbs1")], text


def test_qrerun_runs_the_job_again_and_its_end_is_the_last_runs(
    sched: PbsScheduler, tmp_path: Path, pbs_path: str
) -> None:
    """``qrerun`` SIGTERMs the running job (its trap records ``signal``) and the server
    runs the script again from the top: that run's success is the job's, the log keeps
    both runs, and the server's ``run_count`` 2 is one restart."""
    marker = tmp_path / "first-run"
    script = f"if [ -e {marker} ]; then echo second run; exit 0; fi; touch {marker}; echo first run; sleep 300"
    job = submit(sched, bash_app("rerun", script))
    until(marker.exists, "the first run")
    subprocess.run(["qrerun", job], check=True, timeout=60, capture_output=True)
    status = sched.wait(job, timeout=120)
    assert status is not None and status.state is AppState.SUCCEEDED, status
    assert status.num_restarts == 1, status
    assert list(sched.log_iter(job, "r", 0)) == ["first run", "second run"]
