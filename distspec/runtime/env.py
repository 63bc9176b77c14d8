"""Who am I: rank, sizes and the rendezvous address, from whichever launcher started us.

:func:`detect` reads the environment of the process and returns a :class:`DistEnv`.
Launchers nest (torchrun inside ``srun``, ``mpiexec`` inside ``salloc``), and each
level describes a different process: the outer one the agent or proxy it
started, the inner one *this* process. So the innermost launcher wins:

1. torchrun / torch elastic — ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ... (also set
   by hand or by another tool: then the launcher is ``env``);
2. an MPI launcher — Cray PALS (``PALS_RANKID``), Open MPI (``OMPI_COMM_WORLD_*``),
   MPICH/Hydra and Intel MPI (``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``); when
   ``srun --mpi=pmi2`` or ``--mpi=cray_shasta`` started the process, the MPI and
   Slurm variables agree and the launcher is ``slurm``;
3. a Slurm step — ``srun`` (``SLURM_PROCID`` with ``SLURM_STEP_ID``; a batch script
   or an ``salloc`` shell has no step, and is not a rank of anything);
4. a PBS job — ``pbsdsh`` (``PBS_VNODENUM`` indexes ``$PBS_NODEFILE``);
5. nothing — plain ``python``: rank 0 of a world of one.

Within one level two sources that disagree (say ``PMI_SIZE`` and
``OMPI_COMM_WORLD_SIZE``) are an error, and so are incomplete variables (``RANK``
without ``WORLD_SIZE``): :class:`~distspec.errors.RuntimeEnvError` names them.

The rank-0 host (``master_addr``) is ``MASTER_ADDR`` when set, else what the
launcher says (PALS's apinfo file names every rank's node), else the first host
of the allocation (Slurm's node list, the PBS nodefile), else ``127.0.0.1`` when
every rank is on this host. The port is ``MASTER_PORT``, else
:func:`~distspec.runtime.hosts.default_port` of the job id (so every rank agrees
without talking).
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from distspec.errors import RuntimeEnvError
from distspec.runtime.hosts import (
    MAX_RANKS,
    ApInfo,
    check_host,
    clip,
    default_port,
    expand_nodelist,
    parse_count,
    read_apinfo,
    read_nodefile,
    tasks_per_node,
    unique_hosts,
)

__all__ = ["ApInfo", "DistEnv", "Launcher", "MpiComm", "detect", "read_apinfo"]


class Launcher(str, enum.Enum):
    """What started this process."""

    TORCHRUN = "torchrun"
    ENV = "env"  # RANK/WORLD_SIZE set by hand or by a tool other than torchrun
    SLURM = "slurm"
    MPICH = "mpich"
    INTEL_MPI = "intel-mpi"
    OPENMPI = "openmpi"
    PALS = "pals"
    PBS = "pbs"
    NONE = "none"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class DistEnv:
    """This process's place in the job, as its launcher described it."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    launcher: Launcher
    #: The allocation's hosts when known (the first runs rank 0), else ().
    hosts: tuple[str, ...] = ()
    job_id: str | None = None

    def __post_init__(self) -> None:
        checks = (
            (0 <= self.rank < self.world_size, "rank", self.rank, "world_size", self.world_size),
            (
                0 <= self.local_rank < self.local_world_size,
                "local_rank",
                self.local_rank,
                "local_world_size",
                self.local_world_size,
            ),
            (
                0 <= self.node_rank < self.num_nodes,
                "node_rank",
                self.node_rank,
                "num_nodes",
                self.num_nodes,
            ),
        )
        for ok, name, value, size_name, size in checks:
            if not ok:
                raise RuntimeEnvError(
                    f"{self.launcher}: {name} {value} is not in 0..{size - 1} ({size_name} {size})"
                )
        if self.local_world_size > self.world_size:
            raise RuntimeEnvError(
                f"{self.launcher}: {self.local_world_size} processes on this node but "
                f"{self.world_size} in the whole job"
            )
        if not 1 <= self.master_port <= 65535:
            raise RuntimeEnvError(f"master port {self.master_port} is not in 1..65535")

    @property
    def is_main(self) -> bool:
        """True on global rank 0."""
        return self.rank == 0

    def as_torch_env(self) -> dict[str, str]:
        """The variables ``torch.distributed``'s ``env://`` and most libraries read."""
        return {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.node_rank),
        }

    def describe(self) -> str:
        """One line for a log: launcher, world, nodes, master."""
        hosts = _short_hosts(self.hosts)
        return (
            f"launcher={self.launcher} world={self.world_size} nodes={self.num_nodes} "
            f"local={self.local_world_size} master={self.master_addr}:{self.master_port}"
            + (f" hosts={hosts}" if hosts else "")
            + (f" job={self.job_id}" if self.job_id else "")
        )

    def to_dict(self) -> dict[str, object]:
        """These facts as JSON-ready values."""
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "local_world_size": self.local_world_size,
            "node_rank": self.node_rank,
            "num_nodes": self.num_nodes,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "launcher": self.launcher.value,
            "hosts": list(self.hosts),
            "job_id": self.job_id,
        }


def _short_hosts(hosts: tuple[str, ...]) -> str:
    if not hosts:
        return ""
    import hostlist

    try:
        return str(hostlist.collect_hostlist(list(hosts)))
    except hostlist.BadHostlist:
        return ",".join(hosts)


# ---------------------------------------------------------------------------
# reading variables


class _Vars:
    """Strict reads of an environment mapping, with errors that name the variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.env = environ

    def has(self, *names: str) -> bool:
        return any(self.env.get(n, "") != "" for n in names)

    def text(self, name: str) -> str | None:
        value = self.env.get(name, "")
        return value if value != "" else None

    def number(self, name: str, *, least: int = 0, most: int = MAX_RANKS) -> int | None:
        """The variable as a whole number in ``least..most``, or None when unset."""
        value = self.text(name)
        return None if value is None else parse_count(value, name=name, least=least, most=most)

    def size(self, name: str) -> int | None:
        """A count of processes or nodes: at least 1."""
        return self.number(name, least=1)

    def first(self, *names: str, least: int = 1) -> tuple[int, str] | None:
        """The first of ``names`` that is set, as (number, name)."""
        for name in names:
            number = self.number(name, least=least)
            if number is not None:
                return number, name
        return None

    def need(self, launcher: str, *names: str, sizes: tuple[str, ...] = ()) -> list[int]:
        """All of ``names`` as numbers (those in ``sizes`` at least 1), or an error
        naming the missing and the given ones."""
        values = [self.number(n, least=1 if n in sizes else 0) for n in names]
        missing = [n for n, v in zip(names, values, strict=True) if v is None]
        if missing:
            given = self.pick(names)
            raise RuntimeEnvError(
                f"{launcher}: {', '.join(given) or 'some variables'} set but "
                f"{', '.join(missing)} missing",
                variables=given,
            )
        return [v for v in values if v is not None]

    def pick(self, names: Iterable[str]) -> dict[str, str]:
        """The variables among ``names`` that are set, values shortened for a message."""
        return {n: clip(self.env[n]) for n in names if n and self.env.get(n, "") != ""}


def detect(environ: Mapping[str, str] | None = None, *, mpi_comm: MpiComm | None = None) -> DistEnv:
    """This process's :class:`DistEnv`, from ``environ`` (``os.environ`` by default).

    Args:
        environ: the variables to read.
        mpi_comm: only used when an MPI launcher spread the ranks over several hosts
            and neither ``MASTER_ADDR`` nor an allocation tells rank 0's host: a
            communicator over the world (mpi4py's ``COMM_WORLD``, or anything with
            ``Get_rank``, ``Get_size`` and ``bcast``) over which rank 0 sends its host
            name. None: mpi4py's ``COMM_WORLD`` when mpi4py is installed.

    Raises:
        RuntimeEnvError: a launcher's variables are incomplete, malformed or
            contradict each other; the message names them and their values.
    """
    env = _Vars(os.environ if environ is None else environ)
    alloc = _allocation(env)
    if env.has("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        found = _from_torch(env, alloc)
    elif env.has("PALS_RANKID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        found = _from_mpi(env, alloc)
    elif env.has("SLURM_STEP_ID") and env.has("SLURM_PROCID"):
        found = _from_slurm(env, alloc)
    elif env.has("PBS_VNODENUM") and alloc.nodefile:
        found = _from_pbsdsh(env, alloc)
    else:
        found = _Found(Launcher.PBS if env.has("PBS_JOBID") else Launcher.NONE, 0, 0, 1, 1)
    return _finish(env, alloc, found, mpi_comm)


@dataclass(frozen=True, slots=True)
class _Alloc:
    hosts: tuple[str, ...] = ()
    job_id: str | None = None
    port_key: str | None = None
    nodefile: tuple[str, ...] = ()
    #: The variable the hosts came from.
    hosts_from: str = ""


@dataclass(frozen=True, slots=True)
class _Names:
    """Which variable each number came from ("" when derived), for error messages."""

    rank: str = ""
    world: str = ""
    local_rank: str = ""
    local_world: str = ""
    node_rank: str = ""
    num_nodes: str = ""


@dataclass(frozen=True, slots=True)
class _Found:
    launcher: Launcher
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int | None = None
    num_nodes: int | None = None
    master_addr: str | None = None
    hosts: tuple[str, ...] = ()
    names: _Names = _Names()


def _allocation(env: _Vars) -> _Alloc:
    """The hosts and job id of the surrounding allocation (Slurm, PBS), if any."""
    if env.has("SLURM_JOB_ID"):
        name = next((n for n in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST") if env.has(n)), "")
        hosts = tuple(expand_nodelist(env.env[name], name=name)) if name else ()
        job = env.text("SLURM_JOB_ID")
        step = env.text("SLURM_STEP_ID")
        return _Alloc(
            hosts=hosts, job_id=job, port_key=f"{job}.{step}" if step else job, hosts_from=name
        )
    if env.has("PBS_JOBID"):
        path = env.text("PBS_NODEFILE")
        slots = tuple(read_nodefile(path, name="PBS_NODEFILE")) if path else ()
        job = env.text("PBS_JOBID")
        return _Alloc(
            hosts=tuple(unique_hosts(slots)),
            job_id=job,
            port_key=job,
            nodefile=slots,
            hosts_from="PBS_NODEFILE",
        )
    job = env.text("TORCHELASTIC_RUN_ID") or env.text("DISTSPEC_APP_ID")
    return _Alloc(job_id=job, port_key=job)


def _from_torch(env: _Vars, alloc: _Alloc) -> _Found:
    launcher = Launcher.TORCHRUN if env.has("TORCHELASTIC_RUN_ID") else Launcher.ENV
    # distspec launch's torchrun_env set these from srun's or mpiexec's variables,
    # and names that launcher.
    named = env.text("DISTSPEC_LAUNCHER")
    if named in {m.value for m in Launcher}:
        launcher = Launcher(str(named))
    rank, world = env.need(str(launcher), "RANK", "WORLD_SIZE", sizes=("WORLD_SIZE",))
    names = _Names("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    if env.has("LOCAL_RANK", "LOCAL_WORLD_SIZE") or launcher is Launcher.TORCHRUN:
        # Half of the pair would leave this process's device unknown: both or neither.
        local_rank, local_world = env.need(
            str(launcher), "LOCAL_RANK", "LOCAL_WORLD_SIZE", sizes=("LOCAL_WORLD_SIZE",)
        )
    else:
        # RANK/WORLD_SIZE alone: one process per node is all that can be assumed.
        local_rank, local_world = (rank, world) if world == 1 else (0, 1)
        names = _Names("RANK", "WORLD_SIZE")
    node_rank = env.number("GROUP_RANK")
    num_nodes = env.size("GROUP_WORLD_SIZE")
    if node_rank is None and world % local_world == 0:
        node_rank = rank // local_world
    if num_nodes is None and world % local_world == 0:
        num_nodes = world // local_world
    names = _Names(
        names.rank,
        names.world,
        names.local_rank,
        names.local_world,
        "GROUP_RANK" if env.has("GROUP_RANK") else "",
        "GROUP_WORLD_SIZE" if env.has("GROUP_WORLD_SIZE") else "",
    )
    return _Found(
        launcher, rank, local_rank, world, local_world, node_rank, num_nodes, None, alloc.hosts,
        names,
    )  # fmt: skip


_MPI_FAMILIES: tuple[tuple[Launcher, tuple[str, str, str, str]], ...] = (
    (Launcher.OPENMPI, ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")),
    (Launcher.MPICH, ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")),
)  # fmt: skip


def _from_mpi(env: _Vars, alloc: _Alloc) -> _Found:
    candidates: list[_Found] = []
    if env.has("PALS_RANKID"):
        candidates.append(_from_pals(env, alloc))
    for launcher, (rank_v, size_v, lrank_v, lsize_v) in _MPI_FAMILIES:
        if not env.has(rank_v):
            continue
        if launcher is Launcher.MPICH and env.has("PALS_RANKID") and not env.has(lrank_v):
            # Cray's PMI also sets PMI_RANK/PMI_SIZE beside PALS: same numbers, checked below.
            rank, world = env.need("PALS", rank_v, size_v, sizes=(size_v,))
            candidates.append(
                _Found(Launcher.PALS, rank, 0, world, 1, names=_Names(rank_v, size_v))
            )
            continue
        rank, world = env.need(str(launcher), rank_v, size_v, sizes=(size_v,))
        if env.has(lrank_v, lsize_v):
            local_rank, local_world = env.need(str(launcher), lrank_v, lsize_v, sizes=(lsize_v,))
            local_names = (lrank_v, lsize_v)
        else:
            slurm = _slurm_local(env)
            if slurm is None:
                env.need(str(launcher), lrank_v, lsize_v)
                raise AssertionError("unreachable: need() raised")
            local_rank, local_world, local_names = slurm
        if launcher is Launcher.MPICH and env.has("I_MPI_ROOT", "I_MPI_HYDRA_TOPOLIB"):
            launcher = Launcher.INTEL_MPI
        names = _Names(rank_v, size_v, *local_names)
        candidates.append(
            _Found(launcher, rank, local_rank, world, local_world, hosts=alloc.hosts, names=names)
        )
    first = candidates[0]
    for other in candidates[1:]:
        if (other.rank, other.world_size) != (first.rank, first.world_size):
            raise RuntimeEnvError(
                f"two MPI launchers disagree: {first.launcher} says rank {first.rank} of "
                f"{first.world_size}, {other.launcher} rank {other.rank} of {other.world_size}",
                variables=env.pick(
                    ("PALS_RANKID", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK",
                     "OMPI_COMM_WORLD_SIZE", first.names.world)
                ),
            )  # fmt: skip
    return _as_slurm_if_srun(env, first)


def _slurm_local(env: _Vars) -> tuple[int, int, tuple[str, str]] | None:
    """(local rank, local world size, their variables) from an srun step, if this is one."""
    if not (env.has("SLURM_STEP_ID") and env.has("SLURM_LOCALID")):
        return None
    local = env.number("SLURM_LOCALID")
    node = env.number("SLURM_NODEID") or 0
    spec_name = next(
        (n for n in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE") if env.has(n)), ""
    )
    if local is None or not spec_name:
        return None
    counts = tasks_per_node(env.env[spec_name], name=spec_name)
    if node >= len(counts):
        raise RuntimeEnvError(
            f"Slurm: node {node} is past the {len(counts)} nodes of {spec_name}",
            variables=env.pick(("SLURM_NODEID", spec_name)),
        )
    return local, counts[node], ("SLURM_LOCALID", spec_name)


def _as_slurm_if_srun(env: _Vars, found: _Found) -> _Found:
    """``srun --mpi=pmi2|cray_shasta``: the MPI numbers are srun's own; say so."""
    if not env.has("SLURM_STEP_ID"):
        return found
    rank, world = env.number("SLURM_PROCID"), env.size("SLURM_STEP_NUM_TASKS")
    if (rank, world) != (found.rank, found.world_size):
        return found  # mpiexec inside an allocation: its proxies are the Slurm tasks
    slurm = _from_slurm(env, _Alloc(hosts=found.hosts))
    return _Found(
        Launcher.SLURM if found.launcher is not Launcher.PALS else Launcher.PALS,
        found.rank,
        found.local_rank,
        found.world_size,
        found.local_world_size,
        slurm.node_rank,
        slurm.num_nodes,
        found.master_addr,
        found.hosts,
        _Names(
            found.names.rank,
            found.names.world,
            found.names.local_rank,
            found.names.local_world,
            slurm.names.node_rank,
            slurm.names.num_nodes,
        ),
    )


def _from_pals(env: _Vars, alloc: _Alloc) -> _Found:
    """Cray PALS: ``PALS_RANKID``, ``PALS_NODEID`` and the layout in ``$PALS_APINFO``.

    Cray's own PALS also sets ``PALS_LOCAL_RANKID``; Slurm's ``--mpi=cray_shasta``
    does not, so the local rank comes from the apinfo file or ``SLURM_LOCALID``.
    """
    rank = env.number("PALS_RANKID")
    if rank is None:
        raise AssertionError("unreachable: _from_mpi checked PALS_RANKID")
    node = env.number("PALS_NODEID")
    path = env.text("PALS_APINFO")
    apinfo = read_apinfo(path, name="PALS_APINFO") if path else None
    if apinfo is not None:
        if rank >= len(apinfo.pes):
            raise RuntimeEnvError(
                f"PALS: rank {rank} is not among the {len(apinfo.pes)} ranks of the apinfo file",
                variables=env.pick(("PALS_RANKID", "PALS_APINFO")),
            )
        local_rank, _, node_idx = apinfo.pes[rank]
        for name, value, theirs in (
            ("PALS_LOCAL_RANKID", env.number("PALS_LOCAL_RANKID"), local_rank),
            ("PALS_NODEID", node, node_idx),
        ):
            if value is not None and value != theirs:
                raise RuntimeEnvError(
                    f"PALS: {name} disagrees with the apinfo file, which says {theirs} "
                    f"for rank {rank}",
                    variables=env.pick((name, "PALS_RANKID", "PALS_APINFO")),
                )
        local_world = sum(1 for pe in apinfo.pes if pe[2] == node_idx)
        return _Found(
            Launcher.PALS,
            rank,
            local_rank,
            len(apinfo.pes),
            local_world,
            node_idx,
            len(apinfo.nodes),
            master_addr=apinfo.nodes[apinfo.pes[0][2]],
            hosts=apinfo.nodes,
            names=_Names(*("PALS_RANKID", "PALS_APINFO", "PALS_APINFO", "PALS_APINFO")),
        )
    # No apinfo file: PALS_LOCAL_RANKID (Cray) or Slurm's step variables.
    world = env.first("PMI_SIZE", "PALS_SIZE", "SLURM_STEP_NUM_TASKS")
    lrank = env.first("PALS_LOCAL_RANKID", least=0)
    lworld = env.first("PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE")
    slurm = _slurm_local(env)
    if lrank is None and slurm is not None:
        lrank = slurm[0], slurm[2][0]
    if lworld is None and slurm is not None:
        lworld = slurm[1], slurm[2][1]
    if world is None or lrank is None or lworld is None:
        raise RuntimeEnvError(
            "PALS: PALS_RANKID is set but the world size or local rank cannot be told "
            "(no readable PALS_APINFO, no PMI_SIZE / PALS_LOCAL_RANKID)",
            variables=env.pick(("PALS_RANKID", "PALS_APINFO", "PALS_LOCAL_RANKID", "PMI_SIZE")),
        )
    names = _Names("PALS_RANKID", world[1], lrank[1], lworld[1], "PALS_NODEID" if node else "")
    return _Found(
        Launcher.PALS, rank, lrank[0], world[0], lworld[0], node_rank=node, hosts=alloc.hosts,
        names=names,
    )  # fmt: skip


def _from_slurm(env: _Vars, alloc: _Alloc) -> _Found:
    rank, local_rank = env.need("Slurm", "SLURM_PROCID", "SLURM_LOCALID")
    found = env.first("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    if found is None:
        env.need("Slurm", "SLURM_STEP_NUM_TASKS")
        raise AssertionError("unreachable: need() raised")
    world, world_name = found
    node = env.number("SLURM_NODEID") or 0
    nodes_found = env.first("SLURM_STEP_NUM_NODES", "SLURM_NNODES")
    num_nodes, nodes_name = nodes_found or (1, "")
    if num_nodes > world:
        raise RuntimeEnvError(
            f"Slurm: {num_nodes} nodes but {world} tasks: every node runs at least one",
            variables=env.pick((nodes_name, world_name)),
        )
    slurm = _slurm_local(env)
    if slurm is not None:
        _, local_world, (_, spec_name) = slurm
        counts = tasks_per_node(env.env[spec_name], name=spec_name)
        # Cross-check only numbers of one level: the step's (SLURM_STEP_*) or the job's.
        same_level = ("STEP" in spec_name) == ("STEP" in world_name)
        if (
            nodes_name
            and ("STEP" in spec_name) == ("STEP" in nodes_name)
            and len(counts) != num_nodes
        ):
            raise RuntimeEnvError(
                f"Slurm: {spec_name} lists {len(counts)} nodes but {nodes_name} says {num_nodes}",
                variables=env.pick((spec_name, nodes_name)),
            )
        if same_level and sum(counts) != world:
            raise RuntimeEnvError(
                f"Slurm: {spec_name} adds up to {sum(counts)} tasks but {world_name} says {world}",
                variables=env.pick((spec_name, world_name)),
            )
        local_names = ("SLURM_LOCALID", spec_name)
    else:
        local_world, local_names = world // num_nodes, ("SLURM_LOCALID", "")
    step_hosts = alloc.hosts_from == "SLURM_STEP_NODELIST" and nodes_name == "SLURM_STEP_NUM_NODES"
    if step_hosts and len(alloc.hosts) != num_nodes:
        raise RuntimeEnvError(
            f"Slurm: SLURM_STEP_NODELIST names {len(alloc.hosts)} hosts but "
            f"SLURM_STEP_NUM_NODES says {num_nodes}",
            variables=env.pick(("SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES")),
        )
    names = _Names(
        "SLURM_PROCID", world_name, *local_names, "SLURM_NODEID" if env.has("SLURM_NODEID") else "",
        nodes_name,
    )  # fmt: skip
    return _Found(Launcher.SLURM, rank, local_rank, world, local_world, node, num_nodes, None,
                  alloc.hosts, names)  # fmt: skip


def _from_pbsdsh(env: _Vars, alloc: _Alloc) -> _Found:
    """``pbsdsh``: ``PBS_VNODENUM`` is this task's line in ``$PBS_NODEFILE``."""
    index = env.number("PBS_VNODENUM")
    env.number("PBS_TASKNUM")  # not needed, but a malformed one says something is off
    if index is None:
        raise AssertionError("unreachable: detect() checked PBS_VNODENUM")
    slots = alloc.nodefile
    if index >= len(slots):
        raise RuntimeEnvError(
            f"PBS: task {index} is past the {len(slots)} lines of the nodefile",
            variables=env.pick(("PBS_VNODENUM", "PBS_NODEFILE")),
        )
    host = slots[index]
    names = _Names(*("PBS_VNODENUM", "PBS_NODEFILE", "PBS_VNODENUM", "PBS_NODEFILE"))
    return _Found(
        Launcher.PBS,
        index,
        slots[:index].count(host),
        len(slots),
        slots.count(host),
        alloc.hosts.index(host),
        len(alloc.hosts),
        names=names,
    )


def _check_layout(env: _Vars, found: _Found, node_rank: int, num_nodes: int) -> None:
    """Each index below its count, and the counts consistent, naming the variables."""
    n = found.names
    lw, world = found.local_world_size, found.world_size
    checks = (
        (found.rank < world, (n.rank, n.world),
         f"rank {found.rank} is not below the world size {world} (ranks are 0..{world - 1})"),
        (found.local_rank < lw, (n.local_rank, n.local_world),
         f"local rank {found.local_rank} is not below the {lw} processes on this node "
         f"(local ranks are 0..{lw - 1})"),
        (lw <= world, (n.local_world, n.world),
         f"{lw} processes on this node but {world} in the whole job"),
        (node_rank < num_nodes, (n.node_rank, n.num_nodes),
         f"node rank {node_rank} is not below the node count {num_nodes} "
         f"(nodes are 0..{num_nodes - 1})"),
        (lw + num_nodes - 1 <= world, (n.num_nodes, n.local_world, n.world),
         f"{num_nodes} nodes, {lw} processes on this one, make more than the "
         f"{world} processes of the job"),
    )  # fmt: skip
    for ok, names, message in checks:
        if not ok:
            raise RuntimeEnvError(f"{found.launcher}: {message}", variables=env.pick(names))


def _finish(env: _Vars, alloc: _Alloc, found: _Found, mpi_comm: MpiComm | None) -> DistEnv:
    """Fill in node counts, the master address and port, and validate."""
    hosts = found.hosts or alloc.hosts
    local_world = found.local_world_size
    num_nodes = found.num_nodes
    if num_nodes is None:
        # Block placement (mpiexec -ppn N, --map-by ppr:N:node): the default of every MPI.
        num_nodes = -(-found.world_size // local_world)
    node_rank = found.node_rank
    if node_rank is None:
        node_rank = min(found.rank // local_world, num_nodes - 1)
    _check_layout(env, found, node_rank, num_nodes)
    port = env.number("MASTER_PORT", least=1, most=65535)
    if port is None:
        port = default_port(alloc.port_key)
    master = env.text("MASTER_ADDR")
    if master is not None:
        check_host(master, name="MASTER_ADDR")
    else:
        master = found.master_addr
    if master is None:
        if found.world_size == local_world:
            master = "127.0.0.1"
        elif hosts:
            master = hosts[0]
        else:
            master = _rank0_host(env, found, num_nodes, mpi_comm)
    return DistEnv(
        rank=found.rank,
        local_rank=found.local_rank,
        world_size=found.world_size,
        local_world_size=local_world,
        node_rank=node_rank,
        num_nodes=num_nodes,
        master_addr=master,
        master_port=port,
        launcher=found.launcher,
        hosts=tuple(hosts),
        job_id=alloc.job_id,
    )


# ---------------------------------------------------------------------------
# rank 0's host under a bare mpiexec (no allocation)


class MpiComm(Protocol):
    """What :func:`detect` uses of an MPI communicator (mpi4py's ``Comm``)."""

    def Get_rank(self) -> int:  # mpi4py's names
        """This process's rank in the communicator."""

    def Get_size(self) -> int:
        """The number of processes in the communicator."""

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """``obj`` as rank ``root`` sent it, on every rank."""


#: The variables through which each MPI's mpiexec reads a default hostfile (so
#: its ranks inherit them): rank 0 runs on the file's first host.
_HOSTFILE_VARS: Mapping[Launcher, tuple[str, ...]] = {
    Launcher.MPICH: ("HYDRA_HOST_FILE",),
    Launcher.INTEL_MPI: ("I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE"),
    Launcher.OPENMPI: ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile"),
    Launcher.PALS: (),
}
_SET_MASTER_ADDR = {
    Launcher.MPICH: "mpiexec -genv MASTER_ADDR HOST",
    Launcher.INTEL_MPI: "mpiexec -genv MASTER_ADDR HOST",
    Launcher.OPENMPI: "mpiexec -x MASTER_ADDR=HOST",
}
_MPI_HOST_CACHE: dict[tuple[int, int], str] = {}


def _rank0_host(env: _Vars, found: _Found, num_nodes: int, comm: MpiComm | None) -> str:
    """Rank 0's host when ranks span hosts and no allocation names them."""
    where = f"{found.launcher}: {found.world_size} ranks on {num_nodes} hosts"
    if found.launcher not in _HOSTFILE_VARS:
        raise RuntimeEnvError(
            f"{where} but nothing tells rank 0's host (no allocation node list): "
            "set MASTER_ADDR to rank 0's host on every rank"
        )
    host = _rank0_host_over_mpi(found, comm)
    if host is not None:
        return host
    hostfile_vars = _HOSTFILE_VARS[found.launcher]
    for name in hostfile_vars:
        path = env.text(name)
        if path is None:
            continue
        first = read_nodefile(path, name=name)[0]
        # Hydra tells each rank its host as the hostfile names it: on rank 0 that must
        # be the first host, else mpiexec was given another list (-f, -hosts).
        mine = env.text("MPIR_CVAR_CH3_INTERFACE_HOSTNAME")
        if found.rank == 0 and mine is not None and mine != first:
            raise RuntimeEnvError(
                f"{where}: rank 0 runs on {clip(mine)!r}, not on {clip(first)!r}, the first "
                f"host of {name}, so mpiexec used another host list: set MASTER_ADDR to "
                "rank 0's host on every rank",
                variables=env.pick((name, "MPIR_CVAR_CH3_INTERFACE_HOSTNAME")),
            )
        return first
    how = _SET_MASTER_ADDR.get(found.launcher)
    raise RuntimeEnvError(
        f"{where}, no Slurm or PBS allocation names them, and mpi4py is not installed to "
        "ask rank 0: set MASTER_ADDR to rank 0's host on every rank"
        + (f" ({how})" if how else "")
        + (
            f", or point {' or '.join(hostfile_vars)} at mpiexec's hostfile"
            if hostfile_vars
            else ""
        )
    )


def _rank0_host_over_mpi(found: _Found, comm: MpiComm | None) -> str | None:
    """Rank 0's host name, broadcast by rank 0 over ``comm`` (mpi4py's world when None).

    None when mpi4py is not installed, or its world is not the launcher's (an mpi4py
    built for another MPI starts as a world of one).
    """
    key = (found.rank, found.world_size)
    if comm is None:
        if key in _MPI_HOST_CACHE:
            return _MPI_HOST_CACHE[key]
        comm = _mpi4py_world()
        if comm is None:
            return None
        cache = True
    else:
        cache = False
    if (comm.Get_rank(), comm.Get_size()) != key:
        return None
    host = comm.bcast(socket.gethostname() if found.rank == 0 else None, root=0)
    if not isinstance(host, str):
        raise RuntimeEnvError(f"{found.launcher}: rank 0 sent {host!r} as its host name")
    check_host(host, name="rank 0's host name")
    if cache:
        _MPI_HOST_CACHE[key] = host
    return host


def _mpi4py_world() -> MpiComm | None:
    import importlib
    import importlib.util

    if importlib.util.find_spec("mpi4py") is None:
        return None
    try:
        mpi = importlib.import_module("mpi4py.MPI")  # initialises MPI
    except Exception:  # an mpi4py built for an MPI that is not here: as if not installed
        return None
    world: MpiComm = mpi.COMM_WORLD
    return world
