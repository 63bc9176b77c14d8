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
import socket
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


# ---------------------------------------------------------------------------
# a bare mpiexec (no allocation): rank 0's host

# Recorded: rank 1 of `mpiexec.mpich -n 4 -ppn 2` over a hostfile, no allocation
# (only the variables detect() reads; see test_env_mpiexec.py for the real runs).
BARE_MPICH = {"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}


class FakeComm:
    """mpi4py's COMM_WORLD as detect() uses it: rank 0 sends its host name to everyone."""

    def __init__(self, rank: int, size: int, rank0_host: object = "n0") -> None:
        self.rank, self.size, self.rank0_host = rank, size, rank0_host
        self.sent: list[object] = []

    def Get_rank(self) -> int:  # mpi4py's name
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def bcast(self, obj: object, root: int = 0) -> object:
        assert root == 0
        self.sent.append(obj)
        return obj if self.rank == 0 else self.rank0_host


@pytest.fixture
def no_mpi4py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("distspec.runtime.env._mpi4py_world", lambda: None)


def test_bare_mpiexec_asks_rank_0_over_mpi() -> None:
    comm = FakeComm(1, 4)
    env = detect(BARE_MPICH, mpi_comm=comm)
    assert env.master_addr == "n0" and comm.sent == [None]
    rank0 = FakeComm(0, 4)
    env0 = detect(BARE_MPICH | {"PMI_RANK": "0", "MPI_LOCALRANKID": "0"}, mpi_comm=rank0)
    assert env0.master_addr == socket.gethostname() and rank0.sent == [socket.gethostname()]


def test_an_mpi_world_that_is_not_the_launchers_is_not_asked(no_mpi4py: None) -> None:
    # an mpi4py built for another MPI starts as a world of one: its answer would be wrong
    comm = FakeComm(0, 1)
    with pytest.raises(RuntimeEnvError, match="set MASTER_ADDR"):
        detect(BARE_MPICH, mpi_comm=comm)
    assert comm.sent == []


def test_a_rank_0_host_that_is_not_a_host_name_is_refused() -> None:
    with pytest.raises(RuntimeEnvError, match="rank 0"):
        detect(BARE_MPICH, mpi_comm=FakeComm(1, 4, rank0_host=None))
    with pytest.raises(RuntimeEnvError, match="not a host name"):
        detect(BARE_MPICH, mpi_comm=FakeComm(1, 4, rank0_host="a b\x1b"))


def test_the_mpi_is_asked_only_when_nothing_else_tells() -> None:
    comm = FakeComm(1, 4)
    detect(BARE_MPICH | {"MASTER_ADDR": "m"}, mpi_comm=comm)
    detect(SRUN | BARE_MPICH, mpi_comm=comm)  # the allocation's first host
    detect(BARE_MPICH | {"MPI_LOCALNRANKS": "4", "MPI_LOCALRANKID": "1"}, mpi_comm=comm)
    assert comm.sent == []


@pytest.mark.parametrize(
    ("extra", "var"),
    [
        (BARE_MPICH, "HYDRA_HOST_FILE"),
        (BARE_MPICH | {"I_MPI_ROOT": "/opt/intel"}, "I_MPI_HYDRA_HOST_FILE"),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
         "OMPI_MCA_orte_default_hostfile"),
    ],
)  # fmt: skip
def test_the_mpis_hostfile_variable_names_rank_0s_host(
    extra: dict[str, str], var: str, tmp_path: Path, no_mpi4py: None
) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the first host runs rank 0\nh0 slots=2\nh1 slots=2\n")
    assert detect(extra | {var: str(hostfile)}).master_addr == "h0"


def test_hydra_tells_rank_0_its_own_host_and_a_different_hostfile_is_caught(
    tmp_path: Path, no_mpi4py: None
) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h0:2\nh1:2\n")
    rank0 = BARE_MPICH | {"PMI_RANK": "0", "MPI_LOCALRANKID": "0", "HYDRA_HOST_FILE": str(hostfile)}
    assert detect(rank0 | {"MPIR_CVAR_CH3_INTERFACE_HOSTNAME": "h0"}).master_addr == "h0"
    with pytest.raises(RuntimeEnvError, match="mpiexec used another host list"):
        detect(rank0 | {"MPIR_CVAR_CH3_INTERFACE_HOSTNAME": "h1"})


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        (BARE_MPICH, ["mpich: 4 ranks on 2 hosts", "-genv MASTER_ADDR HOST", "HYDRA_HOST_FILE",
                      "mpi4py"]),
        ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
          "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
         ["openmpi: 4 ranks on 2 hosts", "-x MASTER_ADDR=HOST", "OMPI_MCA_orte_default_hostfile"]),
        ({"RANK": "1", "WORLD_SIZE": "4"}, ["env: 4 ranks on 4 hosts", "set MASTER_ADDR"]),
    ],
)  # fmt: skip
def test_when_nothing_tells_the_error_says_what_to_set(
    environ: dict[str, str], words: list[str], no_mpi4py: None
) -> None:
    with pytest.raises(RuntimeEnvError) as info:
        detect(environ)
    for word in words:
        assert word in str(info.value)


def test_open_mpi_on_one_host_recorded() -> None:
    # Recorded: rank 1 of `mpiexec.openmpi --allow-run-as-root -n 2` here (Open MPI 4.1).
    env = detect(
        {
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "OMPI_COMM_WORLD_NODE_RANK": "1",
            "OMPI_MCA_orte_num_nodes": "1",
        }
    )
    assert env.launcher is Launcher.OPENMPI and env.master_addr == "127.0.0.1"


def test_slurm_tasks_per_node_must_add_up_to_the_tasks_of_its_level() -> None:
    with pytest.raises(RuntimeEnvError, match="adds up to 4 tasks"):
        detect(SRUN | {"SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NUM_TASKS": "3"})
    job_level = {k: v for k, v in SRUN.items() if not k.startswith("SLURM_STEP_")}
    with pytest.raises(RuntimeEnvError, match="SLURM_TASKS_PER_NODE adds up to 4"):
        detect(job_level | {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "5"})
