"""Integration tests of the local two-node Slurm cluster (scripts/slurm-cluster).

They run real jobs on real slurmctld/slurmd daemons, each node in its own
network namespace, so they check what the Slurm backend relies on: multi-node
allocation, a TCP rendezvous between nodes, cancellation and, with accounting,
the exit codes sacct reports.

Tests without accounting run first; the accounting ones restart the cluster
with slurmdbd and the module puts it back without accounting at the end.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm_cluster import (
    cluster_has_accounting,
    cluster_is_up,
    require_slurm_cluster,
)

pytestmark = pytest.mark.slurm

JOB_TIMEOUT_S = 120


def _run(*argv: str, timeout: float = JOB_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _sbatch(
    *argv: str, timeout: float = JOB_TIMEOUT_S
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Run sbatch --parsable; returns (job id, the completed sbatch)."""
    proc = _run("sbatch", "--parsable", *argv, timeout=timeout)
    assert proc.stdout.strip(), f"sbatch printed no job id: rc={proc.returncode} {proc.stderr}"
    return int(proc.stdout.strip().split(";")[0]), proc


def _job_state(job_id: int) -> str:
    # MinJobAge=600 keeps finished jobs visible to squeue for 10 minutes.
    proc = _run("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T", timeout=30)
    return proc.stdout.strip()


def _wait_state(job_id: int, wanted: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = _job_state(job_id)
        if state in wanted:
            return state
        time.sleep(0.1)
    raise AssertionError(
        f"job {job_id} is {state or 'unknown'}, not {sorted(wanted)}, after {timeout}s"
    )


@pytest.fixture(scope="module", autouse=True)
def _restore_mode() -> Iterator[None]:
    """Leave the shared cluster in the mode this module found it in."""
    if os.environ.get("DISTSPEC_SLURM_CLUSTER", "1") == "0":
        yield
        return
    was_up = cluster_is_up()
    had_accounting = was_up and cluster_has_accounting()
    yield
    if was_up and cluster_has_accounting() != had_accounting:
        require_slurm_cluster(accounting=had_accounting)


@pytest.fixture
def cluster() -> None:
    require_slurm_cluster(accounting=False)


@pytest.fixture
def accounting_cluster() -> None:
    require_slurm_cluster(accounting=True)


def test_two_node_job_runs_one_task_per_node(cluster: None, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsrun hostname\n")
    out = tmp_path / "job.out"
    job_id, proc = _sbatch(
        "--wait", "--nodes=2", "--ntasks-per-node=1", f"--output={out}", str(script)
    )
    assert proc.returncode == 0, (
        f"job {job_id}: rc={proc.returncode} {proc.stderr}\n{out.read_text()}"
    )
    assert sorted(out.read_text().split()) == ["n0", "n1"]
    assert _job_state(job_id) == "COMPLETED"


def test_node_reaches_tcp_port_on_first_node(cluster: None, tmp_path: Path) -> None:
    # Each task learns the rendezvous host as a launcher would: the first
    # hostname of the allocation. The server prints the peer it accepted.
    prog = tmp_path / "rendezvous.py"
    prog.write_text(
        "import socket, sys, time\n"
        "head, port = sys.argv[1], int(sys.argv[2])\n"
        "me = socket.gethostname()\n"
        "if me == head:\n"
        "    srv = socket.create_server(('0.0.0.0', port))\n"
        "    srv.settimeout(60)\n"
        "    conn, peer = srv.accept()\n"
        "    msg = conn.recv(100).decode()\n"
        "    print(f'server {me} got {msg!r} from {peer[0]}', flush=True)\n"
        "else:\n"
        "    deadline = time.monotonic() + 60\n"
        "    while True:\n"
        "        try:\n"
        "            sock = socket.create_connection((head, port), timeout=5)\n"
        "            break\n"
        "        except OSError:\n"
        "            if time.monotonic() > deadline:\n"
        "                raise\n"
        "            time.sleep(0.1)\n"
        "    sock.sendall(f'hello from {me}'.encode())\n"
        "    print(f'client {me} connected to {head}', flush=True)\n"
    )
    port = random.randint(20000, 29999)
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)\n'
        f'srun --nodes=2 --ntasks=2 --ntasks-per-node=1 {sys.executable} {prog} "$head" {port}\n'
    )
    out = tmp_path / "job.out"
    job_id, proc = _sbatch(
        "--wait", "--nodes=2", "--ntasks-per-node=1", f"--output={out}", str(script)
    )
    text = out.read_text()
    assert proc.returncode == 0, f"job {job_id}: rc={proc.returncode} {proc.stderr}\n{text}"
    lines = sorted(text.splitlines())
    assert lines == [
        "client n1 connected to n0",
        "server n0 got 'hello from n1' from 10.200.0.11",
    ], text


def test_scancel_cancels_running_job_on_both_nodes(cluster: None, tmp_path: Path) -> None:
    # A sleep length unique to this test run, so we can look for its processes
    # (srun resolves the command: they show as /usr/bin/sleep N).
    marker = str(random.randint(100000, 999999))
    job_id, proc = _sbatch(
        "--nodes=2",
        "--ntasks-per-node=1",
        f"--output={tmp_path / 'job.out'}",
        f"--wrap=srun sleep {marker}",
    )
    assert proc.returncode == 0, proc.stderr
    _wait_state(job_id, {"RUNNING"})
    # Wait for the step's tasks on both nodes before cancelling.
    deadline = time.monotonic() + 30
    while _run("pgrep", "-c", "-f", f"(^|/)sleep {marker}$").stdout.strip() != "2":
        assert time.monotonic() < deadline, "srun tasks did not start on both nodes"
        time.sleep(0.1)
    cancel = _run("scancel", str(job_id))
    assert cancel.returncode == 0, cancel.stderr
    assert _wait_state(job_id, {"CANCELLED", "COMPLETED", "FAILED"}) == "CANCELLED"
    deadline = time.monotonic() + 30
    while _run("pgrep", "-f", f"(^|/)sleep {marker}$").returncode == 0:
        assert time.monotonic() < deadline, "tasks survived scancel"
        time.sleep(0.1)


def test_sacct_fails_without_accounting(cluster: None) -> None:
    assert not cluster_has_accounting()
    proc = _run("sacct", "--parsable2", "-X", timeout=30)
    assert proc.returncode != 0, proc.stdout


def test_qsub_wrapper_sets_pbs_variables(cluster: None, tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    script = tmp_path / "job.pbs"
    script.write_text('#!/bin/bash\n#PBS -N distspec-qsub\necho "$PBS_JOBID $PBS_JOBNAME"\n')
    # `#PBS -o` is overridden by the wrapper's own default; -o on the command line works.
    err = tmp_path / "job.err"
    # Without -e the wrapper writes job.pbs.e<ID> into the submitting directory.
    proc = _run("qsub", "-l", "nodes=2:ppn=1", "-o", str(out), "-e", str(err), str(script))
    assert proc.returncode == 0, proc.stderr
    job_id = int(proc.stdout.strip())
    assert _wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED"}) == "COMPLETED"
    assert out.read_text().split() == [str(job_id), "distspec-qsub"]


# Accounting: these restart the cluster with slurmdbd, so they come last.


def test_sacct_reports_exit_code_of_failed_job(accounting_cluster: None) -> None:
    assert cluster_has_accounting()
    job_id, proc = _sbatch("--wait", "--nodes=1", "--output=/dev/null", "--wrap=exit 3")
    assert proc.returncode == 3, proc.stderr
    # slurmctld sends the job's end to slurmdbd asynchronously.
    deadline = time.monotonic() + 30
    while True:
        sacct = _run(
            "sacct",
            "--parsable2",
            "-X",
            "-n",
            "-j",
            str(job_id),
            "--format=JobID,State,ExitCode",
            timeout=30,
        )
        assert sacct.returncode == 0, sacct.stderr
        if sacct.stdout.strip() not in ("", f"{job_id}|RUNNING|0:0") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sacct.stdout.strip() == f"{job_id}|FAILED|3:0"
