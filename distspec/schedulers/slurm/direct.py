"""The Slurm script of a direct launch (``-cfg workers=direct``): one srun step with
``--ntasks-per-node=M``, every task one rank (see :mod:`distspec.schedulers.batch.direct`).

Task ``t`` (``$SLURM_PROCID``, the global rank) logs to ``<role>-t.log`` and writes
``<role>-t.host`` and ``.exit`` beside it; the script writes the number of ranks to
``ranks``, which status reads to list one replica per rank.

Nothing here runs a command or reads the environment.
"""

from __future__ import annotations

from distspec.errors import CompileError
from distspec.schedulers.batch import container, direct
from distspec.schedulers.batch import script as batch
from distspec.schedulers.batch.container import Container
from distspec.schedulers.logs import log_file_name
from distspec.schedulers.shell import shell_join, shell_word
from distspec.schedulers.slurm import script as slurm
from distspec.schedulers.slurm.options import NAME, SlurmOptions
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
    """A rank's lines from its exports to its exit code (``code``), its output
    prefixed with its rank; in the role's container with podman or apptainer."""
    env = [line for line in batch.env_exports(role, values) if line != worker_exec_line()]
    env.append(
        "export MASTER_ADDR="
        + shell_word(worker.master_addr, values)
        + ("" if own_port else " MASTER_PORT=" + shell_word(worker.master_port, values))
    )
    command = f"{program[0]} " + shell_join([*program[1:], *worker.argv], values)
    pipe = direct.rank_prefix_pipe("$SLURM_PROCID")
    if plan is None or plan.runtime in container.SLURM_ONLY:
        lines = slurm.contained(plan, env, command, replica="$SLURM_PROCID", role=role.name)
        return [*lines[:-1], f"{lines[-1]} {pipe}", "code=${PIPESTATUS[0]}"]
    # The prefix through a process substitution, so that `$?` is the runtime's own
    # code (podman runs in the background, see container.run_lines).
    prefix = pipe.partition("| ")[2]
    output = f"> >({prefix}) 2>&1"
    lines = slurm.contained(
        plan, env, command, replica="$SLURM_PROCID", role=role.name, output=output
    )
    return [*lines, "code=$?"]


def _resources(app: AppDef, opts: SlurmOptions, nproc: int) -> list[str]:
    """The role's #SBATCH resources with M tasks per node, each a share of its CPUs."""
    flags = slurm._resources(app.roles[0], opts)
    out = [f"--ntasks-per-node={nproc}"]
    for flag in flags[1:]:
        if flag.startswith("--cpus-per-task="):
            cpus = int(flag.partition("=")[2]) // nproc
            if cpus:
                out.append(f"--cpus-per-task={cpus}")
        else:
            out.append(flag)
    return out


def direct_script(
    app: AppDef,
    opts: SlurmOptions,
    *,
    app_id: str,
    job_dir: str,
    after: Sequence[Dependency] = (),
    points: Points | None = None,
) -> str:
    """The sbatch script that runs ``app``'s torchrun role without torchrun.

    Raises:
        CompileError: what direct launch cannot honour (:func:`direct.direct_worker`).
    """
    worker = direct.direct_worker(app, NAME)
    role = app.roles[0]
    name = role.name  # NAME_CHARS only: a plain word in the shell
    nproc = worker.nproc_per_node
    values = slurm._macro_values(role, points, opts)
    plan = slurm.container_plan(role, opts, job_dir)
    if plan is not None and plan.runtime is Container.OCI:
        raise CompileError(
            NAME,
            "workers=direct: container=oci cannot run it (srun --container sets no "
            "SLURM_PROCID or SLURM_LOCALID, the ranks' own); use workers=torchrun",
        )
    resources = _resources(app, opts, nproc)
    out = ["#!/bin/bash"]
    out += [slurm._directive(f) for f in slurm._job_flags(app, opts, job_dir, after, points)]
    out.append(f"#SBATCH --nodes={worker.nodes}")
    out += [slurm._directive(f) for f in resources]
    python = '"$PYTHON_EXEC"' if "PYTHON_EXEC" in role.env else "python"
    program = [python, "-m", direct.TORCHRUN_ENV] + ([python] if worker.python else [])
    own_port = "MASTER_PORT" in role.env
    task = [
        "",
        f"  base=$DISTSPEC_JOB_DIR/{name}-$SLURM_PROCID",
        "  " + batch.STAY,
        "  " + batch.START,
        '  echo "${SLURMD_NODENAME:-$HOSTNAME}" > "$base.host"',
        # No worker_exec_line: it picks torchrun's worker program, and there is no torchrun.
        *(f"  {line}" for line in _run(plan, role, worker, values, program, own_port)),
        '  echo "$code" > "$base.exit"',
        '  exit "$code"',
    ]
    about = [
        f"# Role {name}, direct launch: {worker.nodes} node(s) x {nproc} rank(s), no torchrun. "
        f"Rank t logs",
        f"# to {name}-t.log in the job folder (each line prefixed [rankt]:) and writes its node",
        "# and exit code beside it (.host, .exit); `ranks` holds their number. A requeued job",
        "# starts again from the top: clear the old ones.",
    ]
    # env_to_local: the ranks' "python" is the copy's (its bin/ first on PATH, which srun
    # passes on to the tasks).
    out += slurm.prologue(
        app,
        opts,
        app_id=app_id,
        job_dir=job_dir,
        points=points,
        about=about,
        host_is="The rank-0 host",
        files=[f'echo {worker.ranks} > "$DISTSPEC_JOB_DIR/{direct.RANKS_FILE}"'],
    )
    log = shell_word(log_file_name(name, "%t"), {})
    flags = slurm._srun_flags(0, role, opts, het=False, job_dir=job_dir)
    flags = [
        next((r for r in resources if r.startswith("--cpus-per-task=")), "")
        if f.startswith("--cpus-per-task=")
        else f"--ntasks-per-node={nproc}"
        if f.startswith("--ntasks-per-node=")
        else f
        for f in flags
    ]
    out += slurm.pull_step(role, plan, replica=f"SLURM_NODEID * {nproc}")
    out += slurm._srun_step(
        [f for f in flags if f], log, task, requeue=opts.requeue, after=slurm.leftovers(role, plan)
    )
    return "\n".join(out) + "\n"
