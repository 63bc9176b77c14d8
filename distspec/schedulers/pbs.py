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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.schedulers._batch import (
    BatchScheduler,
    JobRecord,
    attempt_loop,
    check_job_dir,
    check_rank0_host,
    exit_code,
    parse_int,
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
    shell_word,
    submit_env,
)
from distspec.schedulers.api import AppSummary, Capabilities, Request
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
    check_rank0_host(opts.rank0_host, NAME)
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
    check_job_dir(job_dir, NAME)
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


def _task(role: Role) -> str:
    return (
        "# One replica. $1 is its id (pbsdsh, direct), or empty: then the MPI launcher's rank\n"
        "# (MPICH/Intel MPI: PMI_RANK, Cray PALS: PALS_RANKID, Open MPI: OMPI_COMM_WORLD_RANK,\n"
        "# PMIx: PMIX_RANK, Slurm's mpiexec wrapper: SLURM_PROCID). It runs in its own bash on\n"
        "# its host, logs beside the others and records its host and exit code there.\n"
    ) + task_function(
        setup=[
            "local id=${1:-${PMI_RANK:-${PALS_RANKID:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-"
            "${SLURM_PROCID:-}}}}}}",
            "if [[ -z $id ]]; then",
            '  echo "distspec: no replica id: the launcher set none of PMI_RANK, PALS_RANKID, '
            'OMPI_COMM_WORLD_RANK, PMIX_RANK" >&2',
            "  return 1",
            "fi",
            "export DISTSPEC_REPLICA_ID=$id",
        ],
        base='"$DISTSPEC_JOB_DIR"/' + shell_word(role.name, {}) + "-$id",
        host="hostname",
        run=['cd "$DISTSPEC_WORKDIR" || return 1', 'distspec_role >> "$base.log" 2>&1 < /dev/null'],
    )


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
    host = rank0_host_word(opts.rank0_host, '"${distspec_hosts[0]}"')
    out += [
        "# The rendezvous host: the first host of the nodefile, where rank 0 runs.",
        f"export DISTSPEC_RANK0_HOST={host}",
        "",
        "# The role's command, run by every task: $DISTSPEC_REPLICA_ID is the task's own id.",
        role_function("distspec_role", role, _macro_values(role)),
        _task(role),
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
    ]
    attempt = [
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
    ]
    out += attempt_loop(attempt, retries)
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


# -- the scheduler ------------------------------------------------------------


class PbsScheduler(BatchScheduler[PbsOptions]):
    """qsub / pbsdsh or mpiexec / qstat / qdel."""

    name = NAME
    Options = PbsOptions
    capabilities = Capabilities(
        mount_kinds=frozenset(), elastic=False, multi_role=False, shared_files=True
    )
    max_poll_interval = 1.0
    label = "PBS"
    no_since = "pbs: --since is not supported (the log lines carry no times)"
    # Slurm's qsub wrapper reports sbatch's errors on stdout.
    errors_on_stdout = True

    # -- pure ------------------------------------------------------------------

    def compile(self, app: AppDef, opts: PbsOptions, *, app_id: str) -> Request:
        """One qsub script; ``argv`` submits it by hand from the folder it is written to."""
        check_capabilities(app, self.capabilities, NAME)
        safe_id = safe_app_id(app_id)
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

    def submit(self, request: Request) -> str:
        """Write the script into ``job_dir`` and qsub it from the current directory
        (the job's ``$PBS_O_WORKDIR``); returns the job id qsub prints."""
        import os

        script = self._write_script(request)
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
        folder = f"{str(script.parent).rstrip('/')}/{script.stem}"
        self._save_record(request, job_id, folder)
        return job_id

    def _check_id(self, app_id: str) -> str:
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

    def _folder(self, record: JobRecord | None, info: _JobInfo | None) -> Path | None:
        if record is not None:
            return Path(record.folder)
        if info is not None and info.output_path.endswith(".out"):
            # [host:]/job_dir/<app_id>.out
            path = info.output_path.partition(":")[2] or info.output_path
            return Path(path.removesuffix(".out"))
        return None

    def _queried_folder(self, job_id: str) -> Path | None:
        return self._folder(None, self._qstat(job_id))

    def _cancelled_marker(self, job_id: str) -> Path | None:
        records = self._records()
        return None if records is None else records / f"{job_id}.cancelled"

    def describe(self, app_id: str) -> AppStatus | None:
        job_id = self._check_id(app_id)
        record = self._record(job_id)
        info = self._qstat(job_id)
        if info is None and record is None:
            return None
        files = read_job_folder(self._folder(record, info))
        marker = self._cancelled_marker(job_id)
        cancelled = marker is not None and marker.exists()
        if record is not None:
            roles = list(record.roles)
        else:
            assert info is not None
            roles = [(info.name or "app", max(1, len(info.hosts)))]
        restarts = parse_int(files.get("attempt")) or 0

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
                    files = read_job_folder(Path(record.folder))
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
    code = parse_int(files.get("exit"))
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
    code = exit_code(files, role, i)
    state = replica_state(code, job_state)
    if code is not None and state is AppState.FAILED:
        reason = f"exited with {code}"
    elif state in (AppState.FAILED, AppState.CANCELLED):
        reason = msg  # the job's end decided it
    else:
        reason = ""
    return ReplicaStatus(
        role=role,
        id=i,
        state=state,
        hostname=replica_host(files, role, i, hosts),
        exit_code=code,
        reason=reason,
        restarts=restarts,
    )
