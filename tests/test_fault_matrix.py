"""The fault matrix: fault x backend -> final state, exit code, leftovers (issue 15,
item 13; docs/reliability.md, "Fault matrix").

Every cell is a real ``distspec run --wait dist.ddp`` job of real torchrun processes:
``-j 1x2`` on local_cwd, ``-j 2x1`` (one rank on each node) on the local Slurm
cluster, ``-j 1x2`` through Slurm's PBS wrappers (``qsub``/``qstat``/``qdel``
translated to Slurm; they give a job no ``pbsdsh``, so a multi-node job cannot start
its nodes there), and ``-j 2x1`` on the real OpenPBS server of scripts/pbs-cluster
(backend ``openpbs``: ``-s pbs`` with its client commands first on PATH; pbsdsh starts
a torchrun on each host). Each rank writes
its pid and then waits for a ``go`` file, so the fault always strikes a running job
and nothing depends on timing. The faults:

- ``rank-exit``: rank 1 exits 7 (the others keep waiting);
- ``rank-exit-last``: the other ranks exit 0, then rank 1 exits 7 (node 0's
  torchrun agent is then waiting for node 1's in torchrun's exit barrier);
- ``rank-sigkill``: the test sends SIGKILL to rank 1's process;
- ``cancel``: ``distspec cancel HANDLE``;
- ``scheduler-kill``: the scheduler kills the job's processes: on Slurm and PBS
  ``scancel --signal=KILL JOBID`` (every process of every step; the PBS wrappers
  have no ``qsig``, so the Slurm command stands in for it), on OpenPBS ``qsig -s
  KILL JOBID`` (the job script's session), on local_cwd SIGKILL to the torchrun
  agent (the "node").

Recorded for each cell (``record_property``, read by ``scripts/reliability``): the
final state ``distspec status`` reports, ``run --wait``'s exit code, and the
leftovers: live processes whose command line names the test's folder, Slurm job
steps still listed, OpenPBS jobs not finished, and ``*.tmp`` files in the state
directory. Each cell asserts
its expected state and code and that nothing is left over.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.openpbs_cluster import require_openpbs_cluster
from tests.slurm_cluster import cluster_is_up, slurm_cluster_unavailable_reason

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.timeout(600)

BACKENDS = ("local_cwd", "slurm", "pbs", "openpbs")
FAULTS = ("rank-exit", "rank-exit-last", "rank-sigkill", "cancel", "scheduler-kill")

#: (final state, run --wait exit code) each cell must end with.
EXPECTED: dict[tuple[str, str], tuple[str, int]] = {
    **{(b, "rank-exit"): ("FAILED", 7) for b in BACKENDS},
    **{(b, "rank-exit-last"): ("FAILED", 7) for b in BACKENDS},
    **{(b, "rank-sigkill"): ("FAILED", 137) for b in BACKENDS},
    # run --wait exits 1 for a cancelled job (docs/cli.md, exit codes)
    **{(b, "cancel"): ("CANCELLED", 1) for b in BACKENDS},
    ("local_cwd", "scheduler-kill"): ("FAILED", 137),
    # scancel --signal=KILL: Slurm records the job CANCELLED (its own kill), as on PBS
    **{(b, "scheduler-kill"): ("CANCELLED", 1) for b in ("slurm", "pbs")},
    # OpenPBS's qsig -s KILL kills the script before it records its exit, and the server
    # still says Exit_status 0: failed, with no code of a rank's
    ("openpbs", "scheduler-kill"): ("FAILED", 1),
}

#: The job: write this rank's pid, wait for ``go``; rank 1 exits 7 if ``go`` says so.
SCRIPT = """\
import os, sys, time
from pathlib import Path
here = Path(sys.argv[1])
rank = os.environ["RANK"]
(here / f"pid.{rank}.tmp").write_text(str(os.getpid()))
os.replace(here / f"pid.{rank}.tmp", here / f"pid.{rank}")
while not (here / "go").exists():
    time.sleep(0.1)
what = (here / "go").read_text()
if rank == "1" and what == "exit7":
    sys.exit(7)
if what == "exit7-last":  # rank 1 exits 7 once every other rank has exited 0
    if rank != "1":
        sys.exit(0)
    for r in range(int(os.environ["WORLD_SIZE"])):
        while r != 1 and Path(f"/proc/{(here / f'pid.{r}').read_text()}").exists():
            time.sleep(0.1)
    sys.exit(7)
while True:
    time.sleep(0.1)
"""


def _until(check: Callable[[], bool], what: str, limit: float = 300) -> None:
    """Poll ``check`` (a generous limit: the cluster is shared; not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.2)


def _processes_naming(text: str) -> list[str]:
    """``PID ARGS`` of live processes (not this one) whose command line contains ``text``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            args = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if text in args and state != "Z":
            found.append(f"{name} {args.strip()}")
    return found


def _slurm_steps(job: str) -> list[str]:
    proc = subprocess.run(
        ["squeue", "--noheader", "--steps", "--jobs", job],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def _require(backend: str) -> str:
    """Skip unless ``backend`` can run here; the PATH to run its cell with."""
    path = f"{BIN}:{os.environ.get('PATH', '')}"
    if backend == "local_cwd":
        return path
    if backend == "openpbs":
        return f"{require_openpbs_cluster()}:{path}"
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        pytest.skip("the local Slurm cluster is not up (scripts/slurm-cluster up)")
    return path


def _pbs_unfinished(job: str, env: dict[str, str]) -> list[str]:
    """The OpenPBS job, if the server does not yet list it as finished."""
    proc = subprocess.run(
        ["qselect", "-s", "QRHTWE"], env=env, capture_output=True, text=True, check=False
    )
    return [f"job {job} not finished"] if job in proc.stdout.split() else []


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize(
    "backend",
    [
        "local_cwd",
        pytest.param("slurm", marks=pytest.mark.slurm),
        pytest.param("pbs", marks=pytest.mark.slurm),
        pytest.param("openpbs", marks=pytest.mark.openpbs),
    ],
)
def test_fault(
    backend: str,
    fault: str,
    tmp_path: Path,
    state_dir: Path,
    record_property: Callable[[str, object], None],
) -> None:
    path = _require(backend)
    here = tmp_path / "job"
    here.mkdir()
    script = here / "fault.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PATH": path}
    # PBS through the wrappers runs one node: a multi-node PBS job starts its nodes with
    # pbsdsh or mpiexec, and the Slurm wrappers provide neither on the job's PATH.
    j = "2x1" if backend in ("slurm", "openpbs") else "1x2"
    scheduler = "pbs" if backend == "openpbs" else backend
    cmd = [str(BIN / "distspec"), "run", "-s", scheduler, "--wait", "dist.ddp", "-j", j]
    # A port of the cell's own: the cluster is shared, and two multi-node jobs whose
    # first node is the same need different rendezvous ports (docs/reliability.md).
    port = 29600 + BACKENDS.index(backend) * len(FAULTS) + FAULTS.index(fault)
    cmd += ["--rdzv_port", str(port), "--script", str(script), "--", str(here)]
    run = subprocess.Popen(
        cmd, cwd=here, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    handle = ""
    try:
        assert run.stdout is not None
        handle = run.stdout.readline().strip()
        assert re.fullmatch(rf"{scheduler}://\S+/\S+", handle), handle
        app_id = handle.rsplit("/", 1)[1]

        def started() -> bool:
            if run.poll() is not None:
                out, err = run.communicate()
                pytest.fail(f"the job ended before both ranks started:\n{out}{err}")
            return all((here / f"pid.{r}").exists() for r in (0, 1))

        _until(started, "both ranks")
        pids = {r: int((here / f"pid.{r}").read_text()) for r in (0, 1)}
        if fault == "rank-exit":
            (here / "go").write_text("exit7")
        elif fault == "rank-exit-last":
            (here / "go").write_text("exit7-last")
        elif fault == "rank-sigkill":
            os.kill(pids[1], signal.SIGKILL)
        elif fault == "cancel":
            cancel = subprocess.run(
                [str(BIN / "distspec"), "cancel", handle],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert cancel.returncode == 0, cancel.stderr
        elif backend == "local_cwd":  # scheduler-kill: the node (torchrun agent) dies
            agent = int(Path(f"/proc/{pids[1]}/stat").read_text().rsplit(")", 1)[1].split()[1])
            os.kill(agent, signal.SIGKILL)
        elif backend == "openpbs":
            subprocess.run(["qsig", "-s", "KILL", app_id], env=env, check=True, timeout=60)
        else:
            subprocess.run(["scancel", "--signal=KILL", app_id], check=True, timeout=60)
        out, err = run.communicate(timeout=400)
        code = run.returncode
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
            if handle:
                subprocess.run([str(BIN / "distspec"), "cancel", handle], env=env, check=False)
    status = subprocess.run(
        [str(BIN / "distspec"), "status", handle],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = re.match(r"[A-Z_]+", status.stdout)
    state = said.group(0) if said else f"? {status.stdout}{status.stderr}"

    # Leftovers once the job has ended: processes still naming the job's folder (the
    # ranks, torchrun, srun, bash), Slurm steps, temp files. A killed process may take
    # a moment to be reaped, so what is left is what remains after up to 30 s.
    def leftovers() -> list[str]:
        procs = _processes_naming(str(here))
        steps = _slurm_steps(app_id) if backend in ("slurm", "pbs") else []
        steps += _pbs_unfinished(app_id, env) if backend == "openpbs" else []
        tmp_files = sorted(str(p.relative_to(state_dir)) for p in state_dir.rglob("*.tmp"))
        return procs + steps + tmp_files

    deadline = time.monotonic() + 30
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    record_property("backend", backend)
    record_property("fault", fault)
    record_property("state", state)
    record_property("exit_code", code)
    record_property("leftovers", "none" if not left else "; ".join(left))
    for line in left:  # never leave a process behind for the next test
        pid = line.split()[0]
        if pid.isdigit():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    want_state, want_code = EXPECTED[(backend, fault)]
    assert (state, code) == (want_state, want_code), out + err
    assert not left, left
