"""The torchrun command line, written once.

Used by the ``dist.*`` components (with macros that each backend fills in) and by
in-job launch (with literal values). The entrypoint is the ``torchrun`` console
script, which is what users type and what their logs show; it is the same
program as ``python -m torch.distributed.run``. What torchrun prints back (rank
prefixes, its failure report) is read by :mod:`distspec.torchrun_output`.

Rendezvous, as decided here and nowhere else:

- one node (``-j 1xM``, or ``1:1xM``): c10d on ``localhost:0``, so torchrun picks a
  free port and concurrent single-node jobs on one host never collide. torchrun's
  own ``--standalone`` does the same, but passing the values keeps the command
  explicit and the same on every torch version.
- several nodes: the chosen backend on ``${rank0_host}:${rdzv_port}`` with
  ``--rdzv_id ${app_id}``. There is no fallback to ``localhost``: a backend that
  cannot provide ``${rank0_host}`` fails to compile the job.
- the port, unless ``--rdzv_port`` names one, is the job's own: ``${rdzv_port}``,
  which Slurm, PBS and local_cwd fill in as :data:`DEFAULT_RDZV_PORT` plus the job
  id modulo :data:`RDZV_PORT_SPAN` (:func:`job_rdzv_port`), and Kubernetes, where
  every pod has its own address, as its ``rdzv_port`` run option (29500). Where
  nodes are shared between jobs (Slurm or PBS nodes with more CPUs or GPUs than one
  job takes), two multi-node jobs whose first node is the same would otherwise both
  listen on 29500: the second fails at start (static) or, worse, joins the first's
  store (c10d, below). The span keeps the ports below Linux's ephemeral range
  (32768 up), where outgoing connections take theirs.
- the default backend, ``auto``, is ``static`` for a fixed node count without
  restarts or retries (``-j NxM``, ``--max_restarts 0``, ``--max_retries 0``) and
  whose ``--rdzv_conf`` sets nothing but ``timeout`` (the one key the static handler
  reads), and ``c10d`` otherwise (elastic jobs, restarts, retries, c10d's keys such
  as ``join_timeout``). ``--rdzv_backend static`` with a key it would ignore is
  refused, never silently dropped. Why not c10d everywhere: its agents poll the store on node 0 ten times a
  second while the workers run (``num_nodes_waiting()`` in the agent's monitor loop),
  and when node 0 cannot bind the port because another job on that node holds it,
  torch's c10d backend silently joins *that* job's store as a client
  (``_create_tcp_store`` retries with ``is_server=False``). Both jobs then run on,
  until the other job ends, its store goes, and this job's next poll raises
  ``RendezvousConnectionError``: a job that was training fine is reported failed.
  The static rendezvous never polls, and node 0 must bind the port itself, so a
  clash fails at once with "address already in use", before any work. c10d stays
  for restarts: after a worker failure it makes every node re-rendezvous, where
  static would leave the nodes at different restart counts. And for retries: a
  Kubernetes Job replaces a failed pod alone, and only c10d lets the new pod join
  the nodes that kept running.
- ``--node_rank ${replica_id}`` only for the ``static`` backend, which needs it and
  a fixed node count. c10d assigns node ranks itself; torchrun logs a warning and
  ignores ``--node_rank`` there (``torch/distributed/run.py``, ``config_from_args``).
- elastic ``-j MIN:MAXxM`` becomes ``--nnodes MIN:MAX``.

Rendezvous timeouts grow with the job (:func:`scaled_rdzv_conf`). torchrun's are
fixed: the static rendezvous waits ``timeout`` 900 s for every node (torchrun's
``LaunchConfig`` sets it where ``--rdzv_conf`` does not, ``launcher/api.py``; the
handler's own 600 s, ``static_tcp_rendezvous.py``, applies only outside torchrun),
c10d ``join_timeout`` 600 s with ``read_timeout`` 60 s per store operation
(``dynamic_rendezvous.py``, ``c10d_rendezvous_backend.py``; its
``last_call_timeout`` 30 s and ``close_timeout`` 30 s are left alone). The window
opens when the first agent arrives, but at thousands of nodes the agents do not
start together: spreading a Python environment to 4,096 Aurora nodes alone took
751 s (ezpz), and the one store on node 0 then serves every node. So up to
:data:`RDZV_SCALE_NODES` nodes distspec emits nothing (torchrun's defaults, the
command as before); above it the window grows a quarter of a second per further
node, ``window = 600 + (nodes - 64) // 4`` (1,608 s at 4,096 nodes), and each key
is the larger of torchrun's default and its scaled value: ``join_timeout`` and
static's ``timeout`` the window, ``read_timeout`` a tenth of it (as torch's
600/60; 160 s at 4,096). A key is written only where it exceeds torchrun's default
(c10d's ``join_timeout`` from 68 nodes, static's ``timeout`` from 1,268), merged
into the user's ``--rdzv_conf``: the user's keys stay as typed and win, a computed
key is added only where the user did not set it, and ``auto`` chooses static or
c10d from the user's keys alone (a computed ``join_timeout`` never turns a static
job into c10d). etcd backends get nothing. ``scripts/sim_rendezvous`` measures
both rendezvous against a real TCPStore; docs/contributing/performance.md has its
numbers.

The store is torch's TCPStore on node 0; torch >= 2.4 serves it with libuv by
default (``USE_LIBUV``, read in ``torch/distributed/elastic/utils/distributed.py``
and ``torch/distributed/rendezvous.py``), which PyTorch built for jobs of more than
1,024 ranks ("Introduction to Libuv TCPStore Backend"). ``pyproject.toml`` still
allows torch 2.3, whose default is the older server, slower to accept thousands
of connections at once. distspec sets nothing for it (the environment is the
user's, and the longer windows above cover a slower start); on torch 2.3 at
thousands of nodes, upgrading torch is the fix.

Script arguments arrive byte-identical: torchrun passes every worker argument
(the script or module too, unless ``--no-python``) through
``string.Template.safe_substitute(local_rank=...)``, which turns ``$$`` into ``$``
and ``$local_rank``/``${local_rank}`` into the worker's local rank. So
:func:`torchrun_args` doubles every ``$`` of those arguments (:func:`escape_dollars`),
and torchrun's ``${local_rank}`` macro is therefore *not* available: the script
reads ``LOCAL_RANK`` from its environment, as torchrun recommends. distspec's own
macros (``${replica_id}`` ...) are left as they are, for the backend to fill in.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from distspec.errors import ComponentError
from distspec.specs import macros
from distspec.specs.macros import Macro
from distspec.specs.topology import Topology

__all__ = [
    "DEFAULT_RDZV_PORT",
    "RDZV_AUTO",
    "RDZV_BACKENDS",
    "RDZV_PORT_SPAN",
    "RDZV_SCALE_NODES",
    "STATIC_RDZV_CONF_KEYS",
    "TORCHRUN",
    "TORCHRUN_RDZV_DEFAULTS",
    "check_rdzv_conf",
    "escape_dollars",
    "job_rdzv_port",
    "nproc_per_node",
    "scaled_rdzv_conf",
    "torchrun_args",
]

#: The program every dist component runs.
TORCHRUN = "torchrun"

#: The first of the rendezvous ports, on the rank-0 host, for multi-node jobs (TorchX's).
DEFAULT_RDZV_PORT = 29500

#: A job's own port is ``DEFAULT_RDZV_PORT + id % RDZV_PORT_SPAN`` (29500-31499).
RDZV_PORT_SPAN = 2000

#: Rendezvous backends torchrun ships with.
RDZV_BACKENDS = ("c10d", "static", "etcd", "etcd-v2")

#: The default rendezvous choice: static for a fixed node count without restarts,
#: c10d otherwise (see the module docstring).
RDZV_AUTO = "auto"


def torchrun_args(
    topology: Topology,
    *,
    script: str | None = None,
    module: str | None = None,
    script_args: Sequence[str] = (),
    rdzv_backend: str = RDZV_AUTO,
    rdzv_port: int | None = None,
    rdzv_id: str = Macro.APP_ID.token,
    rank0_host: str = Macro.RANK0_HOST.token,
    node_rank: str = Macro.REPLICA_ID.token,
    max_restarts: int = 0,
    tee: int | None = None,
    role: str | None = None,
    no_python: bool = False,
    standalone: bool = False,
    rdzv_conf: str | None = None,
    retries: bool = False,
) -> list[str]:
    """The arguments that follow :data:`TORCHRUN` to run ``script`` or ``module``.

    Args:
        topology: nodes (possibly elastic) and processes per node.
        script: the training script; exactly one of ``script`` and ``module``.
        module: a Python module to run as ``python -m module``.
        script_args: arguments for the script; each arrives as given (every ``$``
            escaped from torchrun's ``${local_rank}`` substitution, see
            :func:`escape_dollars`).
        rdzv_backend: torchrun's rendezvous backend for multi-node jobs (one of
            :data:`RDZV_BACKENDS`), or :data:`RDZV_AUTO`: static for a fixed node
            count with ``max_restarts`` 0, c10d otherwise. Single-node jobs always
            use c10d on localhost.
        rdzv_port: the rendezvous port on the rank-0 host (multi-node only); None:
            the job's own, the ``${rdzv_port}`` macro.
        rdzv_id: the rendezvous id shared by all nodes; the app id by default.
        rank0_host: the host of node 0; the ``${rank0_host}`` macro by default.
        node_rank: this node's rank, used only by the static backend; the
            ``${replica_id}`` macro by default.
        max_restarts: how often torchrun restarts the node's workers before failing.
        tee: torchrun's ``--tee``: 0 none, 1 stdout, 2 stderr, 3 both; None omits it.
        role: torchrun's ``--role`` label for the workers; None omits it.
        no_python: torchrun's ``--no-python``: ``script`` is a program run as is
            (``python train.py`` or a binary), not a file handed to Python. Used by
            ``distspec launch``, whose command may be anything.
        standalone: a one-node job as torchrun's ``--standalone`` (c10d on a free
            local port with a random id; the same as the explicit form, spelled as
            users type it). Only for one node; ``rdzv_*`` are then unused.
        rdzv_conf: torchrun's ``--rdzv_conf``, ``KEY=VALUE[,KEY=VALUE...]``
            (``join_timeout=600,timeout=900``), passed on single- and multi-node
            jobs alike; None or empty omits it. With :data:`RDZV_AUTO` a key the
            static rendezvous does not read (anything but ``timeout``) selects c10d;
            with ``static`` it is refused. On more than :data:`RDZV_SCALE_NODES`
            nodes the timeouts of :func:`scaled_rdzv_conf` that it does not set are
            added after its own keys.
        retries: whether the scheduler reruns or replaces failed nodes
            (``max_retries`` > 0): :data:`RDZV_AUTO` then selects c10d, which takes a
            replacement node back in (Kubernetes replaces one failed pod at a time).

    Raises:
        ComponentError: not exactly one of script and module, an unknown rendezvous
            backend, a port out of range, an elastic static rendezvous, a static
            rendezvous with ``rdzv_conf`` keys it would ignore, ``no_python`` with a
            module, or ``standalone`` with more than one node.
    """
    if (script is None) == (module is None):
        raise ComponentError("give exactly one of --script and -m (a script or a module to run)")
    if rdzv_backend != RDZV_AUTO and rdzv_backend not in RDZV_BACKENDS:
        raise ComponentError(
            f"unknown rendezvous backend {rdzv_backend!r}; use {RDZV_AUTO} (the default) "
            f"or one of {', '.join(RDZV_BACKENDS)}"
        )
    if rdzv_port is not None and not 1 <= rdzv_port <= 65535:
        raise ComponentError(f"rendezvous port {rdzv_port} is not in 1..65535")
    if max_restarts < 0:
        raise ComponentError(f"max restarts must be >= 0, got {max_restarts}")
    if tee is not None and tee not in (0, 1, 2, 3):
        raise ComponentError(
            f"--tee must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both), got {tee}"
        )

    if no_python and module is not None:
        raise ComponentError("--no-python runs a program; it cannot run a module (-m)")
    if standalone and (topology.nodes != 1 or topology.elastic):
        raise ComponentError(f"torchrun --standalone runs one node, not -j {topology}")

    if rdzv_conf:
        check_rdzv_conf(rdzv_conf)
    args = ["--nnodes", topology.nnodes_arg, "--nproc_per_node", str(topology.nproc_per_node)]
    if standalone:
        args.insert(0, "--standalone")
    elif topology.nodes == 1:
        args += ["--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0", "--rdzv_id", rdzv_id]
    else:
        conf_keys = _conf_keys(rdzv_conf)
        if rdzv_backend == RDZV_AUTO:
            # static reads only `timeout` from --rdzv_conf: keys only c10d reads
            # (join_timeout, last_call_timeout, ...) ask for c10d, as TorchX builds.
            fixed = not topology.elastic and max_restarts == 0 and not retries
            static_ok = conf_keys <= STATIC_RDZV_CONF_KEYS
            rdzv_backend = "static" if fixed and static_ok else "c10d"
        if rdzv_backend == "static" and not conf_keys <= STATIC_RDZV_CONF_KEYS:
            ignored = ", ".join(sorted(conf_keys - STATIC_RDZV_CONF_KEYS))
            raise ComponentError(
                f"--rdzv_conf {ignored}: the static rendezvous reads only timeout (torchrun "
                "would ignore the rest); write timeout=SECONDS, or use --rdzv_backend c10d"
            )
        if rdzv_backend == "static" and topology.elastic:
            raise ComponentError(
                f"the static rendezvous needs a fixed node count, not -j {topology}; "
                "use --rdzv_backend c10d for elastic jobs"
            )
        args += [
            "--rdzv_backend",
            rdzv_backend,
            "--rdzv_endpoint",
            f"{rank0_host}:{Macro.RDZV_PORT.token if rdzv_port is None else rdzv_port}",
            "--rdzv_id",
            rdzv_id,
        ]
        if rdzv_backend == "static":
            args += ["--node_rank", node_rank]
        # After the choice, which reads only the user's keys: a computed c10d key
        # must not turn auto's static into c10d.
        rdzv_conf = _merge_rdzv_conf(rdzv_conf, scaled_rdzv_conf(rdzv_backend, topology.nodes))
    if rdzv_conf:
        args += ["--rdzv_conf", rdzv_conf]
    args += ["--max_restarts", str(max_restarts)]
    if tee is not None:
        args += ["--tee", str(tee)]
    if role is not None:
        args += ["--role", role]
    if no_python:
        args.append("--no-python")
    if module is not None:
        args += ["-m", escape_dollars(module)]
    else:
        assert script is not None
        # With --no-python the program is torchrun's entrypoint, which it does not
        # substitute; otherwise the script is the first of the worker's arguments.
        args.append(script if no_python else escape_dollars(script))
    args += [escape_dollars(a) for a in script_args]
    return args


def nproc_per_node(entrypoint: str, args: Sequence[str]) -> int | None:
    """The processes per node of a torchrun command (``--nproc_per_node N`` of a role
    whose entrypoint is :data:`TORCHRUN`); None for any other command, or a value that
    is not a number (torchrun's ``gpu``, ``auto``)."""
    if entrypoint != TORCHRUN:
        return None
    # The first occurrence: torchrun_args writes it before the program and its arguments.
    for i, arg in enumerate(args[:-1]):
        if arg in ("--nproc_per_node", "--nproc-per-node"):
            value = args[i + 1]
            return int(value) if value.isdigit() and int(value) > 0 else None
    return None


def job_rdzv_port(job_id: str) -> int:
    """The job's own rendezvous port: :data:`DEFAULT_RDZV_PORT` plus the job id modulo
    :data:`RDZV_PORT_SPAN`, the id read as a number when it starts with digits (a
    Slurm or PBS job id, as the generated scripts compute it), else its CRC-32."""
    digits = job_id[: len(job_id) - len(job_id.lstrip("0123456789"))]
    number = int(digits) if digits else zlib.crc32(job_id.encode())
    return DEFAULT_RDZV_PORT + number % RDZV_PORT_SPAN


def escape_dollars(text: str) -> str:
    """``text`` with each ``$`` outside distspec's macros doubled, so that torchrun's
    ``string.Template`` substitution of worker arguments gives back ``text`` (with
    distspec's macros, such as ``${replica_id}``, filled in by the backend first;
    their values are names and numbers, without ``$``).

    ``'$$x'`` becomes ``'$$$$x'``, which torchrun turns back into ``'$$x'``;
    ``'${local_rank}'`` becomes ``'$${local_rank}'``, which arrives as typed.
    """
    if "$" not in text:
        return text
    return "".join(
        part.token if isinstance(part, Macro) else part.replace("$", "$$")
        for part in macros.split(text)
    )


#: The ``--rdzv_conf`` keys torchrun's static rendezvous reads
#: (``static_tcp_rendezvous.create_rdzv_handler``; ``rank`` comes from ``--node_rank``).
STATIC_RDZV_CONF_KEYS = frozenset({"timeout"})


#: Up to this many nodes the rendezvous keeps torch's timeouts; above it,
#: :func:`scaled_rdzv_conf` adds a quarter of a second per node.
RDZV_SCALE_NODES = 64

#: torchrun's defaults for the keys distspec may compute, in seconds: static's
#: ``timeout`` as torchrun's ``LaunchConfig`` sets it (``launcher/api.py``), c10d's
#: from ``dynamic_rendezvous.py`` and ``c10d_rendezvous_backend.py``.
TORCHRUN_RDZV_DEFAULTS: Mapping[str, int] = MappingProxyType(
    {"timeout": 900, "join_timeout": 600, "read_timeout": 60}
)


def scaled_rdzv_conf(backend: str, nodes: int) -> dict[str, int]:
    """The ``--rdzv_conf`` timeouts, in seconds, for a job of ``nodes`` nodes
    (the most nodes, for an elastic job) where they exceed torchrun's defaults.

    ``window = 600 + max(0, nodes - 64) // 4``; static's ``timeout`` and c10d's
    ``join_timeout`` are the window, c10d's ``read_timeout`` a tenth of it, each
    kept only where it is longer than torchrun's default (900, 600 and 60 s).
    Nothing for up to :data:`RDZV_SCALE_NODES` nodes, nor for the etcd backends.

    >>> scaled_rdzv_conf("static", 4096)
    {'timeout': 1608}
    >>> scaled_rdzv_conf("c10d", 4096)
    {'join_timeout': 1608, 'read_timeout': 160}
    >>> scaled_rdzv_conf("c10d", 64)
    {}
    """
    window = 600 + max(0, nodes - RDZV_SCALE_NODES) // 4
    if backend == "static":
        conf = {"timeout": window}
    elif backend == "c10d":
        conf = {"join_timeout": window, "read_timeout": window // 10}
    else:
        return {}
    return {key: value for key, value in conf.items() if value > TORCHRUN_RDZV_DEFAULTS[key]}


def _merge_rdzv_conf(user: str | None, computed: dict[str, int]) -> str | None:
    """The user's ``--rdzv_conf`` as typed, then each computed key it does not set."""
    keys = _conf_keys(user)
    added = [f"{key}={value}" for key, value in computed.items() if key not in keys]
    return ",".join([user, *added] if user else added) or user


def _conf_keys(text: str | None) -> frozenset[str]:
    """The keys of a ``--rdzv_conf`` value (already checked by :func:`check_rdzv_conf`)."""
    if not text:
        return frozenset()
    return frozenset(item.partition("=")[0].strip() for item in text.split(","))


def check_rdzv_conf(text: str) -> None:
    """Refuse a ``--rdzv_conf`` value torchrun would misread.

    torchrun splits it on ``,`` and each item on its first ``=`` (a value may not
    contain a comma), so every item needs a non-empty key and an ``=``.

    Raises:
        ComponentError: an item without ``=`` or with an empty key.
    """
    for item in text.split(","):
        key, eq, _ = item.partition("=")
        if not eq or not key.strip():
            raise ComponentError(
                f"--rdzv_conf {text!r}: {item!r} is not KEY=VALUE; write it as "
                "KEY=VALUE[,KEY=VALUE...], e.g. join_timeout=600,timeout=900"
            )
