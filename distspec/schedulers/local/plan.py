"""``local_cwd``'s compile step, pure: an AppDef and options to the *plan* that the
supervisor runs (``plan.json``), with ``appdef.json`` beside it.

The plan lists every replica with everything it needs, every macro already
substituted: ``argv``, ``env`` (the role's, plus ``PYTHONUNBUFFERED``,
``CUDA_VISIBLE_DEVICES`` when asked for, and ``DISTSPEC_APP_ID``,
``DISTSPEC_ROLE_NAME``, ``DISTSPEC_REPLICA_ID``), ``cwd`` (the option, else the
role's image; None: where ``distspec run`` starts), ``prepend_cwd``, its three
log files and ``worker_exec`` (a torchrun command whose workers the supervisor starts
with distspec's worker Python, see
:func:`~distspec.torchrun_output.worker_exec_line`); per role the
retry policy and ``max_retries``; the options the supervisor applies
(``grace_period``); and, for a run with dependencies (``run --after``), ``after``:
one ``{"app_id", "run_dir", "condition"}`` per run it waits for, ``run_dir`` being
that run's absolute run directory, where the supervisor reads how it ended; nothing
starts before they all have ended as asked (:mod:`.dependencies`). A run without
dependencies has no ``after`` key. ``${rank0_host}`` is ``localhost``,
``${replica_id}`` the replica's index, ``${img_root}`` the role's image (a directory
here), else ``cwd``, else ``.``.
"""

from __future__ import annotations

import json

from distspec.schedulers.local.files import PLAN_FILE
from distspec.schedulers.logs import log_file_name
from distspec.specs.faults import launcher
from distspec.specs.macros import Macro
from distspec.torchrun import TORCHRUN, job_rdzv_port

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from distspec.schedulers.local.options import LocalOptions
    from distspec.specs.app import AppDef

__all__ = ["BY_HAND", "LOG_PATTERN", "build_plan", "plan_files"]

#: By hand (``--dryrun -o DIR``): supervise in the foreground with DIR as run dir.
BY_HAND = ("python3", "-m", "distspec.schedulers.local.supervisor", "--foreground", ".")
#: Where a replica's combined log is in the run directory (``JobPaths.log_pattern``).
LOG_PATTERN = "logs/" + log_file_name("{role}", "{replica}", "log")


def plan_files(
    app: AppDef, opts: LocalOptions, *, app_id: str, after: Sequence[Mapping[str, str]] = ()
) -> dict[str, str]:
    """``plan.json`` and ``appdef.json``, the files a run directory starts with."""
    plan = build_plan(app, opts, app_id=app_id, after=after)
    return {
        PLAN_FILE: json.dumps(plan, indent=2) + "\n",
        "appdef.json": json.dumps(app.to_dict(), indent=2) + "\n",
    }


def build_plan(
    app: AppDef, opts: LocalOptions, *, app_id: str, after: Sequence[Mapping[str, str]] = ()
) -> dict[str, Any]:
    """The plan of ``app`` run as ``app_id`` (see the module docstring); ``after``: the
    plan's ``after`` entries, in order (none: no ``after`` key)."""
    from distspec.specs import macros

    next_gpu = 0
    roles = []
    for role in app.roles:
        replicas = []
        cwd = opts.cwd or role.image or None
        for i in range(role.num_replicas):
            values = {
                Macro.APP_ID: app_id,
                Macro.REPLICA_ID: str(i),
                Macro.NUM_REPLICAS: str(role.num_replicas),
                Macro.RANK0_HOST: "localhost",
                Macro.RDZV_PORT: str(job_rdzv_port(app_id)),
                Macro.IMG_ROOT: role.image or opts.cwd or ".",
            }
            env = {k: macros.substitute(v, values) for k, v in role.env.items()}
            if opts.unbuffered:
                env.setdefault("PYTHONUNBUFFERED", "1")
            if opts.auto_set_cuda_visible_devices and role.resource.gpu > 0:
                gpus = range(next_gpu, next_gpu + role.resource.gpu)
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
                next_gpu += role.resource.gpu
            env.update(
                {
                    "DISTSPEC_APP_ID": app_id,
                    "DISTSPEC_ROLE_NAME": role.name,
                    "DISTSPEC_REPLICA_ID": str(i),
                }
            )
            replicas.append(
                {
                    "id": i,
                    "argv": [
                        macros.substitute(role.entrypoint, values),
                        *(macros.substitute(a, values) for a in role.args),
                    ],
                    "env": env,
                    "cwd": cwd,
                    "prepend_cwd": opts.prepend_cwd,
                    "stdout": f"logs/{log_file_name(role.name, i, 'stdout')}",
                    "stderr": f"logs/{log_file_name(role.name, i, 'stderr')}",
                    "log": LOG_PATTERN.format(role=role.name, replica=i),
                    # torchrun starts the workers with distspec's worker Python (their
                    # stderr joined to their stdout), as worker_exec_line does in the
                    # batch scripts, unless PYTHON_EXEC is set.
                    "worker_exec": launcher(role) == TORCHRUN and "PYTHON_EXEC" not in env,
                }
            )
        roles.append(
            {
                "name": role.name,
                "num_replicas": role.num_replicas,
                "max_retries": role.max_retries,
                "retry_policy": role.retry_policy.value,
                "replicas": replicas,
            }
        )
    plan: dict[str, Any] = {
        "version": 1,
        "app_id": app_id,
        "app_name": app.name,
        "options": {"grace_period": opts.grace_period},
    }
    if after:
        plan["after"] = [dict(dep) for dep in after]
    plan["roles"] = roles
    return plan
