"""``distspec launch`` inside real allocations on the local two-node Slurm cluster.

Four allocations in all (the cluster has 2 nodes x 2 CPUs and is shared):

- one ``salloc -N2 --ntasks-per-node=2`` running a torchrun-style script that never
  calls distspec (tests/data/launch/ddp_tutorial.py: reads RANK/LOCAL_RANK/WORLD_SIZE,
  ``init_process_group("gloo")``, a few DDP steps, checks torchrun's variables) with
  srun per process and with torchrun per node, then with rank 3 printing a traceback
  and exiting 7 under torchrun: launch exits 7 and names rank 3, n1 and the traceback;

- one ``salloc -N2 --ntasks-per-node=2``: the gloo all-reduce (tests/data/launch/
  allreduce.py, initialised through ``distspec.runtime.init``) with srun per process,
  then with torchrun per node, then from inside a job step (``srun -N1 -n1``, as an
  ``srun --pty bash`` shell would be), then with rank 2 exiting 7 (launch exits 7);
- one ``sbatch`` of the same size: both launchers again, from a batch script;
- one ``salloc`` where launch gets SIGTERM while its ranks sleep: before it,
  ``scontrol listpids`` (run on both nodes) shows the four ranks in launch's step;
  after it, still inside the allocation, ``squeue --steps`` lists no step,
  ``scontrol listpids`` no process, and none of the rank pids exists (the nodes are
  network/UTS namespaces of this machine, so their processes are in its /proc).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm_cluster import require_slurm_cluster

pytest.importorskip("torch", reason="torch is not installed")
pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]

BIN = Path(sys.executable).parent
ALLREDUCE = Path(__file__).resolve().parents[1] / "data" / "launch" / "allreduce.py"
DDP_TUTORIAL = ALLREDUCE.with_name("ddp_tutorial.py")
RESULT = re.compile(
    r"^allreduce rank=(\d+) world=(\d+) host=(\S+) launcher=(\S+) sum=(\d+)$", re.MULTILINE
)


@pytest.fixture
def job_name() -> Iterator[str]:
    """A unique job name; any job left under it is cancelled after the test."""
    name = f"launch-test-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["scancel", "--name", name], capture_output=True, check=False)


@pytest.fixture
def env() -> dict[str, str]:
    """This environment without allocation variables; this venv first on PATH."""
    require_slurm_cluster()
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PBS_", "DISTSPEC_", "ALLREDUCE_"))
    }
    clean["PATH"] = f"{BIN}:{clean.get('PATH', '')}"
    return clean


def _launch(*args: str, out: str) -> str:
    """A shell line: distspec launch ARGS -- python allreduce.py, its output in out.*."""
    cmd = ["distspec", "launch", "--filter-common", *args, "--", "python", str(ALLREDUCE)]
    return f"{shlex.join(cmd)} > {out}.out 2> {out}.err; echo $? > {out}.rc"


def _results(text: str) -> list[tuple[int, int, str, str, int]]:
    return sorted(
        (int(r), int(w), host, launcher, int(s)) for r, w, host, launcher, s in RESULT.findall(text)
    )


def _check_2x2(work: Path, name: str, launcher: str) -> None:
    out = (work / f"{name}.out").read_text()
    err = (work / f"{name}.err").read_text()
    assert (work / f"{name}.rc").read_text().strip() == "0", out + err
    command = out.splitlines()[0]
    assert command.startswith("srun --nodes=2 "), command
    # rank r adds r + 1: 1 + 2 + 3 + 4 = 10 on every rank, across both nodes
    assert _results(out) == [
        (0, 4, "n0", launcher, 10),
        (1, 4, "n0", launcher, 10),
        (2, 4, "n1", launcher, 10),
        (3, 4, "n1", launcher, 10),
    ], out + err


def test_salloc_srun_torchrun_and_a_failing_rank(
    tmp_path: Path, env: dict[str, str], job_name: str
) -> None:
    script = "\n".join(
        [
            f"cd {shlex.quote(str(tmp_path))}",
            _launch(out="srun"),
            _launch("--launcher", "torchrun", out="torchrun"),
            # From inside a step (as in `srun --pty bash`): the step's variables
            # must not change the layout, and the new step must not wait for its CPUs.
            shlex.join(["srun", "-N1", "-n1", "bash", "-c", _launch(out="nested")]),
            # rank 2 fails after the others have ended: srun passes its code on. (Were the
            # others still running, srun would kill them and report 143, the highest code.)
            "export ALLREDUCE_FAIL_RANK=2 ALLREDUCE_FAIL_CODE=7 ALLREDUCE_FAIL_DELAY=3",
            _launch(out="fail"),
        ]
    )
    proc = subprocess.run(
        ["salloc", "-N2", "--ntasks-per-node=2", "-J", job_name, "bash", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    _check_2x2(tmp_path, "srun", "slurm")
    assert (
        f"--cpus-per-task=1 --kill-on-bad-exit=1 {sys.executable} -m distspec.runtime.torchrun_env "
        "python "
    ) in (tmp_path / "srun.out").read_text()
    _check_2x2(tmp_path, "torchrun", "torchrun")
    assert " --rdzv_endpoint n0:" in (tmp_path / "torchrun.out").read_text()
    _check_2x2(tmp_path, "nested", "slurm")
    assert " --overlap --distribution=block " in (tmp_path / "nested.out").read_text()
    # srun ends the step when rank 2 exits 7, and passes its code on: so does launch.
    assert (tmp_path / "fail.rc").read_text().strip() == "7"


def _env_lines(work: Path, name: str) -> list[dict[str, str]]:
    out = (work / f"{name}.out").read_text()
    err = (work / f"{name}.err").read_text()
    assert (work / f"{name}.rc").read_text().strip() == "0", out + err
    ranks = [json.loads(line[4:]) for line in out.splitlines() if line.startswith("ENV ")]
    return sorted(ranks, key=lambda r: int(r["RANK"]))


@pytest.mark.timeout(600)  # three 2x2 runs, and the shared cluster's queue before them
def test_salloc_torchrun_style_script_under_both_launchers(
    tmp_path: Path, env: dict[str, str], job_name: str
) -> None:
    def launch(*args: str, out: str) -> str:
        cmd = ["distspec", "launch", "--filter-common", *args, "--", "python", str(DDP_TUTORIAL)]
        return f"{shlex.join(cmd)} > {out}.out 2> {out}.err; echo $? > {out}.rc"

    script = "\n".join(
        [
            f"cd {shlex.quote(str(tmp_path))}",
            launch(out="srun"),
            launch("--launcher", "torchrun", out="torchrun"),
            "export DDP_FAIL_RANK=3 DDP_FAIL_CODE=7",
            launch("--launcher", "torchrun", out="fail"),
        ]
    )
    proc = subprocess.run(
        ["salloc", "-N2", "--ntasks-per-node=2", "-J", job_name, "bash", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=560,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for name, agent_store in (("srun", "False"), ("torchrun", "True")):
        ranks = _env_lines(tmp_path, name)
        layout = [(r["RANK"], r["LOCAL_RANK"], r["GROUP_RANK"], r["host"]) for r in ranks]
        assert layout == [
            ("0", "0", "0", "n0"),
            ("1", "1", "0", "n0"),
            ("2", "0", "1", "n1"),
            ("3", "1", "1", "n1"),
        ], (name, ranks)
        for r in ranks:
            assert (r["WORLD_SIZE"], r["LOCAL_WORLD_SIZE"], r["GROUP_WORLD_SIZE"]) == (
                "4",
                "2",
                "2",
            )
            assert (r["ROLE_NAME"], r["ROLE_RANK"], r["ROLE_WORLD_SIZE"]) == (
                "default",
                r["RANK"],
                "4",
            )
            assert (r["MASTER_ADDR"], r["TORCHELASTIC_USE_AGENT_STORE"]) == ("n0", agent_store)
            assert r["TORCHELASTIC_RESTART_COUNT"] == r["TORCHELASTIC_MAX_RESTARTS"] == "0"
            assert r["OMP"] == "1"
        assert len({(r["MASTER_PORT"], r["TORCHELASTIC_RUN_ID"]) for r in ranks}) == 1
    srun_line = (tmp_path / "srun.out").read_text().splitlines()[0]
    assert " -m distspec.runtime.torchrun_env python " in srun_line, srun_line

    # Rank 3 (n1) printed a traceback and exited 7: torchrun on n1 exited 1, srun
    # stopped n0's torchrun; launch exits 7 and says who, where and what.
    err = (tmp_path / "fail.err").read_text()
    assert (tmp_path / "fail.rc").read_text().strip() == "7", err
    assert "ChildFailedError" not in err and "SignalException" not in err, err
    report = err[err.index("distspec launch: failed:") :].splitlines()
    assert report[0] == "distspec launch: failed: rank 3 (local rank 1) on n1 exited with 7", err
    assert report[1:3] == ["--- rank 3: last 4 lines ---", "Traceback (most recent call last):"]
    assert report[-2:] == ["ValueError: rank 3 is broken on purpose", "---"], err


def test_sbatch_both_launchers(tmp_path: Path, env: dict[str, str], job_name: str) -> None:
    batch = tmp_path / "job.sbatch"
    batch.write_text(
        "\n".join(
            [
                "#!/bin/bash",
                "#SBATCH --nodes=2",
                "#SBATCH --ntasks-per-node=2",
                f"#SBATCH --output={tmp_path}/batch.log",
                f"cd {shlex.quote(str(tmp_path))}",
                _launch(out="srun"),
                _launch("--launcher", "torchrun", out="torchrun"),
                "",
            ]
        )
    )
    proc = subprocess.run(
        ["sbatch", "--wait", "-J", job_name, str(batch)],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    log = tmp_path / "batch.log"
    assert proc.returncode == 0, proc.stderr + (log.read_text() if log.exists() else "")
    _check_2x2(tmp_path, "srun", "slurm")
    _check_2x2(tmp_path, "torchrun", "torchrun")


# Every process of the job's steps on both nodes except this listing's own step:
# "STEP PID" lines (scontrol listpids asks the node's slurmd, so it runs on each node).
LISTPIDS = "srun --overlap -N2 -n2 bash -c " + shlex.quote(
    'scontrol listpids "$SLURM_JOB_ID" | awk -v me="$SLURM_STEP_ID" \'NR > 1 && $3 != me '
    "{print $3, $1}'"
)


def test_sigterm_to_launch_leaves_no_task(
    tmp_path: Path, env: dict[str, str], job_name: str
) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    launch = shlex.join(["distspec", "launch", "--", "python", str(ALLREDUCE)])
    # All inside the allocation, so that what is left is seen before salloc ends the
    # job: start launch, wait for its four ranks, list the job's processes, SIGTERM
    # launch, wait for it, then list steps and processes again.
    script = f"""
cd {shlex.quote(str(tmp_path))}
{launch} > launch.out 2> launch.err &
launch_pid=$!
for ((i = 0; i < 600; i++)); do
  (( $(ls pids | wc -l) >= 4 )) && break
  sleep 0.2
done
{LISTPIDS} > before.txt
kill -TERM $launch_pid
wait $launch_pid
echo $? > launch.rc
squeue -h --steps -j "$SLURM_JOB_ID" -o '%i %j' > steps.txt
{LISTPIDS} > after.txt
for f in pids/*; do
  pid=${{f##*-}}
  if [[ -e /proc/$pid ]] && [[ $(awk '{{print $3}}' /proc/$pid/stat) != Z ]]; then
    echo "$f" >> alive.txt
  fi
done
"""
    env = {**env, "ALLREDUCE_SLEEP": "300", "ALLREDUCE_PIDS": str(pids)}
    proc = subprocess.run(
        ["salloc", "-N2", "--ntasks-per-node=2", "-J", job_name, "bash", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    err = proc.stderr + (tmp_path / "launch.err").read_text()
    assert proc.returncode == 0, err
    ranks = sorted(p.name.split("-")[0] for p in pids.iterdir())
    assert ranks == ["n0", "n0", "n1", "n1"], err
    # Before: the four ranks, all in step 0 (launch's srun step), seen by listpids.
    before = (tmp_path / "before.txt").read_text().split("\n")
    steps_before = {line.split()[0] for line in before if line.strip()}
    assert steps_before == {"0"}, before
    assert len([line for line in before if line.strip()]) >= 4, before
    # After SIGTERM to launch: it failed, and no step and no process of one is left.
    assert (tmp_path / "launch.rc").read_text().strip() != "0"
    assert (tmp_path / "steps.txt").read_text().split() == [], "a job step outlived launch"
    assert (tmp_path / "after.txt").read_text().split() == [], "processes outlived launch"
    alive = tmp_path / "alive.txt"
    assert not alive.exists(), f"rank processes still running: {alive.read_text()}"
