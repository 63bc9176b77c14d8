"""``distspec launch``: start a command on every host of an allocation you already hold.

Three steps, the first two pure functions of an environment mapping (so a dry run
is a function of recorded variables and can be tested anywhere):

1. :func:`find_allocation` — where are we: a Slurm allocation (``SLURM_JOB_ID``,
   ``SLURM_JOB_NODELIST``), a PBS job (``PBS_JOBID``, ``$PBS_NODEFILE``), a
   hand-written ``--hostfile``, or nowhere (local).
2. :func:`plan_launch` — hosts, processes per host and world size, then one
   command line: ``srun`` (one task per process, or one ``torchrun`` per node),
   ``mpiexec`` (MPICH/Hydra or Cray PALS flags), ``pbsdsh`` + ``torchrun``, or
   ``torchrun --standalone`` here. A frozen :class:`LaunchPlan` holds it.
   :func:`check_command` refuses a command that cannot start (a missing program or
   script, a directory) before anything runs.
3. :func:`run_plan` — run it, forward SIGINT/SIGTERM, optionally drop noise lines
   from its output, and return its exit code; when torchrun reports a failed worker,
   print that worker's rank, host and traceback (:func:`failure_report`) instead of
   torchrun's own traceback, and return the worker's exit code, not torchrun's 1.

Every process gets torchrun's environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``TORCHELASTIC_RUN_ID``, ...), whatever starts it: torchrun sets it
itself; a task of ``srun`` or ``mpiexec`` runs the command through
``python -m distspec.runtime.torchrun_env``, which sets the same variables from the
task's own launcher variables and then runs it with ``exec`` (:mod:`.torchrun_env`).

Processes per host, unless given: what the allocation says (``SLURM_NTASKS_PER_NODE``,
the slots per host of the PBS nodefile, i.e. ``mpiprocs``), else its GPUs per host
(``SLURM_GPUS_ON_NODE``, ``SLURM_JOB_GPUS``, ``NGPUS``, ``CUDA_VISIBLE_DEVICES``),
else 1. Only the environment is read: no ``nvidia-smi``, no torch.

The rank-0 host is the first host of the allocation (Slurm's node order, the first
line of the nodefile) — the same host :func:`distspec.runtime.detect` names, both
read through :mod:`distspec.runtime.hosts`. The torchrun arguments come from
:func:`distspec.torchrun.torchrun_args`, the function the ``dist.*`` components use.
"""

from __future__ import annotations

import enum
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, TextIO

from distspec.errors import RuntimeEnvError, UsageError
from distspec.runtime import torchrun_env
from distspec.runtime.hosts import (
    default_port,
    expand_nodelist,
    read_nodefile,
    tasks_per_node,
    unique_hosts,
)
from distspec.specs.topology import MAX_NPROC_PER_NODE, Topology
from distspec.torchrun import TORCHRUN, torchrun_args

if TYPE_CHECKING:
    from distspec.runtime.launch_failure import TorchrunStderr

__all__ = [
    "DEFAULT_FILTERS",
    "Allocation",
    "LaunchPlan",
    "Launcher",
    "Method",
    "Where",
    "check_command",
    "command_argv",
    "compile_filters",
    "find_allocation",
    "plan_launch",
    "run_plan",
]


class Where(str, enum.Enum):
    """The kind of allocation ``launch`` runs in."""

    SLURM = "slurm"
    PBS = "pbs"
    HOSTFILE = "hostfile"  # --hostfile outside any PBS job
    LOCAL = "local"

    def __str__(self) -> str:
        return self.value


class Launcher(str, enum.Enum):
    """``--launcher``: what starts the processes (``auto`` picks per allocation)."""

    AUTO = "auto"
    SRUN = "srun"
    MPIEXEC = "mpiexec"
    TORCHRUN = "torchrun"

    def __str__(self) -> str:
        return self.value


class Method(str, enum.Enum):
    """The command line a plan runs."""

    SRUN = "srun"  # one Slurm task per process
    SRUN_TORCHRUN = "srun+torchrun"  # one Slurm task per node, running torchrun
    MPICH = "mpiexec (MPICH/Hydra)"
    PALS = "mpiexec (Cray PALS)"
    PBSDSH_TORCHRUN = "pbsdsh+torchrun"
    TORCHRUN = "torchrun"  # --standalone, on this host

    def __str__(self) -> str:
        return self.value

    @property
    def runs_torchrun(self) -> bool:
        """torchrun starts the processes (and reports a failed one in its own words)."""
        return self in (Method.SRUN_TORCHRUN, Method.PBSDSH_TORCHRUN, Method.TORCHRUN)


#: Lines ``--filter-common`` drops: messages of the launchers themselves that say
#: nothing about the job (each a regex searched anywhere in the line).
DEFAULT_FILTERS: tuple[str, ...] = (
    # torch's c10d on hosts without reverse DNS (every node of the local cluster).
    r"hostname of the client socket cannot be retrieved",
    # torchrun's OMP_NUM_THREADS banner: a line of stars, the message, an empty line.
    r"\*{20,}\s*$",
    r"Setting OMP_NUM_THREADS environment variable for each process",
    r"torch/distributed/run\.py:\d+\]\s*$",
    # gloo's per-rank connection chatter.
    r"^\[Gloo\] Rank \d+ is connected to \d+ peer ranks",
    # srun's notes while a step waits for resources.
    r"^srun: (Job|Step) \S+ step creation (temporarily|still) disabled",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """What the surrounding allocation offers, as its environment tells.

    Attributes:
        where: Slurm, PBS, a hand-written hostfile, or local.
        job_id: the scheduler's job id (None for a hostfile or local).
        hosts: the hosts in the scheduler's order; the first runs rank 0.
        slots_per_host: processes per host the allocation asked for
            (``SLURM_NTASKS_PER_NODE``, nodefile lines per host), if it says.
        gpus_per_host: GPUs per host the environment names, if any.
        cpus_per_host: CPUs per host (the smallest across hosts), if known.
        hostfile: the file the hosts were read from (PBS, hostfile).
        in_step: launch itself runs inside a Slurm job step (``srun --pty bash``).
        vnodes: for each host, the index of its first line in the host file: where
            ``pbsdsh -n`` runs a task on it (PBS).
    """

    where: Where
    job_id: str | None = None
    hosts: tuple[str, ...] = ()
    slots_per_host: int | None = None
    gpus_per_host: int | None = None
    cpus_per_host: int | None = None
    hostfile: str | None = None
    in_step: bool = False
    vnodes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchPlan:
    """One command that starts ``nproc_per_host`` processes on each of ``hosts``.

    Attributes:
        allocation: where the plan was made.
        method: the kind of command line.
        hosts: the hosts it uses, the first runs rank 0 (a prefix of the allocation's).
        nproc_per_host: processes on each host.
        argv: the command; :meth:`render` is its one-line shell form.
        warning: one line to print before running (outside any allocation), or None.
    """

    allocation: Allocation
    method: Method
    hosts: tuple[str, ...]
    nproc_per_host: int
    argv: tuple[str, ...]
    warning: str | None = None

    @property
    def world_size(self) -> int:
        """The number of processes it starts: hosts times processes per host."""
        return len(self.hosts) * self.nproc_per_host

    def render(self) -> str:
        """The command as one shell-quoted line, as ``--dryrun`` prints it."""
        return shlex.join(self.argv)


# ---------------------------------------------------------------------------
# 1. where are we


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "").strip()
    if not value:
        return None
    try:
        number = int(value)
    except ValueError:
        raise RuntimeEnvError(f"{name}={value!r} is not a whole number") from None
    return number if number > 0 else None


def _device_list(value: str) -> int | None:
    """Number of devices in a ``0,1,2`` list; None for unset or Slurm's ``NoDevFiles``."""
    items = [v for v in value.split(",") if v.strip()]
    if not items or items == ["NoDevFiles"]:
        return None
    return len(items)


def _gpus(environ: Mapping[str, str], *counts: str) -> int | None:
    for name in counts:
        number = _int(environ, name)
        if number:
            return number
    for name in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        if name == "SLURM_JOB_GPUS" and "SLURM_JOB_ID" not in environ:
            continue
        number = _device_list(environ.get(name, ""))
        if number:
            return number
    return None


def _slurm_tasks_per_node(environ: Mapping[str, str]) -> int | None:
    """``SLURM_NTASKS_PER_NODE`` (``--ntasks-per-node``), else ``SLURM_TASKS_PER_NODE``
    when it is the same on every node (``-n 4 -N 2`` gives ``2(x2)``)."""
    explicit = _int(environ, "SLURM_NTASKS_PER_NODE")
    if explicit or not environ.get("SLURM_NTASKS"):
        # Without -n/--ntasks Slurm still writes SLURM_TASKS_PER_NODE (one per node),
        # which says nothing the user asked for.
        return explicit
    spec = environ.get("SLURM_TASKS_PER_NODE", "")
    counts = set(tasks_per_node(spec)) if spec else set()
    if len(counts) != 1:
        return None  # uneven (3,1): no single number; the default decides
    return counts.pop() or None


def _read_hosts(path: str, source: str, read: Callable[[str], list[str]]) -> list[str]:
    try:
        return read(path)
    except RuntimeEnvError as e:
        raise RuntimeEnvError(
            f"{e} (from {source}); point PBS_NODEFILE or --hostfile at a readable file "
            "listing one host per line"
        ) from e


def find_allocation(
    environ: Mapping[str, str],
    *,
    hostfile: str | None = None,
    read_hostfile: Callable[[str], list[str]] = read_nodefile,
) -> Allocation:
    """Where ``launch`` runs, from ``environ`` (and the hostfile, if any).

    ``--hostfile``, or a PBS job (``PBS_JOBID``) with ``$PBS_NODEFILE``, reads its
    hosts from that file (outside a PBS job: :attr:`Where.HOSTFILE`); else a Slurm
    job (``SLURM_JOB_ID``) reads ``SLURM_JOB_NODELIST``; a PBS job with neither a
    nodefile nor Slurm variables is an error; nothing at all is local.

    Raises:
        RuntimeEnvError: a PBS job without a readable hostfile (the message names
            ``PBS_NODEFILE`` and ``--hostfile``), or malformed Slurm variables.
    """
    pbs_job = environ.get("PBS_JOBID") or None
    slurm_job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or None
    nodefile = environ.get("PBS_NODEFILE") or None
    if hostfile or (pbs_job and (nodefile or not slurm_job)):
        path = hostfile or nodefile
        if path is None:
            raise RuntimeEnvError(
                f"PBS job {pbs_job} has no PBS_NODEFILE: pass --hostfile FILE (one host "
                "per line; under Slurm's PBS wrappers `generate_pbs_nodefile` writes one)"
            )
        source = "--hostfile" if hostfile else "PBS_NODEFILE"
        slots = _read_hosts(path, source, read_hostfile)
        hosts = unique_hosts(slots)
        # A host listed K > 1 times was given K MPI slots (PBS Pro's mpiprocs, Torque's
        # ppn); once is PBS Pro's default and says nothing, so GPUs decide then.
        per_host = min(slots.count(h) for h in hosts)
        return Allocation(
            where=Where.PBS if pbs_job else Where.HOSTFILE,
            job_id=pbs_job,
            hosts=tuple(hosts),
            slots_per_host=per_host if per_host > 1 else None,
            gpus_per_host=_gpus(environ, "NGPUS"),
            cpus_per_host=_int(environ, "NCPUS"),
            hostfile=path,
            vnodes=tuple(slots.index(h) for h in hosts),
        )
    # Slurm's spank_pbs plugin sets PBS_JOBID (and no PBS_NODEFILE) in every Slurm
    # job, and Slurm's PBS wrappers (slurm-wlm-torque) run qsub jobs as Slurm jobs:
    # without a nodefile these are Slurm allocations.
    if slurm_job:
        nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
        if not nodelist:
            raise RuntimeEnvError(
                f"Slurm job {slurm_job} but SLURM_JOB_NODELIST is not set: "
                "run launch in the allocation's shell or batch script"
            )
        hosts = expand_nodelist(nodelist)
        cpus_spec = environ.get("SLURM_JOB_CPUS_PER_NODE", "")
        cpus = min(tasks_per_node(cpus_spec)) if cpus_spec else None
        return Allocation(
            where=Where.SLURM,
            job_id=slurm_job,
            hosts=tuple(hosts),
            slots_per_host=_slurm_tasks_per_node(environ),
            gpus_per_host=_gpus(environ, "SLURM_GPUS_ON_NODE"),
            cpus_per_host=cpus or None,
            # A batch script and an salloc shell have no SLURM_STEP_ID; tasks of a
            # step (srun) have one.
            in_step=bool(environ.get("SLURM_STEP_ID")),
        )
    return Allocation(where=Where.LOCAL, gpus_per_host=_gpus(environ))


# ---------------------------------------------------------------------------
# 2. the command


def command_argv(command: Sequence[str], python: str) -> list[str]:
    """The user's command, with ``python`` in front of a ``.py`` script (ezpz does this).

    Raises:
        UsageError: an empty command.
    """
    if not command:
        raise UsageError("no command to launch: give one after --, e.g. -- python train.py")
    if command[0].endswith(".py"):
        return [python, *command]
    return list(command)


_PYTHON = re.compile(r"python[0-9.]*")
# Options of the python command that take a value (``-X dev``, ``-W error``).
_PYTHON_VALUED = ("-X", "-W", "-Q")


def _python_script(argv: Sequence[str]) -> str | None:
    """The script a ``python [OPTIONS] SCRIPT ...`` command runs, or None (``-m``,
    ``-c``, stdin, or a program that is not Python)."""
    if not _PYTHON.fullmatch(Path(argv[0]).name):
        return None
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-m", "-c", "-") or arg.startswith(("-m", "-c")):
            return None
        if arg in _PYTHON_VALUED:
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


def check_command(argv: Sequence[str], environ: Mapping[str, str]) -> None:
    """Refuse a command that cannot start, before anything runs.

    ``argv`` is the command as :func:`command_argv` gives it. Its program must be an
    executable file (a name without ``/``: found on ``environ``'s PATH); the script
    of a ``python SCRIPT`` command must be a readable file (or a directory or zip
    with a ``__main__.py``). Paths are relative to the current directory, where
    every task starts.

    Raises:
        UsageError: the first thing wrong, in one line.
    """
    program = argv[0]
    script = _python_script(argv)
    try:
        _check_program(program, environ)
        if script is not None:
            _check_script(script)
    except OSError as e:  # a folder on the way that cannot be searched, say
        raise UsageError(f"cannot use {e.filename or program!r}: {e.strerror or e}") from None


def _check_program(program: str, environ: Mapping[str, str]) -> None:
    if "/" not in program:
        if shutil.which(program, path=environ.get("PATH", os.defpath)) is None:
            raise UsageError(f"{program!r} is not a program on PATH")
        return
    path = Path(program)
    if path.is_dir():
        raise UsageError(f"{program!r} is a directory, not a program")
    if not path.exists():
        raise UsageError(f"{program!r} does not exist")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UsageError(f"{program!r} is not an executable file")


def _check_script(script: str) -> None:
    path = Path(script)
    if path.is_dir():
        if not (path / "__main__.py").is_file():
            raise UsageError(f"{script!r} is a directory, not a Python script")
        return
    if not path.exists():
        raise UsageError(f"{script!r} does not exist (in {os.getcwd()!r})")
    if not path.is_file():
        raise UsageError(f"{script!r} is not a regular file")
    try:
        with path.open("rb"):
            pass
    except OSError as e:
        raise UsageError(f"cannot read {script!r}: {e.strerror or e}") from None


def default_torchrun(python: str) -> str:
    """The ``torchrun`` beside ``python`` (a venv not on PATH), else ``torchrun``."""
    beside = Path(python).parent / TORCHRUN
    return str(beside) if beside.is_file() else TORCHRUN


def _which_in(environ: Mapping[str, str]) -> Callable[[str], str | None]:
    """``shutil.which`` on ``environ``'s PATH, resolving links (``mpiexec`` is usually
    a link to the real implementation, whose path tells the flavour)."""

    def which(name: str) -> str | None:
        found = shutil.which(name, path=environ.get("PATH", os.defpath))
        return os.path.realpath(found) if found else None

    return which


def _mpiexec_flavour(resolved: str) -> Method:
    """Cray PALS when the resolved ``mpiexec`` lives under a ``pals`` folder
    (``/opt/cray/pals/<version>/bin/mpiexec``), else MPICH/Hydra flags — which Intel
    MPI and MVAPICH accept as well."""
    parts = [p.lower() for p in Path(resolved).parts]
    return Method.PALS if any(p == "pals" or p.startswith("pals-") for p in parts) else Method.MPICH


def _choose_layout(
    alloc: Allocation, nnodes: int | None, nproc_per_node: int | None
) -> tuple[tuple[str, ...], int]:
    available = alloc.hosts or ("localhost",)
    if nnodes is not None and nnodes < 1:
        raise UsageError(f"--nnodes must be at least 1, got {nnodes}")
    if nproc_per_node is not None and nproc_per_node < 1:
        raise UsageError(f"--nproc-per-node must be at least 1, got {nproc_per_node}")
    where = {
        Where.SLURM: f"the Slurm allocation {alloc.job_id}",
        Where.PBS: f"the PBS job {alloc.job_id}",
        Where.HOSTFILE: f"the host file {alloc.hostfile}",
        Where.LOCAL: "this host (no allocation)",
    }[alloc.where]
    if nnodes is not None and nnodes > len(available):
        raise UsageError(
            f"{nnodes} nodes asked for but {where} has {len(available)}: "
            f"use -j/--nnodes {len(available)} or fewer"
        )
    hosts = available[: nnodes or len(available)]
    nproc = nproc_per_node or alloc.slots_per_host or alloc.gpus_per_host or 1
    if nproc > MAX_NPROC_PER_NODE:
        # The limit -j has (distspec run's too): more is a typo, refused before it
        # starts thousands of processes.
        raise UsageError(f"{nproc} processes per host asked for: at most {MAX_NPROC_PER_NODE}")
    slots = alloc.slots_per_host
    if slots and nproc > slots and alloc.where in (Where.PBS, Where.HOSTFILE):
        # The nodefile lists each host once per MPI slot (mpiprocs, ppn): more
        # processes than that oversubscribes what the job was given.
        raise UsageError(
            f"{nproc} processes per host asked for but {where} gives each host {slots} "
            f"slots: use -j x{slots} or fewer"
        )
    return tuple(hosts), nproc


def plan_launch(
    command: Sequence[str],
    environ: Mapping[str, str],
    *,
    nnodes: int | None = None,
    nproc_per_node: int | None = None,
    hostfile: str | None = None,
    launcher: Launcher | str = Launcher.AUTO,
    python: str | None = None,
    torchrun: str | None = None,
    which: Callable[[str], str | None] | None = None,
    read_hostfile: Callable[[str], list[str]] = read_nodefile,
) -> LaunchPlan:
    """The command that runs ``command`` on the allocation ``environ`` describes.

    Args:
        command: what to run, e.g. ``["python", "train.py", "--lr", "1"]``; a first
            word ending in ``.py`` gets ``python`` in front.
        environ: the environment to read (``os.environ`` for a real launch, a
            recorded mapping in tests).
        nnodes: hosts to use (a prefix of the allocation's); all by default.
        nproc_per_node: processes per host; the allocation's default otherwise.
        hostfile: hosts from this file instead of ``$PBS_NODEFILE``.
        launcher: ``auto``, or force ``srun`` / ``mpiexec`` / ``torchrun``.
        python: the interpreter put before a ``.py`` command (``sys.executable``).
        torchrun: the torchrun program (the one beside ``python`` by default).
        which: resolves a program name to its real path or None (``environ``'s
            PATH by default); tells whether ``mpiexec``/``pbsdsh`` exist and the
            MPI flavour.
        read_hostfile: reads a hostfile into one line per slot.

    Raises:
        UsageError: more hosts asked for than the allocation has (naming both
            numbers), a launcher that cannot run here, an empty command.
        RuntimeEnvError: an unreadable hostfile or malformed allocation variables.
    """
    try:
        launcher = Launcher(launcher)
    except ValueError:
        choices = ", ".join(m.value for m in Launcher)
        raise UsageError(f"unknown launcher {launcher!r}; use one of {choices}") from None
    python = python or sys.executable
    torchrun = torchrun or default_torchrun(python)
    which = which or _which_in(environ)
    argv_cmd = command_argv(command, python)
    # A task of srun or mpiexec: torchrun's variables from the task's own ones.
    as_torchrun = [python, "-m", torchrun_env.MODULE, *argv_cmd]
    alloc = find_allocation(environ, hostfile=hostfile, read_hostfile=read_hostfile)
    hosts, nproc = _choose_layout(alloc, nnodes, nproc_per_node)
    port = _int(environ, "MASTER_PORT") or default_port(alloc.job_id)
    warning = None
    if alloc.where is Where.LOCAL:
        warning = (
            "distspec launch: not inside a Slurm or PBS allocation (no SLURM_JOB_ID, "
            "PBS_JOBID or --hostfile): running locally"
        )

    def plan(method: Method, argv: Sequence[str]) -> LaunchPlan:
        return LaunchPlan(
            allocation=alloc,
            method=method,
            hosts=hosts,
            nproc_per_host=nproc,
            argv=tuple(argv),
            warning=warning,
        )

    def torchrun_line(*, standalone: bool) -> list[str]:
        topology = Topology(nodes=len(hosts), nproc_per_node=nproc)
        return [
            torchrun,
            *torchrun_args(
                topology,
                script=argv_cmd[0],
                script_args=argv_cmd[1:],
                # c10d: one torchrun line for every host (static would need each
                # host's --node_rank); the job-derived port keeps jobs apart.
                rdzv_backend="c10d",
                rdzv_id=alloc.job_id or "distspec-launch",
                rank0_host=hosts[0],
                rdzv_port=port,
                no_python=True,
                standalone=standalone,
            ),
        ]

    if alloc.where is Where.LOCAL or (
        launcher is Launcher.TORCHRUN and alloc.where is Where.HOSTFILE and len(hosts) == 1
    ):
        if launcher in (Launcher.SRUN, Launcher.MPIEXEC) and alloc.where is Where.LOCAL:
            raise UsageError(
                f"--launcher {launcher} needs an allocation (Slurm, or a PBS job / --hostfile "
                "for mpiexec); outside one, launch runs torchrun --standalone"
            )
        return plan(Method.TORCHRUN, torchrun_line(standalone=True))

    if alloc.where is Where.SLURM:
        if launcher is Launcher.MPIEXEC:
            raise UsageError(
                "--launcher mpiexec is for PBS jobs and --hostfile; in a Slurm allocation "
                "use srun (one task per process) or torchrun (one per node)"
            )
        per_node = launcher is Launcher.TORCHRUN
        return plan(
            Method.SRUN_TORCHRUN if per_node else Method.SRUN,
            [
                *_srun(alloc, hosts, nproc, per_node=per_node),
                *(torchrun_line(standalone=False) if per_node else as_torchrun),
            ],
        )

    # PBS job or hand-written hostfile.
    if launcher is Launcher.SRUN:
        raise UsageError(
            f"--launcher srun needs a Slurm allocation; this is {alloc.where} "
            "(use mpiexec or torchrun)"
        )
    mpiexec = which("mpiexec")
    if launcher is Launcher.MPIEXEC or (launcher is Launcher.AUTO and mpiexec):
        if mpiexec is None:
            raise UsageError("--launcher mpiexec: no mpiexec on PATH")
        return plan(_mpiexec_flavour(mpiexec), _mpiexec(alloc, hosts, nproc, mpiexec, as_torchrun))
    if alloc.where is Where.HOSTFILE:
        raise UsageError(
            f"nothing to start processes on the {len(hosts)} hosts of {alloc.hostfile}: "
            "put an MPI's mpiexec on PATH (or use one host, -j 1xM)"
        )
    if which("pbsdsh") is None and launcher is Launcher.AUTO:
        raise UsageError(
            "in a PBS job but neither mpiexec nor pbsdsh is on PATH: load an MPI module"
        )
    if len(hosts) != len(alloc.hosts):
        raise UsageError(
            f"pbsdsh starts one task on every host of the job ({len(alloc.hosts)}); "
            f"for {len(hosts)} of them use mpiexec"
        )
    # One pbsdsh -n per distinct host (not per slot), at the index of the host's first
    # nodefile line: Torque's -u would do it in one call, PBS Pro's pbsdsh has no -u.
    # torchrun then starts the processes of its host and c10d numbers the nodes.
    return plan(
        Method.PBSDSH_TORCHRUN,
        [
            python,
            "-m",
            "distspec.runtime.pbsdsh_hosts",
            ",".join(str(i) for i in alloc.vnodes),
            "--",
            *torchrun_line(standalone=False),
        ],
    )


def _srun(alloc: Allocation, hosts: tuple[str, ...], nproc: int, *, per_node: bool) -> list[str]:
    tasks_per_host = 1 if per_node else nproc
    argv = [
        "srun",
        f"--nodes={len(hosts)}",
        f"--ntasks={len(hosts) * tasks_per_host}",
        f"--ntasks-per-node={tasks_per_host}",
    ]
    if alloc.in_step:
        # Already inside a step (`srun --pty bash`): without --overlap the new step
        # waits forever for the CPUs that step holds; and srun would read that step's
        # SLURM_DISTRIBUTION (cyclic for one task), so ask for blocks of ranks per node.
        argv += ["--overlap", "--distribution=block"]
    if len(hosts) < len(alloc.hosts):
        # A step on fewer nodes than the job may land on any of them; pin it, so its
        # first node is the rank-0 host named here and by detect().
        argv.append(f"--nodelist={','.join(hosts)}")
    cpus = alloc.cpus_per_host
    if cpus is not None:
        # srun 22.05+ no longer takes --cpus-per-task from the allocation; without it
        # each task gets one CPU where task affinity is enforced.
        if cpus >= tasks_per_host:
            argv.append(f"--cpus-per-task={cpus // tasks_per_host}")
        else:
            argv.append("--overcommit")  # more processes than allocated CPUs, as asked
    # One failed task ends the step (the others would wait in a collective forever);
    # srun then exits with the failed task's code.
    argv.append("--kill-on-bad-exit=1")
    return argv


def _mpiexec(
    alloc: Allocation, hosts: tuple[str, ...], nproc: int, mpiexec: str, argv_cmd: list[str]
) -> list[str]:
    flavour = _mpiexec_flavour(mpiexec)
    pals = flavour is Method.PALS
    argv = ["mpiexec", "-n", str(len(hosts) * nproc), "--ppn" if pals else "-ppn", str(nproc)]
    if len(hosts) == len(alloc.hosts) and alloc.hostfile:
        argv += ["--hostfile", alloc.hostfile]
    else:
        argv += ["--hosts" if pals else "-hosts", ",".join(hosts)]
    cpus = alloc.cpus_per_host
    if cpus is not None and cpus >= nproc:
        depth = cpus // nproc
        # Each process gets `depth` consecutive cores: PALS spells it --cpu-bind depth
        # --depth D, Hydra -bind-to core:D.
        argv += (
            ["--cpu-bind", "depth", "--depth", str(depth)]
            if pals
            else ["-bind-to", f"core:{depth}"]
        )
    # The rank-0 host, said explicitly: a hand-written hostfile is not an allocation
    # detect() could read it from.
    argv += ["--env", f"MASTER_ADDR={hosts[0]}"] if pals else ["-genv", "MASTER_ADDR", hosts[0]]
    return argv + argv_cmd


# ---------------------------------------------------------------------------
# 3. running it


def compile_filters(filters: Sequence[str]) -> list[re.Pattern[str]]:
    """The ``--filter`` regexes, compiled.

    Raises:
        UsageError: one is not a valid regex (named).
    """
    patterns = []
    for text in filters:
        try:
            patterns.append(re.compile(text))
        except re.error as e:
            raise UsageError(f"--filter {text!r} is not a valid regex: {e}") from e
    return patterns


def run_plan(
    plan: LaunchPlan,
    *,
    filters: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``plan``; return its exit code (128 + N when a signal N ended it).

    SIGINT and SIGTERM sent to this process are passed on to the launcher, which
    passes them to its tasks (srun, mpiexec and torchrun all do); the launcher
    shares this process group, so a Ctrl-C at a terminal reaches it directly too
    (srun then sees two interrupts and stops at once instead of printing its
    status). With ``filters``, the launcher's stdout and stderr go through this
    process and lines matching any of the regexes are dropped; without, the
    launcher writes to this process's own stdout and stderr — except torchrun's
    stderr, which always goes through this process: when a worker fails, torchrun's
    own traceback is replaced by :func:`~.launch_failure.failure_report` (the
    worker's rank, host and traceback) and the exit code is the worker's.

    Raises:
        UsageError: a filter that is not a valid regex, or a launcher not found.
    """
    import signal
    import subprocess

    from distspec.runtime.launch_failure import TorchrunStderr, failure_report

    patterns = compile_filters(filters)
    watch = TorchrunStderr() if plan.method.runs_torchrun else None
    pipe_out = subprocess.PIPE if patterns else None
    pipe_err = subprocess.PIPE if patterns or watch is not None else None
    try:
        proc = subprocess.Popen(
            list(plan.argv),
            env=None if env is None else dict(env),
            stdout=pipe_out,
            stderr=pipe_err,
        )
    except FileNotFoundError as e:
        raise UsageError(f"cannot run {plan.argv[0]!r}: not found on PATH") from e

    def forward(signum: int, frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        import threading

        threads = []
        copies = [(proc.stdout, sys.stdout, None), (proc.stderr, sys.stderr, watch)]
        for source, sink, watcher in copies:
            if source is None:
                continue
            thread = threading.Thread(
                target=_copy_lines, args=(source, sink, patterns, watcher), daemon=True
            )
            thread.start()
            threads.append(thread)
        while True:
            try:
                code = proc.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
        for thread in threads:
            thread.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = 128 - code if code < 0 else code
    if watch is not None:
        failure = failure_report(watch.written, watch.hidden) if code else None
        if failure is None:
            # No worker failure to tell (torchrun failed itself): its own words.
            _write(sys.stderr, [f"{t}\n".encode() for t in watch.hidden])
        else:
            sys.stdout.flush()
            _write(sys.stderr, [f"{t}\n".encode() for t in failure.lines])
            code = failure.exit_code
    return code


def _write(sink: TextIO, lines: Sequence[bytes]) -> None:
    if lines:
        sink.buffer.write(b"".join(lines))
        sink.buffer.flush()


def _copy_lines(
    source: IO[bytes],
    sink: TextIO,
    patterns: Sequence[re.Pattern[str]],
    watch: TorchrunStderr | None = None,
) -> None:
    r"""Copy ``source`` to ``sink`` line by line, without the lines a pattern matches,
    and through ``watch`` (which holds back torchrun's own traceback) if given.

    Bytes go through unchanged (decoded leniently only to match): a stray byte in a
    child's output must not stop the copy. A carriage return ends a line too, so a
    progress bar (tqdm redraws its line after ``\r``) shows as it moves.
    """
    for line in _lines(source):
        for out in watch.feed(line) if watch is not None else [line]:
            if not _matches(out, patterns):
                _write(sink, [out])
    if watch is not None:
        _write(sink, [out for out in watch.unwritten() if not _matches(out, patterns)])


_EOL = re.compile(rb"\r\n|\n|\r")


def _lines(source: IO[bytes]) -> Iterator[bytes]:
    r"""``source``'s lines as they arrive, each with its ``\n``, ``\r\n`` or ``\r``."""
    read = getattr(source, "read1", source.read)
    pending = b""
    while chunk := read(65536):
        pending += chunk
        start = 0
        for end in _EOL.finditer(pending):
            yield pending[start : end.end()]
            start = end.end()
        pending = pending[start:]
    if pending:
        yield pending


def _matches(line: bytes, patterns: Sequence[re.Pattern[str]]) -> bool:
    text = line.decode(errors="replace").rstrip("\r\n")
    return any(p.search(text) for p in patterns)
