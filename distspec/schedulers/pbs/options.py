"""The PBS backend's run options (``-cfg k=v``) and their checks.

Each option maps to one qsub flag or ``#PBS`` line, or to one choice in the script
(:mod:`distspec.schedulers.pbs.script`). The checks run at compile time, so a value
PBS would refuse or misread is a CompileError before anything is queued.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence

from distspec.errors import CompileError
from distspec.frozen import frozen
from distspec.schedulers.batch import script as batch
from distspec.schedulers.batch.container import SLURM_ONLY, Container
from distspec.schedulers.batch.direct import Workers
from distspec.schedulers.batch.envcopy import EnvCopyOptions
from distspec.specs.app import NAME_CHARS
from distspec.specs.options import option

__all__ = [
    "NAME",
    "Launcher",
    "PbsOptions",
    "ResourceStyle",
    "check_container",
    "check_job_dir",
    "check_options",
    "qsub_args_directives",
]

NAME = "pbs"


class ResourceStyle(str, enum.Enum):
    """How nodes are requested: PBS Pro/OpenPBS chunks or Torque's node spec."""

    SELECT = "select"
    NODES = "nodes"


class Launcher(str, enum.Enum):
    """What starts one task per host in a multi-node job."""

    PBSDSH = "pbsdsh"
    MPIEXEC = "mpiexec"


@frozen
class PbsOptions(EnvCopyOptions):
    """Run options of the PBS backend (``-cfg k=v``); each maps to one qsub flag or
    one choice in the script."""

    queue: str | None = option(None, "Queue to submit to (-q).")
    account: str | None = option(None, "Account or project to charge (-A).")
    walltime: str | None = option(
        None, "Wall-clock limit (-l walltime=): SECONDS, MM:SS or HH:MM:SS."
    )
    resource_style: ResourceStyle = option(
        ResourceStyle.SELECT,
        "How nodes are requested: select (-l select=N:ncpus=C:...:mpiprocs=1, PBS Pro and "
        "OpenPBS) or nodes (-l nodes=N:ppn=C, Torque).",
    )
    place: str = option(
        "scatter",
        "Chunk placement for resource_style=select (-l place=): scatter puts each replica on "
        "its own host; e.g. scatter:excl for whole hosts; empty to leave it to the server.",
    )
    mem: bool = option(True, "Request the role's memory (mem=...mb); false where it is rejected.")
    launcher: Launcher = option(
        Launcher.PBSDSH,
        "What starts one task per host in a multi-node job: pbsdsh (pbsdsh -n, one per host) "
        "or mpiexec (one mpiexec -n N with mpiexec_args). A 1-node job needs neither.",
    )
    workers: Workers = option(
        Workers.TORCHRUN,
        "Who starts a torchrun role's processes: torchrun (one agent per host) or direct "
        "(one mpiexec -n N*M --ppn M, every rank a task; no elastic, restarts, retries or "
        "arrays; launcher is then unused). See docs/launch.md.",
    )
    mpiexec_args: tuple[str, ...] = option(
        ("--ppn", "1"),
        "Arguments after mpiexec -n N that place one process per host, separated by ';': "
        "--ppn;1 for MPICH, Intel MPI and Cray PALS, --map-by;ppr:1:node for Open MPI.",
    )
    export_env: bool = option(
        True, "Pass the submitting environment to the job (-V), as sbatch does by default."
    )
    mail_user: str | None = option(None, "Where PBS mails job events (-M).")
    mail_events: str | None = option(
        None, "Which events are mailed (-m): any of a (abort), b (begin), e (end), or n."
    )
    depend: str | None = option(
        None,
        "More dependencies in PBS's own syntax (-W depend=, after those of run --after), "
        "e.g. afterok:1234.server or afterany:12:13.",
    )
    job_name_max: int = option(
        15,
        "Longest #PBS -N name; longer app names are cut (POSIX and older Torque allow 15 "
        "characters, PBS Pro 236). The job folder is named by the app id either way.",
    )
    job_dir: str | None = option(
        None,
        "Absolute directory for the submitted script and the logs; the default is "
        "<state dir>/pbs. Must be on a filesystem the hosts share.",
    )
    rank0_host: str = option(
        "{host}",
        "Rendezvous host template; {host} is the first line of $PBS_NODEFILE, e.g. {host}-ib.",
    )
    qsub_args: tuple[str, ...] = option(
        (), "Extra qsub flags, each -X or '-X value', separated by ';' (e.g. -r y;-p 10)."
    )
    unbuffered: bool = option(
        True,
        "Live logs: PYTHONUNBUFFERED=1 for every replica (unless the role sets it), so "
        "`distspec log -f` shows Python output as it is written; false leaves it buffered.",
    )
    container: Container = option(
        Container.NONE,
        "How a role's --image runs: none (the image is the absolute directory the job runs "
        "in), podman, apptainer or singularity (pyxis and oci are Slurm's). See "
        "docs/containers.md.",
    )
    container_env: tuple[str, ...] = option(
        (),
        "More variables podman passes into the container by name (their values are not "
        "written into the script), each NAME or PREFIX*, separated by ';', e.g. HF_TOKEN;WANDB_*.",
    )
    container_path: str | None = option(
        None,
        "Directories put first on PATH inside the container (e.g. /opt/venv/bin), before "
        "the standard ones; unset: the image's own PATH.",
    )
    container_args: tuple[str, ...] = option(
        (), "More flags for the runtime (podman run, apptainer exec), separated by ';'."
    )
    pull: bool = option(
        False,
        "Pull the image before the job's command runs (podman: on each host; apptainer: "
        "once into the job folder), so that a failed pull is the job's cause.",
    )


# Patterns are strings compiled on first use (re caches them): a dry run pays only for
# the ones its options need. Plain character classes are checked with str.strip.
_WALLTIME = r"^\d+(:\d{1,2}){0,2}$"
_PLACE = r"^((free|pack|scatter|vscatter)(:(excl|exclhost|shared|group=\w+))*)?$"
_MAIL_EVENTS = r"^(n|[abejfp]+)$"
_DEPEND = r"^[a-z]+(:[A-Za-z0-9_.\[\]@-]+)+(,[a-z]+(:[A-Za-z0-9_.\[\]@-]+)+)*$"
_PLACES = frozenset({"", "free", "pack", "scatter", "vscatter"})
_SIMPLE = NAME_CHARS + ",:@%/+="
_QSUB_FLAG = r"(?s)^-([A-Za-z])( (.+))?$"
# -o paths are [host:]path and directive lines split on blanks: keep job_dir plain.
_JOB_DIR = NAME_CHARS + "/+@=,~"

# qsub flags distspec writes itself, or that have their own option: say which.
_QSUB_OWN = frozenset("NoejJIh")
_QSUB_OPTIONS = {"q": "queue", "A": "account", "m": "mail_events", "M": "mail_user"}
_RESOURCES_OWN = ("select", "nodes", "place", "walltime", "ncpus", "ngpus", "mem", "mpiprocs")


def _bad(message: str) -> CompileError:
    return CompileError(NAME, message)


def _plain(what: str, value: str) -> str:
    """``value`` for a ``#PBS`` line: qsub splits directives on blanks itself and
    quoting differs between servers, so only plain values are accepted."""
    if not value or value.strip(_SIMPLE):
        raise _bad(f"{what}={value!r}: a #PBS value may hold only letters, digits and _.,:@%/+=-")
    return value


def qsub_args_directives(flags: Sequence[str]) -> list[str]:
    """The ``qsub_args`` option as ``#PBS`` lines; CompileError for a flag distspec
    writes itself, one that has its own option, or a value qsub would misread."""
    lines = []
    for flag in flags:
        match = re.compile(_QSUB_FLAG).fullmatch(flag)
        if match is None or any(c in flag for c in "\n\r\x00"):
            raise _bad(f"qsub_args: {flag!r} is not a qsub flag; write each as -X or '-X value'")
        letter, value = match.group(1), match.group(3) or ""
        if letter in _QSUB_OWN:
            raise _bad(f"qsub_args: -{letter} is set by distspec itself and cannot be changed")
        if letter in _QSUB_OPTIONS:
            raise _bad(f"qsub_args: use -cfg {_QSUB_OPTIONS[letter]}=... instead of -{letter}")
        if letter == "W" and value.startswith("depend="):
            raise _bad("qsub_args: use -cfg depend=... instead of -W depend=")
        if letter == "V":
            raise _bad("qsub_args: use -cfg export_env=true instead of -V")
        if letter == "l":
            for item in value.split(","):
                key = item.partition("=")[0].strip()
                if key in _RESOURCES_OWN:
                    hint = "-cfg walltime=..." if key == "walltime" else "the role's resources"
                    raise _bad(f"qsub_args: -l {key}= is set by distspec; use {hint}")
        lines.append(f"#PBS -{letter} {_plain('qsub_args', value)}" if value else f"#PBS -{letter}")
    return lines


def check_options(opts: PbsOptions) -> None:
    """Raise CompileError for an option value PBS would refuse or misread."""
    if opts.walltime is not None and not re.compile(_WALLTIME).fullmatch(opts.walltime):
        raise _bad(f"walltime={opts.walltime!r}: expected SECONDS, MM:SS or HH:MM:SS")
    if opts.place not in _PLACES and not re.compile(_PLACE).fullmatch(opts.place):
        raise _bad(
            f"place={opts.place!r}: expected free, pack, scatter or vscatter, optionally "
            "with :excl, :exclhost, :shared or :group=RESOURCE"
        )
    if opts.mail_events is not None and not re.compile(_MAIL_EVENTS).fullmatch(opts.mail_events):
        raise _bad(f"mail_events={opts.mail_events!r}: expected letters of abe (or n for none)")
    if opts.depend is not None and not re.compile(_DEPEND).fullmatch(opts.depend):
        raise _bad(f"depend={opts.depend!r}: expected TYPE:JOBID[:JOBID...], e.g. afterok:1234")
    if opts.job_name_max < 1:
        raise _bad(f"job_name_max={opts.job_name_max}: must be at least 1")
    batch.check_rank0_host(opts.rank0_host, NAME)
    for arg in opts.mpiexec_args:
        if any(c in arg for c in "\n\r\x00"):
            raise _bad(f"mpiexec_args: {arg!r} contains a line break")
    for what, value in (
        ("queue", opts.queue),
        ("account", opts.account),
        ("mail_user", opts.mail_user),
    ):
        if value is not None:
            _plain(what, value)


def check_container(opts: PbsOptions) -> None:
    """Raise CompileError for a container runtime only Slurm has (pyxis, oci)."""
    if opts.container in SLURM_ONLY:
        how = "srun --container-image" if opts.container is Container.PYXIS else "srun --container"
        raise _bad(
            f"container={opts.container.value} runs through Slurm's {how}, which PBS does "
            "not have; use podman or apptainer"
        )


def check_job_dir(job_dir: str) -> None:
    """Raise CompileError unless ``job_dir`` is absolute and plain enough for ``-o``."""
    batch.check_job_dir(job_dir, NAME)
    if not job_dir.startswith("/") or job_dir.strip(_JOB_DIR):
        raise _bad(
            f"job_dir={job_dir!r}: PBS output paths may hold only letters, digits and _./+@=,~- "
            "(a ':' means host:path to qsub, a blank splits the directive)"
        )
