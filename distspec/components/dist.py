"""Distributed training components: torchrun on every node.

``dist.ddp``, ``dist.spmd`` and ``dist.torchrun`` (and ``dist.fn``, in
:mod:`distspec.components.fn`) run one torchrun per node (one replica of a single
role per node), which starts the processes of that node and joins the rendezvous.
They differ in what a bare ``-j N`` means (:class:`~distspec.specs.topology.BareJ`) and build their role
through one function, :func:`_torchrun_app`; the torchrun command line is built in
:mod:`distspec.torchrun`. The help of the parameters they share is written once,
in :data:`_SHARED_ARGS`, and :func:`_shared_args` completes each one's docstring
(its ``--help``) from it.
"""

from __future__ import annotations

from collections.abc import Mapping

from distspec.errors import ComponentError, SpecError
from distspec.frozen import FrozenDict, frozendict
from distspec.specs.app import NAME_CHARS, SCRIPT_METADATA, AppDef, Resource, Role
from distspec.specs.topology import BareJ, Topology, parse_component_j
from distspec.torchrun import TORCHRUN, torchrun_args

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from distspec.specs.mounts import Mount

    _Component = TypeVar("_Component", bound=Callable[..., AppDef])

__all__ = [
    "DEBUG_ENV",
    "EXPERIMENT_METADATA",
    "FULL_NAME_METADATA",
    "ddp",
    "job_name",
    "spmd",
    "torchrun",
]

#: AppDef metadata: the ``--name`` as given, when the job name differs from it.
FULL_NAME_METADATA = "distspec.full_name"
#: AppDef metadata: the experiment of a TorchX-style ``--name EXPERIMENT/RUN``.
EXPERIMENT_METADATA = "distspec.experiment"

#: What ``--debug`` adds to the environment (the user's ``--env`` wins on a clash):
#: TorchX's debug flags (CUDA_LAUNCH_BLOCKING, NCCL_DESYNC_DEBUG, TORCH_DISTRIBUTED_DEBUG,
#: TORCH_SHOW_CPP_STACKTRACES), so ``--debug`` is the same job in both tools, and more.
DEBUG_ENV: Mapping[str, str] = FrozenDict(
    {
        "CUDA_LAUNCH_BLOCKING": "1",
        "NCCL_DESYNC_DEBUG": "1",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "NCCL_DEBUG": "INFO",
        "TORCH_SHOW_CPP_STACKTRACES": "1",
        "TORCH_CPP_LOG_LEVEL": "INFO",
        "LOGLEVEL": "INFO",
        "PYTHONFAULTHANDLER": "1",
    }
)

#: The help of the parameters dist.ddp, dist.spmd, dist.torchrun and dist.fn share, as
#: the entries of a docstring's ``Args:`` section. A component documents in its own
#: docstring only what is its own (``-j`` always); :func:`_shared_args` adds the rest.
_SHARED_ARGS = """
script_args: arguments passed to the script or module unchanged.
script: the training script to run (a path inside the image); give this or -m.
m: a Python module to run as with ``python -m``; give this or --script.
image: the container image; empty runs in the scheduler's current environment.
name: the job name, or TorchX's ``EXPERIMENT/RUN`` (also ``EXP/`` and
    ``/RUN``): the job is named RUN and records the whole name; the
    script's or module's name when there is no RUN.
h: a named host type (``gpu.large``, see ``distspec resources``) giving the
    CPU, GPU and memory of each node; --cpu, --gpu and --mem_mb override it.
cpu: CPUs per node; without it and -h, Slurm and PBS ask for one per process
    when there are no GPUs, other backends and GPU jobs for none.
gpu: GPUs per node (0 without -h).
mem_mb: memory per node in MiB; without it and -h, the cluster's default.
env: environment variables, ``K=V,K2=V2``; ``\\,`` keeps a comma.
max_retries: how many times the scheduler reruns the job after a failure.
max_restarts: how many times torchrun restarts a node's processes before the
    node fails.
rdzv_backend: torchrun's rendezvous backend for multi-node jobs: auto (static
    for a fixed node count without restarts or retries whose --rdzv_conf sets
    only timeout, else c10d), c10d, static, etcd or etcd-v2.
rdzv_port: the rendezvous port on the rank-0 host (multi-node jobs); default:
    the job's own, 29500 + job id % 2000 on Slurm, PBS and local (jobs sharing
    a first node do not meet), the rdzv_port run option on Kubernetes.
rdzv_conf: torchrun's --rdzv_conf, ``KEY=VALUE[,...]`` (join_timeout,
    close_timeout, timeout in seconds, and the backend's own keys); the
    static rendezvous reads only timeout, so other keys make auto pick c10d.
mounts: mounts, each ``type=bind|volume|device,src=SRC,dst=DST[,readonly]``;
    a new mount starts at each ``type=``.
debug: add verbose torch.distributed and NCCL logging to the environment.
tee: torchrun's --tee: copy 0 nothing, 1 stdout, 2 stderr, 3 both to its log files.
tp: tensor-parallel degree; tp x pp x cp must divide the processes of the job
    (data parallel takes the rest); the job gets them as DISTSPEC_DEGREES and
    ``distspec.runtime.init()`` builds a DeviceMesh from them.
pp: pipeline-parallel degree (see --tp).
cp: context-parallel degree (see --tp).
"""


def _entries(lines: list[str], indent: int) -> dict[str, list[str]]:
    """The entries of an ``Args:`` section whose names stand at ``indent``: name → its
    lines, with that indentation taken off (continuation lines keep what is deeper)."""
    entries: dict[str, list[str]] = {}
    for line in lines:
        if not line.strip():
            continue
        text = line[indent:]
        if not text.startswith(" "):  # "name: help" starts an entry
            entries[text.partition(":")[0]] = []
        entries[next(reversed(entries))].append(text)
    return entries


_SHARED = _entries(_SHARED_ARGS.splitlines(), 0)

_CO_VARARGS = 0x04  # inspect.CO_VARARGS, without importing inspect at start-up


def _shared_args(component: _Component) -> _Component:
    """Complete ``component``'s docstring, its ``--help``: the ``Args:`` section (the
    docstring's last) gets the :data:`_SHARED_ARGS` entry of each parameter that the
    component does not document itself, and lists every parameter in the order of the
    signature. Only ``__doc__`` changes: the function and its signature are the same
    (no wrapper), and the work is a few string operations at import.

    Raises:
        TypeError: a parameter documented nowhere, or an entry for no parameter.
    """
    code = component.__code__
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    if code.co_flags & _CO_VARARGS:  # *args stands between positional and keyword-only
        names.insert(code.co_argcount, code.co_varnames[count])
    lines = (component.__doc__ or "").splitlines()
    at = next((i for i, line in enumerate(lines) if line.strip() == "Args:"), len(lines))
    head, args = lines[:at], lines[at + 1 :]
    # the indentation of the Args: line; without one, the body's (none in Python 3.13+)
    indented = lines[at : at + 1] or [line for line in lines[1:] if line.strip()]
    pad = min((line[: len(line) - len(line.lstrip())] for line in indented), key=len, default="")
    own = _entries(args, len(pad) + 4)
    if not args:  # a new Args: section, after a blank line
        head = [*"\n".join(head).rstrip().splitlines(), ""]
    where = f"{component.__module__}.{component.__qualname__}"
    if stray := own.keys() - set(names):
        raise TypeError(f"{where}: the docstring documents no parameter {sorted(stray)}")
    if missing := [n for n in names if n not in own and n not in _SHARED]:
        raise TypeError(f"{where}: no help for {missing}, in its docstring or in _SHARED_ARGS")
    body = [f"{pad}    {text}" for n in names for text in own.get(n) or _SHARED[n]]
    component.__doc__ = "\n".join([*head, f"{pad}Args:", *body, pad])
    return component


@_shared_args
def ddp(
    *script_args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = "",
    name: str | None = None,
    h: str | None = None,
    cpu: int | None = None,
    gpu: int | None = None,
    mem_mb: int | None = None,
    j: str = "1x2",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    max_restarts: int = 0,
    rdzv_backend: str = "auto",
    rdzv_port: int | None = None,
    rdzv_conf: str | None = None,
    mounts: list[str] | None = None,
    debug: bool = False,
    tee: int = 3,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
) -> AppDef:
    """Distributed data parallel: torchrun on each of N nodes, M processes per node.

    One role with one replica per node. A single node rendezvouses on
    localhost with a free port; several nodes rendezvous on the rank-0 host
    (``${rank0_host}``), which every scheduler fills in or refuses to compile.

    ``-j M`` (no ``x``) is M processes on one node whatever --gpu or -h say, as in
    TorchX's dist.ddp: ``-j 2 --gpu 8`` is one node of 2 processes. For N nodes of
    one process per GPU use dist.spmd (or dist.torchrun with -h), or write NxM.

    Examples::

        distspec run dist.ddp --script train.py -- --lr 0.1
        distspec run -s slurm dist.ddp -j 2x8 -h gpu.xlarge --script train.py
        distspec run dist.ddp -j 1:4x8 -m mypkg.train      # elastic, 1 to 4 nodes

    Args:
        j: the topology ``[MIN:]NxM``: N nodes of M processes; ``MIN:NxM`` makes it
            elastic; a bare ``M`` is always one node of M processes.
    """
    return _torchrun_app(BareJ.PROCESSES, **locals())


@_shared_args
def spmd(
    *script_args: str,
    j: str,
    script: str | None = None,
    m: str | None = None,
    image: str = "",
    name: str | None = None,
    h: str | None = None,
    cpu: int | None = None,
    gpu: int | None = None,
    mem_mb: int | None = None,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    max_restarts: int = 0,
    rdzv_backend: str = "auto",
    rdzv_port: int | None = None,
    rdzv_conf: str | None = None,
    mounts: list[str] | None = None,
    debug: bool = False,
    tee: int = 3,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
) -> AppDef:
    """Single program, multiple data: one process per GPU on every node.

    The same torchrun launch as dist.ddp, but the topology is always stated
    (-j is required) and a bare ``-j N`` counts nodes, one process per GPU, as
    in TorchX's dist.spmd: with ``-h gpu.xlarge`` (8 GPUs) ``-j 2`` is 2 nodes of
    8 processes; ``NxM`` is always N nodes of M processes. Nodes without GPUs
    are refused: TorchX's dist.spmd defaults to ``-h gpu.small``, distspec asks
    for -h or --gpu rather than guess; CPU processes are dist.ddp's job.

    Examples::

        distspec run -s slurm dist.spmd -h gpu.xlarge -j 4 --script train.py
        distspec run -s kubernetes dist.spmd --gpu 4 -j 2 --image repo/img -m mypkg.train

    Args:
        j: the topology: ``N`` nodes of one process per GPU, ``NxM``, or elastic
            ``MIN:N`` / ``MIN:NxM`` (GPU nodes only: give -h or --gpu).
        gpu: GPUs per node, and so processes per node (0 without -h).
    """
    return _torchrun_app(BareJ.NODES, **locals())


@_shared_args
def torchrun(
    *script_args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = "",
    name: str | None = None,
    h: str | None = None,
    cpu: int | None = None,
    gpu: int | None = None,
    mem_mb: int | None = None,
    j: str = "1x2",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    max_restarts: int = 0,
    rdzv_backend: str = "auto",
    rdzv_port: int | None = None,
    rdzv_conf: str | None = None,
    mounts: list[str] | None = None,
    debug: bool = False,
    tee: int = 3,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
) -> AppDef:
    """torchrun on each node: TorchX's dist.torchrun (its newer name for dist.ddp).

    The job of dist.ddp with one difference, TorchX's: with a named host type
    (-h), a bare ``-j N`` counts nodes and runs one process per GPU of the host
    (a host without GPUs needs ``-j NxM``); without -h, ``-j M`` is one node of
    M processes, as in dist.ddp.

    Examples::

        distspec run dist.torchrun -j 2x4 --script train.py
        distspec run -s slurm dist.torchrun -h gpu.xlarge -j 2 -m mypkg.train
        distspec run -s kubernetes dist.torchrun -h aws_p4d.24xlarge -j 2 --image repo/img -m mypkg.train

    Args:
        j: the topology ``[MIN:]NxM``; with -h a bare ``N`` is N nodes of one
            process per GPU, without -h a bare ``M`` is one node of M processes.
    """
    return _torchrun_app(BareJ.NODES_WITH_H, **locals())


def job_name(name: str | None, derived: str) -> tuple[str, dict[str, str]]:
    """The job name for ``--name`` (TorchX's ``EXPERIMENT/RUN`` form accepted) and
    the metadata that records what was asked for.

    ``exp/run`` names the job ``run``; ``exp/`` and ``/`` use ``derived`` (the
    script's name); ``/run`` is ``run``. A name with characters a job name cannot
    have (``my run``) has them replaced by ``-``. Whenever the job name differs
    from ``name``, the metadata carries ``distspec.full_name`` (and
    ``distspec.experiment`` when there is one), kept in the run's record.
    """
    if name is None:
        return derived, {}
    experiment, _, run = name.partition("/") if "/" in name else ("", "", name)
    cleaned = "".join(c if c in NAME_CHARS else "-" for c in run).strip("_.-")
    job = cleaned or derived
    meta: dict[str, str] = {}
    if job != name:
        meta[FULL_NAME_METADATA] = name
    if experiment:
        meta[EXPERIMENT_METADATA] = experiment
    return job, meta


def _torchrun_app(
    bare_j: BareJ,
    script_args: tuple[str, ...],
    *,
    script: str | None,
    m: str | None,
    image: str,
    name: str | None,
    h: str | None,
    cpu: int | None,
    gpu: int | None,
    mem_mb: int | None,
    j: str,
    env: dict[str, str] | None,
    max_retries: int,
    max_restarts: int,
    rdzv_backend: str,
    rdzv_port: int | None,
    mounts: list[str] | None,
    rdzv_conf: str | None = None,
    debug: bool,
    tee: int,
    tp: int = 1,
    pp: int = 1,
    cp: int = 1,
    role_name: str | None = None,
    derived_name: str | None = None,
) -> AppDef:
    """The job of dist.ddp/spmd/torchrun and dist.fn: one torchrun role, ``-j`` read
    as ``bare_j`` says.

    Every other parameter of dist.ddp, dist.spmd and dist.torchrun is a keyword here
    of the same name, so they pass theirs as ``**locals()`` (Python refuses a missing
    or unknown one). ``role_name`` replaces the name derived from the script or
    module (dist.fn's ``fn``); ``derived_name`` is the job name without ``--name``
    (the role name when not given).
    """
    if (script is None) == (m is None):
        given = "both" if script is not None else "neither"
        raise ComponentError(
            f"give exactly one of --script (a program) and -m (a Python module); {given} was given"
        )
    resource = resource_for(h=h, cpu=cpu, gpu=gpu, mem_mb=mem_mb)
    topology = parse_component_j(j, bare_j, gpus=resource.gpu, h=h)
    if resource.gpu and topology.nproc_per_node > resource.gpu:
        raise ComponentError(
            f"-j {j} runs {topology.nproc_per_node} processes per node but each node has "
            f"{resource.gpu} GPU(s); run at most {resource.gpu} per node or ask for more GPUs"
        )
    role_name = role_name or role_name_for(script=script, module=m)
    args = torchrun_args(
        topology,
        script=script,
        module=m,
        script_args=script_args,
        rdzv_backend=rdzv_backend,
        rdzv_port=rdzv_port,
        max_restarts=max_restarts,
        tee=tee,
        role=role_name,
        rdzv_conf=rdzv_conf,
        retries=max_retries > 0,
    )
    role_env = {**(DEBUG_ENV if debug else {}), **(env or {})}
    if tp != 1 or pp != 1 or cp != 1:
        role_env.update(_degrees(topology, tp=tp, pp=pp, cp=cp))
    role = Role(
        name=role_name,
        image=image,
        entrypoint=TORCHRUN,
        args=tuple(args),
        env=frozendict(role_env),
        num_replicas=topology.nodes,
        min_replicas=topology.min_nodes,
        resource=resource,
        port_map=frozendict(
            {"c10d": rdzv_port} if topology.nodes > 1 and rdzv_port is not None else {}
        ),
        max_retries=max_retries,
        mounts=_mounts(mounts),
        metadata=frozendict({SCRIPT_METADATA: script} if script else {}),
    )
    app_name, full_name = job_name(name, derived_name or role_name)
    return AppDef(name=app_name, roles=(role,), metadata=frozendict(full_name))


def _degrees(topology: Topology, *, tp: int, pp: int, cp: int) -> dict[str, str]:
    """``{"DISTSPEC_DEGREES": "pp=..,cp=..,tp=.."}``, checked against every world size allowed."""
    from distspec.specs.degrees import DEGREES_ENV, Degrees

    try:
        degrees = Degrees(tp=tp, pp=pp, cp=cp)
        degrees.check(topology)
    except SpecError as e:
        raise ComponentError(str(e)) from None
    return {DEGREES_ENV: degrees.format()}


def resource_for(
    *, h: str | None, cpu: int | None, gpu: int | None, mem_mb: int | None
) -> Resource:
    """The named host type ``h``, with any of cpu/gpu/mem_mb replaced.

    Without ``h``, what is not given stays unspecified (None; no GPUs): a backend then
    requests no CPUs or memory of its own and the cluster's defaults apply.
    """
    if h:
        from distspec.specs.resources import NamedResources

        base = NamedResources().get(h)
    else:
        base = Resource()
    if cpu is None and gpu is None and mem_mb is None:
        return base
    return Resource(
        cpu=base.cpu if cpu is None else cpu,
        gpu=base.gpu if gpu is None else gpu,
        mem_mb=base.mem_mb if mem_mb is None else mem_mb,
        capabilities=base.capabilities,
        devices=base.devices,
    )


def role_name_for(*, script: str | None, module: str | None) -> str:
    """``path/to/train.py`` → ``train``; ``pkg.trainer`` → ``trainer``; made a valid role name."""
    if script is not None:
        base = script.rstrip("/").rsplit("/", 1)[-1]
        base = base.rsplit(".", 1)[0] if "." in base[1:] else base
    else:
        base = (module or "").rsplit(".", 1)[-1]
    cleaned = "".join(c if c in NAME_CHARS else "-" for c in base).lstrip("_.-")
    return cleaned or "worker"


def _mounts(items: list[str] | None) -> tuple[Mount, ...]:
    if not items:
        return ()
    from distspec.specs.mounts import parse_mounts

    return parse_mounts(group_mounts(items))


def group_mounts(items: list[str]) -> list[str]:
    """Regroup comma-split mount words into one spec per mount; a mount starts at ``type=``."""
    specs: list[str] = []
    for item in items:
        for word in item.split(","):
            if not word:
                continue
            if word.startswith("type=") or not specs:
                specs.append(word)
            else:
                specs[-1] += "," + word
    return specs
