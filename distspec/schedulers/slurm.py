"""Slurm: one sbatch script per AppDef, one srun step per role, one task per node.

A single-role app is a plain job (``--nodes=N``, or ``--nodes=MIN-MAX`` when
elastic); several roles make a heterogeneous job, one component per role. Every
replica is one Slurm task; its command runs in a ``bash -c`` of its own, so
``${replica_id}`` (``$SLURM_NODEID``) is the task's own value, not the batch
step's. The script's size does not depend on the node count.

Files (``job_dir``, absolute; default ``<state dir>/slurm``)::

    <job_dir>/<app_id>.sbatch              the script, as submitted
    <job_dir>/<app>-<jobid>.out            the batch script's own output
    <job_dir>/<app>-<jobid>/<role>-<i>.log replica i's stdout and stderr
    <job_dir>/<app>-<jobid>/<role>-<i>.host the node it ran on
    <job_dir>/<app>-<jobid>/<role>-<i>.exit its exit code, once it exited

The ``.exit`` files give per-replica exit codes with or without accounting:
Slurm itself only records one exit code per step. ``describe`` asks ``sacct``
when accounting is enabled and ``scontrol show job`` when it is not (one query
per poll either way); when ``scontrol`` has forgotten a finished job (after
MinJobAge) it falls back to what the job folder recorded.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.schedulers._batch import (
    BatchScheduler,
    JobRecord,
    attempt_loop,
    check_job_dir,
    check_rank0_host,
    exit_code,
    rank0_host_word,
    read_job_folder,
    replica_host,
    replica_state,
    role_function,
    safe_app_id,
    task_function,
)
from distspec.schedulers._common import (
    MacroValues,
    ShellExpr,
    check_capabilities,
    log_file_name,
    shell_word,
    submit_env,
)
from distspec.schedulers.api import AppSummary, Capabilities, Request
from distspec.specs.app import AppDef, RetryPolicy, Role
from distspec.specs.frozen import FrozenDict
from distspec.specs.macros import Macro
from distspec.specs.options import option
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus

__all__ = ["SLURM_STATES", "GpuFlag", "SlurmOptions", "SlurmScheduler", "expand_hostlist"]

NAME = "slurm"


class GpuFlag(str, enum.Enum):
    """How GPUs are requested: ``--gpus-per-node=G`` or ``--gres=gpu:G``."""

    GPUS_PER_NODE = "gpus-per-node"
    GRES = "gres"


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmOptions:
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


#: Every Slurm job state (squeue/scontrol/sacct spelling) to an AppState.
#: TIMEOUT, PREEMPTED and DEADLINE end the job from outside, so they are CANCELLED
#: (with the Slurm state as the reason), not FAILED.
SLURM_STATES: Mapping[str, AppState] = FrozenDict(
    {
        "PENDING": AppState.PENDING,
        "CONFIGURING": AppState.PENDING,
        "REQUEUED": AppState.PENDING,
        "REQUEUE_FED": AppState.PENDING,
        "REQUEUE_HOLD": AppState.PENDING,
        "RESV_DEL_HOLD": AppState.PENDING,
        "SPECIAL_EXIT": AppState.FAILED,
        "SUSPENDED": AppState.PENDING,
        "STOPPED": AppState.PENDING,
        "RUNNING": AppState.RUNNING,
        "COMPLETING": AppState.RUNNING,
        "RESIZING": AppState.RUNNING,
        "SIGNALING": AppState.RUNNING,
        "STAGE_OUT": AppState.RUNNING,
        "UPDATE_DB": AppState.RUNNING,
        "POWER_UP_NODE": AppState.PENDING,
        "COMPLETED": AppState.SUCCEEDED,
        "FAILED": AppState.FAILED,
        "NODE_FAIL": AppState.FAILED,
        "OUT_OF_MEMORY": AppState.FAILED,
        "BOOT_FAIL": AppState.FAILED,
        "CANCELLED": AppState.CANCELLED,
        "TIMEOUT": AppState.CANCELLED,
        "PREEMPTED": AppState.CANCELLED,
        "DEADLINE": AppState.CANCELLED,
        "REVOKED": AppState.CANCELLED,
    }
)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Worst first: the state a heterogeneous job reports when its components differ.
_SEVERITY = (
    AppState.FAILED,
    AppState.CANCELLED,
    AppState.RUNNING,
    AppState.PENDING,
    AppState.SUBMITTED,
    AppState.UNKNOWN,
    AppState.SUCCEEDED,
)

_TIME = re.compile(
    r"^(UNLIMITED|INFINITE|\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}(:\d{1,2})?)?)$"
)
_MAIL_TYPES = _words(
    "NONE BEGIN END FAIL REQUEUE ALL INVALID_DEPEND STAGE_OUT TIME_LIMIT "
    "TIME_LIMIT_90 TIME_LIMIT_80 TIME_LIMIT_50 ARRAY_TASKS"
)
_SIGNALS = _words("HUP INT QUIT USR1 USR2 TERM CONT STOP TSTP URG XCPU XFSZ VTALRM PROF WINCH PWR")
_FLAG = re.compile(r"^--([A-Za-z][A-Za-z0-9-]*)(=.*)?$", re.DOTALL)
_GRES = re.compile(r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)?$")
_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")

# Flags distspec writes itself; the value would be silently overridden or break the
# layout (log paths, one task per node), so extra flags may not set them.
_SBATCH_OWN = _words(
    "job-name output error open-mode nodes ntasks ntasks-per-node cpus-per-task mem "
    "gpus-per-node gres hetjob parsable wait array signal requeue no-requeue"
)
_SRUN_OWN = _words(
    "output error open-mode nodes ntasks ntasks-per-node cpus-per-task het-group "
    "kill-on-bad-exit export chdir"
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


# -- compile ------------------------------------------------------------------


def _bad(message: str) -> CompileError:
    return CompileError(NAME, message)


def sbatch_value(text: str) -> str:
    """``text`` quoted for an ``#SBATCH`` line, which sbatch splits itself (not bash).

    sbatch drops double and single quotes and keeps what is between them (no
    backslash escapes), so each run of non-``"`` characters goes in double quotes
    and each ``"`` in single quotes. A line break cannot be expressed at all.
    """
    if any(c in text for c in "\n\r\x00"):
        raise _bad(f"{text!r}: an #SBATCH value cannot contain a line break")
    if re.fullmatch(r"[A-Za-z0-9_.,:@%/+=-]+", text):
        return text
    parts = re.split(r'(")', text)
    return "".join("'\"'" if p == '"' else f'"{p}"' for p in parts if p) or '""'


def _check_flags(flags: Sequence[str], own: frozenset[str], option_name: str) -> None:
    for flag in flags:
        match = _FLAG.match(flag)
        if match is None:
            raise _bad(
                f"{option_name}: {flag!r} is not a long flag; write each as --name or --name=value"
            )
        name = match.group(1)
        if name in own:
            raise _bad(f"{option_name}: --{name} is set by distspec itself and cannot be changed")
        if name in _FLAG_OPTIONS:
            raise _bad(f"{option_name}: use -cfg {_FLAG_OPTIONS[name]}=... instead of --{name}")


def _check_options(opts: SlurmOptions) -> None:
    if opts.time is not None and not _TIME.match(opts.time):
        raise _bad(f"time={opts.time!r}: expected MINUTES, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED")
    if opts.mail_type is not None:
        unknown = [t for t in opts.mail_type.split(",") if t.upper() not in _MAIL_TYPES]
        if unknown:
            raise _bad(
                f"mail_type: unknown event(s) {', '.join(unknown)}; use {', '.join(sorted(_MAIL_TYPES))}"
            )
    signal = opts.requeue_signal.upper().removeprefix("SIG")
    if signal not in _SIGNALS and not (signal.isdigit() and 0 < int(signal) < 65):
        raise _bad(f"requeue_signal={opts.requeue_signal!r}: not a signal name or number")
    if opts.requeue_before < 0 or opts.requeue_before > 65535:
        raise _bad(f"requeue_before={opts.requeue_before}: expected 0..65535 seconds")
    check_rank0_host(opts.rank0_host, NAME)
    _check_flags(opts.sbatch_args, _SBATCH_OWN, "sbatch_args")
    _check_flags(opts.srun_args, _SRUN_OWN, "srun_args")


def _check_job_dir(job_dir: str) -> None:
    check_job_dir(job_dir, NAME)
    # Slurm expands %-patterns in log paths and ignores all of them after a backslash.
    if any(c in job_dir for c in "%\\\n\r"):
        raise _bad(f"job_dir={job_dir!r}: Slurm log paths cannot contain %, \\ or a line break")


def _retries(app: AppDef) -> int:
    """How often the batch script reruns its steps after a failure (whole app)."""
    retries = max(role.max_retries for role in app.roles)
    for role in app.roles:
        if role.max_retries and role.retry_policy is RetryPolicy.REPLICA:
            raise _bad(
                f"role {role.name!r}: retry_policy=replica cannot be honoured (a role's replicas "
                "are one srun step); use role or application"
            )
        if role.max_retries and role.retry_policy is RetryPolicy.ROLE and len(app.roles) > 1:
            raise _bad(
                f"role {role.name!r}: retry_policy=role in a multi-role app; Slurm reruns "
                "the whole job's steps (application)"
            )
    return retries


def _resources(role: Role, opts: SlurmOptions) -> list[str]:
    res = role.resource
    flags = ["--ntasks-per-node=1"]
    if res.cpu:
        flags.append(f"--cpus-per-task={res.cpu}")
    if opts.mem and res.mem_mb:
        flags.append(f"--mem={res.mem_mb}")
    gres = []
    if res.gpu:
        if opts.gpu_flag is GpuFlag.GRES:
            gres.append(f"gpu:{res.gpu}")
        else:
            flags.append(f"--gpus-per-node={res.gpu}")
    for name, count in sorted(res.devices.items()):
        if not _GRES.match(name):
            raise _bad(f"role {role.name!r}: device {name!r} is not a Slurm gres name")
        gres.append(f"{name}:{count}")
    if gres:
        flags.append(f"--gres={','.join(gres)}")
    return flags


def _job_flags(app: AppDef, opts: SlurmOptions, job_dir: str) -> list[str]:
    flags = [
        f"--job-name={app.name}",
        f"--output={job_dir}/{app.name}-%j.out",
        # Appending keeps earlier attempts' output when the job is requeued.
        "--open-mode=append",
    ]
    simple = [
        ("partition", opts.partition),
        ("account", opts.account),
        ("qos", opts.qos),
        ("time", opts.time),
        ("constraint", opts.constraint),
        ("nodelist", opts.nodelist),
        ("exclude", opts.exclude),
        ("comment", opts.comment),
        ("mail-user", opts.mail_user),
        ("mail-type", opts.mail_type),
    ]
    flags += [f"--{name}={value}" for name, value in simple if value is not None]
    if opts.exclusive:
        flags.append("--exclusive")
    if opts.requeue:
        signal = opts.requeue_signal.upper().removeprefix("SIG")
        flags += ["--requeue", f"--signal=B:{signal}@{opts.requeue_before}"]
    flags += list(opts.sbatch_args)
    return flags


def _directive(flag: str) -> str:
    name, sep, value = flag.partition("=")
    return f"#SBATCH {name}{sep}{sbatch_value(value)}" if sep else f"#SBATCH {name}"


def _task() -> str:
    return (
        "# Runs one replica: $1 is the role, $2 the function holding its command. It records\n"
        "# the node and the exit code beside the log, since Slurm keeps one code per step.\n"
    ) + task_function(
        base='"$DISTSPEC_JOB_DIR/$1-$SLURM_NODEID"',
        host='echo "${SLURMD_NODENAME:-$HOSTNAME}"',
        run=['"$2"'],
    )


_WAIT = """\
# Waits for the $1 srun steps started in the background and returns 0, or the first
# failure's exit code after stopping the other steps. A trapped signal interrupts
# `wait`; the requeue trap sets distspec_interrupted so the loop waits again.
distspec_wait() {
  local left=$1 code
  while (( left > 0 )); do
    distspec_interrupted=0
    wait -n
    code=$?
    (( distspec_interrupted )) && continue
    if (( code != 0 )); then
      kill $(jobs -p) 2>/dev/null
      wait
      return "$code"
    fi
    left=$((left - 1))
  done
  return 0
}
"""

_REQUEUE = """\
# Slurm sends SIG{signal} {secs} s before the time limit (--signal=B:...): requeue the job,
# which then starts again from the top with the same job id.
distspec_requeue() {{
  distspec_interrupted=1
  echo "distspec: SIG{signal} before the time limit: requeueing job $SLURM_JOB_ID" >&2
  echo $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) > "$DISTSPEC_JOB_DIR/requeues"
  scontrol requeue "$SLURM_JOB_ID"
}}
trap distspec_requeue {signal}
"""


def _macro_values(role: Role) -> MacroValues:
    return {
        Macro.APP_ID: ShellExpr("$SLURM_JOB_ID"),
        Macro.REPLICA_ID: ShellExpr("$SLURM_NODEID"),
        # Inside a step this is the step's (for a hetjob: the component's) node count.
        Macro.NUM_REPLICAS: ShellExpr("$SLURM_JOB_NUM_NODES"),
        Macro.RANK0_HOST: ShellExpr("$DISTSPEC_RANK0_HOST"),
        Macro.IMG_ROOT: role.image if role.image else ShellExpr("$SLURM_SUBMIT_DIR"),
    }


def _srun_line(index: int, role: Role, opts: SlurmOptions, het: bool) -> str:
    """The role's step, started in the background. The role name reaches the task as
    ``$1`` of its ``bash -c``, whose functions come from ``declare -f`` in this shell."""
    res = role.resource
    flags = []
    if het:
        flags.append(f"--het-group={index}")
    flags.append("--ntasks-per-node=1")
    # srun 22.05+ no longer inherits --cpus-per-task from the job: pass it again, or each
    # task is confined to one CPU where task affinity is enforced.
    if res.cpu:
        flags.append(f"--cpus-per-task={res.cpu}")
    flags.append(f"--kill-on-bad-exit={1 if opts.kill_on_bad_exit else 0}")
    flags.append("--open-mode=append")
    if role.image:
        flags.append("--chdir=" + shell_word(role.image, {}))
    flags += [shell_word(f, {}) for f in opts.srun_args]
    log = shell_word(log_file_name(role.name, "%t"), {})
    func = f"distspec_role_{index}"
    return (
        f'  srun {" ".join(flags)} --output="$DISTSPEC_JOB_DIR"/{log} \\\n'
        f'    bash -c "$(declare -f distspec_task {func})"\'; distspec_task "$1" {func}\' '
        f"distspec-task {shell_word(role.name, {})} &"
    )


def _nodes(role: Role) -> str:
    return f"{role.min_replicas}-{role.num_replicas}" if role.elastic else str(role.num_replicas)


def compile_script(app: AppDef, opts: SlurmOptions, *, app_id: str, job_dir: str) -> str:
    """The sbatch script for ``app``: pure text, the same for the same inputs."""
    if not _JOB_NAME.match(app.name):
        raise _bad(f"app name {app.name!r} is not a valid Slurm job name")
    _check_job_dir(job_dir)
    _check_options(opts)
    retries = _retries(app)
    het = len(app.roles) > 1
    base = job_dir.rstrip("/")

    out = ["#!/bin/bash"]
    for index, role in enumerate(app.roles):
        if index == 0:
            # Job-wide flags go in the first component; a hetjob propagates them.
            out += [_directive(f) for f in _job_flags(app, opts, base)]
        else:
            out.append("#SBATCH hetjob")
        out.append(f"#SBATCH --nodes={_nodes(role)}")
        out += [_directive(f) for f in _resources(role, opts)]
    kind = "heterogeneous job, one component per role" if het else "one role"
    out += [
        f"# Generated by distspec for app {app_id} ({kind}). Submit by hand with:",
        f"#   sbatch {app_id}.sbatch",
        *(f"# role {role.name}: {_nodes(role)} node(s), one task per node" for role in app.roles),
        "",
        "# Replica i of a role logs to $DISTSPEC_JOB_DIR/<role>-<i>.log.",
        "export DISTSPEC_JOB_DIR=" + shell_word(f"{base}/{app.name}-", {}) + '"$SLURM_JOB_ID"',
        'mkdir -p "$DISTSPEC_JOB_DIR" || exit 1',
        'echo "${SLURM_RESTART_COUNT:-0}" > "$DISTSPEC_JOB_DIR/requeues"',
    ]
    nodelist = (
        '"${SLURM_JOB_NODELIST_HET_GROUP_0:-$SLURM_JOB_NODELIST}"'
        if het
        else '"$SLURM_JOB_NODELIST"'
    )
    host = rank0_host_word(opts.rank0_host, '"$distspec_host"')
    out += [
        "# The rendezvous host: the first node of the (first role's) allocation.",
        f"distspec_host=$(scontrol show hostnames {nodelist} | head -n1)",
        f"export DISTSPEC_RANK0_HOST={host}",
        "",
        "# Each role's command, run by every task of its step: $SLURM_NODEID is the",
        "# task's own node index there.",
    ]
    out += [
        role_function(f"distspec_role_{index}", role, _macro_values(role))
        for index, role in enumerate(app.roles)
    ]
    out += [_task(), _WAIT]
    if opts.requeue:
        signal = opts.requeue_signal.upper().removeprefix("SIG")
        out.append(_REQUEUE.format(signal=signal, secs=opts.requeue_before))
    out += [
        "# One srun step per role. A failed attempt is retried max_retries times;",
        "# each attempt clears the previous attempt's exit codes.",
    ]
    steps = [_srun_line(index, role, opts, het) for index, role in enumerate(app.roles)]
    out += attempt_loop(
        [*steps, f"  distspec_wait {len(app.roles)}", "  distspec_code=$?"], retries
    )
    return "\n".join(out) + "\n"


# -- hostlists, parsing -------------------------------------------------------


def expand_hostlist(text: str) -> list[str]:
    """``n[0-2,5],gpu01`` → ``['n0', 'n1', 'n2', 'n5', 'gpu01']`` (Slurm's compressed form)."""
    text = text.strip()
    if not text or text in {"(null)", "None assigned", "None"}:
        return []
    items: list[str] = []
    depth = 0
    start = 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    hosts: list[str] = []
    for item in items:
        hosts += _expand_one(item)
    return hosts


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item] if item else []
    head, tail = item[: match.start()], item[match.end() :]
    values: list[str] = []
    for part in match.group(1).split(","):
        low, sep, high = part.partition("-")
        if sep and low.isdigit() and high.isdigit():
            width = len(low)
            values += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
        else:
            values.append(part)
    return [head + v + rest for v in values for rest in _expand_one(tail) or [""]]


def _state_word(text: str) -> str:
    """``CANCELLED by 0`` → ``CANCELLED``; ``RUNNING+`` → ``RUNNING``."""
    word = text.strip().split(" ")[0] if text.strip() else ""
    return word.rstrip("+")


def _scontrol_fields(line: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces ...`` from ``scontrol show job -o``."""
    out: dict[str, str] = {}
    for chunk in re.split(r"\s+(?=[A-Za-z][A-Za-z0-9_/:]*=)", line.strip()):
        key, sep, value = chunk.partition("=")
        if sep:
            out.setdefault(key, value)
    return out


def _combine(states: Sequence[AppState]) -> AppState:
    for state in _SEVERITY:
        if state in states:
            return state
    return AppState.UNKNOWN


@dataclass(frozen=True, slots=True)
class _Component:
    """What Slurm says about one (hetjob) component of the job."""

    state: str
    reason: str = ""
    exit_code: str = ""
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _JobInfo:
    components: tuple[_Component, ...]
    restarts: int = 0
    name: str = ""
    stdout: str = ""
    source: str = "scontrol"


# -- the scheduler ------------------------------------------------------------


class SlurmScheduler(BatchScheduler[SlurmOptions]):
    """sbatch / srun / squeue / scontrol / sacct / scancel."""

    name = NAME
    Options = SlurmOptions
    capabilities = Capabilities(mount_kinds=frozenset(), shared_files=True)
    max_poll_interval = 1.0
    label = "Slurm"
    no_since = "slurm: --since is not supported (Slurm log lines carry no times)"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._accounting: bool | None = None
        # (state, query) last reported per job: see describe().
        self._seen: dict[str, tuple[AppState, str]] = {}

    # -- pure ------------------------------------------------------------------

    def compile(self, app: AppDef, opts: SlurmOptions, *, app_id: str) -> Request:
        """One sbatch script; ``argv`` submits it by hand from the folder it is written to."""
        check_capabilities(app, self.capabilities, NAME)
        safe_id = safe_app_id(app_id)
        script = compile_script(app, opts, app_id=safe_id, job_dir=self._job_dir(opts))
        main = f"{safe_id}.sbatch"
        return Request(
            scheduler=NAME,
            app=app,
            app_id=app_id,
            options=opts,
            files=FrozenDict({main: script}),
            argv=("sbatch", "--parsable", main),
            main_file=main,
        )

    # -- effectful -------------------------------------------------------------

    def submit(self, request: Request) -> str:
        """Write the script into ``job_dir``, ``sbatch --parsable`` it; returns the job id."""
        script = self._write_script(request)
        # The job inherits sbatch's environment (--export=ALL), with distspec's own
        # bin directory last on PATH (its torchrun).
        import os

        argv = ["sbatch", "--parsable", str(script)]
        result = self.run_cmd(argv, env=submit_env(os.environ))
        if result.returncode != 0:
            raise SchedulerError(
                "sbatch failed",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )
        job_id = result.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(
                f"sbatch printed {result.stdout.strip()!r}, not a job id",
                scheduler=NAME,
                argv=result.argv,
                stderr=result.stderr,
            )
        folder = f"{str(script.parent).rstrip('/')}/{request.app.name}-{job_id}"
        self._save_record(request, job_id, folder)
        return job_id

    def _check_id(self, app_id: str) -> str:
        if not app_id.isdigit():
            raise UsageError(f"slurm app ids are job ids (digits), got {app_id!r}")
        return app_id

    # describe ------------------------------------------------------------------

    def _query(self, job_id: str) -> _JobInfo | None:
        """One query: sacct with accounting, scontrol without (decided on first use)."""
        if self._accounting is not False:
            info = self._sacct(job_id)
            if info is not None:
                return info
        return self._scontrol(job_id)

    def _sacct(self, job_id: str) -> _JobInfo | None:
        argv = [
            "sacct",
            "--parsable2",
            "--noheader",
            "--jobs",
            job_id,
            "--format=JobID,JobName,State,ExitCode,NodeList,Reason",
        ]
        result = self._run(argv, "sacct", ok=False)
        if result.returncode != 0:
            if "accounting storage is disabled" in result.stderr.lower():
                self._accounting = False
            # Otherwise slurmdbd may be restarting: ask the controller this time.
            return None
        self._accounting = True
        # sacct 22.05 --duplicates garbles the job row (name "allocation", one node),
        # so requeues are counted by the script instead ($SLURM_RESTART_COUNT).
        latest: dict[str, _Component] = {}
        name = ""
        for line in result.stdout.splitlines():
            cols = line.split("|")
            if len(cols) < 6 or "." in cols[0]:
                continue
            name = name or cols[1]
            latest[cols[0]] = _Component(
                state=_state_word(cols[2]),
                reason=cols[5] if cols[5] != "None" else "",
                exit_code=cols[3],
                nodes=tuple(expand_hostlist(cols[4])),
            )
        if not latest:
            return None  # not yet in the database: ask the controller this once
        comps = tuple(latest[k] for k in sorted(latest, key=_component_order))
        return _JobInfo(components=comps, name=name, source="sacct")

    def _scontrol(self, job_id: str) -> _JobInfo | None:
        argv = ["scontrol", "show", "job", "-o", job_id]
        result = self._run(argv, "scontrol show job", ok=False)
        if result.returncode != 0:
            if "invalid job id" in result.stderr.lower():
                return None
            raise SchedulerError(
                "scontrol show job failed",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )
        comps = []
        restarts = 0
        name = stdout = ""
        for line in result.stdout.splitlines():
            if not line.strip():
                continue
            f = _scontrol_fields(line)
            comps.append(
                (
                    int(f.get("HetJobOffset", "0") or 0),
                    _Component(
                        state=_state_word(f.get("JobState", "")),
                        reason=f.get("Reason", "") if f.get("Reason") != "None" else "",
                        exit_code=f.get("ExitCode", ""),
                        nodes=tuple(expand_hostlist(f.get("NodeList", ""))),
                    ),
                )
            )
            restarts = max(restarts, int(f.get("Restarts", "0") or 0))
            name = name or f.get("JobName", "")
            stdout = stdout or f.get("StdOut", "")
        if not comps:
            return None
        comps.sort(key=lambda c: c[0])
        return _JobInfo(
            components=tuple(c for _, c in comps), restarts=restarts, name=name, stdout=stdout
        )

    def _folder(self, record: JobRecord | None, info: _JobInfo | None) -> Path | None:
        if record is not None:
            return Path(record.folder)
        if info is not None and info.stdout.endswith(".out"):
            return Path(info.stdout[: -len(".out")])
        return None

    def describe(self, app_id: str) -> AppStatus | None:
        job_id = self._check_id(app_id)
        record = self._record(job_id)
        info = self._query(job_id)
        if info is None and record is None:
            return None
        files = read_job_folder(self._folder(record, info))
        if record is not None:
            roles = list(record.roles)
        else:
            assert info is not None
            roles = [
                (info.name or "app" if i == 0 else f"{info.name}{i}", max(1, len(c.nodes)))
                for i, c in enumerate(info.components)
            ]
        # Restarts: requeues (Slurm's count) plus in-script retries (max_retries).
        requeues = int(files.get("requeues", "0") or 0)
        if info is not None:
            requeues = max(requeues, info.restarts)
        restarts = requeues + int(files.get("attempt", "0") or 0)
        if info is None:
            return _from_files(job_id, roles, files, restarts)
        state = _combine([SLURM_STATES.get(c.state, AppState.UNKNOWN) for c in info.components])
        # slurmdbd lags the controller: right after submit sacct has no row (so scontrol
        # answers, RUNNING) and then a stale PENDING one. Do not report that step back.
        lagging = self._seen.get(job_id) == (AppState.RUNNING, "scontrol") and (
            info.source == "sacct" and state is AppState.PENDING
        )
        if lagging:
            state = AppState.RUNNING
        else:
            self._seen[job_id] = (state, info.source)
        head = info.components[0]
        msg = "RUNNING" if lagging else head.state + (f" ({head.reason})" if head.reason else "")
        role_status = []
        for index, (role, count) in enumerate(roles):
            comp = info.components[index] if index < len(info.components) else head
            comp_state = SLURM_STATES.get(comp.state, AppState.UNKNOWN)
            if lagging and comp_state is AppState.PENDING:
                comp_state = AppState.RUNNING
            count = len(comp.nodes) if comp.nodes else count
            replicas = tuple(
                _replica(role, i, comp_state, comp, files, restarts) for i in range(count)
            )
            role_status.append(RoleStatus(role=role, replicas=replicas))
        return AppStatus(
            state=state,
            msg=msg,
            num_restarts=restarts,
            roles=tuple(role_status),
        )

    def _queried_folder(self, job_id: str) -> Path | None:
        return self._folder(None, self._scontrol(job_id))

    # cancel, list ----------------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        job_id = self._check_id(app_id)
        result = self._run(["scancel", job_id], "scancel", ok=False)
        if result.returncode != 0 and "already completing or completed" not in result.stderr:
            raise SchedulerError(
                "scancel failed",
                scheduler=NAME,
                argv=result.argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )

    def list(self) -> list[AppSummary]:
        """The user's jobs: from sacct (last 7 days) with accounting, squeue without."""
        import getpass

        user = getpass.getuser()
        rows: list[list[str]] = []
        if self._accounting is not False:
            argv = [
                "sacct",
                "--parsable2",
                "--noheader",
                "--allocations",
                # A requeued job's last run may not have started inside the time
                # window; --duplicates lists every run, and the last one wins below.
                "--duplicates",
                "--user",
                user,
                "--starttime",
                "now-7days",
                "--format=JobID,JobName,State,Reason",
            ]
            result = self._run(argv, "sacct", ok=False)
            if result.returncode == 0:
                self._accounting = True
                rows = [
                    line.split("|")[:4]
                    for line in result.stdout.splitlines()
                    if line.count("|") >= 3
                ]
            elif "accounting storage is disabled" in result.stderr.lower():
                self._accounting = False
            else:
                raise SchedulerError(
                    "sacct failed",
                    scheduler=NAME,
                    argv=argv,
                    returncode=result.returncode,
                    stderr=result.stderr,
                )
        if self._accounting is False:
            argv = ["squeue", "--noheader", "--states=all", "--user", user, "--format=%i|%j|%T|%r"]
            result = self._run(argv, "squeue")
            rows = [
                line.split("|")[:4] for line in result.stdout.splitlines() if line.count("|") >= 3
            ]
        latest: dict[str, list[str]] = {}
        for row in rows:
            latest[row[0]] = row  # per (hetjob component) id, the last run listed
        jobs: dict[str, list[list[str]]] = {}
        for key, row in latest.items():
            base = key.split("+")[0]
            if base.isdigit():
                jobs.setdefault(base, []).append(row)
        out = []
        for base in sorted(jobs, key=int, reverse=True):
            comps = jobs[base]
            states = [_state_word(c[2]) for c in comps]
            mapped = _combine([SLURM_STATES.get(s, AppState.UNKNOWN) for s in states])
            name, reason = comps[0][1], comps[0][3]
            detail = states[0] + (f" ({reason})" if reason and reason != "None" else "")
            out.append(AppSummary(app_id=base, name=name, state=mapped, detail=detail))
        return out


def _component_order(key: str) -> tuple[int, int]:
    job, _, offset = key.partition("+")
    return (int(job) if job.isdigit() else 0, int(offset) if offset.isdigit() else 0)


def _replica(
    role: str,
    i: int,
    job_state: AppState,
    comp: _Component,
    files: Mapping[str, str],
    attempt: int,
) -> ReplicaStatus:
    code = exit_code(files, role, i)
    reason = comp.state if comp.state not in {"RUNNING", "COMPLETED", "PENDING"} else ""
    if comp.reason:
        reason = f"{reason}: {comp.reason}" if reason else comp.reason
    return ReplicaStatus(
        role=role,
        id=i,
        state=replica_state(code, job_state),
        hostname=replica_host(files, role, i, comp.nodes),
        exit_code=code,
        reason="" if code == 0 else reason,
        restarts=attempt,
    )


def _from_files(
    job_id: str, roles: Sequence[tuple[str, int]], files: Mapping[str, str], attempt: int
) -> AppStatus:
    """Slurm forgot the job (no accounting, past MinJobAge): what the job folder recorded."""
    role_status = []
    codes: list[int | None] = []
    for role, count in roles:
        replicas = []
        for i in range(count):
            code = exit_code(files, role, i)
            codes.append(code)
            state = (
                AppState.UNKNOWN
                if code is None
                else AppState.SUCCEEDED
                if code == 0
                else AppState.FAILED
            )
            replicas.append(
                ReplicaStatus(
                    role=role,
                    id=i,
                    state=state,
                    exit_code=code,
                    hostname=replica_host(files, role, i, ()),
                    restarts=attempt,
                )
            )
        role_status.append(RoleStatus(role=role, replicas=tuple(replicas)))
    if codes and all(c == 0 for c in codes):
        state = AppState.SUCCEEDED
    elif any(c not in (None, 0) for c in codes):
        state = AppState.FAILED
    else:
        state = AppState.UNKNOWN
    return AppStatus(
        state=state,
        msg=f"Slurm no longer lists job {job_id}; state from the exit codes in its job folder",
        num_restarts=attempt,
        roles=tuple(role_status),
    )
