"""Give one task of ``srun`` or ``mpiexec`` the environment torchrun gives its workers.

``distspec launch`` starts one task per process with ``srun`` (Slurm) or ``mpiexec``
(PBS, a hostfile). Each task then knows its place only from that launcher's own
variables (``SLURM_PROCID``, ``PMI_RANK``, ...), while most training scripts read
torchrun's: the PyTorch DDP tutorial reads ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` and
calls ``init_process_group`` with ``env://``; HF accelerate and transformers read
``LOCAL_RANK`` and ``WORLD_SIZE``; Lightning's ``TorchElasticEnvironment`` needs
``RANK``, ``GROUP_RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` (and
``torch.distributed.is_torchelastic_launched()``, ``TORCHELASTIC_RUN_ID``). Without
them a script fails with ``RANK expected, but not set``, or, under Lightning in an
``salloc`` shell (job name ``interactive``, which Lightning's Slurm detection
ignores), every task spawns its own workers and they wait for each other forever.

So launch runs every task as::

    python -m distspec.runtime.torchrun_env CMD [ARGS...]

which reads the task's launcher variables with :func:`distspec.runtime.detect`, sets
:func:`torchrun_environ` of them, and replaces itself with ``CMD`` (``exec``: the
same process, so signals, exit code and pid are the command's own). The variables are exactly those torch's
``LocalElasticAgent._start_workers`` sets (torch 2.13), with the values torchrun
would give a one-role job without restarts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.runtime.env import DistEnv

__all__ = ["MODULE", "TORCHRUN_VARIABLES", "main", "torchrun_environ"]

#: How launch names this module on a task's command line (``python -m MODULE``).
MODULE = "distspec.runtime.torchrun_env"

#: Every variable torchrun's agent sets for a worker, in its order, plus
#: ``LOCAL_RANK`` (set beside them) and ``OMP_NUM_THREADS`` (torchrun's ``run.py``
#: sets it to 1 when several processes share a node and it is not set).
TORCHRUN_VARIABLES = (
    "RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "LOCAL_RANK",
    "OMP_NUM_THREADS",
)

#: Names the launcher that started the task (``slurm``, ``mpich``, ...), so that
#: :func:`distspec.runtime.detect` in the command still reports it rather than
#: ``torchrun``.
LAUNCHER_VARIABLE = "DISTSPEC_LAUNCHER"

#: torchrun's role name when ``--role`` is not given.
DEFAULT_ROLE = "default"

# What an outer torchrun (or a user's shell) may have left in the environment:
# the task's own launcher variables decide, not these.
_STALE = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
)


def torchrun_environ(dist: DistEnv, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables torchrun would set for the process ``dist`` describes.

    ``environ`` is the task's environment: ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` and
    ``OMP_NUM_THREADS`` keep a value it sets, as under torchrun.
    """
    out = {
        "RANK": str(dist.rank),
        "GROUP_RANK": str(dist.node_rank),
        "ROLE_RANK": str(dist.rank),
        "ROLE_NAME": DEFAULT_ROLE,
        "LOCAL_WORLD_SIZE": str(dist.local_world_size),
        "WORLD_SIZE": str(dist.world_size),
        "GROUP_WORLD_SIZE": str(dist.num_nodes),
        "ROLE_WORLD_SIZE": str(dist.world_size),
        "MASTER_ADDR": dist.master_addr,
        "MASTER_PORT": str(dist.master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": dist.job_id or "none",
        # No agent here: rank 0 creates the TCP store itself (env:// as usual).
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "LOCAL_RANK": str(dist.local_rank),
    }
    if "OMP_NUM_THREADS" in environ:
        out["OMP_NUM_THREADS"] = environ["OMP_NUM_THREADS"]
    elif dist.local_world_size > 1:
        out["OMP_NUM_THREADS"] = "1"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Set torchrun's variables from this task's launcher and exec ``argv``.

    Returns only on failure: 2 when the launcher's variables cannot be read (one
    line naming them), 127 when the command cannot be run (one line).
    """
    import socket

    from distspec.errors import RuntimeEnvError
    from distspec.runtime.env import detect

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    host = socket.gethostname()
    if not args:
        print(f"distspec launch: on {host}: no command to run", file=sys.stderr)
        return 2
    environ = dict(os.environ)
    try:
        dist = detect({k: v for k, v in environ.items() if k not in _STALE})
    except RuntimeEnvError as e:
        print(f"distspec launch: on {host}: {e}", file=sys.stderr)
        return 2
    environ.update(torchrun_environ(dist, environ))
    environ[LAUNCHER_VARIABLE] = dist.launcher.value
    sys.stdout.flush()
    try:
        os.execvpe(args[0], args, environ)
    except OSError as e:
        print(
            f"distspec launch: rank {dist.rank} on {host}: cannot run {args[0]!r}: "
            f"{e.strerror or e}",
            file=sys.stderr,
        )
        return 127
    raise AssertionError("unreachable")  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main())
