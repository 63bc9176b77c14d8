"""The Slurm backend on the real local two-node cluster (scripts/slurm-cluster).

Mode-agnostic tests use the cluster in whatever accounting mode it is in (switching
restarts every daemon); the two mode-specific tests come last and ask for theirs.
"""

from __future__ import annotations

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

from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppDef, AppState, AppStatus, Role
from tests.schedulers.batch_apps import (
    FAILING_RANK,
    FAILING_RANK_CASES,
    assert_private,
    private_modes,
    processes_with,
    report_then_plain,
)
from tests.slurm_cluster import (
    cluster_has_accounting,
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def cluster() -> None:
    """The cluster up in either accounting mode, or a skip with the reason."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()


@pytest.fixture
def env(state_dir: Path) -> dict[str, str]:
    """The CLI's environment: a private state dir, and torchrun on PATH for the job."""
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}


def _cli(
    args: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _handle(stdout: str) -> str:
    match = re.search(r"slurm://\S+", stdout)
    assert match, stdout
    return match.group(0)


def _until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.3)


def _sleeper(marker: str, nodes: int = 2) -> AppDef:
    return AppDef(
        name="sleeper",
        roles=(
            Role(
                name="s",
                entrypoint="bash",
                args=("-c", 'echo "started on $(hostname)"; exec -a "$1" sleep 300', "x", marker),
                num_replicas=nodes,
            ),
        ),
    )


def _submit(sched: SlurmScheduler, app: AppDef, **opts: str) -> str:
    return sched.submit(sched.compile(app, sched.parse_options(opts), app_id=f"{app.name}-t"))


def _running_everywhere(sched: SlurmScheduler, job: str, replicas: int) -> bool:
    """Every replica's task has started (its .host file exists): the batch script is past
    its traps and srun has launched."""
    status = sched.describe(job)
    assert status is not None
    if status.is_terminal:
        pytest.fail(f"job {job} ended early: {status.format()}")
    record = sched._record(job)
    assert record is not None
    started = [
        Path(record.folder, f"{r.role}-{r.id}.host").exists() for r in status.roles[0].replicas
    ]
    return status.state is AppState.RUNNING and len(started) == replicas and all(started)


def test_ddp_2x2_real_rendezvous_and_logs_from_another_cwd(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    proc = _cli(
        [
            "run",
            "-s",
            "slurm",
            "--wait",
            "dist.ddp",
            "-j",
            "2x2",
            "--script",
            "examples/train_ddp.py",
            "--",
            "--steps",
            "30",
            "--checkpoint",
            "none",
        ],
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = _handle(proc.stdout)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = _cli(["describe", handle], env=env, cwd=elsewhere)
    assert status.returncode == 0, status.stderr
    assert "SUCCEEDED" in status.stdout
    hosts = set(re.findall(r"host=(n\d)", status.stdout))
    assert hosts == {"n0", "n1"}, status.stdout
    logs = _cli(["log", handle], env=env, cwd=elsewhere)
    assert logs.returncode == 0, logs.stderr
    # Both replicas' files are read, and four ranks met across the two nodes.
    prefixes = set(re.findall(r"^(\S+/[01])(?: rank \d)?\| ", logs.stdout, re.M))
    assert len(prefixes) == 2, logs.stdout
    assert "world_size=4 backend=gloo" in logs.stdout
    assert "done: loss" in logs.stdout


_MEET = """
import os, sys, time, pathlib
import torch, torch.distributed as dist
dist.init_process_group("gloo")
meet = pathlib.Path(sys.argv[1])
if dist.get_rank() == 0:
    (meet / os.environ["SLURM_JOB_ID"]).touch()
deadline = time.monotonic() + 150
while len(list(meet.iterdir())) < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
total = torch.ones(1)
dist.all_reduce(total)
print(f"job={os.environ['SLURM_JOB_ID']} port={os.environ['MASTER_PORT']} "
      f"met={len(list(meet.iterdir()))} sum={total.item():.0f}", flush=True)
dist.destroy_process_group()
"""


def test_two_multi_node_jobs_on_the_same_first_node_each_get_their_own_port(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    """Two 2-node jobs at once share n0 as their rank-0 host. With one fixed port the
    second fails at start (static: EADDRINUSE) or joins the first's store (c10d); each
    job's own port (29500 + job id % 2000) keeps them apart. Each job waits, its store
    up, until both have started, so they are certainly running at the same time."""
    script = tmp_path / "meet.py"
    script.write_text(_MEET)
    meet = tmp_path / "meet"
    meet.mkdir()
    cmd = [str(BIN / "distspec"), "run", "-s", "slurm", "--wait", "--log", "dist.ddp", "-j", "2x1"]
    cmd += ["--script", str(script), "--", str(meet)]
    procs = [
        subprocess.Popen(
            cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    for proc, out in zip(procs, outs, strict=True):
        assert proc.returncode == 0, out
    found = [re.search(r"job=(\d+) port=(\d+) met=(\d+) sum=(\d+)", out) for out in outs]
    assert all(found), outs
    jobs = [(int(m.group(1)), int(m.group(2))) for m in found if m]
    assert [m.group(3) for m in found if m] == ["2", "2"], outs  # both were running at once
    assert [m.group(4) for m in found if m] == ["2", "2"], outs  # and each met its own 2 ranks
    assert [port for _, port in jobs] == [29500 + job % 2000 for job, _ in jobs], jobs
    assert jobs[0][1] != jobs[1][1], jobs


def test_a_failing_rank_fails_the_job_and_is_named(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        "import os, sys\n"
        "rank = int(os.environ['RANK'])\n"
        "print(f'rank {rank} here', flush=True)\n"
        "sys.exit(3 if rank == 3 else 0)\n"
    )
    proc = _cli(
        ["run", "-s", "slurm", "--wait", "dist.ddp", "-j", "2x2", "--script", "fail.py"],
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    # The summary names the failed replica, the rank torchrun reports as the root
    # cause, and shows that rank's own last lines.
    assert re.search(
        r"FAILED after \S+: \S+/[01] rank 3 on n[01] exited with [1-9]", proc.stderr
    ), proc.stderr
    assert "--- rank 3: last line ---\nrank 3 here\n---" in proc.stderr, proc.stderr


def test_cancel_leaves_no_task_on_either_node(cluster: None, state_dir: Path) -> None:
    sched = SlurmScheduler(state_dir=state_dir)
    marker = f"distspec-cancel-{uuid.uuid4().hex}"
    job = _submit(sched, _sleeper(marker))
    _until(lambda: _running_everywhere(sched, job, 2), "both replicas to run")
    _until(lambda: len(processes_with(marker)) >= 2, "both sleepers to start")
    sched.cancel(job)
    status = sched.wait(job, timeout=60)
    assert status is not None and status.state is AppState.CANCELLED, status
    _until(lambda: not processes_with(marker), "the tasks to be killed")
    steps = subprocess.run(
        ["squeue", "--noheader", "--steps", "--jobs", job],
        capture_output=True,
        text=True,
        check=False,
    )
    assert steps.stdout.strip() == ""
    sched.cancel(job)  # cancelling an ended job is a no-op


def test_requeue_on_the_signal(cluster: None, state_dir: Path) -> None:
    sched = SlurmScheduler(state_dir=state_dir)
    # The sleeper never looks at the pre-emption flag: it is requeued at the trap's
    # deadline, half of requeue_before after the signal.
    job = _submit(
        sched,
        _sleeper(f"distspec-requeue-{uuid.uuid4().hex}", 1),
        requeue="true",
        time="10",
        requeue_before="20",
    )
    try:
        _until(lambda: _running_everywhere(sched, job, 1), "the job to run")
        # What Slurm does requeue_before seconds ahead of the time limit.
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)

        def requeued() -> bool:
            status = sched.describe(job)
            assert status is not None
            return status.num_restarts >= 1 and status.state is AppState.PENDING

        _until(requeued, f"the job to be requeued: {sched.describe(job)}")
        batch_log = next((state_dir / "slurm").glob(f"sleeper-{job}.out")).read_text()
        assert f"requeueing job {job}" in batch_log
    finally:
        sched.cancel(job)


@pytest.mark.parametrize("unbuffered", [True, False])
def test_output_is_live_unless_unbuffered_is_off(
    cluster: None,
    state_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unbuffered: bool,
) -> None:
    # The job inherits sbatch's environment: only the run option may make it unbuffered.
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    marker = tmp_path / "printed"
    program = (
        "import pathlib, sys, time; print('first line'); "
        "pathlib.Path(sys.argv[1]).write_text('x'); time.sleep(300)"
    )
    app = AppDef(
        name="live",
        roles=(Role(name="r", entrypoint="python3", args=("-c", program, str(marker))),),
    )
    sched = SlurmScheduler(state_dir=state_dir)
    job = _submit(sched, app, unbuffered=str(unbuffered).lower())
    try:
        # The marker is written after the print: whatever the log holds then, the print
        # put there (a block-buffered stdout holds its line until the buffer fills).
        _until(marker.exists, "the program to print its line")
        lines = list(sched.log_iter(job, "r", 0))
        assert ("first line" in lines) is unbuffered, lines
    finally:
        sched.cancel(job)


def _short_job(sched: SlurmScheduler) -> tuple[str, AppStatus]:
    app = AppDef(name="short", roles=(Role(name="r", entrypoint="true", num_replicas=2),))
    job = _submit(sched, app)
    status = sched.wait(job, timeout=120)
    assert status is not None
    return job, status


def test_status_and_list_through_squeue_and_scontrol(cluster: None, state_dir: Path) -> None:
    sched = SlurmScheduler(state_dir=state_dir)
    sched._accounting = False  # as on a cluster without slurmdbd, whatever this one has
    before = time.time()
    job, status = _short_job(sched)
    after = time.time()
    assert status.state is AppState.SUCCEEDED, status.format()
    assert [r.exit_code for r in status.roles[0].replicas] == [0, 0]
    listed = {a.app_id: a for a in sched.list()}
    assert job in listed
    # squeue's submit and end times (whole seconds, local time) as POSIX times: a wrong
    # time zone or format would put them hours away or drop them.
    submitted, ended = (float(listed[job].extra[k]) for k in ("submitted", "ended"))
    assert before - 2 <= submitted <= ended <= after + 2, (before, submitted, ended, after)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    shown = _cli(["list", "-s", "slurm", "--json"], env=env, cwd=state_dir.parent)
    assert shown.returncode == 0, shown.stderr
    row = next(r for r in json.loads(shown.stdout) if r["app_id"] == job)
    assert row["submitted"] == submitted and row["duration"] == ended - submitted
    table = _cli(["list", "-s", "slurm"], env=env, cwd=state_dir.parent)
    line = next(x for x in table.stdout.splitlines() if f"/{job} " in x)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(submitted))
    assert re.search(rf"SUCCEEDED\s+{when}\s+\d+\.\ds\s+short", line), table.stdout


def test_status_and_list_with_accounting(state_dir: Path) -> None:
    require_slurm_cluster(accounting=True)
    sched = SlurmScheduler(state_dir=state_dir)
    job, status = _short_job(sched)
    assert sched._accounting is True
    assert status.state is AppState.SUCCEEDED, status.format()
    # slurmdbd may lag the controller by a moment.
    _until(lambda: job in {a.app_id for a in sched.list()}, "sacct to list the job")
    apps = {a.app_id: a for a in sched.list()}
    assert apps[job].state is AppState.SUCCEEDED


def test_status_and_list_without_accounting(state_dir: Path) -> None:
    require_slurm_cluster(accounting=False)
    assert not cluster_has_accounting()
    sched = SlurmScheduler(state_dir=state_dir)
    job, status = _short_job(sched)
    assert sched._accounting is False
    assert status.state is AppState.SUCCEEDED, status.format()
    apps = {a.app_id: a for a in sched.list()}
    assert apps[job].state is AppState.SUCCEEDED


@pytest.mark.parametrize(
    ("how", "code", "said"),
    FAILING_RANK_CASES,
)
def test_run_wait_exits_with_the_ranks_own_code_or_signal(
    cluster: None, env: dict[str, str], tmp_path: Path, how: str, code: int, said: str
) -> None:
    """torchrun exits 1 whatever its worker did; the worker's code (or signal) comes
    from torchrun's root-cause report in the replica's log, as on local_cwd."""
    (tmp_path / "fail.py").write_text(FAILING_RANK)
    proc = _cli(
        ["run", "-s", "slurm", "--wait", "dist.ddp", "-j", "1x2", "--script", "fail.py", "--", how],
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert re.search(rf"FAILED after \S+: \S+/0 rank 1 on n[01] {re.escape(said)}", proc.stderr), (
        proc.stderr
    )
    assert "torchrun exited with 1" in proc.stderr, proc.stderr
    if how == "raise":
        # The summary quotes the error, not the warning the rank printed after it.
        assert "its last line: ValueError: the real error" in proc.stderr, proc.stderr


def test_a_retry_reports_the_last_attempts_failure(
    cluster: None, state_dir: Path, tmp_path: Path
) -> None:
    """#15: the log holds both attempts; the status is the last one's (4), not the
    first attempt's torchrun report (rank 1 exited with 7)."""
    sched = SlurmScheduler(state_dir=state_dir)
    job = _submit(sched, report_then_plain(tmp_path))
    status = sched.wait(job, timeout=180)
    assert status is not None and status.state is AppState.FAILED, status
    replica = status.roles[0].replicas[0]
    assert (replica.exit_code, replica.reason) == (4, "exited with 4"), status.format()
    assert status.num_restarts == 1
    log = "\n".join(sched.log_iter(job, "r", 0))
    assert "exitcode  : 7" in log and "attempt 1 fails without a report" in log


def test_job_dir_folder_script_and_record_are_private(cluster: None, state_dir: Path) -> None:
    """The script holds the job's --env values and the folder its logs: 0700 folders,
    0600 files, whatever the umask (here the permissive 022)."""
    old = os.umask(0o022)
    try:
        sched = SlurmScheduler(state_dir=state_dir)
        _job, status = _short_job(sched)
    finally:
        os.umask(old)
    assert status.state is AppState.SUCCEEDED, status
    assert status.location
    modes = private_modes(state_dir, "slurm", status.location)
    assert any(p.endswith(".sbatch") for p in modes) and any(p.endswith(".json") for p in modes)
    assert_private(modes)


def test_job_dir_holds_script_and_logs_and_the_job_runs_where_it_was_submitted(
    cluster: None, env: dict[str, str], tmp_path: Path
) -> None:
    """``-cfg job_dir=DIR`` is where the script and logs go, not the job's working
    directory (TorchX's job_dir is both: it copies the workspace there and runs the job
    with ``sbatch --chdir``; docs/migrating-from-torchx.md names the difference). A
    relative script path is found where ``distspec run`` ran."""
    work, jobs = tmp_path / "work", tmp_path / "jobs"
    work.mkdir()
    (work / "where.py").write_text("import os\nprint('cwd=' + os.getcwd(), flush=True)\n")
    proc = _cli(
        [
            *("run", "-s", "slurm", "--wait", "--log", "-cfg", f"job_dir={jobs}"),
            *("dist.ddp", "-j", "1x1", "--script", "where.py"),
        ],
        env=env,
        cwd=work,
        timeout=600,  # the shared cluster may be busy with other jobs
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"cwd={work}" in proc.stdout, proc.stdout
    assert list(jobs.glob("*.sbatch")), list(jobs.iterdir())
    # The code snapshot's store is there too (job_dir is on the file system the nodes share).
    assert (jobs / "snapshots" / "trees").is_dir()
    (folder,) = [p for p in jobs.iterdir() if p.is_dir() and p.name != "snapshots"]
    assert f"cwd={work}" in (folder / "where-0.log").read_text()
