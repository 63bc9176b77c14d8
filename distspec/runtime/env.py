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
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from distspec.errors import RuntimeEnvError
from distspec.runtime.hosts import (
    default_port,
    expand_nodelist,
    read_nodefile,
    tasks_per_node,
    unique_hosts,
)

__all__ = ["DistEnv", "Launcher", "detect", "read_apinfo"]


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
    """Typed reads of an environment mapping, with errors that name the variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.env = environ

    def has(self, *names: str) -> bool:
        return any(self.env.get(n, "") != "" for n in names)

    def text(self, name: str) -> str | None:
        value = self.env.get(name, "")
        return value if value != "" else None

    def number(self, name: str) -> int | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            number = int(value.strip())
        except ValueError:
            raise RuntimeEnvError(
                f"{name} is not a whole number", variables={name: value}
            ) from None
        if number < 0:
            raise RuntimeEnvError(f"{name} is negative", variables={name: value})
        return number

    def need(self, launcher: str, *names: str) -> list[int]:
        """All of ``names`` as ints, or an error naming the missing and the given ones."""
        values = [self.number(n) for n in names]
        missing = [n for n, v in zip(names, values, strict=True) if v is None]
        if missing:
            given = {n: self.env[n] for n in names if self.env.get(n)}
            raise RuntimeEnvError(
                f"{launcher}: {', '.join(given) or 'some variables'} set but "
                f"{', '.join(missing)} missing",
                variables=given,
            )
        return [v for v in values if v is not None]

    def pick(self, names: tuple[str, ...]) -> dict[str, str]:
        return {n: self.env[n] for n in names if n in self.env}


_TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def detect(environ: Mapping[str, str] | None = None) -> DistEnv:
    """This process's :class:`DistEnv`, from ``environ`` (``os.environ`` by default).

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
    return _finish(env, alloc, found)


@dataclass(frozen=True, slots=True)
class _Alloc:
    hosts: tuple[str, ...] = ()
    job_id: str | None = None
    port_key: str | None = None
    nodefile: tuple[str, ...] = ()


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


def _allocation(env: _Vars) -> _Alloc:
    """The hosts and job id of the surrounding allocation (Slurm, PBS), if any."""
    if env.has("SLURM_JOB_ID"):
        nodelist = env.text("SLURM_STEP_NODELIST") or env.text("SLURM_JOB_NODELIST")
        hosts = tuple(expand_nodelist(nodelist)) if nodelist else ()
        job = env.text("SLURM_JOB_ID")
        step = env.text("SLURM_STEP_ID")
        return _Alloc(hosts=hosts, job_id=job, port_key=f"{job}.{step}" if step else job)
    if env.has("PBS_JOBID"):
        path = env.text("PBS_NODEFILE")
        slots = tuple(read_nodefile(path)) if path else ()
        job = env.text("PBS_JOBID")
        return _Alloc(hosts=tuple(unique_hosts(slots)), job_id=job, port_key=job, nodefile=slots)
    job = env.text("TORCHELASTIC_RUN_ID") or env.text("DISTSPEC_APP_ID")
    return _Alloc(job_id=job, port_key=job)


def _from_torch(env: _Vars, alloc: _Alloc) -> _Found:
    launcher = Launcher.TORCHRUN if env.has("TORCHELASTIC_RUN_ID") else Launcher.ENV
    # distspec launch's torchrun_env set these from srun's or mpiexec's variables,
    # and names that launcher.
    named = env.text("DISTSPEC_LAUNCHER")
    if named in {m.value for m in Launcher}:
        launcher = Launcher(str(named))
    rank, world = env.need(str(launcher), "RANK", "WORLD_SIZE")
    local_rank = env.number("LOCAL_RANK")
    local_world = env.number("LOCAL_WORLD_SIZE")
    if local_rank is None or local_world is None:
        if launcher is Launcher.TORCHRUN:
            env.need("torchrun", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
        # RANK/WORLD_SIZE alone: one process per node is all that can be assumed.
        local_rank, local_world = (rank, world) if world == 1 else (0, 1)
    node_rank = env.number("GROUP_RANK")
    if node_rank is None:
        node_rank = rank // local_world if world % local_world == 0 else None
    num_nodes = env.number("GROUP_WORLD_SIZE")
    if num_nodes is None and world % local_world == 0:
        num_nodes = world // local_world
    return _Found(
        launcher, rank, local_rank, world, local_world, node_rank, num_nodes, hosts=alloc.hosts
    )


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
            continue  # Cray's PMI also sets PMI_RANK/PMI_SIZE beside PALS: same numbers
        rank, world = env.need(str(launcher), rank_v, size_v)
        local_rank, local_world = env.number(lrank_v), env.number(lsize_v)
        if local_rank is None or local_world is None:
            slurm = _slurm_local(env)
            if slurm is None:
                env.need(str(launcher), lrank_v, lsize_v)
                raise AssertionError("unreachable")
            local_rank, local_world = slurm
        if launcher is Launcher.MPICH and env.has("I_MPI_ROOT", "I_MPI_HYDRA_TOPOLIB"):
            launcher = Launcher.INTEL_MPI
        candidates.append(_Found(launcher, rank, local_rank, world, local_world, hosts=alloc.hosts))
    first = candidates[0]
    for other in candidates[1:]:
        if (other.rank, other.world_size) != (first.rank, first.world_size):
            raise RuntimeEnvError(
                f"two MPI launchers disagree: {first.launcher} says rank {first.rank} of "
                f"{first.world_size}, {other.launcher} rank {other.rank} of {other.world_size}",
                variables=env.pick(
                    ("PALS_RANKID", "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK",
                     "OMPI_COMM_WORLD_SIZE")
                ),
            )  # fmt: skip
    return _as_slurm_if_srun(env, first)


def _slurm_local(env: _Vars) -> tuple[int, int] | None:
    """(local rank, local world size) from an srun step, if this is one."""
    if not (env.has("SLURM_STEP_ID") and env.has("SLURM_LOCALID")):
        return None
    local = env.number("SLURM_LOCALID")
    node = env.number("SLURM_NODEID") or 0
    spec = env.text("SLURM_STEP_TASKS_PER_NODE") or env.text("SLURM_TASKS_PER_NODE")
    if local is None or spec is None:
        return None
    counts = tasks_per_node(spec)
    if node >= len(counts):
        raise RuntimeEnvError(
            "Slurm: SLURM_NODEID is past the tasks-per-node list",
            variables=env.pick(("SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE")),
        )
    return local, counts[node]


def _as_slurm_if_srun(env: _Vars, found: _Found) -> _Found:
    """``srun --mpi=pmi2|cray_shasta``: the MPI numbers are srun's own; say so."""
    if not env.has("SLURM_STEP_ID"):
        return found
    rank, world = env.number("SLURM_PROCID"), env.number("SLURM_STEP_NUM_TASKS")
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
    )


def _from_pals(env: _Vars, alloc: _Alloc) -> _Found:
    """Cray PALS: ``PALS_RANKID``, ``PALS_NODEID`` and the layout in ``$PALS_APINFO``.

    Cray's own PALS also sets ``PALS_LOCAL_RANKID``; Slurm's ``--mpi=cray_shasta``
    does not, so the local rank comes from the apinfo file or ``SLURM_LOCALID``.
    """
    rank = env.number("PALS_RANKID")
    assert rank is not None
    node = env.number("PALS_NODEID")
    apinfo = None
    path = env.text("PALS_APINFO")
    if path:
        apinfo = read_apinfo(path)
    if apinfo is not None:
        if rank >= len(apinfo.pes):
            raise RuntimeEnvError(
                f"PALS: rank {rank} is not among the {len(apinfo.pes)} ranks of {path}",
                variables=env.pick(("PALS_RANKID", "PALS_APINFO")),
            )
        local_rank, _, node_idx = apinfo.pes[rank]
        local_env = env.number("PALS_LOCAL_RANKID")
        if local_env is not None and local_env != local_rank:
            raise RuntimeEnvError(
                f"PALS: PALS_LOCAL_RANKID disagrees with the apinfo file (local rank {local_rank})",
                variables=env.pick(("PALS_LOCAL_RANKID", "PALS_APINFO")),
            )
        local_world = sum(1 for pe in apinfo.pes if pe[2] == node_idx)
        rank0_node = apinfo.pes[0][2]
        return _Found(
            Launcher.PALS,
            rank,
            local_rank,
            len(apinfo.pes),
            local_world,
            node_idx,
            len(apinfo.nodes),
            master_addr=apinfo.nodes[rank0_node] if rank0_node < len(apinfo.nodes) else None,
            hosts=tuple(apinfo.nodes) or alloc.hosts,
        )
    # No apinfo file: PALS_LOCAL_RANKID (Cray) or Slurm's step variables.
    world = env.number("PMI_SIZE") or env.number("PALS_SIZE") or env.number("SLURM_STEP_NUM_TASKS")
    lrank = env.number("PALS_LOCAL_RANKID")
    lworld = env.number("PALS_LOCAL_SIZE") or env.number("PMI_LOCAL_SIZE")
    slurm = _slurm_local(env)
    if lrank is None and slurm is not None:
        lrank = slurm[0]
    if lworld is None and slurm is not None:
        lworld = slurm[1]
    if world is None or lrank is None or lworld is None:
        raise RuntimeEnvError(
            "PALS: PALS_RANKID is set but the world size or local rank cannot be told "
            "(no readable PALS_APINFO, no PMI_SIZE / PALS_LOCAL_RANKID)",
            variables=env.pick(("PALS_RANKID", "PALS_APINFO", "PALS_LOCAL_RANKID", "PMI_SIZE")),
        )
    return _Found(Launcher.PALS, rank, lrank, world, lworld, node_rank=node, hosts=alloc.hosts)


def _from_slurm(env: _Vars, alloc: _Alloc) -> _Found:
    rank, local_rank = env.need("Slurm", "SLURM_PROCID", "SLURM_LOCALID")
    world = env.number("SLURM_STEP_NUM_TASKS") or env.number("SLURM_NTASKS")
    if world is None:
        env.need("Slurm", "SLURM_STEP_NUM_TASKS")
        raise AssertionError("unreachable")
    node = env.number("SLURM_NODEID") or 0
    num_nodes = env.number("SLURM_STEP_NUM_NODES") or env.number("SLURM_NNODES") or 1
    slurm = _slurm_local(env)
    local_world = slurm[1] if slurm else world // num_nodes
    return _Found(Launcher.SLURM, rank, local_rank, world, local_world, node, num_nodes, None,
                  alloc.hosts)  # fmt: skip


def _from_pbsdsh(env: _Vars, alloc: _Alloc) -> _Found:
    """``pbsdsh``: ``PBS_VNODENUM`` is this task's line in ``$PBS_NODEFILE``."""
    index = env.number("PBS_VNODENUM")
    assert index is not None
    slots = alloc.nodefile
    if index >= len(slots):
        raise RuntimeEnvError(
            f"PBS: PBS_VNODENUM is past the {len(slots)} lines of the nodefile",
            variables=env.pick(("PBS_VNODENUM", "PBS_NODEFILE")),
        )
    host = slots[index]
    return _Found(
        Launcher.PBS,
        index,
        slots[:index].count(host),
        len(slots),
        slots.count(host),
        alloc.hosts.index(host),
        len(alloc.hosts),
    )


def _finish(env: _Vars, alloc: _Alloc, found: _Found) -> DistEnv:
    """Fill in node counts, the master address and port, and validate."""
    hosts = found.hosts or alloc.hosts
    local_world = found.local_world_size
    node_rank = found.node_rank
    num_nodes = found.num_nodes
    if num_nodes is None:
        # Block placement (mpiexec -ppn N, --map-by ppr:N:node): the default of every MPI.
        num_nodes = -(-found.world_size // local_world)
    if node_rank is None:
        node_rank = min(found.rank // local_world, num_nodes - 1)
    master = env.text("MASTER_ADDR") or found.master_addr
    if master is None:
        if found.world_size == local_world:
            master = "127.0.0.1"
        elif hosts:
            master = hosts[0]
        else:
            raise RuntimeEnvError(
                f"{found.launcher}: {found.world_size} ranks on {num_nodes} nodes but no way to "
                "tell the rank-0 host (no allocation node list): set MASTER_ADDR"
            )
    port = env.number("MASTER_PORT")
    if port is None:
        port = default_port(alloc.port_key)
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
# PALS apinfo


@dataclass(frozen=True, slots=True)
class ApInfo:
    """The layout in a PALS apinfo file: per rank (local index, command, node index)."""

    pes: tuple[tuple[int, int, int], ...]
    nodes: tuple[str, ...]


# The header: version, then (size, offset, count) for comm profiles, commands,
# ranks ("pes"), nodes and NICs; every field takes 8 bytes (ints are padded).
_HEADER = struct.Struct("<i4xQQQi4xQQi4xQQi4xQQi4xQQi4x")
_PE = struct.Struct("<iii")


def read_apinfo(path: str | os.PathLike[str]) -> ApInfo | None:
    """Read a PALS apinfo file (format version 1, as Slurm's cray_shasta writes it).

    Returns None for a file that cannot be read or has another version.
    """
    try:
        data = Path(path).read_bytes()
        fields = _HEADER.unpack_from(data, 0)
    except (OSError, struct.error):
        return None
    version = fields[0]
    if version != 1:
        return None
    pe_size, pe_off, npes = fields[8:11]
    node_size, node_off, nnodes = fields[11:14]
    try:
        pes = tuple(_PE.unpack_from(data, pe_off + i * pe_size) for i in range(npes))
        nodes = []
        for i in range(nnodes):
            start = node_off + i * node_size + 4  # int nid, then char hostname[64]
            raw = data[start : node_off + (i + 1) * node_size]
            nodes.append(raw.split(b"\0", 1)[0].decode(errors="replace"))
    except struct.error:
        return None
    return ApInfo(pes=pes, nodes=tuple(nodes))
