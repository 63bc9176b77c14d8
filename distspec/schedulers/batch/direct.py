"""Direct launch of a torchrun role: the scheduler's launcher starts every rank.

With the run option ``workers=direct`` (Slurm, PBS) a role whose entrypoint is
``torchrun`` is compiled without torchrun: one launcher step starts ``N x M`` tasks
(``srun --ntasks-per-node=M``, ``mpiexec -n N*M -ppn M``), and each task runs::

    python -m distspec.runtime.torchrun_env <python> -u <script> ARGS   (or -m MODULE)

which sets the variables torchrun gives its workers (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ...) from the launcher's own and
``exec``s the worker. There is no agent per node and no rendezvous: rank 0 opens the
TCP store itself (``env://``), on the job's own port.

The job folder then holds one ``<role>-<rank>.log`` (and ``.host``, ``.exit``) per
global rank, and a ``ranks`` file with their number, which status reads. Each line
of a rank's log carries torchrun's tee prefix (``[rank3]:``), so ``distspec log
--rank``, the failure summary and the log readers treat it as they treat torchrun's.

What direct launch cannot honour is refused at compile time (:func:`direct_worker`):
an elastic role (``-j MIN:MAXxM``), torchrun restarts (``--max_restarts`` > 0),
a role that is not a torchrun command, several roles, scheduler retries
(``max_retries``), and a per-node count that is not a number (``gpu``, ``auto``).

Nothing here runs a command or reads the environment.
"""

from __future__ import annotations

import enum
import re

from distspec.errors import CompileError
from distspec.frozen import frozen
from distspec.specs.macros import Macro
from distspec.torchrun import TORCHRUN

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from distspec.specs.app import AppDef, Role

__all__ = [
    "RANKS_FILE",
    "TORCHRUN_ENV",
    "DirectWorker",
    "Workers",
    "direct_worker",
    "rank_prefix_pipe",
    "task_count",
]

#: The in-job module that sets torchrun's variables from the launcher's
#: (:mod:`distspec.runtime.torchrun_env`; named, not imported: the compile path never
#: imports distspec.runtime).
TORCHRUN_ENV = "distspec.runtime.torchrun_env"

#: The job-folder file that holds a direct job's number of ranks (= log files).
RANKS_FILE = "ranks"


class Workers(str, enum.Enum):
    """Who starts a torchrun role's worker processes."""

    #: One torchrun agent per node, which starts the node's workers (the default).
    TORCHRUN = "torchrun"
    #: The scheduler's launcher starts every rank as a task of its own.
    DIRECT = "direct"


@frozen
class DirectWorker:
    """A torchrun role's worker, as direct launch runs it."""

    #: Nodes (the role's replicas) and processes on each.
    nodes: int
    nproc_per_node: int
    #: The worker's argv after the interpreter: ``-u script ARGS`` or ``-u -m mod ARGS``
    #: (``script ARGS`` with torchrun's ``--no-python``), distspec's macros left in.
    argv: tuple[str, ...]
    #: Whether ``argv`` runs under Python (torchrun without ``--no-python``).
    python: bool
    #: The rank-0 host and port torchrun's rendezvous would use (macros or literals).
    master_addr: str
    master_port: str

    @property
    def ranks(self) -> int:
        """The job's number of ranks (tasks, log files)."""
        return self.nodes * self.nproc_per_node


# torchrun flags that take a value and that direct launch reads or may drop: the
# rendezvous ones (there is none) and the ones about torchrun's own output.
_VALUE_FLAGS = frozenset(
    [
        "nnodes",
        "nproc_per_node",
        "rdzv_backend",
        "rdzv_endpoint",
        "rdzv_id",
        "node_rank",
        "rdzv_conf",
        "max_restarts",
        "tee",
        "role",
        "monitor_interval",
        "log_dir",
        "redirects",
        "local_ranks_filter",
        "log_line_prefix_template",
        "start_method",
        "master_addr",
        "master_port",
    ]
)
_BOOL_FLAGS = frozenset({"standalone", "no_python"})


def _bad(scheduler: str, message: str) -> CompileError:
    return CompileError(scheduler, f"workers=direct: {message}")


def _torchrun_flags(args: tuple[str, ...], scheduler: str) -> tuple[dict[str, str], int]:
    """torchrun's own flags (``{name: value}``, dashes as underscores) and the index of
    the program (``-m`` or the script) in ``args``."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" or not arg.startswith("-"):
            return flags, i
        name, eq, value = arg.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name in _BOOL_FLAGS and not eq:
            flags[name] = "1"
        elif name in _VALUE_FLAGS:
            if not eq:
                if i + 1 >= len(args):
                    raise _bad(scheduler, f"torchrun {arg} has no value")
                i += 1
                value = args[i]
            flags[name] = value
        else:
            raise _bad(
                scheduler, f"torchrun flag {arg} has no direct equivalent; use workers=torchrun"
            )
        i += 1
    raise _bad(scheduler, "the torchrun command names no script or module")


# torchrun passes every worker argument through string.Template.safe_substitute(
# local_rank=...): "$$" becomes "$" and ${local_rank} the local rank.
_TEMPLATE = r"\$(\$|\{local_rank\}|local_rank(?![A-Za-z0-9_]))"


def _untemplate(text: str, scheduler: str) -> str:
    """``text`` as torchrun's substitution would hand it to the worker (distspec's macros
    kept for the backend); ``${local_rank}`` is refused: there is no torchrun to fill it."""
    from distspec.specs import macros

    out = []
    for part in macros.split(text):
        if isinstance(part, Macro):
            out.append(part.token)
            continue

        def one(m: re.Match[str]) -> str:
            if m.group(1) != "$":
                raise _bad(
                    scheduler,
                    f"{text!r}: torchrun's ${{local_rank}} is not filled in without torchrun; "
                    "read LOCAL_RANK from the environment",
                )
            return "$"

        out.append(re.sub(_TEMPLATE, one, part))
    return "".join(out)


def direct_worker(app: AppDef, scheduler: str) -> DirectWorker:
    """The worker of ``app``'s one torchrun role, for ``workers=direct``.

    Raises:
        CompileError: one line, for what direct launch cannot honour: several roles,
            scheduler retries, a role that is not a torchrun command, an elastic role,
            torchrun restarts, a per-node count that is not a number, a node count
            that is not the role's, or a torchrun flag without an equivalent.
    """
    if len(app.roles) != 1:
        raise _bad(
            scheduler, f"app {app.name!r} has {len(app.roles)} roles; direct launch runs one"
        )
    role: Role = app.roles[0]
    if role.entrypoint != TORCHRUN:
        raise _bad(
            scheduler,
            f"role {role.name!r} runs {role.entrypoint!r}; direct launch applies to torchrun "
            "roles (dist.ddp, dist.spmd): use workers=torchrun",
        )
    if role.elastic:
        raise _bad(
            scheduler,
            f"role {role.name!r} is elastic ({role.min_replicas}:{role.num_replicas} nodes); "
            "direct launch needs a fixed node count (-j NxM)",
        )
    if role.max_retries:
        raise _bad(
            scheduler,
            f"role {role.name!r}: max_retries={role.max_retries} is not supported with direct "
            "launch; use workers=torchrun",
        )
    flags, start = _torchrun_flags(role.args, scheduler)
    restarts = flags.get("max_restarts", "0")
    if restarts != "0":
        raise _bad(
            scheduler,
            f"--max_restarts {restarts}: torchrun restarts its workers, direct launch cannot; "
            "use workers=torchrun",
        )
    nnodes = flags.get("nnodes", "1")
    if ":" in nnodes:
        raise _bad(scheduler, f"--nnodes {nnodes} is elastic; direct launch needs a fixed count")
    if nnodes != str(role.num_replicas):
        raise _bad(
            scheduler,
            f"torchrun --nnodes {nnodes} but role {role.name!r} has {role.num_replicas} node(s)",
        )
    nproc = flags.get("nproc_per_node", "1")
    if not nproc.isdigit() or int(nproc) < 1:
        raise _bad(scheduler, f"--nproc_per_node {nproc}: direct launch needs a number (-j NxM)")
    no_python = "no_python" in flags
    rest = role.args[start:]
    if rest[0] == "-m":
        if len(rest) < 2:
            raise _bad(scheduler, "torchrun -m names no module")
        argv = ["-u", "-m", _untemplate(rest[1], scheduler)]
        tail = rest[2:]
    elif no_python:
        argv = [rest[0]]
        tail = rest[1:]
    else:
        argv = ["-u", _untemplate(rest[0], scheduler)]
        tail = rest[1:]
    argv += [_untemplate(a, scheduler) for a in tail]
    host, port = Macro.RANK0_HOST.token, Macro.RDZV_PORT.token
    endpoint = flags.get("rdzv_endpoint")
    if endpoint and not endpoint.startswith("localhost:"):
        named_host, _, named_port = endpoint.rpartition(":")
        host, port = named_host or host, named_port if named_port not in ("", "0") else port
    return DirectWorker(
        nodes=role.num_replicas,
        nproc_per_node=int(nproc),
        argv=tuple(argv),
        python=not no_python,
        master_addr=host,
        master_port=port,
    )


def rank_prefix_pipe(rank: str) -> str:
    """What a rank's output is piped through: each line gets torchrun's tee prefix
    (``[rank3]:``, the rank a shell expression), so that the log reads as torchrun's."""
    return f'2>&1 | sed -u "s/^/[rank{rank}]:/"'


def task_count(files: Mapping[str, str], count: int) -> int:
    """The replicas of a job's (one) role: the ``ranks`` file of a direct job (one log
    per rank), else ``count`` (one per node). ``files`` as
    :func:`~distspec.schedulers.batch.folder.read_job_folder` reads them."""
    text = files.get(RANKS_FILE)
    return int(text) if text and text.isdigit() and int(text) > 0 else count
