"""detect(): each launcher's variables, precedence when launchers nest, and the errors.

The environments below are the variables the launchers set, as recorded on the
local two-node Slurm cluster (``srun``, ``srun --mpi=pmi2``, ``srun --mpi=cray_shasta``,
``mpiexec.mpich`` and ``mpiexec.openmpi`` inside ``salloc -N2 --ntasks-per-node 2``)
and, labelled so, written from vendor documentation for what cannot run here
(Intel MPI, Cray's own PALS with ``PALS_LOCAL_RANKID``). The real launchers run in
test_launchers_cluster.py and test_init.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from distspec.errors import RuntimeEnvError
from distspec.runtime.env import Launcher, detect, read_apinfo
from distspec.runtime.hosts import default_port, expand_nodelist, read_nodefile, tasks_per_node

DATA = Path(__file__).resolve().parent.parent / "data" / "runtime"

# Recorded: rank 3 of `srun -N2 --ntasks-per-node 2` (step 0 of job 1) on node n1.
SRUN = {
    "SLURM_JOB_ID": "1",
    "SLURM_JOB_NODELIST": "n[0-1]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_NTASKS": "4",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NODELIST": "n[0-1]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
}
# Recorded: the batch script of the same job (no step: not a rank of anything).
BATCH = {
    k: v
    for k, v in SRUN.items()
    if not k.startswith("SLURM_STEP") and k not in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID")
} | {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


def test_plain_python_is_a_world_of_one() -> None:
    env = detect({})
    assert (env.rank, env.world_size, env.local_world_size, env.num_nodes) == (0, 1, 1, 1)
    assert env.launcher is Launcher.NONE
    assert env.master_addr == "127.0.0.1" and env.master_port == 29500


def test_srun_step() -> None:
    env = detect(SRUN)
    assert env.launcher is Launcher.SLURM
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (3, 1, 4, 2)
    assert (env.node_rank, env.num_nodes) == (1, 2)
    assert env.hosts == ("n0", "n1") and env.master_addr == "n0"
    assert env.job_id == "1"
    # every rank of the step derives the same port from the job and step ids
    assert (
        env.master_port == default_port("1.0") == detect(SRUN | {"SLURM_PROCID": "0"}).master_port
    )


def test_a_batch_script_or_salloc_shell_is_not_a_rank_of_the_allocation() -> None:
    env = detect(BATCH)
    assert (env.rank, env.world_size) == (0, 1)
    assert env.launcher is Launcher.NONE and env.hosts == ("n0", "n1")


def test_uneven_tasks_per_node_and_a_compressed_node_list() -> None:
    env = detect(
        SRUN
        | {
            "SLURM_STEP_NODELIST": "gpu[01-03,07]",
            "SLURM_STEP_TASKS_PER_NODE": "2(x3),1",
            "SLURM_STEP_NUM_TASKS": "7",
            "SLURM_STEP_NUM_NODES": "4",
            "SLURM_PROCID": "6",
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": "3",
        }
    )
    assert (env.rank, env.world_size, env.local_world_size, env.node_rank) == (6, 7, 1, 3)
    assert env.hosts == ("gpu01", "gpu02", "gpu03", "gpu07") and env.master_addr == "gpu01"


def test_torchrun_inside_srun_wins() -> None:
    # one srun task per node runs torchrun; its workers see both sets of variables
    env = detect(
        SRUN
        | {
            "SLURM_PROCID": "1",
            "SLURM_STEP_NUM_TASKS": "2",
            "TORCHELASTIC_RUN_ID": "job",
            "RANK": "5",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2",
            "MASTER_ADDR": "n0",
            "MASTER_PORT": "29400",
        }
    )
    assert env.launcher is Launcher.TORCHRUN
    assert (env.rank, env.world_size, env.local_rank, env.node_rank) == (5, 8, 1, 1)
    assert (env.master_addr, env.master_port) == ("n0", 29400)


def test_srun_pmi2_is_srun() -> None:
    env = detect(SRUN | {"PMI_RANK": "3", "PMI_SIZE": "4", "PMI_FD": "11", "PMI_JOBID": "1.2"})
    assert env.launcher is Launcher.SLURM and (env.rank, env.world_size) == (3, 4)
    assert env.local_world_size == 2


def test_mpiexec_mpich_inside_an_allocation_wins_over_its_proxy_step() -> None:
    # Hydra starts one proxy per node with srun: the ranks inherit the proxy step's ids
    proxy = SRUN | {
        "SLURM_PROCID": "1",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
        "SLURM_LOCALID": "0",
    }
    env = detect(
        proxy | {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    )
    assert env.launcher is Launcher.MPICH
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 4, 1, 2)
    assert (env.node_rank, env.num_nodes, env.master_addr) == (1, 2, "n0")


def test_open_mpi() -> None:
    env = detect(
        SRUN
        | {
            "OMPI_COMM_WORLD_RANK": "2",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "OMPI_COMM_WORLD_NODE_RANK": "0",  # Open MPI's "node rank" is a local rank, not a node index
            "SLURM_PROCID": "1",
            "SLURM_STEP_NUM_TASKS": "2",
        }
    )
    assert env.launcher is Launcher.OPENMPI
    assert (env.rank, env.local_rank, env.node_rank, env.num_nodes) == (2, 0, 1, 2)


def test_intel_mpi_written_from_its_documentation() -> None:
    # Not runnable here: Intel MPI's Hydra sets the MPICH variables; its set-up script sets I_MPI_ROOT.
    env = detect(
        {
            "PMI_RANK": "1",
            "PMI_SIZE": "2",
            "MPI_LOCALRANKID": "1",
            "MPI_LOCALNRANKS": "2",
            "I_MPI_ROOT": "/opt/intel/oneapi/mpi/latest",
        }
    )
    assert env.launcher is Launcher.INTEL_MPI and env.master_addr == "127.0.0.1"


def test_pals_from_the_apinfo_file_recorded_on_the_cluster(tmp_path: Path) -> None:
    # apinfo-2x2.bin: written by `srun --mpi=cray_shasta -N2 --ntasks-per-node 2` here
    apinfo = read_apinfo(DATA / "apinfo-2x2.bin")
    assert apinfo is not None
    assert apinfo.nodes == ("n0", "n1")
    assert [pe[2] for pe in apinfo.pes] == [0, 0, 1, 1]
    env = detect(
        {
            "PALS_RANKID": "2",
            "PALS_NODEID": "1",
            "PALS_APID": "1.3",
            "PALS_APINFO": str(DATA / "apinfo-2x2.bin"),
        }
    )
    assert env.launcher is Launcher.PALS
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (2, 0, 4, 2)
    assert (env.node_rank, env.num_nodes, env.master_addr) == (1, 2, "n0")


def test_pals_without_apinfo_uses_slurm_localid() -> None:
    env = detect(SRUN | {"PALS_RANKID": "3", "PALS_NODEID": "1", "PALS_APINFO": "/nonexistent"})
    assert env.launcher is Launcher.PALS and (env.local_rank, env.local_world_size) == (1, 2)


def test_crays_own_pals_written_from_its_documentation() -> None:
    # Not runnable here: HPE's PALS mpiexec also sets PALS_LOCAL_RANKID and PMI_SIZE.
    env = detect(
        {
            "PALS_RANKID": "5",
            "PALS_LOCAL_RANKID": "1",
            "PALS_NODEID": "1",
            "PMI_RANK": "5",
            "PMI_SIZE": "8",
            "PALS_LOCAL_SIZE": "4",
            "PBS_JOBID": "123.pbs",
            "MASTER_ADDR": "x1000c0s0b0n0",
        }
    )
    assert env.launcher is Launcher.PALS
    assert (env.rank, env.local_rank, env.world_size, env.local_world_size) == (5, 1, 8, 4)
    assert env.master_addr == "x1000c0s0b0n0" and env.master_port == default_port("123.pbs")


def test_pbsdsh_reads_the_nodefile(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("a\na\nb\nb\n")
    base = {"PBS_JOBID": "7.server", "PBS_NODEFILE": str(nodefile)}
    env = detect(base | {"PBS_VNODENUM": "3"})
    assert env.launcher is Launcher.PBS
    assert (env.rank, env.local_rank, env.world_size, env.node_rank, env.master_addr) == (
        3,
        1,
        4,
        1,
        "a",
    )
    alone = detect(base)  # python started by the job script itself
    assert (alone.rank, alone.world_size, alone.launcher, alone.hosts) == (
        0,
        1,
        Launcher.PBS,
        ("a", "b"),
    )


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({"RANK": "1"}, ["RANK", "WORLD_SIZE missing"]),
        ({"WORLD_SIZE": "4"}, ["RANK missing"]),
        ({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h"}, ["rank 4", "0..3"]),
        ({"RANK": "x", "WORLD_SIZE": "2"}, ["RANK", "not a whole number", "'x'"]),
        ({"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "r"}, ["LOCAL_RANK"]),
        (
            {"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1",
             "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
             "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
            ["disagree", "PMI_SIZE='4'", "OMPI_COMM_WORLD_SIZE='2'"],
        ),
        ({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"}, ["MASTER_ADDR"]),
        ({"PALS_RANKID": "1"}, ["PALS_RANKID", "world size"]),
        ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "70000"}, ["70000"]),
    ],
)  # fmt: skip
def test_incomplete_or_conflicting_variables_are_named(
    environ: dict[str, str], words: list[str]
) -> None:
    with pytest.raises(RuntimeEnvError) as info:
        detect(environ)
    for word in words:
        assert word in str(info.value)


def test_master_addr_and_port_override_everything() -> None:
    env = detect(SRUN | {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "1234"})
    assert (env.master_addr, env.master_port) == ("10.0.0.5", 1234)
    assert env.as_torch_env()["MASTER_PORT"] == "1234"


def test_hosts_helpers(tmp_path: Path) -> None:
    assert expand_nodelist("gpu[01-02,07],login") == ["gpu01", "gpu02", "gpu07", "login"]
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(RuntimeEnvError, match="node list"):
        expand_nodelist("gpu[01-")
    f = tmp_path / "hosts"
    f.write_text("# comment\nh1:2\n\nh2\n")
    assert read_nodefile(f) == ["h1", "h1", "h2"]
    with pytest.raises(RuntimeEnvError, match="cannot read"):
        read_nodefile(tmp_path / "missing")
    assert 29500 <= default_port("12345") < 31500 and default_port("1") != default_port("2")


def test_apinfo_that_is_not_one_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "apinfo"
    bad.write_bytes(b"\x02" + bytes(200))
    assert read_apinfo(bad) is None
    shutil.copy(DATA / "apinfo-2x2.bin", tmp_path / "ok")
    assert read_apinfo(tmp_path / "ok") is not None
