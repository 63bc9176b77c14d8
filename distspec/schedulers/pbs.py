"""PBS (OpenPBS, PBS Pro, Torque): one qsub script per AppDef, one process per node.

One role of N replicas asks for N hosts (``-l select=N:...:mpiprocs=1`` with
``-l place=scatter``, or Torque's ``-l nodes=N:ppn=C``). Replica i runs on the i-th
distinct host of ``$PBS_NODEFILE`` (the file repeats a host once per slot; its first
line is the rendezvous host). A single-node job runs its command directly; a
multi-node job starts one task per host with ``pbsdsh -n`` (the default: it ships
with every PBS and needs no MPI) or with one ``mpiexec`` (option ``launcher``).
Each task is ``<job folder>/task.sh``, which the batch script writes at run time
(the spooled script itself is not visible on the other hosts); it takes the replica
id from its argument (pbsdsh) or from the MPI launcher's rank variable (mpiexec).
The script's size does not depend on the node count.

Files (``job_dir``, absolute; default ``<state dir>/pbs``)::

    <job_dir>/<app_id>.pbs              the script, as submitted
    <job_dir>/<app_id>.out              the batch script's own output (-j oe, -o)
    <job_dir>/<app_id>/<role>-<i>.log   replica i's stdout and stderr
    <job_dir>/<app_id>/<role>-<i>.host  the host it ran on
    <job_dir>/<app_id>/<role>-<i>.exit  its exit code, once it exited
    <job_dir>/<app_id>/exit             the batch script's exit code
    <job_dir>/<app_id>/signal           present when the script was terminated (qdel)

Launchers rarely return every task's exit code (pbsdsh does not; Slurm's
``mpiexec`` wrapper always exits 0), and neither Torque's ``qstat -f`` before the
end nor Slurm's PBS wrappers report an exit status, so the ``.exit`` files decide
per-replica codes and the script's own exit code. ``describe`` asks ``qstat -f``,
then ``qstat -x -f`` when PBS Pro says the job has finished, and falls back to the
job folder when PBS has forgotten the job.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.schedulers._common import (
    MacroValues,
    ShellExpr,
    check_capabilities,
    log_file_name,
    read_log_lines,
    shell_join,
    shell_word,
    submit_env,
)
from distspec.schedulers.api import AppSummary, Capabilities, CommandResult, Request, Scheduler
from distspec.specs.app import AppDef, RetryPolicy, Role
from distspec.specs.frozen import FrozenDict
from distspec.specs.macros import Macro
from distspec.specs.options import option
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus

__all__ = [
    "PBS_STATES",
    "Launcher",
    "PbsOptions",
    "PbsScheduler",
    "ResourceStyle",
    "parse_qstat_full",
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


@dataclass(frozen=True, slots=True, kw_only=True)
class PbsOptions:
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
        None, "Dependencies (-W depend=), e.g. afterok:1234.server or afterany:12:13."
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


#: Every PBS job state letter (PBS Pro, OpenPBS, Torque) to an AppState. C, F and X
#: are finished: the exit status (or the job folder) decides between SUCCEEDED,
#: FAILED and CANCELLED, so they map to SUCCEEDED here only as "ended".
PBS_STATES: Mapping[str, AppState] = FrozenDict(
    {
        "Q": AppState.PENDING,  # queued
        "H": AppState.PENDING,  # held
        "W": AppState.PENDING,  # waiting for its start time (-a) or for stage-in
        "T": AppState.PENDING,  # in transit to another server
        "M": AppState.PENDING,  # moved to another server (PBS Pro)
        "S": AppState.PENDING,  # suspended by the server
        "U": AppState.PENDING,  # suspended: the workstation is busy (PBS Pro)
        "R": AppState.RUNNING,
        "B": AppState.RUNNING,  # an array job with a subjob started (PBS Pro)
        "E": AppState.RUNNING,  # exiting after having run: not ended yet
        "C": AppState.SUCCEEDED,  # completed (Torque, Slurm's wrappers)
        "F": AppState.SUCCEEDED,  # finished (PBS Pro history, qstat -x)
        "X": AppState.SUCCEEDED,  # a finished subjob (PBS Pro)
    }
)
_FINISHED = frozenset("CFX")
_STATE_WORDS = {
    "Q": "queued",
    "H": "held",
    "W": "waiting",
    "T": "in transit",
    "M": "moved",
    "S": "suspended",
    "U": "suspended",
    "R": "running",
    "B": "running",
    "E": "exiting",
}

# PBS Pro's negative Exit_status values (JOB_EXEC_* in its job.h): the job did not
# run to its own end. Walltime is an external limit, so CANCELLED (as Slurm's TIMEOUT).
_EXEC_CODES: Mapping[int, tuple[AppState, str]] = FrozenDict(
    {
        -1: (AppState.FAILED, "PBS could not start the job"),
        -2: (AppState.FAILED, "PBS could not start the job (after staging files)"),
        -3: (AppState.FAILED, "PBS could not start the job; it was to be retried"),
        -4: (AppState.FAILED, "the job was aborted when MoM started"),
        -10: (AppState.FAILED, "the job's user or group is invalid on the execution host"),
        -11: (AppState.FAILED, "the job was rerun"),
        -27: (AppState.FAILED, "the job exceeded its mem limit"),
        -28: (AppState.FAILED, "the job exceeded its cput limit"),
        -29: (AppState.CANCELLED, "the job exceeded its walltime"),
    }
)

_WALLTIME = re.compile(r"^\d+(:\d{1,2}){0,2}$")
_PLACE = re.compile(r"^((free|pack|scatter|vscatter)(:(excl|exclhost|shared|group=\w+))*)?$")
_MAIL_EVENTS = re.compile(r"^(n|[abejfp]+)$")
_DEPEND = re.compile(r"^[a-z]+(:[A-Za-z0-9_.\[\]@-]+)+(,[a-z]+(:[A-Za-z0-9_.\[\]@-]+)+)*$")
_SIMPLE = re.compile(r"^[A-Za-z0-9_.,:@%/+=-]+$")
_QSUB_FLAG = re.compile(r"^-([A-Za-z])( (.+))?$", re.DOTALL)
_RESOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# -o paths are [host:]path and directive lines split on blanks: keep job_dir plain.
_JOB_DIR = re.compile(r"^/[A-Za-z0-9_./+@=,~-]*$")
_JOB_ID = re.compile(r"^\d+(\[\d*\])?(\.[A-Za-z0-9_.-]+)?$")

# qsub flags distspec writes itself, or that have their own option: say which.
_QSUB_OWN = frozenset("NoejJIh")
_QSUB_OPTIONS = {"q": "queue", "A": "account", "m": "mail_events", "M": "mail_user"}
_RESOURCES_OWN = ("select", "nodes", "place", "walltime", "ncpus", "ngpus", "mem", "mpiprocs")


# -- compile ------------------------------------------------------------------


def _bad(message: str) -> CompileError:
    return CompileError(NAME, message)


def _plain(what: str, value: str) -> str:
    """``value`` for a ``#PBS`` line: qsub splits directives on blanks itself and
    quoting differs between servers, so only plain values are accepted."""
    if not _SIMPLE.match(value):
        raise _bad(f"{what}={value!r}: a #PBS value may hold only letters, digits and _.,:@%/+=-")
    return value


def _check_qsub_args(flags: Sequence[str]) -> list[str]:
    lines = []
    for flag in flags:
        match = _QSUB_FLAG.match(flag)
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


def _check_options(opts: PbsOptions) -> None:
    if opts.walltime is not None and not _WALLTIME.match(opts.walltime):
        raise _bad(f"walltime={opts.walltime!r}: expected SECONDS, MM:SS or HH:MM:SS")
    if not _PLACE.match(opts.place):
        raise _bad(
            f"place={opts.place!r}: expected free, pack, scatter or vscatter, optionally "
            "with :excl, :exclhost, :shared or :group=RESOURCE"
        )
    if opts.mail_events is not None and not _MAIL_EVENTS.match(opts.mail_events):
        raise _bad(f"mail_events={opts.mail_events!r}: expected letters of abe (or n for none)")
    if opts.depend is not None and not _DEPEND.match(opts.depend):
        raise _bad(f"depend={opts.depend!r}: expected TYPE:JOBID[:JOBID...], e.g. afterok:1234")
    if opts.job_name_max < 1:
        raise _bad(f"job_name_max={opts.job_name_max}: must be at least 1")
    if opts.rank0_host.count("{host}") != 1:
        raise _bad(f"rank0_host={opts.rank0_host!r}: the template must contain {{host}} once")
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


def _check_job_dir(job_dir: str) -> None:
    if not job_dir.startswith("/"):
        raise _bad(f"job_dir={job_dir!r} must be an absolute path (logs are read from any cwd)")
    if not _JOB_DIR.match(job_dir):
        raise _bad(
            f"job_dir={job_dir!r}: PBS output paths may hold only letters, digits and _./+@=,~- "
            "(a ':' means host:path to qsub, a blank splits the directive)"
        )


def job_name(app_name: str, limit: int) -> str:
    """The ``#PBS -N`` name: the app name, starting with a letter, at most ``limit`` long."""
    name = app_name if app_name[:1].isalpha() else f"j{app_name}"
    return name[:limit]


def _retries(app: AppDef) -> int:
    role = app.roles[0]
    if role.max_retries and role.retry_policy is RetryPolicy.REPLICA:
        raise _bad(
            f"role {role.name!r}: retry_policy=replica cannot be honoured (the replicas start "
            "and end together); use role or application"
        )
    return role.max_retries


def _resource_lines(role: Role, opts: PbsOptions) -> list[str]:
    res = role.resource
    n = role.num_replicas
    if opts.resource_style is ResourceStyle.SELECT:
        chunk = [str(n)]
        if res.cpu:
            chunk.append(f"ncpus={res.cpu}")
        chunk.append("mpiprocs=1")
        if res.gpu:
            chunk.append(f"ngpus={res.gpu}")
        for name, count in sorted(res.devices.items()):
            if not _RESOURCE.match(name):
                raise _bad(f"role {role.name!r}: device {name!r} is not a PBS resource name")
            chunk.append(f"{name}={count}")
        # Slurm's qsub wrapper reads a chunk's mem up to the next comma: keep it last.
        if opts.mem and res.mem_mb:
            chunk.append(f"mem={res.mem_mb}mb")
        lines = [f"#PBS -l select={':'.join(chunk)}"]
        if opts.place:
            lines.append(f"#PBS -l place={opts.place}")
        return lines
    if res.devices:
        names = ", ".join(sorted(res.devices))
        raise _bad(
            f"role {role.name!r}: devices ({names}) need resource_style=select (Torque's "
            "node spec has no custom resources)"
        )
    spec = [f"nodes={n}", f"ppn={max(res.cpu, 1)}"]
    if res.gpu:
        spec.append(f"gpus={res.gpu}")
    lines = [f"#PBS -l {':'.join(spec)}"]
    if opts.mem and res.mem_mb:
        # Torque's mem is the job's total over all its nodes.
        lines.append(f"#PBS -l mem={res.mem_mb * n}mb")
    return lines


def _directives(app: AppDef, opts: PbsOptions, out_path: str) -> list[str]:
    role = app.roles[0]
    lines = [f"#PBS -N {job_name(app.name, opts.job_name_max)}"]
    if opts.queue:
        lines.append(f"#PBS -q {opts.queue}")
    if opts.account:
        lines.append(f"#PBS -A {opts.account}")
    lines += _resource_lines(role, opts)
    if opts.walltime:
        lines.append(f"#PBS -l walltime={opts.walltime}")
    lines += ["#PBS -j oe", f"#PBS -o {out_path}"]
    if opts.export_env:
        lines.append("#PBS -V")
    if opts.mail_events:
        lines.append(f"#PBS -m {opts.mail_events}")
    if opts.mail_user:
        lines.append(f"#PBS -M {opts.mail_user}")
    if opts.depend:
        lines.append(f"#PBS -W depend={opts.depend}")
    lines += _check_qsub_args(opts.qsub_args)
    return lines


def _macro_values(role: Role) -> MacroValues:
    return {
        Macro.APP_ID: ShellExpr("$DISTSPEC_APP_ID"),
        Macro.REPLICA_ID: ShellExpr("$DISTSPEC_REPLICA_ID"),
        Macro.NUM_REPLICAS: str(role.num_replicas),
        Macro.RANK0_HOST: ShellExpr("$DISTSPEC_RANK0_HOST"),
        Macro.IMG_ROOT: role.image if role.image else ShellExpr("$DISTSPEC_WORKDIR"),
    }


def _role_function(role: Role) -> str:
    values = _macro_values(role)
    lines = [f"distspec_role() {{  # role {role.name}"]
    for key, value in role.env.items():
        lines.append(f"  export {key}={shell_word(value, values)}")
    lines.append("  " + shell_join([role.entrypoint, *role.args], values))
    lines.append("}")
    return "\n".join(lines) + "\n"


_TASK = """\
# One replica. $1 is its id (pbsdsh, direct), or empty: then the MPI launcher's rank
# (MPICH/Intel MPI: PMI_RANK, Cray PALS: PALS_RANKID, Open MPI: OMPI_COMM_WORLD_RANK,
# PMIx: PMIX_RANK, Slurm's mpiexec wrapper: SLURM_PROCID). It runs in its own bash on
# its host, logs beside the others and records its host and exit code there.
distspec_task() {{
  local id=${{1:-${{PMI_RANK:-${{PALS_RANKID:-${{OMPI_COMM_WORLD_RANK:-${{PMIX_RANK:-${{SLURM_PROCID:-}}}}}}}}}}}}
  if [[ -z $id ]]; then
    echo "distspec: no replica id: the launcher set none of PMI_RANK, PALS_RANKID, OMPI_COMM_WORLD_RANK, PMIX_RANK" >&2
    return 1
  fi
  export DISTSPEC_REPLICA_ID=$id
  local base="$DISTSPEC_JOB_DIR"/{role}-$id
  hostname > "$base.host"
  cd "$DISTSPEC_WORKDIR" || return 1
  distspec_role >> "$base.log" 2>&1 < /dev/null
  local code=$?
  echo "$code" > "$base.exit"
  return "$code"
}}
"""

_WAIT = """\
# Waits for the $1 launcher processes started in the background and returns 0, or the
# first failure's exit code after stopping the others.
distspec_wait() {
  local left=$1 code
  while (( left > 0 )); do
    wait -n
    code=$?
    if (( code != 0 )); then
      kill $(jobs -p) 2>/dev/null
      wait
      return "$code"
    fi
    left=$((left - 1))
  done
  return 0
}

# qdel (and Slurm's scancel under its PBS wrappers) sends SIGTERM first: note it, so the
# job reads as cancelled rather than failed, and take the launchers down with the script.
distspec_terminated() {
  echo TERM > "$DISTSPEC_JOB_DIR/signal"
  kill $(jobs -p) 2>/dev/null
  exit 143
}
trap distspec_terminated TERM
trap 'echo "$?" > "$DISTSPEC_JOB_DIR/exit"' EXIT
"""


def _launch_lines(role: Role, opts: PbsOptions) -> list[str]:
    """Start the replicas in the background; sets ``distspec_started`` to how many
    launcher processes there are."""
    n = role.num_replicas
    if n == 1:
        return [
            "  # One node: no launcher, the replica runs here.",
            "  distspec_task 0 &",
            "  distspec_started=1",
        ]
    if opts.launcher is Launcher.MPIEXEC:
        extra = " ".join(shell_word(a, {}) for a in opts.mpiexec_args)
        return [
            f"  # One mpiexec: {n} ranks, one per host; each task reads its launcher's rank.",
            f'  mpiexec -n {n} {extra + " " if extra else ""}/bin/bash "$DISTSPEC_TASK" &',
            "  distspec_started=1",
        ]
    return [
        "  # One pbsdsh per host: -n is the host's first line in $PBS_NODEFILE (its",
        "  # vnode index); the replica id is passed as the task's argument.",
        "  distspec_started=0",
        f"  for ((i = 0; i < {n}; i++)); do",
        '    pbsdsh -n "${distspec_vnodes[i]}" -- /bin/bash "$DISTSPEC_TASK" "$i" &',
        "    distspec_started=$((distspec_started + 1))",
        "  done",
    ]


def compile_script(app: AppDef, opts: PbsOptions, *, app_id: str, job_dir: str) -> str:
    """The qsub script for ``app``: pure text, the same for the same inputs."""
    _check_job_dir(job_dir)
    _check_options(opts)
    retries = _retries(app)
    role = app.roles[0]
    n = role.num_replicas
    base = job_dir.rstrip("/") or "/"
    folder = f"{base.rstrip('/')}/{app_id}"
    out_path = f"{folder}.out"
    launcher = "none (one node)" if n == 1 else f"{opts.launcher.value}"

    hint = (
        " (-cfg place=scatter puts each replica on its own host)"
        if opts.resource_style is ResourceStyle.SELECT and not opts.place.startswith("scatter")
        else ""
    )
    out = ["#!/bin/bash", *_directives(app, opts, out_path)]
    out += [
        f"# Generated by distspec for app {app_id}: role {role.name}, {n} node(s), one",
        f"# process per node, launcher {launcher}. Submit by hand with:",
        f"#   qsub -j oe -o {out_path} {app_id}.pbs",
        "# (an explicit -o: some qsub front ends override #PBS -o with their own default).",
        "",
        "# Replica i of the role logs to $DISTSPEC_JOB_DIR/<role>-<i>.log.",
        "export DISTSPEC_JOB_DIR=" + shell_word(folder, {}),
        'mkdir -p "$DISTSPEC_JOB_DIR" || exit 1',
        "export DISTSPEC_APP_ID=$PBS_JOBID",
        "# PBS starts the script in $HOME: run where qsub ran (or in the role's image dir).",
        "export DISTSPEC_WORKDIR="
        + (shell_word(role.image, {}) if role.image else '"${PBS_O_WORKDIR:-$PWD}"'),
        "",
        "# The hosts: $PBS_NODEFILE lists one line per slot, so keep each host's first line",
        "# (its index is the host's vnode for pbsdsh -n). Slurm's PBS wrappers set no",
        "# PBS_NODEFILE; their generate_pbs_nodefile writes one.",
        "distspec_nodefile=${PBS_NODEFILE:-}",
        "if [[ -z $distspec_nodefile ]] && command -v generate_pbs_nodefile > /dev/null; then",
        "  distspec_nodefile=$(generate_pbs_nodefile)",
        "fi",
        "if [[ -r $distspec_nodefile ]]; then",
        "  mapfile -t distspec_hosts < <(awk 'NF && !seen[$1]++ {print $1}' \"$distspec_nodefile\")",
        "  mapfile -t distspec_vnodes < <(awk 'NF && !seen[$1]++ {print NR - 1}' \"$distspec_nodefile\")",
        "else",
        '  distspec_hosts=("$(hostname)") distspec_vnodes=(0)',
        "fi",
        f"if (( ${{#distspec_hosts[@]}} < {n} )); then",
        f'  echo "distspec: {n} hosts needed, PBS gave ${{#distspec_hosts[@]}}: ${{distspec_hosts[*]}}'
        f'{hint}" >&2',
        "  exit 1",
        "fi",
    ]
    prefix, _, suffix = opts.rank0_host.partition("{host}")
    host = (
        (shell_word(prefix, {}) if prefix else "")
        + '"${distspec_hosts[0]}"'
        + (shell_word(suffix, {}) if suffix else "")
    )
    out += [
        "# The rendezvous host: the first host of the nodefile, where rank 0 runs.",
        f"export DISTSPEC_RANK0_HOST={host}",
        "",
        "# The role's command, run by every task: $DISTSPEC_REPLICA_ID is the task's own id.",
        _role_function(role),
        _TASK.format(role=shell_word(role.name, {})),
        "# The task file every host runs (the spooled script is only on this host).",
        'export DISTSPEC_TASK="$DISTSPEC_JOB_DIR/task.sh"',
        "{",
        "  echo '#!/bin/bash'",
        "  printf 'export %s=%q\\n' DISTSPEC_JOB_DIR \"$DISTSPEC_JOB_DIR\" DISTSPEC_APP_ID "
        '"$DISTSPEC_APP_ID" \\',
        '    DISTSPEC_WORKDIR "$DISTSPEC_WORKDIR" DISTSPEC_RANK0_HOST "$DISTSPEC_RANK0_HOST"',
        "  declare -f distspec_role distspec_task",
        "  echo 'distspec_task \"$@\"'",
        '} > "$DISTSPEC_TASK" || exit 1',
        "",
        _WAIT,
        "# A failed attempt is retried max_retries times; each attempt clears the previous",
        "# attempt's exit codes. Launchers do not all return their tasks' codes: the .exit",
        "# files decide the script's exit code.",
        "distspec_attempt=0",
        "while :; do",
        '  rm -f "$DISTSPEC_JOB_DIR"/*.exit "$DISTSPEC_JOB_DIR"/*.host',
        '  echo "$distspec_attempt" > "$DISTSPEC_JOB_DIR/attempt"',
        *_launch_lines(role, opts),
        '  distspec_wait "$distspec_started"',
        "  distspec_code=$?",
        "  distspec_missing=0",
        f"  for ((i = {n} - 1; i >= 0; i--)); do",
        "    distspec_exit=" + shell_word(f"{role.name}-", {}) + '"$i.exit"',
        "    if [[ -s $DISTSPEC_JOB_DIR/$distspec_exit ]]; then",
        '      read -r distspec_c < "$DISTSPEC_JOB_DIR/$distspec_exit"',
        "      (( distspec_c != 0 )) && distspec_code=$distspec_c",
        "    else",
        "      distspec_missing=$((distspec_missing + 1))",
        "    fi",
        "  done",
        "  if (( distspec_missing > 0 )); then",
        '    echo "distspec: $distspec_missing replica(s) recorded no exit code" >&2',
        "    (( distspec_code == 0 )) && distspec_code=1",
        "  fi",
        f"  (( distspec_code == 0 || distspec_attempt >= {retries} )) && break",
        "  distspec_attempt=$((distspec_attempt + 1))",
        f'  echo "distspec: attempt failed (exit code $distspec_code); retry $distspec_attempt of {retries}" >&2',
        "done",
        'exit "$distspec_code"',
    ]
    return "\n".join(out) + "\n"


# -- parsing ------------------------------------------------------------------

_KEY_LINE = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_.]*) = ?(.*)$")
_JOB_LINE = re.compile(r"^Job Id:\s*(\S+)")


def parse_qstat_full(text: str) -> dict[str, dict[str, str]]:
    """``qstat -f`` output → ``{job id: {attribute: value}}``.

    Attributes are ``    name = value`` lines; PBS Pro and Torque wrap long values
    onto lines that start with a tab, which are joined back without a separator (the
    break can fall inside a word or a path).
    """
    jobs: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    key = ""
    for line in text.splitlines():
        head = _JOB_LINE.match(line)
        if head:
            current = jobs.setdefault(head.group(1), {})
            key = ""
            continue
        if current is None or not line.strip():
            continue
        attr = _KEY_LINE.match(line)
        if attr:
            key = attr.group(1)
            current[key] = attr.group(2).rstrip()
        elif key and line[:1] in "\t ":
            current[key] += line.strip()
    return jobs


def _exit_status(attrs: Mapping[str, str]) -> int | None:
    text = attrs.get("Exit_status", attrs.get("exit_status", "")).strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def _exec_hosts(text: str) -> list[str]:
    """``n0/0*8+n1/0*8`` (PBS Pro), ``n0/0-7+n1/0-7`` (Torque) → ``['n0', 'n1']``."""
    hosts: list[str] = []
    for part in text.split("+"):
        host = part.split("/")[0].strip()
        if host and host not in hosts:
            hosts.append(host)
    return hosts


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True, slots=True)
class _JobInfo:
    """What ``qstat -f`` says about one job."""

    state: str
    name: str = ""
    exit_status: int | None = None
    hosts: tuple[str, ...] = ()
    comment: str = ""
    output_path: str = ""


@dataclass(frozen=True, slots=True)
class _Record:
    """What submit wrote down about a job, so that describe and log work from any cwd."""

    job_id: str
    app_id: str
    app: str
    folder: str
    roles: tuple[tuple[str, int], ...] = field(default=())


# -- the scheduler ------------------------------------------------------------


class PbsScheduler(Scheduler[PbsOptions]):
    """qsub / pbsdsh or mpiexec / qstat / qdel."""

    name = NAME
    Options = PbsOptions
    capabilities = Capabilities(
        mount_kinds=frozenset(), elastic=False, multi_role=False, shared_files=True
    )
    max_poll_interval = 1.0

    # -- pure ------------------------------------------------------------------

    def _job_dir(self, opts: PbsOptions) -> str:
        if opts.job_dir:
            return opts.job_dir
        if self._state_dir is None:
            raise _bad("no job_dir: set -cfg job_dir=/shared/absolute/dir")
        return str(Path(self._state_dir) / "pbs")

    def compile(self, app: AppDef, opts: PbsOptions, *, app_id: str) -> Request:
        """One qsub script; ``argv`` submits it by hand from the folder it is written to."""
        check_capabilities(app, self.capabilities, NAME)
        safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", app_id)
        job_dir = self._job_dir(opts)
        script = compile_script(app, opts, app_id=safe_id, job_dir=job_dir)
        main = f"{safe_id}.pbs"
        out_path = f"{job_dir.rstrip('/')}/{safe_id}.out"
        return Request(
            scheduler=NAME,
            app=app,
            app_id=app_id,
            options=opts,
            files=FrozenDict({main: script}),
            argv=("qsub", "-j", "oe", "-o", out_path, main),
            main_file=main,
        )

    # -- effectful -------------------------------------------------------------

    def _run(self, argv: Sequence[str], what: str, *, ok: bool = True) -> CommandResult:
        result = self.run_cmd(argv)
        if ok and result.returncode != 0:
            raise SchedulerError(
                f"{what} failed",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                stderr=result.stderr or result.stdout,
            )
        return result

    def _records(self) -> Path | None:
        return None if self._state_dir is None else Path(self._state_dir) / "pbs" / "jobs"

    def submit(self, request: Request) -> str:
        """Write the script into ``job_dir`` and qsub it from the current directory
        (the job's ``$PBS_O_WORKDIR``); returns the job id qsub prints."""
        import os

        opts: PbsOptions = request.options
        job_dir = Path(self._job_dir(opts))
        try:
            job_dir.mkdir(parents=True, exist_ok=True)
            script = job_dir / request.main_file
            script.write_text(request.render())
        except OSError as e:
            raise SchedulerError(f"cannot write the job script into {job_dir}: {e}") from e
        # An explicit -o and -j oe on the command line: Slurm's qsub wrapper ignores
        # #PBS -o and, without -j, writes <name>.e<id> into the current directory.
        argv = ["qsub", *request.argv[1:-1], str(script)]
        result = self.run_cmd(argv, env=submit_env(os.environ))
        # PBS Pro prints 1234.server, Torque 1234.server.domain, Slurm's wrapper 1234;
        # the wrapper reports sbatch's errors on stdout.
        job_id = result.stdout.strip().splitlines()[-1].strip() if result.stdout.strip() else ""
        if result.returncode != 0 or not _JOB_ID.match(job_id):
            raise SchedulerError(
                "qsub failed" if result.returncode else f"qsub printed {job_id!r}, not a job id",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                # The wrapper quotes sbatch's output in '...': keep the words.
                stderr="\n".join(
                    line.strip(" '")
                    for line in (result.stderr + result.stdout).splitlines()
                    if line.strip(" '")
                ),
            )
        records = self._records()
        if records is not None:
            app = request.app
            folder = f"{str(job_dir).rstrip('/')}/{Path(request.main_file).stem}"
            record = {
                "job_id": job_id,
                "app_id": request.app_id,
                "app": app.name,
                "folder": folder,
                "roles": [[r.name, r.num_replicas] for r in app.roles],
            }
            records.mkdir(parents=True, exist_ok=True)
            (records / f"{job_id}.json").write_text(json.dumps(record))
        return job_id

    def _record(self, job_id: str) -> _Record | None:
        records = self._records()
        if records is None:
            return None
        try:
            data = json.loads((records / f"{job_id}.json").read_text())
        except (OSError, ValueError):
            return None
        return _Record(
            job_id=job_id,
            app_id=data["app_id"],
            app=data["app"],
            folder=data["folder"],
            roles=tuple((str(n), int(c)) for n, c in data["roles"]),
        )

    @staticmethod
    def _check_id(app_id: str) -> str:
        if not _JOB_ID.match(app_id):
            raise UsageError(f"pbs app ids are job ids such as 1234 or 1234.server, got {app_id!r}")
        return app_id

    # describe ------------------------------------------------------------------

    def _qstat(self, job_id: str) -> _JobInfo | None:
        """``qstat -f``; for a job PBS Pro has moved to its history, ``qstat -x -f``.
        None when the server does not know the job (any more)."""
        argv = ["qstat", "-f", job_id]
        result = self._run(argv, "qstat", ok=False)
        if result.returncode != 0 and "has finished" in result.stderr:
            argv = ["qstat", "-x", "-f", job_id]
            result = self._run(argv, "qstat -x", ok=False)
        if result.returncode != 0:
            # PBS Pro and Torque: "Unknown Job Id" (rc 153); Slurm's wrapper: rc 153, silent.
            if result.returncode == 153 or "unknown job" in result.stderr.lower():
                return None
            raise SchedulerError(
                "qstat failed",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )
        jobs = parse_qstat_full(result.stdout)
        if not jobs:
            return None
        attrs = jobs.get(job_id) or next(iter(jobs.values()))
        return _JobInfo(
            state=attrs.get("job_state", "").strip(),
            name=attrs.get("Job_Name", ""),
            exit_status=_exit_status(attrs),
            hosts=tuple(_exec_hosts(attrs.get("exec_host", ""))),
            comment=attrs.get("comment", ""),
            output_path=attrs.get("Output_Path", ""),
        )

    def _folder(self, record: _Record | None, info: _JobInfo | None) -> Path | None:
        if record is not None:
            return Path(record.folder)
        if info is not None and info.output_path.endswith(".out"):
            # [host:]/job_dir/<app_id>.out
            path = info.output_path.partition(":")[2] or info.output_path
            return Path(path.removesuffix(".out"))
        return None

    def _cancelled_marker(self, job_id: str) -> Path | None:
        records = self._records()
        return None if records is None else records / f"{job_id}.cancelled"

    def describe(self, app_id: str) -> AppStatus | None:
        job_id = self._check_id(app_id)
        record = self._record(job_id)
        info = self._qstat(job_id)
        if info is None and record is None:
            return None
        files = _read_folder(self._folder(record, info))
        marker = self._cancelled_marker(job_id)
        cancelled = marker is not None and marker.exists()
        if record is not None:
            roles = list(record.roles)
        else:
            assert info is not None
            roles = [(info.name or "app", max(1, len(info.hosts)))]
        restarts = _int(files.get("attempt")) or 0

        if info is None or info.state in _FINISHED:
            exit_status = None if info is None else info.exit_status
            state, msg = _finished(exit_status, files, cancelled)
            if info is None:
                msg = f"PBS no longer lists job {job_id}; {msg}"
        else:
            state = PBS_STATES.get(info.state, AppState.UNKNOWN)
            msg = _STATE_WORDS.get(info.state, f"job_state {info.state}")
            if info.comment and state is AppState.PENDING:
                msg += f" ({info.comment})"
        hosts = info.hosts if info is not None else ()
        role_status = []
        for role, count in roles:
            replicas = tuple(
                _replica(role, i, state, files, hosts, restarts, msg) for i in range(count)
            )
            role_status.append(RoleStatus(role=role, replicas=replicas))
        return AppStatus(state=state, msg=msg, num_restarts=restarts, roles=tuple(role_status))

    # logs ------------------------------------------------------------------------

    def log_iter(
        self,
        app_id: str,
        role: str,
        replica: int,
        *,
        since: float | None = None,
        follow: bool = False,
    ) -> Iterator[str]:
        """Lines of ``<job folder>/<role>-<replica>.log``; ``since`` is not supported
        (the files carry no per-line times)."""
        if since is not None:
            raise UsageError("pbs: --since is not supported (the log lines carry no times)")
        job_id = self._check_id(app_id)
        record = self._record(job_id)
        info = None if record is not None else self._qstat(job_id)
        folder = self._folder(record, info)
        if folder is None:
            raise SchedulerError(
                f"cannot find the log folder of job {job_id}: it was not submitted from this "
                "state dir and PBS no longer shows it",
                scheduler=NAME,
            )
        path = folder / log_file_name(role, replica)
        return read_log_lines(path, follow=follow, ended=lambda: self._ended(job_id))

    def _ended(self, job_id: str) -> bool:
        status = self.describe(job_id)
        return status is None or status.is_terminal

    # cancel, list ----------------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        """``qdel``; a job that already ended (or that PBS forgot) is left alone."""
        job_id = self._check_id(app_id)
        info = self._qstat(job_id)
        if info is None or info.state in _FINISHED:
            return
        marker = self._cancelled_marker(job_id)
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("qdel\n")
        result = self._run(["qdel", job_id], "qdel", ok=False)
        if result.returncode == 0:
            return
        # PBS Pro: "Job has finished" (rc 35), Torque: "Unknown Job Id" (rc 153), Slurm's
        # wrapper: rc 1 and nothing said. Ended in between is fine; anything else is not.
        after = self._qstat(job_id)
        if after is None or after.state in _FINISHED:
            return
        if marker is not None:
            marker.unlink(missing_ok=True)
        raise SchedulerError(
            "qdel failed",
            scheduler=NAME,
            argv=result.argv,
            returncode=result.returncode,
            stderr=result.stderr or result.stdout,
        )

    def list(self) -> list[AppSummary]:
        """The user's jobs that ``qstat`` shows (PBS Pro: not finished ones; Torque and
        Slurm's wrappers: finished ones too, for a while)."""
        import getpass

        user = getpass.getuser()
        result = self._run(["qstat"], "qstat")
        out = []
        for line in result.stdout.splitlines():
            cols = line.split()
            # Job id  Name  User  Time Use  S  Queue
            if len(cols) < 6 or not _JOB_ID.match(cols[0].rstrip("*")):
                continue
            job_id, name, owner, letter = cols[0], cols[1], cols[2], cols[4]
            # Some servers cut long names in this table and mark the cut with '*'.
            if owner != user and not (owner.endswith("*") and user.startswith(owner[:-1])):
                continue
            record = self._record(job_id)
            if letter in _FINISHED:
                # The table has no exit status: what the job folder recorded decides.
                if record is None:
                    state = AppState.UNKNOWN
                else:
                    marker = self._cancelled_marker(job_id)
                    files = _read_folder(Path(record.folder))
                    state = _finished(None, files, marker is not None and marker.exists())[0]
            else:
                state = PBS_STATES.get(letter, AppState.UNKNOWN)
            out.append(
                AppSummary(
                    app_id=job_id,
                    name=record.app if record is not None else name,
                    state=state,
                    detail=_STATE_WORDS.get(letter, "finished" if letter in _FINISHED else letter),
                )
            )
        return sorted(out, key=lambda a: _sort_key(a.app_id), reverse=True)


def _sort_key(job_id: str) -> int:
    digits = re.match(r"\d+", job_id)
    return int(digits.group(0)) if digits else 0


def _read_folder(folder: Path | None) -> dict[str, str]:
    """``{file name: stripped text}`` of the small status files in the job folder."""
    if folder is None:
        return {}
    out: dict[str, str] = {}
    try:
        entries = list(folder.iterdir())
    except OSError:
        return out
    for path in entries:
        if path.suffix in {".exit", ".host"} or path.name in {"attempt", "exit", "signal"}:
            try:
                out[path.name] = path.read_text().strip()
            except OSError:
                continue
    return out


def _int(text: str | None) -> int | None:
    return int(text) if text and re.fullmatch(r"-?\d+", text) else None


def _finished(
    exit_status: int | None, files: Mapping[str, str], cancelled: bool
) -> tuple[AppState, str]:
    """The end state of a finished job: from PBS's exit status where it reports one,
    else from what the job folder recorded."""
    if cancelled or "signal" in files:
        return AppState.CANCELLED, "cancelled (qdel)" if cancelled else "terminated by SIGTERM"
    if exit_status is not None:
        if exit_status == 0:
            return AppState.SUCCEEDED, "finished"
        if exit_status < 0:
            state, why = _EXEC_CODES.get(
                exit_status, (AppState.FAILED, "PBS could not run the job")
            )
            return state, f"{why} (Exit_status {exit_status})"
        if exit_status >= 256:
            # PBS reports 256 + N when the script itself was killed by signal N.
            return AppState.CANCELLED, f"killed by {_signal_name(exit_status - 256)}"
        return AppState.FAILED, f"exit status {exit_status}"
    code = _int(files.get("exit"))
    if code == 0:
        return AppState.SUCCEEDED, "finished"
    if code is not None:
        return AppState.FAILED, f"exit status {code} (recorded by the job)"
    if not any(name.endswith(".host") for name in files):
        return AppState.CANCELLED, "ended before any replica started"
    return AppState.FAILED, "ended without recording an exit code"


def _replica(
    role: str,
    i: int,
    job_state: AppState,
    files: Mapping[str, str],
    hosts: Sequence[str],
    restarts: int,
    msg: str,
) -> ReplicaStatus:
    code = _int(files.get(f"{role}-{i}.exit"))
    host = files.get(f"{role}-{i}.host", "") or (hosts[i] if i < len(hosts) else "")
    reason = ""
    if code is None:
        state = job_state
        if job_state in (AppState.FAILED, AppState.CANCELLED):
            reason = msg
    elif code == 0:
        state = AppState.SUCCEEDED
    elif job_state is AppState.CANCELLED and code > 128:
        state, reason = AppState.CANCELLED, msg  # killed by the job's end, not on its own
    else:
        state, reason = AppState.FAILED, f"exited with {code}"
    return ReplicaStatus(
        role=role,
        id=i,
        state=state,
        hostname=host,
        exit_code=code,
        reason=reason,
        restarts=restarts,
    )
