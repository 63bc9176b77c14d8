"""``dist.fn``: run a Python function on every rank, under torchrun.

The same launch as ``dist.ddp`` (one torchrun per node), with the program fixed to
the worker side of callables, :mod:`distspec.runtime.call`. The worker initialises
the process group with :func:`distspec.runtime.init`, calls the function and, when
the job has a job directory (``$DISTSPEC_JOB_DIR``), writes each rank's return
value or exception there.

``distspec.submit(fn, ...)`` compiles every Python callable through this component
(without ``--fn``: the function and its arguments travel pickled in the job
directory), so ``distspec run dist.fn ... --dryrun`` shows what such a job submits.
"""

from __future__ import annotations

from distspec.components import dist
from distspec.errors import ComponentError
from distspec.specs.app import AppDef

__all__ = [
    "ROLE",
    "WORKER_MODULE",
    "fn",
    "format_groups",
    "job_name",
    "parse_groups",
    "worker_args",
]

#: The module every rank of a ``dist.fn`` job runs (``python -m``).
WORKER_MODULE = "distspec.runtime.call"
#: The role name of a ``dist.fn`` job (its logs are ``fn-<node>.log``).
ROLE = "fn"


def fn(
    *fn_args: str,
    fn: str | None = None,
    j: str = "1x2",
    image: str = "",
    name: str | None = None,
    h: str | None = None,
    cpu: int | None = None,
    gpu: int | None = None,
    mem_mb: int | None = None,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    rdzv_backend: str = "auto",
    rdzv_port: int | None = None,
    mounts: list[str] | None = None,
    debug: bool = False,
    tee: int = 3,
    seed: int | None = None,
    seed_per_rank: bool = False,
    groups: str | None = None,
    backend: str | None = None,
    timeout: float | None = None,
) -> AppDef:
    """Run a Python function on every rank: ``fn(*ARGS)``, after the process group is up.

    Each rank calls ``distspec.runtime.init`` (seed, groups, backend, timeout as given
    here) and then the function; a function whose first parameter is annotated
    ``Dist`` receives the initialised ``Dist`` first. Arguments after ``--`` are
    passed as strings. Rank 0's return value is printed; with a job directory
    (``$DISTSPEC_JOB_DIR``), every rank's return value or exception is written there.

    Examples::

        distspec run dist.fn -j 1x2 --fn mypkg.train:main -- --lr 0.1
        distspec run -s slurm dist.fn -j 2x4 --seed 0 --fn mypkg.probe:allreduce

    Args:
        fn_args: arguments passed to the function, as strings.
        fn: the function, ``pkg.module:function`` (importable on the nodes); without
            it, the function and its arguments are read from the job directory
            (what ``distspec.submit`` writes).
        j: the topology ``[MIN:]NxM``: N nodes of M processes; a bare ``M`` is one
            node of M processes whatever --gpu or -h say (as dist.ddp).
        image: the container image; empty runs in the scheduler's current environment.
        name: the job name, or TorchX's ``EXPERIMENT/RUN`` (as dist.ddp): the job is
            named RUN and records the whole name; the function's name when not given.
        h: a named host type (``gpu.large``, see ``distspec resources``); --cpu, --gpu
            and --mem_mb override it.
        cpu: CPUs per node (see dist.ddp).
        gpu: GPUs per node (see dist.ddp).
        mem_mb: memory per node in MiB (see dist.ddp).
        env: environment variables, ``K=V,K2=V2``; ``\\,`` keeps a comma.
        max_retries: how many times the scheduler reruns the job after a failure.
        rdzv_backend: torchrun's rendezvous backend for multi-node jobs: auto (as
            dist.ddp: static for a fixed node count, c10d for an elastic one), c10d,
            static, etcd or etcd-v2.
        rdzv_port: the rendezvous port on the rank-0 host (multi-node jobs); default:
            the job's own, 29500 + job id % 2000 on Slurm, PBS and local (jobs sharing
            a first node do not meet), the rdzv_port run option on Kubernetes.
        mounts: mounts, each ``type=bind|volume|device,src=SRC,dst=DST[,readonly]``.
        debug: add verbose torch.distributed and NCCL logging to the environment.
        tee: torchrun's --tee: copy 0 nothing, 1 stdout, 2 stderr, 3 both to its log files.
        seed: seed Python, NumPy and torch on every rank before the call.
        seed_per_rank: add the rank to the seed, so ranks draw different numbers.
        groups: process subgroups, ranks separated by commas, groups by semicolons
            (``0,2;1,3``); each rank's own group is ``dist.group``.
        backend: the process group backend (nccl, gloo, ...); the runtime picks one
            for the device when not given.
        timeout: the process group's timeout in seconds (the runtime's default: 1800).
    """
    if fn is not None:
        module, sep, attr = fn.partition(":")
        if not sep or not module or not attr:
            raise ComponentError(f"--fn {fn!r}: give the function as pkg.module:function")
    if groups is not None:
        parse_groups(groups)
    if timeout is not None and timeout <= 0:
        raise ComponentError(f"--timeout must be positive, got {timeout}")
    args = worker_args(
        fn=fn,
        seed=seed,
        seed_per_rank=seed_per_rank,
        groups=groups,
        backend=backend,
        timeout=timeout,
        fn_args=fn_args,
    )
    # The launch is dist.ddp's, -j and --name included (a bare -j M is one node of
    # M processes whatever --gpu or -h say); only the program and role name differ.
    return dist._torchrun_app(
        tuple(args),
        script=None,
        m=WORKER_MODULE,
        image=image,
        name=name,
        h=h,
        cpu=cpu,
        gpu=gpu,
        mem_mb=mem_mb,
        j=j,
        bare_j=dist._BareJ.PROCESSES,
        env=env,
        max_retries=max_retries,
        max_restarts=0,  # a restart would run the function again over its results
        rdzv_backend=rdzv_backend,
        rdzv_port=rdzv_port,
        mounts=mounts,
        debug=debug,
        tee=tee,
        role_name=ROLE,
        derived_name=job_name(fn.rpartition(":")[2] if fn else "fn"),
    )


def worker_args(
    *,
    fn: str | None,
    seed: int | None,
    seed_per_rank: bool,
    groups: str | None,
    backend: str | None,
    timeout: float | None,
    fn_args: tuple[str, ...] | list[str] = (),
) -> list[str]:
    """The command line of :mod:`distspec.runtime.call` (after ``-m``)."""
    args: list[str] = []
    if fn is not None:
        args += ["--fn", fn]
    if seed is not None:
        args += ["--seed", str(seed)]
    if seed_per_rank:
        args.append("--seed-per-rank")
    if groups is not None:
        args += ["--groups", groups]
    if backend is not None:
        args += ["--backend", backend]
    if timeout is not None:
        args += ["--timeout", repr(float(timeout))]
    if fn_args:
        args += ["--", *fn_args]
    return args


def parse_groups(text: str) -> list[list[int]]:
    """``"0,2;1,3"`` → ``[[0, 2], [1, 3]]``; ComponentError for anything else."""
    groups: list[list[int]] = []
    for part in text.split(";"):
        try:
            ranks = [int(r) for r in part.split(",")]
        except ValueError:
            raise ComponentError(
                f"--groups {text!r}: give ranks separated by commas, groups by semicolons (0,2;1,3)"
            ) from None
        if any(r < 0 for r in ranks):
            raise ComponentError(f"--groups {text!r}: ranks cannot be negative")
        groups.append(ranks)
    return groups


def format_groups(
    groups: list[list[int]] | tuple[tuple[int, ...], ...] | list[tuple[int, ...]],
) -> str:
    """The inverse of :func:`parse_groups`."""
    return ";".join(",".join(str(int(r)) for r in g) for g in groups)


def job_name(text: str) -> str:
    """A function's name made a valid job name (``<lambda>`` → ``lambda``), as
    ``--name`` is made one (:func:`distspec.components.dist.job_name`); ``fn`` when
    nothing is left."""
    return dist.job_name(text.replace("/", "-"), "fn")[0]
