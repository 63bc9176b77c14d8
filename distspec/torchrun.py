"""The torchrun command line, written once.

Used by the ``dist.*`` components (with macros that each backend fills in) and by
in-job launch (with literal values). The entrypoint is the ``torchrun`` console
script, which is what users type and what their logs show; it is the same
program as ``python -m torch.distributed.run``.

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
from collections.abc import Sequence

from distspec.errors import ComponentError
from distspec.specs import macros
from distspec.specs.frozen import frozen
from distspec.specs.macros import Macro
from distspec.specs.topology import Topology

__all__ = [
    "DEFAULT_RDZV_PORT",
    "RDZV_AUTO",
    "RDZV_BACKENDS",
    "RDZV_PORT_SPAN",
    "STATIC_RDZV_CONF_KEYS",
    "TERMINATE_AT_EXIT",
    "TORCHRUN",
    "aborted_at_exit",
    "check_rdzv_conf",
    "escape_dollars",
    "job_rdzv_port",
    "nproc_per_node",
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
            with ``static`` it is refused.
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


# ---------------------------------------------------------------------------
# reading what torchrun and its workers print when a worker fails
#
# Pure functions of log lines, shared by ``distspec run --wait`` (through
# distspec.schedulers._common) and ``distspec launch`` (distspec.runtime.launch).
# local_cwd's supervisor keeps its own stdlib-only reader of the same report
# (distspec.schedulers.local_supervisor.torchrun_root_cause): it runs without
# ``site`` and cannot import this module.

#: torchrun's ``--tee`` prefixes each worker line with ``[<role><local rank>]:``; with
#: this template (read from ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``) it writes the
#: worker's *global* rank instead, in the form torch's own exception hook uses
#: (``[rank3]: ``), so one parser (:func:`split_rank`) recovers the rank of a line.
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"


def split_rank(text: str, role: str = "") -> tuple[int | None, str]:
    """``(global rank, text)`` of a replica's log line, without torchrun's prefixes.

    Recognised, in this order and each at most once: torchrun's tee prefix as
    :data:`RANK_PREFIX_TEMPLATE` makes it (``[rank3]:``) or torchrun's default
    (``[<role><local rank>]:``, giving no global rank), then the prefix torch's
    exception hook puts on a traceback after ``init_process_group`` (``[rank3]: ``).
    A line with none of them (torchrun's own messages, a plain program) has rank None.
    """
    rank: int | None = None
    rest = text
    if rest.startswith("[rank"):
        end = rest.find("]:", 5)
        if end > 5 and rest[5:end].isdigit():
            rank, rest = int(rest[5:end]), rest[end + 2 :]
    elif role and rest.startswith("[" + role):
        end = rest.find("]:", len(role) + 1)
        if end > len(role) + 1 and rest[len(role) + 1 : end].isdigit():
            rest = rest[end + 2 :]
    if rest.startswith("[rank"):
        end = rest.find("]: ", 5)
        if end > 5 and rest[5:end].isdigit() and (rank is None or int(rest[5:end]) == rank):
            rank, rest = int(rest[5:end]), rest[end + 3 :]
    return rank, rest


@frozen
class RootCause:
    """The first failure torchrun observed, from its ChildFailedError report.

    Attributes:
        rank: the failed worker's global rank.
        local_rank: its rank on its node.
        host: the node it ran on, as torchrun names it (``socket.getfqdn()``).
        exitcode: torchrun's number for it: the exit code, or minus the signal.
        pid: its process id.
    """

    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    exitcode: int | None = None
    pid: int | None = None


def root_cause(lines: Sequence[str]) -> RootCause | None:
    """The "Root Cause (first observed failure)" entry of the last ChildFailedError
    report in ``lines`` (torchrun's stderr, without newlines), or None without one.

    The entry reads (torch 2.x)::

        Root Cause (first observed failure):
        [0]:
          time      : 2026-11-26_09:15:07
          host      : n1
          rank      : 3 (local_rank: 1)
          exitcode  : 7 (pid: 29855)
          error_file: <N/A>
          traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
        ============================================================
    """
    starts = [i for i, text in enumerate(lines) if text.startswith("Root Cause")]
    if not starts:
        return None
    fields: dict[str, str] = {}
    for text in lines[starts[-1] + 1 : starts[-1] + 12]:
        if text.startswith("="):
            break
        key, _, value = text.partition(":")
        fields.setdefault(key.strip(), value.strip())

    def number(text: str | None, pattern: str = "") -> int | None:
        if text is None:
            return None
        if pattern:
            rest = text.partition(pattern)[2]
            if not rest:
                return None
            text = rest
        word = text.strip().split(" ")[0].rstrip(")")
        try:
            return int(word)
        except ValueError:
            return None

    found = RootCause(
        rank=number(fields.get("rank")),
        local_rank=number(fields.get("rank"), "local_rank:"),
        host=fields.get("host") or None,
        exitcode=number(fields.get("exitcode")),
        pid=number(fields.get("exitcode"), "pid:"),
    )
    return None if found == RootCause() else found


#: What the C++ runtime prints when a process ends while a ``std::thread`` is still
#: joinable: torch's process-group threads, when a script returns without
#: ``destroy_process_group()``, now and then (then SIGABRT, exit code 134).
TERMINATE_AT_EXIT = "terminate called without an active exception"


def aborted_at_exit(excerpt: Sequence[str]) -> bool:
    """Whether a failed rank's last lines (:func:`failure_excerpt`) show an abort as
    its process exited: the C++ ``terminate`` message among its last lines and no
    Python traceback, i.e. the script had returned when the process died."""
    tail = [text for text in excerpt if text.strip()][-3:]
    return any(TERMINATE_AT_EXIT in text for text in tail) and not any(
        text.startswith("Traceback (") for text in excerpt
    )


def failure_excerpt(
    lines: Sequence[tuple[int | None, str]], *, limit: int = 40
) -> tuple[int | None, list[str]]:
    """``(rank, excerpt)``: who failed in a failed replica's log and what it said.

    ``lines`` are ``(rank, text)`` pairs as :func:`split_rank` gives them. The rank is
    the first failure torchrun reports (:func:`root_cause`), else the rank of the last
    traceback, else None. The excerpt is that rank's last traceback (from
    ``Traceback (most recent call last):`` to its last line), else its last lines;
    for a plain program (no ranks) the last traceback or last lines of the log. At
    most ``limit`` lines, the end kept.
    """
    found = root_cause([text for line_rank, text in lines if line_rank is None])
    rank = found.rank if found is not None else None
    if rank is None:
        traced = [r for r, text in lines if r is not None and text.startswith("Traceback (")]
        rank = traced[-1] if traced else None
    if rank is not None:
        own = [text for r, text in lines if r == rank]
    else:
        own = [text for _, text in lines if not text.startswith("distspec: ")]
    starts = [i for i, text in enumerate(own) if text.startswith("Traceback (")]
    excerpt = own[starts[-1] :] if starts else own[-20:]
    if rank is None and starts:
        # A plain program's traceback ends at its exception line; what follows is
        # other output (or a wrapper's messages).
        end = next(
            (i for i, text in enumerate(excerpt) if i and text and not text[0].isspace()),
            len(excerpt) - 1,
        )
        excerpt = excerpt[: end + 1]
    return rank, excerpt[-limit:]
