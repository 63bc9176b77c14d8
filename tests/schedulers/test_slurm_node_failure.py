"""Bad nodes left behind (``-cfg exclude_failed_nodes``, on with ``requeue=true``), on the
real local cluster's ``faults`` partition (n2, n3 and n4, which no other test uses;
scripts/slurm-cluster).

A 2-node job starts on n2 and n3 (Slurm takes idle nodes in order) and one of them
dies (every process in its namespace is killed: slurmd, slurmstepd, the task). Slurm
sets the node DOWN and requeues the job. When n3 died, the batch script on n2 sets
``ExcNodeList=n3`` before it ends; when n2 (the batch host) died, the script died with
it and the next attempt's first lines find n2 among the last attempt's nodes. Either
way the next attempt runs on the two others and finishes. The dead node is brought
back afterwards, even when the test fails. The bad-input cases of the option are at
the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from distspec.cli.main import main
from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppDef, Role
from tests.slurm_cluster import SCRIPT, submitted, succeeded, until, use_slurm_cluster

PARTITION = "faults"
NODES = ("n2", "n3", "n4")


def _node_state(node: str) -> str:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-n", node, "-p", PARTITION, "-o", "%t"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip()


def _restore() -> None:
    """Every slurmd running again (``up`` starts what is not running) and the faults
    partition's nodes back in service. (A test session that finds the cluster down runs
    ``up`` too, which would revive a killed node early; a dead node of this partition
    does not make the cluster count as down.)"""
    subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=300, check=False)
    for node in NODES:
        if _node_state(node) not in {"idle", "mix", "alloc"}:
            subprocess.run(
                ["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                capture_output=True,
                check=False,
            )
    until(
        lambda: all(_node_state(n) in {"idle", "mix", "alloc"} for n in NODES),
        f"{NODES} back in service",
        60,
    )


@pytest.fixture
def faults_partition() -> Iterator[None]:
    """The cluster up with its faults partition, whose nodes are restored at the end."""
    use_slurm_cluster()
    if any(_node_state(n) != "idle" for n in NODES):
        # Left down by an earlier run, or a cluster brought up by an older
        # scripts/slurm-cluster, without the faults partition: `up` restarts its daemons
        # with the new slurm.conf. Idle, not still completing a job, or the job may
        # start elsewhere than on n2.
        _restore()
        until(lambda: all(_node_state(n) == "idle" for n in NODES), f"{NODES} idle", 60)
    try:
        yield
    finally:
        _restore()


def _worker() -> AppDef:
    """2 nodes; each replica prints its host and a step a second: for 5 min on the
    first attempt (a node dies in it), for 3 s on the next."""
    body = (
        "n=$(( ${SLURM_RESTART_COUNT:-0} > 0 ? 3 : 300 )); "
        'echo "attempt ${SLURM_RESTART_COUNT:-0} on $(hostname)"; '
        'for i in $(seq "$n"); do echo "step $i"; sleep 1; done'
    )
    return AppDef(
        name="nodefail",
        roles=(
            Role(
                name="w",
                entrypoint="bash",
                args=("-c", body),
                num_replicas=2,
            ),
        ),
    )


@pytest.mark.slurm
@pytest.mark.parametrize("dead", ["n3", "n2"], ids=["a-node", "the-batch-host"])
def test_a_dead_node_is_left_behind_by_the_requeued_job(
    dead: str, faults_partition: None, state_dir: Path
) -> None:
    sched = SlurmScheduler(state_dir=state_dir)
    opts = sched.parse_options({"requeue": "true", "partition": PARTITION})
    job = sched.submit(sched.compile(_worker(), opts, app_id="nodefail-t"))
    record = sched._record(job)
    assert record is not None
    folder = Path(record.folder)
    try:

        def on_two_nodes() -> bool:
            status = sched.describe(job)
            assert status is not None and not status.is_terminal, status
            hosts = [folder / f"w-{i}.host" for i in range(2)]
            return all(h.exists() and h.read_text().strip() for h in hosts)

        until(on_two_nodes, "the job to run", 60)
        first = sorted((folder / f"w-{i}.host").read_text().strip() for i in range(2))
        assert first == ["n2", "n3"], first
        subprocess.run([str(SCRIPT), "kill-node", dead], check=True, capture_output=True)

        # ~25 s until the node is DOWN (SlurmdTimeout=10), 31 s before a requeued job
        # may start (cred_expire=30).
        until(succeeded(sched, job), f"the requeued job to finish: {sched.describe(job)}", 150)
        show = subprocess.run(
            ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=True
        ).stdout
        assert " Restarts=1 " in show, show
        assert sorted(set((folder / "bad_nodes").read_text().split())) == [dead]
        assert (folder / "restart_reason").read_text().strip() == "node-failure"
        others = sorted({"n2", "n3", "n4"} - {dead})
        hosts = sorted(p.read_text().strip() for p in folder.glob("w-*.host"))
        # The last attempt cleared the first one's files: two replicas, on the others.
        assert hosts == others, hosts
        logs = "".join(p.read_text() for p in sorted(folder.glob("w-*.log")))
        assert all(f"attempt 1 on {n}" in logs for n in others), logs
        assert f"attempt 1 on {dead}" not in logs, logs
        batch_log = next((state_dir / "slurm").glob(f"nodefail-{job}.out")).read_text()
        if dead == "n3":
            # The batch script saw it: the next attempt was queued without it.
            assert f" ExcNodeList={dead} " in show, show
            assert f"distspec: node(s) {dead} failed" in batch_log, batch_log
            assert f"job {job} requeued without {dead}" in batch_log, batch_log
        else:
            assert f"distspec: node(s) {dead} of the last attempt failed" in batch_log, batch_log
    finally:
        sched.cancel(job)


# -- spare nodes (--spares): the job goes on inside its allocation ----------------------

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.slurm
@pytest.mark.torch
def test_with_a_spare_the_job_goes_on_from_its_checkpoint_in_the_same_allocation(
    faults_partition: None, state_dir: Path
) -> None:
    """A 2x1 train_ddp job with ``--spares 1`` gets n2-n4 and runs on n2 and n3; n3 dies
    after a checkpoint. Its step fails once slurmctld has n3 DOWN (~25 s), and the
    script runs it again at once on n2 and n4 in the same allocation: no requeue, the
    run resumes from its last checkpoint, as attempt 1 for a node failure."""
    marker = f"spares-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(
        [str(BIN / "distspec"), "run", "-s", "slurm", "--spares", "1", "-cfg",
         f"partition={PARTITION}", "dist.ddp", "-j", "2x1", "--name", marker, "--script",
         "examples/train_ddp.py", "--", "--steps", "200", "--log-every", "10",
         "--save-every", "20", "--step-delay", "0.1", "--checkpoint", "none"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job, folder = submitted(proc.stdout, state_dir)
    sched = SlurmScheduler(state_dir=state_dir)
    rank0 = folder / "train_ddp-0.log"
    try:

        def saved() -> bool:
            status = sched.describe(job)
            assert status is not None and not status.is_terminal, status
            return rank0.exists() and "saved step 40\n" in rank0.read_text()

        until(saved, "the job to save step 40", 90)
        hosts = sorted((folder / f"train_ddp-{i}.host").read_text().strip() for i in range(2))
        assert hosts == ["n2", "n3"], hosts
        subprocess.run([str(SCRIPT), "kill-node", "n3"], check=True, capture_output=True)
        killed = time.monotonic()

        until(succeeded(sched, job), f"the job to finish on the spare: {sched.describe(job)}", 150)
        took = time.monotonic() - killed
        show = subprocess.run(
            ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=True
        ).stdout
        assert " Restarts=0 " in show, show  # never went back to the queue
        batch_log = next((state_dir / "slurm").glob(f"{marker}-{job}.out")).read_text()
        assert "distspec: node(s) n3 of the step failed" in batch_log, batch_log
        assert "distspec: attempt 1 runs on n2,n4" in batch_log, batch_log
        assert (folder / "bad_nodes").read_text().split() == ["n3"]
        assert (folder / "restart_reason").read_text().strip() == "node-failure"
        assert (folder / "attempt").read_text().strip() == "1"
        hosts = sorted((folder / f"train_ddp-{i}.host").read_text().strip() for i in range(2))
        assert hosts == ["n2", "n4"], hosts
        log = rank0.read_text()
        resumed = re.findall(r"resuming from step (\d+) \(attempt (\d+), reason (\S+)\)", log)
        assert len(resumed) == 1, log
        step, attempt, reason = resumed[0]
        assert (
            int(step) >= 40 and int(step) % 20 == 0 and (attempt, reason) == ("1", "node-failure")
        )
        assert len(re.findall(r"step +1 +loss", log)) == 1, log  # step 1 ran once
        assert "step   200  loss" in log and "done: loss" in log, log
        print(f"killed n3 at step >= 40; finished {took:.0f} s later, resumed from {step}")
    finally:
        sched.cancel(job)


@pytest.mark.slurm
def test_with_spares_a_dead_batch_host_ends_the_job_at_once(
    faults_partition: None, state_dir: Path
) -> None:
    """Under --no-kill slurmctld keeps a job whose batch host died RUNNING, with no
    script, until its time limit; the guard step on another node cancels it once the
    host is bad (requeue=true would requeue it without the host, but the faults
    partition has no fourth node to run 2 + 1 spare on)."""
    sched = SlurmScheduler(state_dir=state_dir)
    opts = sched.parse_options({"partition": PARTITION, "spares": "1", "time": "5"})
    job = sched.submit(sched.compile(_worker(), opts, app_id="nodefail-t"))
    record = sched._record(job)
    assert record is not None
    folder = Path(record.folder)
    try:

        def running() -> bool:
            status = sched.describe(job)
            assert status is not None and not status.is_terminal, status
            return all((folder / f"w-{i}.host").exists() for i in range(2))

        until(running, "the job to run", 60)
        subprocess.run([str(SCRIPT), "kill-node", "n2"], check=True, capture_output=True)
        killed = time.monotonic()

        def ended() -> bool:
            status = sched.describe(job)
            assert status is not None
            return status.is_terminal

        until(ended, f"the job to end: {sched.describe(job)}", 60)
        took = time.monotonic() - killed
        assert (folder / "bad_nodes").read_text().split() == ["n2"]
        batch_log = next((state_dir / "slurm").glob(f"nodefail-{job}.out")).read_text()
        assert "distspec: the batch host n2 failed" in batch_log, batch_log
        print(f"the batch host n2 killed; the job ended {took:.0f} s later")
    finally:
        sched.cancel(job)


# -- bad input: one line, exit 2, nothing submitted --------------------------------------


@pytest.mark.parametrize("value", ["perhaps", "2", ""])
def test_exclude_failed_nodes_takes_a_boolean(
    value: str,
    tmp_path: Path,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DISTSPEC_TORCHXCONFIG", "off")
    monkeypatch.chdir(tmp_path)
    state_dir.mkdir(parents=True, exist_ok=True)
    before = sorted(p.relative_to(state_dir) for p in state_dir.rglob("*"))
    argv = ["run", "-s", "slurm", "-cfg", f"requeue=true,exclude_failed_nodes={value}"]
    argv += ["dist.ddp", "-j", "1x1", "--script", "train.py"]
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    out, err = capfd.readouterr()
    assert code == 2, (out, err)
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("distspec"), err
    assert "exclude_failed_nodes" in lines[0], err
    assert "Traceback" not in err and out == ""
    assert sorted(p.relative_to(state_dir) for p in state_dir.rglob("*")) == before


def test_off_without_requeue_or_when_asked() -> None:
    """The script has the lines only with requeue and without exclude_failed_nodes=false."""
    sched = SlurmScheduler(state_dir=Path(os.devnull))
    app = _worker()

    def script(**cfg: str) -> str:
        request = sched.compile(app, sched.parse_options(cfg), app_id="nodefail-t")
        return request.files[request.main_file]

    assert "distspec_leave_bad_nodes" in script(requeue="true")
    assert "distspec_leave_bad_nodes" not in script()
    assert "distspec_leave_bad_nodes" not in script(requeue="true", exclude_failed_nodes="false")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
