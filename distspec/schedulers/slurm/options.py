"""The Slurm backend's run options (``-cfg k=v``) and their checks.

Each option maps to one sbatch or srun flag, or to one choice in the script
(:mod:`distspec.schedulers.slurm.script`). The checks run at compile time, so a value
Slurm would refuse or misread is a CompileError before anything is queued.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence

from distspec.errors import CompileError
from distspec.frozen import frozen
from distspec.schedulers.batch import script as batch
from distspec.schedulers.batch.container import Container
from distspec.schedulers.batch.direct import Workers
from distspec.schedulers.batch.envcopy import EnvCopyOptions
from distspec.specs.options import option

__all__ = [
    "MAX_SPARES",
    "NAME",
    "GpuFlag",
    "SlurmOptions",
    "check_job_dir",
    "check_options",
    "requeue_signal",
]

NAME = "slurm"

#: The most spare nodes one job may ask for (``-cfg spares``).
MAX_SPARES = 256


class GpuFlag(str, enum.Enum):
    """How GPUs are requested: ``--gpus-per-node=G`` or ``--gres=gpu:G``."""

    GPUS_PER_NODE = "gpus-per-node"
    GRES = "gres"


@frozen
class SlurmOptions(EnvCopyOptions):
    """Run options of the Slurm backend (``-cfg k=v``); each maps to one sbatch/srun flag."""

    partition: str | None = option(None, "Partition to submit to (--partition).")
    account: str | None = option(None, "Account to charge (--account).")
    qos: str | None = option(None, "Quality of service (--qos).")
    time: str | None = option(
        None, "Time limit (--time): MINUTES, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED."
    )
    constraint: str | None = option(None, "Node features required (--constraint).")
    nodelist: str | None = option(None, "Nodes to run on (--nodelist), e.g. n[0-3].")
    exclude: str | None = option(None, "Nodes to avoid (--exclude).")
    exclusive: bool = option(False, "Whole nodes, shared with no other job (--exclusive).")
    comment: str | None = option(None, "Free-text job comment (--comment).")
    mail_user: str | None = option(None, "Where Slurm mails job events (--mail-user).")
    mail_type: str | None = option(
        None, "Which events are mailed (--mail-type), e.g. END,FAIL or ALL."
    )
    job_dir: str | None = option(
        None,
        "Absolute directory for the submitted script and the logs; the default is "
        "<state dir>/slurm. Must be on a filesystem the nodes share.",
    )
    requeue: bool = option(
        False,
        "Requeue the job when its time limit nears: --requeue plus --signal=B:SIG@SECS and "
        "a trap that runs `scontrol requeue`.",
    )
    requeue_signal: str = option("USR1", "The signal sent ahead of the time limit (requeue).")
    requeue_before: int = option(
        120, "Seconds before the time limit to send requeue_signal (Slurm is ~60 s precise)."
    )
    exclude_failed_nodes: bool = option(
        True,
        "With requeue: when a step fails and a node of the job is then down, not responding, "
        "draining or failing, requeue the job without it (ExcNodeList, accumulated across "
        "requeues in the job folder's bad_nodes). See docs/fault-tolerance.md.",
    )
    spares: int = option(
        0,
        "Spare nodes: allocate this many nodes more than the role needs (with --no-kill); "
        "its step runs on the first healthy ones, and when a node of the step fails, the "
        "step runs again at once on the others, in the same allocation (restart_reason "
        "node-failure). One role, fixed node count. See docs/fault-tolerance.md.",
    )
    kill_on_bad_exit: bool = option(
        True, "Stop every replica of a role when one of them fails (srun --kill-on-bad-exit)."
    )
    gpu_flag: GpuFlag = option(
        GpuFlag.GPUS_PER_NODE, "How GPUs are requested: gpus-per-node or gres (gpu:G)."
    )
    mem: bool = option(
        True, "Request the role's memory (--mem); false on clusters that reject --mem."
    )
    rank0_host: str = option(
        "{host}",
        "Rendezvous host template; {host} is the first node's name, e.g. {host}-ib for "
        "clusters whose fast network has its own hostnames.",
    )
    sbatch_args: tuple[str, ...] = option(
        (), "Extra sbatch flags, each --name or --name=value, separated by ';'."
    )
    srun_args: tuple[str, ...] = option(
        (), "Extra srun flags for every step, each --name or --name=value, separated by ';'."
    )
    unbuffered: bool = option(
        True,
        "Live logs: PYTHONUNBUFFERED=1 for every replica (unless the role sets it) and "
        "srun --unbuffered; false leaves output buffered (fewer, larger writes).",
    )
    workers: Workers = option(
        Workers.TORCHRUN,
        "Who starts a torchrun role's processes: torchrun (one agent per node) or direct "
        "(one srun step, --ntasks-per-node=M, every rank a task; no elastic, restarts or "
        "retries). See docs/launch.md.",
    )
    container: Container = option(
        Container.NONE,
        "How a role's --image runs: none (the image is the absolute directory the job runs "
        "in), podman, apptainer, singularity, pyxis (srun --container-image) or oci (srun "
        "--container=BUNDLE). See docs/containers.md.",
    )
    container_env: tuple[str, ...] = option(
        (),
        "More variables podman passes into the container by name (their values are not "
        "written into the script), each NAME or PREFIX*, separated by ';', e.g. HF_TOKEN;WANDB_*.",
    )
    container_path: str | None = option(
        None,
        "Directories put first on PATH inside the container (e.g. /opt/venv/bin), before "
        "the standard ones; unset: the image's own PATH (oci: the standard directories).",
    )
    container_args: tuple[str, ...] = option(
        (),
        "More flags for the runtime (podman run, apptainer exec, or srun for pyxis/oci), "
        "separated by ';'.",
    )
    pull: bool = option(
        False,
        "Pull the image in a step of its own before the job's (podman: once per node; "
        "apptainer, pyxis: once into the job folder), so that a failed pull is the job's "
        "cause and its time shows in the timeline.",
    )


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Patterns are strings compiled on first use (re caches them): a dry run pays only for
# the ones its options need.
_TIME = r"^(UNLIMITED|INFINITE|\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}(:\d{1,2})?)?)$"
_MAIL_TYPES = _words(
    "NONE BEGIN END FAIL REQUEUE ALL INVALID_DEPEND STAGE_OUT TIME_LIMIT "
    "TIME_LIMIT_90 TIME_LIMIT_80 TIME_LIMIT_50 ARRAY_TASKS"
)
_SIGNALS = _words("HUP INT QUIT USR1 USR2 TERM CONT STOP TSTP URG XCPU XFSZ VTALRM PROF WINCH PWR")
_FLAG = r"(?s)^--([A-Za-z][A-Za-z0-9-]*)(=.*)?$"

# Flags distspec writes itself; the value would be silently overridden or break the
# layout (log paths, one task per node), so extra flags may not set them.
_SBATCH_OWN = _words(
    "job-name output error open-mode nodes ntasks ntasks-per-node cpus-per-task mem "
    "gpus-per-node gres hetjob parsable wait array signal requeue no-requeue"
)
_SRUN_OWN = _words(
    "output error open-mode nodes ntasks ntasks-per-node cpus-per-task het-group "
    "kill-on-bad-exit export chdir unbuffered"
)
# Flags that have their own run option: say which.
_FLAG_OPTIONS = {
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "time": "time",
    "constraint": "constraint",
    "nodelist": "nodelist",
    "exclude": "exclude",
    "exclusive": "exclusive",
    "comment": "comment",
    "mail-user": "mail_user",
    "mail-type": "mail_type",
}


def _bad(message: str) -> CompileError:
    return CompileError(NAME, message)


def requeue_signal(opts: SlurmOptions) -> str:
    """The ``requeue_signal`` option as ``--signal`` and ``trap`` take it: ``USR1``."""
    return opts.requeue_signal.upper().removeprefix("SIG")


def _check_flags(flags: Sequence[str], own: frozenset[str], option_name: str) -> None:
    for flag in flags:
        match = re.compile(_FLAG).fullmatch(flag)
        if match is None:
            raise _bad(
                f"{option_name}: {flag!r} is not a long flag; write each as --name or --name=value"
            )
        name = match.group(1)
        if name in own:
            raise _bad(f"{option_name}: --{name} is set by distspec itself and cannot be changed")
        if name in _FLAG_OPTIONS:
            raise _bad(f"{option_name}: use -cfg {_FLAG_OPTIONS[name]}=... instead of --{name}")


def check_options(opts: SlurmOptions) -> None:
    """Raise CompileError for an option value Slurm would refuse or misread."""
    if opts.time is not None and not re.compile(_TIME).fullmatch(opts.time):
        raise _bad(f"time={opts.time!r}: expected MINUTES, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED")
    if opts.mail_type is not None:
        unknown = [t for t in opts.mail_type.split(",") if t.upper() not in _MAIL_TYPES]
        if unknown:
            raise _bad(
                f"mail_type: unknown event(s) {', '.join(unknown)}; use {', '.join(sorted(_MAIL_TYPES))}"
            )
    signal = requeue_signal(opts)
    if signal not in _SIGNALS and not (signal.isdigit() and 0 < int(signal) < 65):
        raise _bad(f"requeue_signal={opts.requeue_signal!r}: not a signal name or number")
    if opts.requeue_before < 0 or opts.requeue_before > 65535:
        raise _bad(f"requeue_before={opts.requeue_before}: expected 0..65535 seconds")
    if not 0 <= opts.spares <= MAX_SPARES:
        raise _bad(f"spares={opts.spares}: expected 0..{MAX_SPARES} spare nodes")
    batch.check_rank0_host(opts.rank0_host, NAME)
    _check_flags(opts.sbatch_args, _SBATCH_OWN, "sbatch_args")
    _check_flags(opts.srun_args, _SRUN_OWN, "srun_args")
    if opts.spares and any(
        re.match(r"--(nodelist|exclude|nodefile|relative)(=|$)", f) for f in opts.srun_args
    ):
        raise _bad(
            "srun_args: with spares, the script chooses each step's nodes itself "
            "(--nodelist); leave --nodelist, --exclude, --nodefile and --relative out"
        )
    if opts.container is not Container.NONE and any(
        f.startswith("--container") for f in opts.srun_args
    ):
        raise _bad(
            f"srun_args: --container* flags are written by container={opts.container.value}; "
            "give more of them with -cfg container_args=..."
        )


def check_job_dir(job_dir: str) -> None:
    """Raise CompileError unless ``job_dir`` is absolute and Slurm takes it as a log path."""
    batch.check_job_dir(job_dir, NAME)
    # Slurm expands %-patterns in log paths and ignores all of them after a backslash.
    if any(c in job_dir for c in "%\\\n\r"):
        raise _bad(f"job_dir={job_dir!r}: Slurm log paths cannot contain %, \\ or a line break")
