"""Spare nodes (``-cfg spares=N``, ``run --spares N``) without a cluster: the compiled
script under a fake ``srun`` and ``scontrol``, which know an allocation of nodes and
which of them are dead. A task "dies with its node" by adding its node to the dead
list and failing; the fake ``scontrol show node`` then has that node DOWN, as
slurmctld does once it has noticed (the real cluster's case is in
test_slurm_node_failure.py)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from distspec.errors import CompileError
from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppDef, Role

# Runs the command once per node of --nodelist (the step's), each task with its index
# in the step, as srun does.
FAKE_SRUN = r"""#!/bin/bash
# The batch host's guard watches the real slurmctld's view of a node: not here.
[[ " $* " == *" distspec-guard "* ]] && exit 0
out="" nodes=""
while [[ $1 == --* ]]; do
  case $1 in
    --output=*) out=${1#--output=};;
    --nodelist=*) nodes=${1#--nodelist=};;
  esac
  shift
done
echo "srun on $nodes" >> "$FAKE_LOG"
IFS=, read -ra list <<< "$nodes"
rc=0
for ((i = 0; i < ${#list[@]}; i++)); do
  SLURM_NODEID=$i SLURMD_NODENAME=${list[i]} SLURM_STEP_NUM_NODES=${#list[@]} "$@" \
    >> "${out//%t/$i}" 2>&1 || rc=$?
done
exit $rc
"""

# The allocation is $FAKE_ALLOC; a node listed in $FAKE_DEAD is DOWN.
FAKE_SCONTROL = r"""#!/bin/bash
expand() { if [[ $1 == *,* || $1 != *[* ]]; then tr , '\n' <<< "$1"; else printf '%s\n' $FAKE_ALLOC; fi; }
case "$1 $2" in
  "show hostnames") expand "$3";;
  "show node")
    for n in $(expand "$4"); do
      state=ALLOCATED; grep -qx "$n" "$FAKE_DEAD" 2> /dev/null && state=DOWN*
      echo "NodeName=$n Arch=x86_64 State=$state Partitions=faults"
    done;;
  "show job") echo "JobId=42 JobState=RUNNING Restarts=0 ExcNodeList=(null) NodeList=x";;
  *) echo "scontrol $*" >> "$FAKE_LOG";;
esac
"""

# Prints what the task sees; on a node in $DIE_ON (first attempt only) the node dies.
TASK = (
    'echo "on $SLURMD_NODENAME id $SLURM_NODEID of ${num_replicas} rank0 $DISTSPEC_RANK0_HOST '
    "attempt $(cat $DISTSPEC_JOB_DIR/attempt) reason $(cat $DISTSPEC_JOB_DIR/restart_reason "
    '2> /dev/null)"; '
    'for n in $DIE_ON; do [[ $SLURMD_NODENAME == "$n" && ! -e $DISTSPEC_JOB_DIR/died-$n ]] '
    "&& { touch $DISTSPEC_JOB_DIR/died-$n; echo $n >> $FAKE_DEAD; exit 1; }; done; "
    "exit ${FAIL:-0}"
)


def _app(nodes: int = 2, retries: int = 0) -> AppDef:
    role = Role(name="w", entrypoint="bash", args=("-c", TASK), num_replicas=nodes)
    return AppDef(name="sp", roles=(dataclasses.replace(role, max_retries=retries),))


def _compile(app: AppDef, **opts: str) -> str:
    sched = SlurmScheduler(state_dir=Path("/nonexistent"))
    options = sched.parse_options({"job_dir": "/tmp/unused", **opts})
    return sched.compile(app, options, app_id="sp-1").render()


def _run(
    tmp_path: Path, text: str, *, alloc: str, die_on: str = "", fail: int = 0
) -> tuple[subprocess.CompletedProcess[str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    jobs = tmp_path / "jobs"
    text = text.replace("/tmp/unused", str(jobs))
    (tmp_path / "job.sbatch").write_text(text)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "n[0-9]",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "FAKE_ALLOC": alloc,
        "FAKE_DEAD": str(tmp_path / "dead"),
        "FAKE_LOG": str(tmp_path / "fake.log"),
        "DIE_ON": die_on,
        "FAIL": str(fail),
    }
    proc = subprocess.run(
        ["bash", str(tmp_path / "job.sbatch")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc, jobs / "sp-42"


def _logs(folder: Path) -> str:
    return "".join(p.read_text() for p in sorted(folder.glob("w-*.log")))


def test_the_script_asks_for_the_spares_and_runs_the_step_on_its_own_nodes() -> None:
    text = _compile(_app(2), spares="1")
    assert "#SBATCH --no-kill\n" in text and "#SBATCH --nodes=3\n" in text
    assert '--nodes=2 --ntasks=2 --nodelist="$distspec_step_nodes" --overlap' in text
    # ${num_replicas} is the step's node count, not the allocation's.
    assert "$SLURM_STEP_NUM_NODES" in text and "$SLURM_JOB_NUM_NODES" not in text
    plain = _compile(_app(2))
    assert "--no-kill" not in plain and "distspec_pick_nodes" not in plain


@pytest.mark.parametrize(("dead", "then", "rank0"), [("n1", "n0,n2", "n0"), ("n0", "n1,n2", "n1")])
def test_a_dead_node_of_the_step_is_replaced_by_a_spare_at_once(
    tmp_path: Path, dead: str, then: str, rank0: str
) -> None:
    proc, folder = _run(tmp_path, _compile(_app(2), spares="1"), alloc="n0 n1 n2", die_on=dead)
    assert proc.returncode == 0, proc.stderr
    assert f"distspec: node(s) {dead} of the step failed" in proc.stderr
    assert f"distspec: running the step again on {then}, in the same allocation" in proc.stderr
    assert (tmp_path / "fake.log").read_text().splitlines() == ["srun on n0,n1", f"srun on {then}"]
    # The guard's step runs on a node other than the batch host, the last one.
    assert '--nodelist="$distspec_guard_node"' in _compile(_app(2), spares="1")
    assert (folder / "bad_nodes").read_text().split() == [dead]
    assert (folder / "attempt").read_text().strip() == "1"
    logs = _logs(folder)
    first, second = then.split(",")
    assert f"on {first} id 0 of 2 rank0 {rank0} attempt 1 reason node-failure" in logs, logs
    assert f"on {second} id 1 of 2 rank0 {rank0} attempt 1 reason node-failure" in logs, logs
    assert "attempt failed" not in proc.stderr  # not a retry


def test_without_a_spare_left_the_job_fails_or_is_requeued_without_the_nodes(
    tmp_path: Path,
) -> None:
    proc, folder = _run(tmp_path, _compile(_app(2), spares="1"), alloc="n0 n1 n2", die_on="n1 n2")
    assert proc.returncode == 1, proc.stderr
    assert "running the step again on n0,n2" in proc.stderr
    assert "fewer than 2 healthy nodes left in the allocation" in proc.stderr
    assert sorted((folder / "bad_nodes").read_text().split()) == ["n1", "n2"]
    assert (tmp_path / "fake.log").read_text().count("srun on") == 2

    requeue = tmp_path / "requeue"
    requeue.mkdir()
    text = _compile(_app(2), spares="1", requeue="true")
    proc, folder = _run(requeue, text, alloc="n0 n1 n2", die_on="n1 n2")
    log = (requeue / "fake.log").read_text()
    assert "scontrol requeue 42" in log, (log, proc.stderr)
    assert "scontrol update JobId=42 ExcNodeList=n1,n2" in log, log
    assert (folder / "restart_reason").read_text().strip() == "node-failure"


def test_a_failure_without_a_bad_node_is_an_ordinary_one(tmp_path: Path) -> None:
    proc, folder = _run(
        tmp_path, _compile(_app(2, retries=1), spares="1"), alloc="n0 n1 n2", fail=3
    )
    assert proc.returncode == 3, proc.stderr
    assert "of the step failed" not in proc.stderr
    # The one retry runs (failed-rank) on the same nodes, and no more: spares are no retries.
    assert "retry 1 of 1" in proc.stderr
    assert (tmp_path / "fake.log").read_text().splitlines() == ["srun on n0,n1"] * 2
    assert (folder / "restart_reason").read_text().strip() == "failed-rank"
    assert not (folder / "bad_nodes").exists()


def test_a_run_on_spares_does_not_use_up_a_retry(tmp_path: Path) -> None:
    text = _compile(_app(2, retries=1), spares="1")
    proc, folder = _run(tmp_path, text, alloc="n0 n1 n2", die_on="n1", fail=3)
    # n1 dies (spare run, attempt 1), then the step fails on n0,n2 (retry 1 of 1, attempt 2).
    assert proc.returncode == 3, proc.stderr
    assert "retry 1 of 1" in proc.stderr and "retry 2" not in proc.stderr
    assert (tmp_path / "fake.log").read_text().splitlines() == [
        "srun on n0,n1",
        "srun on n0,n2",
        "srun on n0,n2",
    ]
    assert (folder / "attempt").read_text().strip() == "2"
    assert (folder / "restart_reason").read_text().strip() == "failed-rank"


@pytest.mark.parametrize(
    ("app", "opts", "text"),
    [
        (
            AppDef(
                name="two",
                roles=(
                    Role(name="a", entrypoint="true", num_replicas=2),
                    Role(name="b", entrypoint="true"),
                ),
            ),
            {},
            "2 roles",
        ),
        (
            AppDef(
                name="el",
                roles=(Role(name="a", entrypoint="true", num_replicas=4, min_replicas=2),),
            ),
            {},
            "fixed node count",
        ),
        (_app(2), {"workers": "direct"}, "workers=direct"),
        (_app(2), {"env_to_local": "/tmp"}, "env_to_local"),
        (_app(2), {"srun_args": "--relative=1"}, "--relative"),
    ],
)
def test_jobs_that_cannot_keep_spares_are_refused(
    app: AppDef, opts: dict[str, str], text: str
) -> None:
    with pytest.raises(CompileError, match=text):
        _compile(app, spares="1", **opts)
