"""The pure half of the Slurm backend: AppDef + options -> one sbatch script.

A single-role app is a plain job (``--nodes=N``, or ``--nodes=MIN-MAX`` when
elastic); several roles make a heterogeneous job, one component per role, started
as one srun step per role with one task per node. Every replica's command runs in
a ``bash -c`` of its own, so ``${replica_id}`` (``$SLURM_NODEID``) is the task's
own value, not the batch step's. The script's size does not depend on the node
count. The job folder it writes is described in :mod:`distspec.schedulers.batch`.

The common case, one role without retries, is one srun in the foreground, written
as a person would; the machinery to run several steps at once, stop the others
when one fails and retry (``distspec_wait`` and the attempt loop) is emitted only
for the jobs that need it.

Nothing here runs a command or reads the environment.
"""

from __future__ import annotations

import re
from functools import partial

from distspec.errors import CompileError
from distspec.schedulers.batch import container, envcopy
from distspec.schedulers.batch import script as batch
from distspec.schedulers.batch.container import Container, ContainerPlan
from distspec.schedulers.batch.direct import Workers
from distspec.schedulers.logs import log_file_name
from distspec.schedulers.shell import MacroValues, ShellExpr, shell_join, shell_word
from distspec.schedulers.slurm import nodes
from distspec.schedulers.slurm.options import (
    NAME,
    GpuFlag,
    SlurmOptions,
    check_job_dir,
    check_options,
    requeue_signal,
)
from distspec.specs.app import NAME_CHARS, AppDef, RetryPolicy, Role, is_name
from distspec.specs.macros import Macro
from distspec.torchrun import DEFAULT_RDZV_PORT, RDZV_PORT_SPAN
from distspec.torchrun_output import worker_exec_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from distspec.schedulers.api import Dependency, Points

__all__ = ["DEPENDENCY_KINDS", "check_job_id", "compile_script", "sbatch_value"]

# Patterns are strings compiled on first use (re caches them).
_GRES = r"^[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)?$"
#: Characters an #SBATCH value may have without quotes.
_PLAIN = NAME_CHARS + ",:@%/+="


def _bad(message: str) -> CompileError:
    return CompileError(NAME, message)


#: A job id as sbatch, squeue, sacct and scancel take it: ``1234``, or ``1234_7`` for
#: task 7 of the job array 1234.
_JOB_ID = r"[0-9]+(_[0-9]+)?"

#: ``run --after`` condition -> Slurm's dependency type.
DEPENDENCY_KINDS = {"ok": "afterok", "any": "afterany", "failed": "afternotok"}


def check_job_id(app_id: str) -> bool:
    """Whether ``app_id`` has the form of a Slurm job id (``1234``) or array task
    (``1234_7``)."""
    return re.fullmatch(_JOB_ID, app_id) is not None


def _dependency(after: Sequence[Dependency]) -> list[str]:
    """``--dependency=afterok:12:13,afterany:14`` (every one must hold: ``,``) and
    ``--kill-on-invalid-dep=yes``, so that a job whose dependency can never be met is
    cancelled rather than left pending forever. Empty without ``after``."""
    if not after:
        return []
    kinds: dict[str, list[str]] = {}
    for dep in after:
        if dep.condition not in DEPENDENCY_KINDS:
            raise _bad(
                f"--after {dep.app_id}:{dep.condition}: the condition is one of "
                f"{', '.join(DEPENDENCY_KINDS)}"
            )
        if not check_job_id(dep.app_id):
            raise _bad(f"--after {dep.app_id!r}: a Slurm job id is digits (1234, or 1234_7)")
        ids = kinds.setdefault(DEPENDENCY_KINDS[dep.condition], [])
        if dep.app_id not in ids:
            ids.append(dep.app_id)
    spec = ",".join(":".join([kind, *ids]) for kind, ids in kinds.items())
    return [f"--dependency={spec}", "--kill-on-invalid-dep=yes"]


def _array(points: Points | None) -> list[str]:
    """``--array=0-(n-1)``, with ``%K`` to run at most K tasks at once."""
    if points is None:
        return []
    n = len(points.values)
    limit = f"%{points.max_parallel}" if points.max_parallel else ""
    if points.max_parallel is not None and points.max_parallel < 1:
        raise _bad(f"max_parallel={points.max_parallel}: expected a positive number")
    return [f"--array=0-{n - 1}{limit}"]


def sbatch_value(text: str) -> str:
    """``text`` quoted for an ``#SBATCH`` line, which sbatch splits itself (not bash).

    sbatch drops double and single quotes and keeps what is between them (no
    backslash escapes), so each run of non-``"`` characters goes in double quotes
    and each ``"`` in single quotes. A line break cannot be expressed at all.
    """
    if any(c in text for c in "\n\r\x00"):
        raise _bad(f"{text!r}: an #SBATCH value cannot contain a line break")
    if text and not text.strip(_PLAIN):
        return text
    parts = re.split(r'(")', text)
    return "".join("'\"'" if p == '"' else f'"{p}"' for p in parts if p) or '""'


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
    cpus = batch.cpus_per_node(role)
    if cpus:
        flags.append(f"--cpus-per-task={cpus}")
    if opts.mem and res.mem_mb:
        flags.append(f"--mem={res.mem_mb}")
    gres = []
    if res.gpu:
        if opts.gpu_flag is GpuFlag.GRES:
            gres.append(f"gpu:{res.gpu}")
        else:
            flags.append(f"--gpus-per-node={res.gpu}")
    for name, count in sorted(res.devices.items()):
        if not re.compile(_GRES).fullmatch(name):
            raise _bad(f"role {role.name!r}: device {name!r} is not a Slurm gres name")
        gres.append(f"{name}:{count}")
    if gres:
        flags.append(f"--gres={','.join(gres)}")
    return flags


def _job_flags(
    app: AppDef,
    opts: SlurmOptions,
    job_dir: str,
    after: Sequence[Dependency] = (),
    points: Points | None = None,
) -> list[str]:
    # An array task's output: %A the array's job id, %a the task's index.
    output = "%A_%a" if points is not None else "%j"
    flags = [
        f"--job-name={app.name}",
        *_array(points),
        f"--output={job_dir}/{app.name}-{output}.out",
        # Appending keeps earlier attempts' output when the job is requeued.
        "--open-mode=append",
        *_dependency(after),
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
    if opts.spares:
        # A dead node leaves the job running on the others (its step still fails).
        flags.append("--no-kill")
    if opts.requeue:
        signal = requeue_signal(opts)
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
    ) + batch.task_function(
        base='"$DISTSPEC_JOB_DIR/$1-$SLURM_NODEID"',
        host='echo "${SLURMD_NODENAME:-$HOSTNAME}"',
        run=['"$2"'],
    )


_REQUEUE = """\
# Slurm sends SIG{signal} {secs} s before the time limit (--signal=B:...). The trap does not
# requeue at once: it raises the pre-emption flag ($DISTSPEC_JOB_DIR/preempt, which
# distspec.runtime's `preempted` reads) so that the job can save a checkpoint and exit,
# and writes why the next attempt runs (restart_reason). The job is requeued when its
# step has ended, or after {grace} s if it has not (half of requeue_before: Slurm's signal
# may come up to a minute late). It then starts again from the top with the same job id.
distspec_preempt=
distspec_requeue() {{
  [[ -n $distspec_preempt ]] && return
  distspec_preempt=1
  echo "distspec: SIG{signal} before the time limit: job $SLURM_JOB_ID may save and stop; requeueing it when its step ends, at the latest in {grace} s" >&2
  echo time-limit > "$DISTSPEC_JOB_DIR/restart_reason"
  touch "$DISTSPEC_JOB_DIR/preempt"
  ( trap 'kill $! 2> /dev/null; exit 0' TERM; sleep {grace} > /dev/null 2>&1 & wait $!; distspec_requeue_now ) &
  distspec_timer=$!
}}
distspec_requeue_now() {{
  echo "distspec: requeueing job $SLURM_JOB_ID" >&2
  echo $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) > "$DISTSPEC_JOB_DIR/requeues"
  scontrol requeue "$SLURM_JOB_ID"
}}
# After the step: true once the flag was raised, and then the job is requeued, unless the
# step exited 0 without any rank having seen the flag (no preempt.seen): it finished first.
distspec_requeued() {{
  [[ -n $distspec_preempt ]] || return 1
  kill "$distspec_timer" 2> /dev/null
  if (( distspec_code == 0 )) && [[ ! -e "$DISTSPEC_JOB_DIR/preempt.seen" ]]; then
    echo "distspec: job $SLURM_JOB_ID finished before it saw SIG{signal}: not requeueing it" >&2
    return 1
  fi
  distspec_requeue_now
}}
trap distspec_requeue {signal}
# A requeue this trap did not ask for (a node failure, pre-emption by another job, scontrol
# requeue): no reason is known. The last run's flag is cleared.
if [[ ! -e "$DISTSPEC_JOB_DIR/preempt" ]] && (( ${{SLURM_RESTART_COUNT:-0}} > 0 )); then
  echo unknown > "$DISTSPEC_JOB_DIR/restart_reason"
fi
rm -f "$DISTSPEC_JOB_DIR/preempt" "$DISTSPEC_JOB_DIR/preempt.seen"
"""


def _requeue(signal: str, before: int) -> str:
    """The requeue trap and the functions the step's end calls (:data:`_REQUEUE`)."""
    return _REQUEUE.format(signal=signal, secs=before, grace=before // 2)


#: An array task's own id, as squeue and scancel name it: ``1234_7``.
_TASK_ID = "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"


def _macro_values(
    role: Role, points: Points | None = None, opts: SlurmOptions | None = None
) -> MacroValues:
    # In a container the image is no directory: the job runs where sbatch ran.
    directory = opts is None or opts.container is Container.NONE
    return {
        # An array task is known by its task id (1234_7): that is its handle's app id.
        Macro.APP_ID: ShellExpr(_TASK_ID if points is not None else "$SLURM_JOB_ID"),
        Macro.REPLICA_ID: ShellExpr("$SLURM_NODEID"),
        # Inside a step this is the step's (for a hetjob: the component's) node count; with
        # spares the allocation is larger than the step, and srun leaves the job's count.
        Macro.NUM_REPLICAS: ShellExpr(
            "$SLURM_STEP_NUM_NODES" if opts is not None and opts.spares else "$SLURM_JOB_NUM_NODES"
        ),
        Macro.RANK0_HOST: ShellExpr("$DISTSPEC_RANK0_HOST"),
        # The job's own port (job_rdzv_port): jobs sharing a first node do not meet.
        Macro.RDZV_PORT: ShellExpr(f"$(({DEFAULT_RDZV_PORT} + SLURM_JOB_ID % {RDZV_PORT_SPAN}))"),
        Macro.IMG_ROOT: role.image if role.image and directory else ShellExpr("$SLURM_SUBMIT_DIR"),
        **batch.sweep_values(points),
    }


def _srun_step(
    flags: Sequence[str],
    log: str,
    task: Sequence[str],
    *,
    requeue: bool,
    after: Sequence[str] = (),
) -> list[str]:
    """The one srun step of a single-role job: ``flags``, each task's output to ``log``
    (a shell word in the job folder), ``task``'s lines as one ``bash -c`` word. With
    ``requeue`` it runs in the background, and the script waits for it across the
    requeue trap (a trapped signal ends ``wait`` early), requeues the job if the trap
    ran (``distspec_requeued``) and exits with its code.
    ``after``: lines run once the step has ended, before the script exits with its
    code."""
    # The task body is one single-quoted word: its own quotes survive unchanged.
    body = _single_quoted("\n".join(task) + "\n")
    out = [
        f"srun {' '.join(flags)} \\",
        f'  --output="$DISTSPEC_JOB_DIR"/{log} bash -c {body[:-1]}' + ("' &" if requeue else "'"),
    ]
    if requeue:
        out += [
            "# wait returns early when the trap has run: wait again while srun runs.",
            "distspec_srun=$!",
            "while :; do",
            '  wait "$distspec_srun"',
            "  distspec_code=$?",
            '  kill -0 "$distspec_srun" 2> /dev/null || break',
            "done",
            *after,
            "# After the requeue signal: requeue now (see distspec_requeued).",
            "distspec_requeued",
            'exit "$distspec_code"',
        ]
    elif after:
        out += ["distspec_code=$?", *after, 'exit "$distspec_code"']
    return out


def _job_folder(base: str, app: AppDef, points: Points | None) -> str:
    """``export DISTSPEC_JOB_DIR=<job_dir>/<app>-<job id>`` (an array task's: ``1234_7``)."""
    folder = shell_word(f"{base}/{app.name}-", {})
    return f'export DISTSPEC_JOB_DIR={folder}"{_TASK_ID if points else "$SLURM_JOB_ID"}"'


def _point_lines(points: Points | None, job_dir: str, app_id: str) -> list[str]:
    """An array task's point, exported before any srun (see :func:`batch.point_exports`)."""
    if points is None:
        return []
    return batch.point_exports(f"{job_dir}/{app_id}.points", "SLURM_ARRAY_TASK_ID")


def _srun_flags(index: int, role: Role, opts: SlurmOptions, het: bool, job_dir: str) -> list[str]:
    """The flags of the role's srun step, up to (not including) ``--output``; with
    pyxis or oci, those that run its tasks in the container."""
    flags = []
    if het:
        flags.append(f"--het-group={index}")
    flags.append("--ntasks-per-node=1")
    # srun 22.05+ no longer inherits --cpus-per-task from the job: pass it again, or each
    # task is confined to one CPU where task affinity is enforced.
    cpus = batch.cpus_per_node(role)
    if cpus:
        flags.append(f"--cpus-per-task={cpus}")
    flags.append(f"--kill-on-bad-exit={1 if opts.kill_on_bad_exit else 0}")
    if opts.unbuffered:
        flags.append("--unbuffered")
    flags.append("--open-mode=append")
    if role.image and opts.container is Container.NONE:
        flags.append("--chdir=" + shell_word(role.image, {}))
    flags += [shell_word(f, {}) for f in opts.srun_args]
    plan = container_plan(role, opts, job_dir)
    if plan is not None and plan.runtime in container.SLURM_ONLY:
        flags += container.srun_flags(plan)
    return flags


def _srun_line(index: int, role: Role, opts: SlurmOptions, het: bool, job_dir: str) -> str:
    """The role's step, started in the background (its pid joins ``distspec_pids``). The
    role name reaches the task as ``$1`` of its ``bash -c``, whose functions come from
    ``declare -f`` in this shell."""
    flags = _srun_flags(index, role, opts, het, job_dir)
    if opts.spares:
        # The nodes this attempt chose (nodes.spare_pick), not the whole allocation,
        # and one task each: srun would take the job's SLURM_NTASKS (one per node of it).
        n = role.num_replicas
        flags += [f"--nodes={n}", f"--ntasks={n}", '--nodelist="$distspec_step_nodes"']
        # A step that lost a node stays RUNNING in slurmctld, holding its other nodes'
        # CPUs, when its tasks there ended before the node was found dead (scancel does
        # not end it): without --overlap the next step waits for it ("Requested nodes
        # are busy"), seen for minutes on Slurm 22.05.
        flags.append("--overlap")
    log = shell_word(log_file_name(role.name, "%t"), {})
    func = f"distspec_role_{index}"
    return (
        f'  srun {" ".join(flags)} --output="$DISTSPEC_JOB_DIR"/{log} \\\n'
        f'    bash -c "$(declare -f distspec_task {func})"\'; distspec_task "$1" {func}\' '
        f"distspec-task {shell_word(role.name, {})} < /dev/null &\n"
        "  distspec_pids+=($!)"
    )


def _nodes(role: Role) -> str:
    return f"{role.min_replicas}-{role.num_replicas}" if role.elastic else str(role.num_replicas)


def check_spares(app: AppDef, opts: SlurmOptions) -> None:
    """Raise CompileError for a job that cannot keep ``spares``: only one role with a
    fixed node count, started by torchrun or its command (the attempt loop), without
    container=oci or env_to_local, which are set up for the allocation's nodes."""
    if not opts.spares:
        return
    what = f"spares={opts.spares}"
    if opts.workers is Workers.DIRECT:
        raise _bad(
            f"{what}: workers=direct has no attempt loop to run the step again on spare "
            "nodes; use workers=torchrun (the default)"
        )
    if len(app.roles) > 1:
        raise _bad(
            f"{what}: app {app.name!r} has {len(app.roles)} roles (a heterogeneous job); "
            "spare nodes are for a job of one role"
        )
    role = app.roles[0]
    if role.elastic:
        raise _bad(
            f"{what}: role {role.name!r} is elastic ({_nodes(role)} nodes); spare nodes need "
            "a fixed node count (-j NxM)"
        )
    if opts.container is Container.OCI:
        raise _bad(
            f"{what}: container=oci finds each task's node index among the allocation's "
            "nodes, not the step's; use container=pyxis, podman or apptainer"
        )
    if opts.env_to_local is not None:
        raise _bad(
            f"{what}: env_to_local keeps a step on every node of the allocation, which a "
            "dead node ends; leave env_to_local unset"
        )


def _single_quoted(text: str) -> str:
    r"""``text`` inside single quotes (each ``'`` written as ``'\''``)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _plain_body(
    app: AppDef, opts: SlurmOptions, *, app_id: str, job_dir: str, points: Points | None
) -> list[str]:
    """The script after the #SBATCH lines for one role without retries: one srun in the
    foreground (in the background with ``requeue``, whose trap bash runs only between
    commands), each task writing its ``.host`` and ``.exit`` files itself."""
    role = app.roles[0]
    values = _macro_values(role, points, opts)
    name = role.name  # NAME_CHARS only: a plain word in the shell
    plan = container_plan(role, opts, job_dir)
    command = shell_join([role.entrypoint, *role.args], values)
    env = batch.env_exports(role, values)
    task = [
        "",
        *(f"  {line}" for line in _oci_node_id(plan)),
        f"  base=$DISTSPEC_JOB_DIR/{name}-$SLURM_NODEID",
        "  " + batch.STAY,
        "  " + batch.START,  # no single quote in it: the body is one single-quoted word
        '  echo "${SLURMD_NODENAME:-$HOSTNAME}" > "$base.host"',
        *(
            f"  {line}"
            for line in contained(plan, env, command, replica="$SLURM_NODEID", role=name)
        ),
        "  code=$?",
        '  echo "$code" > "$base.exit"',
        '  exit "$code"',
    ]
    about = [
        f"# Role {name}, {_nodes(role)} node(s), one task each: task i logs to {name}-i.log in the",
        "# job folder and writes its node and exit code beside it (.host, .exit; Slurm keeps one",
        "# exit code per step). A requeued job starts again from the top: clear the old ones.",
    ]
    out = prologue(
        app,
        opts,
        app_id=app_id,
        job_dir=job_dir,
        points=points,
        about=about,
        host_is="The rendezvous host",
        files=oci_nodes(plan),
    )
    log = shell_word(log_file_name(name, "%t"), {})
    flags = _srun_flags(0, role, opts, het=False, job_dir=job_dir)
    out += nodes.prologue_lines(opts)
    out += pull_step(role, plan, replica="SLURM_NODEID")
    after = [*nodes.after_step(opts), *leftovers(role, plan)]
    out += _srun_step(flags, log, task, requeue=opts.requeue, after=after)
    return out


# -- containers (-cfg container=...) ----------------------------------------------------


def container_plan(role: Role, opts: SlurmOptions, job_dir: str) -> ContainerPlan | None:
    """The role's container (:mod:`distspec.schedulers.batch.container`), or None."""
    return container.plan(
        role,
        runtime=opts.container,
        scheduler=NAME,
        job_base=job_dir,
        workdir='"$PWD"',
        launcher_env="SLURM_*",
        env=opts.container_env,
        path=opts.container_path,
        args=opts.container_args,
        pull=opts.pull,
    )


def container_name(role: str, replica: str) -> str:
    """A podman container's name, unique per job (its folder's name), role and replica."""
    return f'distspec-"${{DISTSPEC_JOB_DIR##*/}}"-{role}-"{replica}"'


def contained(
    plan: ContainerPlan | None,
    env: list[str],
    command: str,
    *,
    replica: str,
    role: str,
    output: str = "",
) -> list[str]:
    """A task's lines from its ``export`` lines to its command, the command run in the
    role's container: podman and apptainer wrap it; under pyxis and oci the task is in
    the container already (only PATH is set). Without a container, ``env`` and
    ``command`` as they are. distspec's worker Python (:func:`worker_exec_line`) is a
    host path: in a container torchrun starts the image's own Python."""
    if plan is None:
        return [*env, command + (f" {output}" if output else "")]
    env = [line for line in env if line != worker_exec_line()]
    if plan.runtime in container.SLURM_ONLY:
        path = [f"export PATH={plan.path}"] if plan.path else []
        return [*env, *path, command + (f" {output}" if output else "")]
    name = container_name(role, replica)
    return [*env, *container.run_lines(plan, command, name=name, exported=env, output=output)]


def leftovers(role: Role, plan: ContainerPlan | None) -> list[str]:
    """After a podman role's step: a step that removes the containers of its tasks on
    every node. A task's trap removes its container on SIGTERM, but a task killed
    outright (the step's SIGKILL after a failed peer) leaves it running under conmon."""
    if plan is None or plan.runtime is not Container.PODMAN:
        return []
    prefix = f"^distspec-${{DISTSPEC_JOB_DIR##*/}}-{role.name}-"
    return [
        "# Remove what a task killed outright left running (podman's conmon is not in the step).",
        "srun --ntasks-per-node=1 --kill-on-bad-exit=0 --output=/dev/null bash -c "
        f"'podman ps -aq --filter name=\"{prefix}\" | xargs -r podman rm -f -t 0 > /dev/null 2>&1'",
    ]


def oci_nodes(plan: ContainerPlan | None) -> list[str]:
    """Batch-script lines for ``container=oci``: the allocation's hosts, from which a
    task finds its node index (srun --container sets no SLURM_NODEID)."""
    if plan is None or plan.runtime is not Container.OCI:
        return []
    return [
        "# container=oci: srun --container gives the tasks the batch script's SLURM_NODEID,",
        "# SLURM_PROCID and SLURM_LOCALID (node 0's); each finds its node index from these hosts.",
        'export DISTSPEC_NODES="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr "\\n" " ")"',
    ]


def _oci_node_id(plan: ContainerPlan | None) -> list[str]:
    """A task's first lines under oci: ``SLURM_NODEID`` from its host's place in
    ``$DISTSPEC_NODES`` (node names that are not the hosts' names fail here), and the
    one task per node's ``SLURM_PROCID`` and ``SLURM_LOCALID`` from it. The task has
    the batch script's environment, whose ``SLURM_NODEID``/``SLURM_PROCID`` are node
    0's: every node would be node 0 (and Lightning reads ``SLURM_PROCID``). The host's
    name is ``uname -n``'s: ``$HOSTNAME`` may be the submitting machine's, passed on
    in the environment."""
    if plan is None or plan.runtime is not Container.OCI:
        return []
    return [
        'SLURM_NODEID=; i=0; me=$(uname -n); for h in $DISTSPEC_NODES; do [[ $h == "${me%%.*}" ]] '
        "&& SLURM_NODEID=$i; i=$((i + 1)); done",
        '[[ -n $SLURM_NODEID ]] || { echo "distspec: container=oci: $me is not '
        'among the nodes $DISTSPEC_NODES" >&2; exit 1; }',
        "export SLURM_NODEID SLURM_PROCID=$SLURM_NODEID SLURM_LOCALID=0",
    ]


def pull_step(
    role: Role,
    plan: ContainerPlan | None,
    *,
    replica: str,
    het_group: int | None = None,
) -> list[str]:
    """With ``pull=true``, the step before the job's that pulls the role's image: podman
    on every node (one task each), apptainer and pyxis once into the job folder. A node
    whose pull fails writes its replica's ``.exit`` and ``.reason`` and the script ends
    there. ``replica``: the replica a node's failure is recorded for (a shell
    expression of ``$SLURM_NODEID``)."""
    if plan is None or not plan.source:
        return []
    base = f'"$DISTSPEC_JOB_DIR/{role.name}-$(({replica}))'
    lines = container.pull_lines(
        plan,
        host="${SLURMD_NODENAME:-$HOSTNAME}",
        reason_file=base + '.reason"',
        exit_file=base + '.exit"',
        log=f'"$DISTSPEC_JOB_DIR/{role.name}-$SLURM_NODEID.pull"',
    )
    each = plan.runtime is Container.PODMAN
    where = "on every node (one task each)" if each else "once, into the job folder"
    flags = [
        *([f"--het-group={het_group}"] if het_group is not None else []),
        "--ntasks-per-node=1" if each else "--nodes=1 --ntasks=1",
        "--kill-on-bad-exit=0",
        "--output=/dev/null",
    ]
    body = _single_quoted("\n" + "".join(f"  {line}\n" for line in lines))
    return [
        f"# pull=true: pull the image {where}, before the job's step. A failed",
        "# pull ends the job here, with the cause in its replica's .reason file.",
        'rm -f "$DISTSPEC_JOB_DIR"/*.reason',
        f"srun {' '.join(flags)} bash -c {body} || exit $?",
    ]


def prologue(
    app: AppDef,
    opts: SlurmOptions,
    *,
    app_id: str,
    job_dir: str,
    points: Points | None,
    about: Sequence[str],
    host_is: str,
    files: Sequence[str] = (),
) -> list[str]:
    """The lines of a single-role script between its ``#SBATCH`` lines and its srun
    step: the comment (``about`` says what the step does), the job folder (``files``
    are more lines that write into it), ``PYTHONUNBUFFERED``, ``DISTSPEC_RANK0_HOST``
    (``host_is`` names its use), ``env_to_local``'s lines and the requeue trap."""
    host = batch.rank0_host_word(
        opts.rank0_host, '"$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"'
    )
    out = [
        f"# Generated by distspec for app {app_id}; submit by hand with: sbatch {app_id}.sbatch",
        *_array_comment(points, app_id),
        *about,
        _job_folder(job_dir, app, points),
        'mkdir -p -m 700 "$DISTSPEC_JOB_DIR" || exit 1',
        'rm -f "$DISTSPEC_JOB_DIR"/*.{exit,host,start}',
        'echo "${SLURM_RESTART_COUNT:-0}" > "$DISTSPEC_JOB_DIR/requeues"',
        *files,
        *_point_lines(points, job_dir, app_id),
    ]
    if opts.unbuffered:
        out.append("export PYTHONUNBUFFERED=1")
    out += [
        f"# {host_is}: the first node of the allocation.",
        f"export DISTSPEC_RANK0_HOST={host}",
        "",
    ]
    out += envcopy.slurm_lines(opts, NAME, job_dir=job_dir, roles=len(app.roles))
    if opts.requeue:
        signal = requeue_signal(opts)
        out.append(_requeue(signal, opts.requeue_before))
    return out


def _array_comment(points: Points | None, app_id: str) -> list[str]:
    if points is None:
        return []
    return [
        f"# A job array of {len(points.values)} sweep points (task k runs point "
        f"{points.first} + k), with {app_id}.points beside this script."
    ]


def compile_script(
    app: AppDef,
    opts: SlurmOptions,
    *,
    app_id: str,
    job_dir: str,
    after: Sequence[Dependency] = (),
    points: Points | None = None,
) -> str:
    """The sbatch script for ``app``: pure text, the same for the same inputs.

    ``after``: the jobs it waits for (``--dependency``). ``points``: a job array, task
    ``k`` of which runs point ``k`` with each ``{{name}}`` in the roles' args and env
    read from ``$DISTSPEC_SWEEP_<name>``, exported from line ``k + 1`` of
    ``<job_dir>/<app_id>.points`` (written beside the script by submit); each task has
    its own job folder ``<app>-<array job id>_<task>``.
    """
    if not is_name(app.name) or len(app.name) > 200:
        raise _bad(f"app name {app.name!r} is not a valid Slurm job name")
    check_job_dir(job_dir)
    check_options(opts)
    if after and any(re.match(r"--dependency(=|$)", f) for f in opts.sbatch_args):
        raise _bad("sbatch_args --dependency and --after both set: give the dependency once")
    check_spares(app, opts)
    if opts.workers is Workers.DIRECT:
        from distspec.schedulers.slurm.direct import direct_script

        return direct_script(
            app, opts, app_id=app_id, job_dir=job_dir.rstrip("/"), after=after, points=points
        )
    retries = _retries(app)
    het = len(app.roles) > 1
    if het and points is not None:
        raise _bad(
            f"app {app.name!r} has {len(app.roles)} roles (a heterogeneous job), and Slurm "
            "runs no job arrays of heterogeneous jobs: submit one job per sweep point"
        )
    base = job_dir.rstrip("/")

    out = ["#!/bin/bash"]
    for index, role in enumerate(app.roles):
        if index == 0:
            # Job-wide flags go in the first component; a hetjob propagates them.
            out += [_directive(f) for f in _job_flags(app, opts, base, after, points)]
        else:
            out.append("#SBATCH hetjob")
        out.append(
            f"#SBATCH --nodes={_nodes(role) if het or not opts.spares else role.num_replicas + opts.spares}"
        )
        out += [_directive(f) for f in _resources(role, opts)]
    if not het and not retries and not opts.spares:
        out += _plain_body(app, opts, app_id=app_id, job_dir=base, points=points)
        return "\n".join(out) + "\n"
    kind = "heterogeneous job, one component per role" if het else "one role"
    out += [
        f"# Generated by distspec for app {app_id} ({kind}). Submit by hand with:",
        f"#   sbatch {app_id}.sbatch",
        *_array_comment(points, app_id),
        *(f"# role {role.name}: {_nodes(role)} node(s), one task per node" for role in app.roles),
        *([f"# and {opts.spares} spare node(s): see distspec_pick_nodes"] if opts.spares else []),
        "",
        "# Replica i of a role logs to $DISTSPEC_JOB_DIR/<role>-<i>.log.",
        _job_folder(base, app, points),
        'mkdir -p -m 700 "$DISTSPEC_JOB_DIR" || exit 1',
        'echo "${SLURM_RESTART_COUNT:-0}" > "$DISTSPEC_JOB_DIR/requeues"',
        *_point_lines(points, base, app_id),
    ]
    if opts.unbuffered:
        out.append("export PYTHONUNBUFFERED=1")
    nodelist = (
        '"${SLURM_JOB_NODELIST_HET_GROUP_0:-$SLURM_JOB_NODELIST}"'
        if het
        else '"$SLURM_JOB_NODELIST"'
    )
    host = batch.rank0_host_word(opts.rank0_host, '"$distspec_host"')
    if not opts.spares:
        out += [
            "# The rendezvous host: the first node of the (first role's) allocation.",
            f"distspec_host=$(scontrol show hostnames {nodelist} | head -n1)",
            f"export DISTSPEC_RANK0_HOST={host}",
        ]
    out += [
        "",
        "# Each role's command, run by every task of its step: $SLURM_NODEID is the",
        "# task's own node index there.",
    ]
    plans = [container_plan(role, opts, base) for role in app.roles]
    if any(p is not None and p.runtime is Container.OCI for p in plans):
        raise _bad(
            "container=oci runs one role without retries (srun --container sets no "
            "SLURM_NODEID, which the retry loop's tasks need)"
        )
    out += [
        batch.role_function(
            f"distspec_role_{index}",
            role,
            _macro_values(role, points, opts),
            partial(contained, plan, replica="$SLURM_NODEID", role=role.name),
        )
        for index, (role, plan) in enumerate(zip(app.roles, plans, strict=True))
    ]
    out += [_task(), batch.WAIT_FUNCTIONS]
    out += envcopy.slurm_lines(opts, NAME, job_dir=base, roles=len(app.roles))
    if opts.requeue:
        signal = requeue_signal(opts)
        out.append(_requeue(signal, opts.requeue_before))
    out += nodes.prologue_lines(opts, nodes=app.roles[0].num_replicas)
    for index, (role, plan) in enumerate(zip(app.roles, plans, strict=True)):
        out += pull_step(role, plan, replica="SLURM_NODEID", het_group=index if het else None)
    out += nodes.spare_guard(opts)
    out += [
        "# One srun step per role. A failed attempt is retried max_retries times;",
        "# each attempt clears the previous attempt's exit codes.",
    ]
    steps = [_srun_line(index, role, opts, het, base) for index, role in enumerate(app.roles)]
    # After the requeue signal: requeue rather than retry (see distspec_requeued).
    check = ["  distspec_requeued && break"] if opts.requeue else []
    pick = nodes.spare_pick(opts, nodes=app.roles[0].num_replicas, host=host)
    check += [*nodes.spare_check(opts), *nodes.after_attempt(opts)]
    # A run on spare nodes is an attempt, not a retry (distspec_spared).
    spent = "distspec_attempt - distspec_spared" if opts.spares else "distspec_attempt"
    out += batch.attempt_loop([*pick, *steps], retries, check=check, spent=spent)
    return "\n".join(out) + "\n"
