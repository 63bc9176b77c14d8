"""The PBS script of a direct launch (``-cfg workers=direct``): one
``mpiexec -n N*M -ppn M``, every MPI rank a torchrun worker
(see :mod:`distspec.schedulers.batch.direct`).

Direct launch always uses ``mpiexec`` (the ``launcher`` option is then unused:
``pbsdsh`` starts one task per host) with ``--ppn M`` (MPICH/Hydra, Intel MPI, Cray
PALS); ``mpiexec_args`` add site flags, less their own ``--ppn``. Rank ``r`` logs to
``<role>-r.log`` in the job folder and writes ``.host`` and ``.exit`` beside it;
``ranks`` holds their number. Sweeps (job arrays) and retries are refused.

Nothing here runs a command or reads the environment.
"""

from __future__ import annotations

from distspec.errors import CompileError
from distspec.schedulers.batch import direct, envcopy
from distspec.schedulers.batch import script as batch
from distspec.schedulers.batch.container import Container
from distspec.schedulers.pbs import script as pbs
from distspec.schedulers.pbs.options import NAME, PbsOptions
from distspec.schedulers.shell import shell_join, shell_word
from distspec.torchrun_output import worker_exec_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from distspec.schedulers.api import Dependency, Points
    from distspec.schedulers.batch.container import ContainerPlan
    from distspec.schedulers.shell import MacroValues
    from distspec.specs.app import AppDef, Role

__all__ = ["direct_script"]


def _run(
    plan: ContainerPlan | None,
    role: Role,
    worker: direct.DirectWorker,
    values: MacroValues,
    program: list[str],
    own_port: bool,
) -> list[str]:
    """A rank's lines from its exports to its ``.exit`` file, its output prefixed with
    its rank into its log; in the role's container with podman or apptainer."""
    env = [line for line in batch.env_exports(role, values) if line != worker_exec_line()]
    env.append(
        "export MASTER_ADDR="
        + shell_word(worker.master_addr, values)
        + ("" if own_port else " MASTER_PORT=" + shell_word(worker.master_port, values))
    )
    command = f"{program[0]} {shell_join([*program[1:], *worker.argv], values)}"
    pipe = direct.rank_prefix_pipe("$DISTSPEC_REPLICA_ID")
    if plan is None:
        return [
            *env,
            command + " " + pipe.replace("2>&1 |", "2>&1 < /dev/null |") + ' >> "$base.log" 2>&1',
            'echo "${PIPESTATUS[0]}" > "$base.exit"',
        ]
    # The prefix through a process substitution, so that `$?` is the runtime's own
    # code (podman runs in the background, see container.run_lines).
    prefix = pipe.partition("| ")[2]
    output = f'> >({prefix} >> "$base.log" 2>&1) 2>&1 < /dev/null'
    return [
        *pbs.contained(plan, env, command, role=role.name, output=output),
        'echo "$?" > "$base.exit"',
    ]


#: The rank of an mpiexec task: MPICH/Intel MPI, Cray PALS, Open MPI, PMIx.
_RANK = (
    "${PMI_RANK:-${PALS_RANKID:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:?the launcher set no rank}}}}"
)


def _without_ppn(args: Sequence[str]) -> list[str]:
    """``mpiexec_args`` without their processes-per-host flag (``--ppn 1`` by default):
    direct launch places M per host itself."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--ppn", "-ppn"):
            skip = True
        elif not arg.startswith(("--ppn=", "-ppn=")):
            out.append(arg)
    return out


def direct_script(
    app: AppDef,
    opts: PbsOptions,
    *,
    app_id: str,
    job_dir: str,
    after: Sequence[Dependency] = (),
    points: Points | None = None,
) -> str:
    """The qsub script that runs ``app``'s torchrun role without torchrun.

    Raises:
        CompileError: what direct launch cannot honour (:func:`direct.direct_worker`),
            or a sweep (job array).
    """
    worker = direct.direct_worker(app, NAME)
    if points is not None:
        raise CompileError(NAME, "workers=direct: job arrays (sweeps) are not supported on PBS")
    role = app.roles[0]
    name = role.name  # NAME_CHARS only: a plain word in the shell
    n, nproc, ranks = worker.nodes, worker.nproc_per_node, worker.ranks
    base = job_dir.rstrip("/") or "/"
    folder = f"{base.rstrip('/')}/{app_id}"
    out_path = f"{folder}.out"
    values = pbs._macro_values(role, opts=opts)
    plan = pbs.container_plan(role, opts, base)
    if plan is not None and plan.source and plan.runtime is Container.PODMAN:
        raise CompileError(
            NAME,
            "workers=direct: pull=true with podman would pull once per rank; pull the "
            "image beforehand, or use workers=torchrun",
        )
    # The nodefile lists each host once per MPI slot: M per node here.
    directives = [
        line.replace(":mpiprocs=1", f":mpiprocs={nproc}")
        if line.startswith("#PBS -l select=")
        else line
        for line in pbs._directives(app, opts, out_path, after)
    ]
    python = '"$PYTHON_EXEC"' if "PYTHON_EXEC" in role.env else "python"
    program = [python, "-m", direct.TORCHRUN_ENV] + ([python] if worker.python else [])
    own_port = "MASTER_PORT" in role.env
    unbuffered = " PYTHONUNBUFFERED=1" if opts.unbuffered else ""
    task = [
        "export DISTSPEC_APP_ID=$1 DISTSPEC_RANK0_HOST=$2 DISTSPEC_WORKDIR=$3" + unbuffered,
        f"export DISTSPEC_JOB_DIR={shell_word(folder, {})} DISTSPEC_REPLICA_ID={_RANK}",
        f"base=$DISTSPEC_JOB_DIR/{name}-$DISTSPEC_REPLICA_ID; {batch.STAY}",
        batch.START,
        'hostname > "$base.host" && cd "$DISTSPEC_WORKDIR" || exit 1',
        *_run(plan, role, worker, values, program, own_port),
    ]
    end = pbs._heredoc_end(task)
    host = batch.rank0_host_word(opts.rank0_host, '"${hosts[0]}"')
    exits = f'"$DISTSPEC_JOB_DIR"/{name}-*.exit'
    extra = "".join(" " + shell_word(a, {}) for a in _without_ppn(opts.mpiexec_args))
    hint = pbs._place_hint(opts)
    # env_to_local: one mpiexec task per host unpacks the copy; the ranks' "python" is
    # the copy's (task.sh puts its bin/ first on PATH).
    copy = envcopy.pbs_lines(
        opts,
        NAME,
        job_dir=base,
        nodes=n,
        vnodes="",
        mpiexec=["--ppn", "1", *_without_ppn(opts.mpiexec_args)],
    )
    if copy:
        task.insert(
            task.index('hostname > "$base.host" && cd "$DISTSPEC_WORKDIR" || exit 1') + 1,
            envcopy.task_path_line(),
        )
    stopped = pbs.containers_stopped(plan, name)
    out = [
        "#!/bin/bash",
        *directives,
        *pbs.path_lines(opts),
        f"# Generated by distspec for app {app_id}; submit by hand with:",
        f"#   qsub -j oe -o {out_path} {app_id}.pbs",
        f"# Role {name}, direct launch: {n} host(s) x {nproc} rank(s), one mpiexec, no torchrun.",
        f"# Rank r logs to {name}-r.log in the job folder (each line prefixed [rankr]:), with",
        "# its host and exit code (.host, .exit); `ranks` holds their number.",
        "export DISTSPEC_JOB_DIR=" + shell_word(folder, {}),
        'mkdir -p -m 700 "$DISTSPEC_JOB_DIR" && rm -f "$DISTSPEC_JOB_DIR"/{*.exit,*.host,*.start,exit,signal'
        + (",stop" if stopped else "")
        + "} || exit 1",
        f'echo {ranks} > "$DISTSPEC_JOB_DIR/{direct.RANKS_FILE}"',
        pbs.TERM_TRAP,
        "trap 'code=$?; kill -TERM -- $(jobs -p | sed s/^/-/) 2> /dev/null; "
        + (f"{stopped}; " if stopped else "")
        + 'echo "$code" > "$DISTSPEC_JOB_DIR/exit"'
        + (f"; {pbs._ENV_CLEAN}" if copy else "")
        + "' EXIT",
        "set -m  # each launcher leads a process group: the EXIT trap stops what it started here",
        "cd "
        + (
            shell_word(role.image, {})
            if pbs.workdir_image(role, opts)
            else '"${PBS_O_WORKDIR:-$PWD}"'
        )
        + " || exit 1  # PBS starts in $HOME: run where qsub ran",
        "nodefile=${PBS_NODEFILE:-$(generate_pbs_nodefile)}  # Slurm's PBS wrappers set none",
        "mapfile -t hosts < <(awk 'NF && !seen[$1]++ {print $1}' \"$nodefile\")"
        "  # the file repeats a host per slot",
        f'(( ${{#hosts[@]}} >= {n} )) || {{ echo "distspec: {n} hosts needed, PBS gave '
        f'${{#hosts[@]}}: ${{hosts[*]}}{hint}" >&2; exit 1; }}',
        *copy,
        *pbs.pull_lines(plan, name, replica="0"),
        ("{ " + pbs._printf_exports(["DISTSPEC_ENV_LOCAL"]) + "; cat; }" if copy else "cat")
        + f" > \"$DISTSPEC_JOB_DIR/task.sh\" << '{end}'  # each rank: APP_ID RANK0_HOST WORKDIR",
        *task,
        end,
        f'task=(/bin/bash "$DISTSPEC_JOB_DIR/task.sh" "$PBS_JOBID" {host} "$PWD")',
        # The hosts come from $PBS_NODEFILE (mpiprocs=M lines each), as mpiexec reads it.
        f'mpiexec -n {ranks} --ppn {nproc}{extra} "${{task[@]}}" < /dev/null & launchers=$!',
        f"while kill -0 $launchers 2> /dev/null && ! grep -qsvx 0 {exits}; do sleep 1 & wait -n; done",
        f"code=$(grep -hsvx 0 {exits} | head -n1)",
        f"[[ -n $code ]] || (( $(cat {exits} 2> /dev/null | wc -l) == {ranks} )) ||",
        '  { echo "distspec: a rank recorded no exit code" >&2; code=1; }',
        'exit "${code:-0}"',
    ]
    return "\n".join(out) + "\n"
