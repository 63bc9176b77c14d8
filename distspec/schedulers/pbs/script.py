"""The pure half of the PBS backend: AppDef + options -> one qsub script.

One role of N replicas asks for N hosts (``-l select=N:...:mpiprocs=1`` with
``-l place=scatter``, or Torque's ``-l nodes=N:ppn=C``). Replica i runs on the i-th
distinct host of ``$PBS_NODEFILE`` (the file repeats a host once per slot; its first
line is the rendezvous host). A single-node job runs its command directly; a
multi-node job starts one task per host with ``pbsdsh -n`` (the default: it ships
with every PBS and needs no MPI) or with one ``mpiexec`` (option ``launcher``).
Each task is ``<job folder>/task.sh``, which the batch script writes at run time
(the spooled script itself is not visible on the other hosts); it takes the replica
id from its argument (pbsdsh) or from the MPI launcher's rank variable (mpiexec).
The script's size does not depend on the node count. The job folder it writes is
described in :mod:`distspec.schedulers.batch`.

``run --after`` becomes ``#PBS -W depend=afterok:ID,...``. A sweep's points run as
one array job (``#PBS -J 0-N`` on PBS Pro and OpenPBS, ``#PBS -t 0-N`` on Torque, each
with ``%K`` for ``--max-parallel K``): subjob k reads its values from line k + 1 of
``<job_dir>/<app_id>.points`` and runs in its own job folder ``<app_id>_k``.

Nothing here runs a command or reads the environment.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from distspec.errors import CompileError
from distspec.schedulers.batch import container, envcopy
from distspec.schedulers.batch import script as batch
from distspec.schedulers.batch.container import Container, ContainerPlan
from distspec.schedulers.batch.direct import Workers
from distspec.schedulers.pbs.options import (
    NAME,
    Launcher,
    PbsOptions,
    ResourceStyle,
    check_container,
    check_job_dir,
    check_options,
    qsub_args_directives,
)
from distspec.schedulers.shell import MacroValues, ShellExpr, shell_join, shell_word
from distspec.specs.app import AppDef, RetryPolicy, Role
from distspec.specs.macros import Macro
from distspec.torchrun import DEFAULT_RDZV_PORT, RDZV_PORT_SPAN
from distspec.torchrun_output import worker_exec_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.schedulers.api import Dependency, Points

__all__ = ["DEPENDENCY_KINDS", "compile_script", "job_name"]

# Compiled on first use (re caches it).
_RESOURCE = r"^[A-Za-z_][A-Za-z0-9_]*$"
# What -W depend may name: a job or a whole array job (1234[].server), not a subjob.
_WHOLE_JOB = r"^\d+(\[\])?(\.[A-Za-z0-9_.-]+)?$"
_SUBJOB = r"^\d+\[\d+\]"

#: ``run --after`` condition -> PBS's dependency type.
DEPENDENCY_KINDS = {"ok": "afterok", "any": "afterany", "failed": "afternotok"}


def _bad(message: str) -> CompileError:
    return CompileError(NAME, message)


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
    cpus = batch.cpus_per_node(role)
    if opts.resource_style is ResourceStyle.SELECT:
        chunk = [str(n)]
        if cpus:
            chunk.append(f"ncpus={cpus}")
        chunk.append("mpiprocs=1")
        if res.gpu:
            chunk.append(f"ngpus={res.gpu}")
        for name, count in sorted(res.devices.items()):
            if not re.compile(_RESOURCE).fullmatch(name):
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
    # Without a CPU count (a GPU role without --cpu), ppn is left out: Torque's default (one).
    spec = [f"nodes={n}", *([f"ppn={cpus}"] if cpus else [])]
    if res.gpu:
        spec.append(f"gpus={res.gpu}")
    lines = [f"#PBS -l {':'.join(spec)}"]
    if opts.mem and res.mem_mb:
        # Torque's mem is the job's total over all its nodes.
        lines.append(f"#PBS -l mem={res.mem_mb * n}mb")
    return lines


def _depend(after: Sequence[Dependency], opts: PbsOptions) -> str | None:
    """The ``-W depend=`` value: ``afterok:12.srv:13.srv,afterany:14.srv`` (each must
    hold), then the ``depend`` option's own. None without either.

    PBS deletes a job whose dependency can no longer be met (an afterok job that
    failed, an afternotok one that succeeded): it does not stay queued. A dependency
    on a whole array job (``1234[].server``) waits for every subjob; Torque spells it
    ``afterokarray``. A single subjob cannot be waited for (OpenPBS's qsub refuses it).
    """
    kinds: dict[str, list[str]] = {}
    for dep in after:
        job = dep.app_id
        if dep.condition not in DEPENDENCY_KINDS:
            raise _bad(
                f"--after {job}:{dep.condition}: the condition is one of "
                f"{', '.join(DEPENDENCY_KINDS)}"
            )
        if re.compile(_SUBJOB).match(job):
            whole = re.sub(r"\[\d+\]", "[]", job, count=1)
            raise _bad(
                f"--after {job}: PBS cannot make a job wait for one subjob of an array job; "
                f"wait for the whole array ({whole})"
            )
        if not re.compile(_WHOLE_JOB).fullmatch(job):
            raise _bad(
                f"--after {job!r}: a PBS job id is 1234 or 1234.server (an array: 1234[].server)"
            )
        kind = DEPENDENCY_KINDS[dep.condition]
        if "[]" in job and opts.resource_style is ResourceStyle.NODES:
            kind += "array"  # Torque's dependency on every subjob of an array
        ids = kinds.setdefault(kind, [])
        if job not in ids:
            ids.append(job)
    parts = [":".join([kind, *ids]) for kind, ids in kinds.items()]
    if opts.depend:
        parts.append(opts.depend)
    return ",".join(parts) or None


def _array_directives(points: Points, opts: PbsOptions) -> list[str]:
    """``#PBS -J 0-(n-1)`` (PBS Pro, OpenPBS) or ``#PBS -t 0-(n-1)`` (Torque), with
    ``%K`` for at most K subjobs at once (OpenPBS sets ``max_run_subjobs`` from it; Slurm's
    sbatch reads both lines as ``--array``)."""
    n = len(points.values)
    if points.max_parallel is not None and points.max_parallel < 1:
        raise _bad(f"max_parallel={points.max_parallel}: expected a positive number")
    limit = f"%{points.max_parallel}" if points.max_parallel else ""
    if opts.resource_style is ResourceStyle.NODES:
        return [f"#PBS -t {'0' if n == 1 else f'0-{n - 1}'}{limit}"]
    for flag in opts.qsub_args:
        if re.compile(r"^-r\s*n").match(flag):
            raise _bad(
                "qsub_args: -r n: PBS array jobs are always rerunnable (qsub refuses -J with it)"
            )
    if n == 1:
        # PBS Pro wants a range X-Y with X < Y: 0-1:2 is index 0 alone.
        return [f"#PBS -J 0-1:2{limit}"]
    return [f"#PBS -J 0-{n - 1}{limit}"]


_INVALID_DEP = [
    "# Slurm's PBS wrappers (sbatch reads the #PBS lines) would keep a job whose dependency can",
    "# no longer be met pending forever, where PBS deletes it; to PBS this line is a comment.",
    "#SBATCH --kill-on-invalid-dep=yes",
]


def _directives(
    app: AppDef,
    opts: PbsOptions,
    out_path: str,
    after: Sequence[Dependency] = (),
    points: Points | None = None,
) -> list[str]:
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
    depend = _depend(after, opts)
    if depend:
        lines.append(f"#PBS -W depend={depend}")
    if points is not None:
        lines += _array_directives(points, opts)
    lines += qsub_args_directives(opts.qsub_args)
    return lines + (_INVALID_DEP if depend else [])


def path_lines(opts: PbsOptions) -> list[str]:
    """The lines after the ``#PBS`` ones that give the job qsub's PATH back.

    PBS Pro and OpenPBS run the script in the user's login shell, whose profile
    (Debian's /etc/profile, a ``~/.bash_profile``) sets PATH anew after ``-V`` put
    qsub's there: torchrun, the venv's python and ``pbsdsh`` would not be found.
    ``$PBS_O_PATH`` is qsub's PATH on every PBS."""
    if not opts.export_env:
        return []
    return ['[[ -z ${PBS_O_PATH:-} ]] || export PATH="$PBS_O_PATH"  # a login profile reset it']


def _macro_values(
    role: Role, points: Points | None = None, opts: PbsOptions | None = None
) -> MacroValues:
    # A subjob's id starts with its array's number: its point's index tells them apart.
    own = " + DISTSPEC_SWEEP_INDEX" if points is not None else ""
    return {
        Macro.APP_ID: ShellExpr("$DISTSPEC_APP_ID"),
        Macro.REPLICA_ID: ShellExpr("$DISTSPEC_REPLICA_ID"),
        Macro.NUM_REPLICAS: str(role.num_replicas),
        Macro.RANK0_HOST: ShellExpr("$DISTSPEC_RANK0_HOST"),
        # The job's own port (job_rdzv_port): the number that PBS_JOBID starts with.
        Macro.RDZV_PORT: ShellExpr(
            f"$(({DEFAULT_RDZV_PORT} + (10#0${{DISTSPEC_APP_ID%%[!0-9]*}}{own}) % {RDZV_PORT_SPAN}))"
            if points is not None
            else f"$(({DEFAULT_RDZV_PORT} + 10#0${{DISTSPEC_APP_ID%%[!0-9]*}} % {RDZV_PORT_SPAN}))"
        ),
        Macro.IMG_ROOT: role.image if workdir_image(role, opts) else ShellExpr("$DISTSPEC_WORKDIR"),
        **batch.sweep_values(points),
    }


def _task(role: Role, *, attempts: bool) -> str:
    return (
        "# One replica. $1 is its id (pbsdsh, direct), or empty: then the MPI launcher's rank\n"
        "# (MPICH/Intel MPI: PMI_RANK, Cray PALS: PALS_RANKID, Open MPI: OMPI_COMM_WORLD_RANK,\n"
        "# PMIx: PMIX_RANK, Slurm's mpiexec wrapper: SLURM_PROCID). It runs in its own bash on\n"
        "# its host, logs beside the others and records its host and exit code there.\n"
    ) + batch.task_function(
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
        attempts=attempts,
    )


# qdel sends SIGTERM to every task of the job (torchrun too), and SIGKILL to what is
# left once the script has exited. torchrun's workers run in sessions of their own,
# which PBS's kill by session misses: an agent SIGKILLed before it stopped them leaves
# them running (a real OpenPBS server showed it, #29). So the trap waits, up to 8 s
# (MoM's kill_delay is 10 s), for what the script started to end first.
TERM_TRAP = (
    'trap \'echo TERM > "$DISTSPEC_JOB_DIR/signal"; for ((t = 0; t < 80; t++)); do '
    "[[ -n $(jobs -pr) ]] || break; sleep 0.1; done; exit 143' TERM"
)

_TRAPS = """\
# qdel (and Slurm's scancel under its PBS wrappers) sends SIGTERM first: note it, so the
# job reads as cancelled rather than failed, and take the launchers down with the script.
distspec_terminated() {
  echo TERM > "$DISTSPEC_JOB_DIR/signal"
  for ((distspec_t = 0; distspec_t < 80; distspec_t++)); do  # torchrun stops its workers
    [[ -n $(jobs -pr) ]] || break
    sleep 0.1
  done
  distspec_kill "${distspec_pids[@]}"
  exit 143
}
trap distspec_terminated TERM
trap 'echo "$?" > "$DISTSPEC_JOB_DIR/exit"' EXIT
"""


#: The EXIT traps' removal of the node-local copies (env_to_local), once the script has
#: defined it (:func:`envcopy.pbs_lines`).
_ENV_CLEAN = "declare -F distspec_env_clean > /dev/null && distspec_env_clean"


def _launch_lines(role: Role, opts: PbsOptions) -> list[str]:
    """Start the replicas' launchers in the background, each pid in ``distspec_pids``."""
    n = role.num_replicas
    if n == 1:
        return [
            "  # One node: no launcher, the replica runs here.",
            "  distspec_task 0 < /dev/null &",
            "  distspec_pids+=($!)",
        ]
    if opts.launcher is Launcher.MPIEXEC:
        extra = " ".join(shell_word(a, {}) for a in opts.mpiexec_args)
        return [
            f"  # One mpiexec: {n} ranks, one per host; each task reads its launcher's rank.",
            f'  mpiexec -n {n} {extra + " " if extra else ""}/bin/bash "$DISTSPEC_TASK" < /dev/null &',
            "  distspec_pids+=($!)",
        ]
    return [
        "  # One pbsdsh per host: -n is the host's first line in $PBS_NODEFILE (its",
        "  # vnode index); the replica id is passed as the task's argument.",
        f"  for ((i = 0; i < {n}; i++)); do",
        '    pbsdsh -n "${distspec_vnodes[i]}" -- /bin/bash "$DISTSPEC_TASK" "$i" < /dev/null &',
        "    distspec_pids+=($!)",
        "  done",
    ]


def _place_hint(opts: PbsOptions) -> str:
    """What the "hosts needed" message suggests when chunks may share a host."""
    if opts.resource_style is ResourceStyle.SELECT and not opts.place.startswith("scatter"):
        return " (-cfg place=scatter puts each replica on its own host)"
    return ""


def _heredoc_end(lines: Sequence[str]) -> str:
    """A here-document delimiter that no line of ``lines`` equals."""
    end = "DISTSPEC_TASK"
    while end in lines:
        end += "_"
    return end


def _check_points(role: Role, points: Points) -> None:
    """Raise CompileError unless each ``{{name}}`` the role uses is a sweep variable
    with a name the shell can hold, and its image (the directory it runs in, one for
    the whole array job) uses none."""
    from distspec.specs import placeholders

    for name in points.names:
        if not re.compile(_RESOURCE).fullmatch(name):
            raise _bad(f"sweep variable {name!r} is not a valid name")
    used: set[str] = set()
    for text in (role.entrypoint, *role.args, *role.env.values()):
        used |= placeholders.find(text)
    unknown = sorted(used - set(points.names))
    if unknown:
        raise _bad(
            f"role {role.name!r} uses {{{{{unknown[0]}}}}}, which is not a sweep variable "
            f"({', '.join(points.names) or 'there are none'})"
        )
    if role.image and placeholders.find(role.image):
        raise _bad(
            f"role {role.name!r}: --image {role.image!r}: the directory a PBS array job runs "
            "in is the same for every point"
        )


def _sweep_names(points: Points | None) -> list[str]:
    """The environment variables an array job's point sets (none without points)."""
    if points is None:
        return []
    return [f"{batch.SWEEP_PREFIX}INDEX", *(f"{batch.SWEEP_PREFIX}{n}" for n in points.names)]


def _array_head(points: Points, opts: PbsOptions, *, app_id: str, folder: str) -> list[str]:
    """An array job's first lines: its subjob's index (``distspec_index``), the point's
    values exported (``DISTSPEC_SWEEP_*``, from the points file beside the script), the
    subjob's id (``distspec_id``) and its own job folder, ``<folder>_<index>``."""
    if opts.resource_style is ResourceStyle.NODES:
        index = "${PBS_ARRAYID:-${PBS_ARRAY_INDEX:-}}  # Slurm's PBS wrappers set the latter"
    else:
        index = "$PBS_ARRAY_INDEX"
    return [
        f"# An array job of {len(points.values)} sweep points: subjob k runs point {points.first} + k",
        f"# with the values on line k + 1 of {app_id}.points (beside this script),",
        f"# in its own job folder {app_id}_k.",
        f"distspec_index={index}",
        *batch.point_exports(f"{folder}.points", "distspec_index"),
        "# The subjob's id (1234[k].server); Slurm's PBS wrappers give each its own job number.",
        'distspec_id=$PBS_JOBID; [[ $distspec_id == *"["* ]] || distspec_id="${PBS_ARRAY_ID:-$PBS_JOBID}[$distspec_index]"',
        "export DISTSPEC_JOB_DIR=" + shell_word(f"{folder}_", {}) + '"$distspec_index"',
    ]


#: After an array job's folder is made: the id the server knows the subjob by (Slurm's
#: PBS wrappers: its own job number, for describe and cancel), and its own output file.
_ARRAY_OUTPUT = [
    'echo "$PBS_JOBID" > "$DISTSPEC_JOB_DIR/jobid"',
    "exec >> \"$DISTSPEC_JOB_DIR.out\" 2>&1  # this subjob's output (qsub's -o file is the array's)",
]


# -- containers (-cfg container=...) ----------------------------------------------------


def workdir_image(role: Role, opts: PbsOptions | None) -> bool:
    """Whether the role's image is the directory it runs in (``container=none``)."""
    return bool(role.image) and (opts is None or opts.container is Container.NONE)


def container_plan(role: Role, opts: PbsOptions, job_base: str) -> ContainerPlan | None:
    """The role's container (:mod:`distspec.schedulers.batch.container`), or None.

    Raises:
        CompileError: a Slurm-only runtime (pyxis, oci), or what the runtime refuses.
    """
    check_container(opts)
    return container.plan(
        role,
        runtime=opts.container,
        scheduler=NAME,
        job_base=job_base,
        workdir='"$DISTSPEC_WORKDIR"',
        launcher_env="PBS_*",
        env=opts.container_env,
        path=opts.container_path,
        args=opts.container_args,
        pull=opts.pull,
    )


def container_name(role: str, replica: str = "$DISTSPEC_REPLICA_ID") -> str:
    """A podman container's name, unique per job (its folder's name), role and replica."""
    return f'distspec-"${{DISTSPEC_JOB_DIR##*/}}"-{role}-"{replica}"'


def contained(
    plan: ContainerPlan | None,
    env: list[str],
    command: str,
    *,
    role: str,
    output: str = "",
    trap: bool = True,
    background: bool = False,
) -> list[str]:
    """A replica's lines from its ``export`` lines to its command: the command, with
    ``output``, run in the role's container (:func:`container.run_lines`); without a
    container ``env`` and ``command`` as they are (in the foreground)."""
    if plan is None:
        return [*env, command + (f" {output}" if output else "")]
    env = [line for line in env if line != worker_exec_line()]
    name = container_name(role)
    marked = trap and plan.runtime is Container.PODMAN
    return [
        *env,
        *(['rm -f "$base.stopped"  # from an earlier run'] if marked else []),
        *container.run_lines(
            plan,
            command,
            name=name,
            exported=env,
            output=output,
            trap=trap,
            background=background,
            stopped=STOPPED if marked else "",
            watch=STOP_FILE if marked else "",
        ),
    ]


#: What podman's TERM trap in a task runs once its container is gone: ``$base.stopped``
#: (for use in the trap's double quotes). See :func:`containers_stopped`.
STOPPED = ': > \\"$base.stopped\\"'


#: The file in the job folder that asks every podman task to remove its container.
STOP_FILE = '"$DISTSPEC_JOB_DIR/stop"'


def containers_stopped(plan: ContainerPlan | None, role: str) -> str:
    """Shell that asks every podman task of ``role`` to remove its container
    (:data:`STOP_FILE`), waits up to 8 s until each replica that started (its
    ``.host``) has ended (``.exit``) or removed its container (``.stopped``), and
    takes the request back; "" but for podman. For the script's end: OpenPBS
    SIGTERMs only the mother superior's tasks on qdel, pbsdsh (SIGTERMed by the EXIT
    trap after a failed replica) forwards its signal and returns at once, and once
    the script has exited every task left is SIGKILLed, ``podman rm`` included:
    containers ran on, "Up" or "Stopping" (a real OpenPBS server showed both, #26).
    No single quote: it goes into the EXIT trap's."""
    if plan is None or plan.runtime is not Container.PODMAN:
        return ""
    return (
        f": > {STOP_FILE}; "
        f'for ((t = 0; t < 80; t++)); do left=; for h in "$DISTSPEC_JOB_DIR"/{role}-*.host; do '
        "[[ ! -e $h || -e ${h%.host}.exit || -e ${h%.host}.stopped ]] || left=1; done; "
        f"[[ -n $left ]] || break; sleep 0.1; done; rm -f {STOP_FILE}"
    )


def pull_lines(plan: ContainerPlan | None, name: str, *, replica: str) -> list[str]:
    """With ``pull=true``: the lines that pull the role's image (on this host), whose
    failure records replica ``replica``'s exit code and cause and exits."""
    if plan is None or not plan.source:
        return []
    base = f'"$DISTSPEC_JOB_DIR/{name}-{replica}'
    return [
        "# pull=true: pull the image first; a failed pull is the replica's recorded cause.",
        f'rm -f {base}.reason"',
        *container.pull_lines(
            plan,
            host="$(hostname)",
            reason_file=base + '.reason"',
            exit_file=base + '.exit"',
            log=f'"$DISTSPEC_JOB_DIR/{name}-{replica}.pull"',
        ),
    ]


def _plain_script(
    role: Role,
    opts: PbsOptions,
    *,
    app_id: str,
    folder: str,
    out_path: str,
    points: Points | None = None,
) -> list[str]:
    """The script after the #PBS lines for one role without retries, written as a
    person would. One node runs the command itself; several run ``task.sh`` on each
    host through the launcher. The script waits for the launchers, or until a replica
    records a failure: then it exits with that code, and its EXIT trap stops the
    launchers (the job's end stops what they started on other hosts), so one failed
    node ends the job promptly whatever the launcher does on a failure."""
    n = role.num_replicas
    name = role.name  # NAME_CHARS only: a plain word in the shell
    values = _macro_values(role, points, opts)
    job_id = "$PBS_JOBID" if points is None else "$distspec_id"
    env = batch.env_exports(role, values)
    command = shell_join([role.entrypoint, *role.args], values)
    plan = container_plan(role, opts, folder.rpartition("/")[0] or "/")
    unbuffered = " PYTHONUNBUFFERED=1" if opts.unbuffered else ""
    launched = "run here" if n == 1 else f"one task each ({opts.launcher.value})"
    stopped = containers_stopped(plan, name) if n > 1 else ""  # one host: the script's trap
    pbsdsh = opts.launcher is Launcher.PBSDSH
    copy = envcopy.pbs_lines(
        opts,
        NAME,
        job_dir=folder.rpartition("/")[0] or "/",
        nodes=n,
        vnodes="vnodes",
        mpiexec=None if pbsdsh else opts.mpiexec_args,
    )
    out = [
        f"# Generated by distspec for app {app_id}; submit by hand with:",
        f"#   qsub -j oe -o {out_path} {app_id}.pbs",
        f"# Role {name} on {n} host(s), {launched}: replica i logs to {name}-i.log in the job",
        "# folder, with its host and exit code (.host, .exit); exit and signal: the script's end.",
        *(
            ["export DISTSPEC_JOB_DIR=" + shell_word(folder, {})]
            if points is None
            else _array_head(points, opts, app_id=app_id, folder=folder)
        ),
        'mkdir -p -m 700 "$DISTSPEC_JOB_DIR" && rm -f "$DISTSPEC_JOB_DIR"/{*.exit,*.host,*.start,exit,signal'
        + (",stop" if stopped else "")
        + "} || exit 1",
        *(_ARRAY_OUTPUT if points is not None else []),
        TERM_TRAP,
        "trap 'code=$?; kill -TERM -- $(jobs -p | sed s/^/-/) 2> /dev/null; "
        + (f"{stopped}; " if stopped else "")
        + 'echo "$code" > "$DISTSPEC_JOB_DIR/exit"'
        + (f"; {_ENV_CLEAN}" if copy else "")
        + "' EXIT",
        "set -m  # each launcher leads a process group: the EXIT trap stops what it started here",
        "cd "
        + (shell_word(role.image, {}) if workdir_image(role, opts) else '"${PBS_O_WORKDIR:-$PWD}"')
        + " || exit 1  # PBS starts in $HOME: run where qsub ran",
    ]
    if n == 1:
        out += copy
        host = batch.rank0_host_word(opts.rank0_host, '"$(hostname)"')
        log = f'"$DISTSPEC_JOB_DIR/{name}-0'
        output = f'>> {log}.log" 2>&1 < /dev/null'
        if plan is not None and plan.runtime is Container.PODMAN:
            # The script's TERM trap removes the container first.
            stop = container.stop_command(plan, container_name(name)).replace('"', "")
            out[out.index(TERM_TRAP)] = TERM_TRAP.replace("trap '", f"trap '{stop}; ", 1)
        return [
            *out,
            f'export DISTSPEC_APP_ID="{job_id}" DISTSPEC_REPLICA_ID=0 DISTSPEC_RANK0_HOST={host}',
            f'export DISTSPEC_WORKDIR="$PWD"{unbuffered}',
            batch.START.replace('"$base.log" > "$base.start"', f'{log}.log" > {log}.start"'),
            f'hostname > {log}.host"',
            *pull_lines(plan, name, replica="0"),
            *(
                contained(plan, env, command, role=name, output=output, trap=False, background=True)
                if plan is not None
                else [*env, f"{command} {output} &", "wait $!"]
            ),
            "code=$?",
            f'echo "$code" > {log}.exit"',
            'exit "$code"',
        ]
    hint = _place_hint(opts)
    rank = (
        "$4"
        if pbsdsh
        # MPICH/Intel MPI, Cray PALS, Open MPI, PMIx, Slurm's mpiexec wrapper (srun).
        else "${PMI_RANK:-${PALS_RANKID:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:?"
        "the launcher set no rank}}}}}"
    )
    task = [
        "export DISTSPEC_APP_ID=$1 DISTSPEC_RANK0_HOST=$2 DISTSPEC_WORKDIR=$3" + unbuffered,
        (
            f"export DISTSPEC_JOB_DIR={shell_word(folder, {})} DISTSPEC_REPLICA_ID={rank}"
            if points is None
            else f"export DISTSPEC_REPLICA_ID={rank}"
        ),
        f"base=$DISTSPEC_JOB_DIR/{name}-$DISTSPEC_REPLICA_ID; {batch.STAY}",
        batch.START,
        'hostname > "$base.host" && cd "$DISTSPEC_WORKDIR" || exit 1',
        *([envcopy.task_path_line()] if copy else []),
        *(
            pull_lines(plan, name, replica="$DISTSPEC_REPLICA_ID")
            if plan and plan.runtime is Container.PODMAN
            else []
        ),
        *contained(plan, env, command, role=name, output='>> "$base.log" 2>&1 < /dev/null'),
        'echo "$?" > "$base.exit"',
    ]
    end = _heredoc_end(task)
    host = batch.rank0_host_word(opts.rank0_host, '"${hosts[0]}"')
    exits = f'"$DISTSPEC_JOB_DIR"/{name}-*.exit'
    out += [
        "nodefile=${PBS_NODEFILE:-$(generate_pbs_nodefile)}  # Slurm's PBS wrappers set none",
        "mapfile -t hosts < <(awk 'NF && !seen[$1]++ {print $1}' \"$nodefile\")"
        "  # the file repeats a host per slot",
        *(
            [
                "mapfile -t vnodes < <(awk 'NF && !seen[$1]++ {print NR - 1}' \"$nodefile\")"
                "  # pbsdsh -n"
            ]
            if pbsdsh
            else []
        ),
        f'(( ${{#hosts[@]}} >= {n} )) || {{ echo "distspec: {n} hosts needed, PBS gave '
        f'${{#hosts[@]}}: ${{hosts[*]}}{hint}" >&2; exit 1; }}',
        *copy,
        *(
            pull_lines(plan, name, replica="0")
            if plan and plan.runtime is not Container.PODMAN
            else []
        ),
        (
            "cat"
            if points is None and not copy
            # The job folder, the point's values and the copy's place first, as this
            # script has them.
            else "{ "
            + _printf_exports(
                [
                    *(["DISTSPEC_JOB_DIR", *_sweep_names(points)] if points is not None else []),
                    *(["DISTSPEC_ENV_LOCAL"] if copy else []),
                ]
            )
            + "; cat; }"
        )
        + f" > \"$DISTSPEC_JOB_DIR/task.sh\" << '{end}'  # run on each host: APP_ID RANK0_HOST WORKDIR"
        + (" ID" if pbsdsh else ""),
        *task,
        end,
        f'task=(/bin/bash "$DISTSPEC_JOB_DIR/task.sh" "{job_id}" {host} "$PWD")',
    ]
    if pbsdsh:
        out.append(
            # launchers= first: with -V a variable of that name in qsub's environment is here too.
            f'launchers=; for ((i = 0; i < {n}; i++)); do pbsdsh -n "${{vnodes[i]}}" -- "${{task[@]}}" "$i"'
            ' < /dev/null & launchers+=" $!"; done'
        )
    else:
        extra = "".join(" " + shell_word(a, {}) for a in opts.mpiexec_args)
        out.append(f'mpiexec -n {n}{extra} "${{task[@]}}" < /dev/null & launchers=$!')
    out += [
        f"while kill -0 $launchers 2> /dev/null && ! grep -qsvx 0 {exits}; do sleep 1 & wait -n; done",
        f"code=$(grep -hsvx 0 {exits} | head -n1)",
        f"[[ -n $code ]] || (( $(cat {exits} 2> /dev/null | wc -l) == {n} )) ||",
        '  { echo "distspec: a replica recorded no exit code" >&2; code=1; }',
        'exit "${code:-0}"',
    ]
    return out


def _printf_exports(names: Sequence[str]) -> str:
    """A printf that writes ``export NAME=value`` for each of ``names``, each value
    quoted for bash (``%q``) as this shell has it."""
    pairs = " ".join(f'{name} "${name}"' for name in names)
    return f"printf 'export %s=%q\\n' {pairs}"


def compile_script(
    app: AppDef,
    opts: PbsOptions,
    *,
    app_id: str,
    job_dir: str,
    after: Sequence[Dependency] = (),
    points: Points | None = None,
) -> str:
    """The qsub script for ``app``: pure text, the same for the same inputs.

    ``after``: the jobs it waits for (``#PBS -W depend=``, with the ``depend``
    option's own). ``points``: an array job (``-J``, Torque ``-t``), whose subjob k
    runs point ``points.first + k``: its values, exported as ``DISTSPEC_SWEEP_<name>``
    from line k + 1 of ``<job_dir>/<app_id>.points`` (which submit writes beside the
    script), fill each ``{{name}}`` in the role's command and env; its job folder is
    ``<job_dir>/<app_id>_k`` and its output ``<job_dir>/<app_id>_k.out``.
    """
    check_job_dir(job_dir)
    check_options(opts)
    if opts.workers is Workers.DIRECT:
        from distspec.schedulers.pbs.direct import direct_script

        return direct_script(app, opts, app_id=app_id, job_dir=job_dir, after=after, points=points)
    retries = _retries(app)
    role = app.roles[0]
    if points is not None:
        _check_points(role, points)
    n = role.num_replicas
    base = job_dir.rstrip("/") or "/"
    plan = container_plan(role, opts, base)
    stopped = containers_stopped(plan, role.name)
    folder = f"{base.rstrip('/')}/{app_id}"
    out_path = f"{folder}.out"
    launcher = "none (one node)" if n == 1 else f"{opts.launcher.value}"

    hint = _place_hint(opts)
    out = ["#!/bin/bash", *_directives(app, opts, out_path, after, points), *path_lines(opts)]
    if not retries:
        out += _plain_script(
            role, opts, app_id=app_id, folder=folder, out_path=out_path, points=points
        )
        return "\n".join(out) + "\n"
    out += [
        f"# Generated by distspec for app {app_id}: role {role.name}, {n} node(s), one",
        f"# process per node, launcher {launcher}. Submit by hand with:",
        f"#   qsub -j oe -o {out_path} {app_id}.pbs",
        "# (an explicit -o: some qsub front ends override #PBS -o with their own default).",
        "",
        "# Replica i of the role logs to $DISTSPEC_JOB_DIR/<role>-<i>.log.",
        *(
            ["export DISTSPEC_JOB_DIR=" + shell_word(folder, {})]
            if points is None
            else _array_head(points, opts, app_id=app_id, folder=folder)
        ),
        # A rerun (qrerun, a requeue) starts again here: the last run's end is not this one's.
        'mkdir -p -m 700 "$DISTSPEC_JOB_DIR" && rm -f "$DISTSPEC_JOB_DIR"/{exit,signal'
        + (",stop" if stopped else "")
        + "} || exit 1",
        *(_ARRAY_OUTPUT if points is not None else []),
        f"export DISTSPEC_APP_ID={'$PBS_JOBID' if points is None else '$distspec_id'}",
        "# PBS starts the script in $HOME: run where qsub ran (or in the role's image dir).",
        "export DISTSPEC_WORKDIR="
        + (shell_word(role.image, {}) if workdir_image(role, opts) else '"${PBS_O_WORKDIR:-$PWD}"'),
        *(["export PYTHONUNBUFFERED=1"] if opts.unbuffered else []),
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
    host = batch.rank0_host_word(opts.rank0_host, '"${distspec_hosts[0]}"')
    copy = envcopy.pbs_lines(
        opts,
        NAME,
        job_dir=base,
        nodes=n,
        vnodes="distspec_vnodes",
        mpiexec=None if opts.launcher is Launcher.PBSDSH else opts.mpiexec_args,
    )
    if copy:
        out += ["trap distspec_env_clean EXIT  # the attempts' traps below call it too", *copy]
    out += [
        "# The rendezvous host: the first host of the nodefile, where rank 0 runs.",
        f"export DISTSPEC_RANK0_HOST={host}",
        "",
        "# The role's command, run by every task: $DISTSPEC_REPLICA_ID is the task's own id.",
        *(
            pull_lines(plan, name=role.name, replica="0")
            if plan and plan.runtime is not Container.PODMAN
            else []
        ),
        batch.role_function(
            "distspec_role",
            role,
            _macro_values(role, points, opts),
            lambda env, command: [
                *(
                    pull_lines(plan, role.name, replica="$DISTSPEC_REPLICA_ID")
                    if plan and plan.runtime is Container.PODMAN
                    else []
                ),
                *contained(plan, env, command, role=role.name),
            ],
        ),
        _task(role, attempts=True),
        "# The task file every host runs (the spooled script is only on this host).",
        'export DISTSPEC_TASK="$DISTSPEC_JOB_DIR/task.sh"',
        "{",
        "  echo '#!/bin/bash'",
        "  printf 'export %s=%q\\n' DISTSPEC_JOB_DIR \"$DISTSPEC_JOB_DIR\" DISTSPEC_APP_ID "
        '"$DISTSPEC_APP_ID" \\',
        '    DISTSPEC_WORKDIR "$DISTSPEC_WORKDIR" DISTSPEC_RANK0_HOST "$DISTSPEC_RANK0_HOST"',
        *(["  " + _printf_exports(_sweep_names(points))] if points is not None else []),
        *(["  echo 'export PYTHONUNBUFFERED=1'"] if opts.unbuffered else []),
        *(
            ["  " + _printf_exports(["DISTSPEC_ENV_LOCAL"]), f"  echo '{envcopy.task_path_line()}'"]
            if copy
            else []
        ),
        "  declare -f distspec_role distspec_task",
        "  echo 'distspec_task \"$@\"'",
        '} > "$DISTSPEC_TASK" || exit 1',
        "",
    ]
    out += [
        batch.WAIT_FUNCTIONS,
        (
            _TRAPS.replace("/exit\"' EXIT", "/exit\"; distspec_env_clean' EXIT") if copy else _TRAPS
        ).replace(
            'trap \'echo "$?"',
            f'trap \'code=$?; {stopped}; echo "$code"' if stopped else 'trap \'echo "$?"',
        ),
        "# A failed attempt is retried max_retries times; each attempt clears the previous",
        "# attempt's exit codes. Launchers do not all return their tasks' codes: the .exit",
        "# files decide the script's exit code.",
    ]
    check = [
        *([f"  (( distspec_code == 0 )) || {{ {stopped}; }}"] if stopped else []),
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
    out += batch.attempt_loop(_launch_lines(role, opts), retries, check=check)
    return "\n".join(out) + "\n"
