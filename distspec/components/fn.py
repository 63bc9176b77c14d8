"""``dist.fn``: run a Python function on every rank, under torchrun.

The same launch as ``dist.ddp`` (one torchrun per node), with the program fixed to
the worker side of callables, :mod:`distspec.runtime.call`. The worker initialises
the process group with :func:`distspec.runtime.init`, calls the function and, when
the job has a job directory (``$DISTSPEC_JOB_DIR``), writes each rank's return
value or exception there.

``distspec.submit(fn, ...)`` compiles every Python callable through this component
(without ``--fn``: the function and its arguments travel pickled in the job
directory), so ``distspec run dist.fn ... --dryrun`` shows what such a job submits.

Its role is built by dist.ddp's own function, and the help of the parameters it
shares with dist.ddp comes from dist.ddp's (``dist._shared_args``), so the two read
and describe those parameters alike.
"""

from __future__ import annotations

import math

from distspec._arguments import show
from distspec.components import dist
from distspec.errors import ComponentError
from distspec.specs.app import AppDef
from distspec.specs.groups import groups_problem, parse_groups
from distspec.specs.topology import BareJ, Topology

__all__ = [
    "BACKENDS",
    "MAX_SEED",
    "ROLE",
    "WORKER_MODULE",
    "backend_problem",
    "fn",
    "fn_spec_problem",
    "job_name",
    "seed_problem",
    "timeout_problem",
    "worker_args",
]

#: The module every rank of a ``dist.fn`` job runs (``python -m``).
WORKER_MODULE = "distspec.runtime.call"
#: The role name of a ``dist.fn`` job (its logs are ``fn-<node>.log``).
ROLE = "fn"
#: The process group backends ``--backend`` takes (torch.distributed's own).
BACKENDS = ("gloo", "nccl", "xccl", "mpi", "ucc")
#: The largest seed: torch takes a 64-bit seed, and ``--seed_per_rank`` adds the rank.
MAX_SEED = 2**63 - 1
#: The longest process group timeout in seconds (``datetime.timedelta``'s limit).
MAX_TIMEOUT = 999_999_999 * 86_400.0


@dist._shared_args
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
        name: the job name, or TorchX's ``EXPERIMENT/RUN`` (as dist.ddp): the job is
            named RUN and records the whole name; the function's name when not given.
        rdzv_backend: torchrun's rendezvous backend for multi-node jobs: auto (static
            for a fixed node count without retries, else c10d), c10d, static, etcd
            or etcd-v2.
        seed: seed Python, NumPy and torch on every rank before the call.
        seed_per_rank: add the rank to the seed, so ranks draw different numbers.
        groups: process subgroups, ranks separated by commas, groups by semicolons
            (``0,2;1,3``); each rank's own group is ``dist.group``.
        backend: the process group backend (nccl, gloo, ...); the runtime picks one
            for the device when not given.
        timeout: the process group's timeout in seconds (the runtime's default: 1800).
    """
    # Everything the worker would only refuse once the job runs is refused here.
    if fn is not None and (problem := fn_spec_problem(fn)):
        raise ComponentError(f"--fn {show(fn)}: {problem}")
    if groups is not None:
        parsed = parse_groups(groups)
        if problem := groups_problem(parsed, Topology.parse(j)):
            raise ComponentError(f"--groups {show(groups)}: {problem}")
    if timeout is not None and (problem := timeout_problem(timeout)):
        raise ComponentError(f"--timeout {show(timeout)}: {problem}")
    if seed is not None and (problem := seed_problem(seed)):
        raise ComponentError(f"--seed {show(seed)}: {problem}")
    if backend is not None and (problem := backend_problem(backend)):
        raise ComponentError(f"--backend {show(backend)}: {problem}")
    if name is not None and not name.isprintable():
        raise ComponentError(f"--name {show(name)}: control characters are not allowed")
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
        BareJ.PROCESSES,
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


def fn_spec_problem(spec: str) -> str | None:
    """Why ``spec`` is not ``pkg.module:function`` (dotted names of identifiers on both
    sides of one colon), or None."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        return "give the function as pkg.module:function"
    for side, text in (("module", module), ("function", attr)):
        bad = next((p for p in text.split(".") if not p.isidentifier()), None)
        if bad == "":
            return f"the {side} {show(text)} has an empty part (pkg.module:function)"
        if bad is not None:
            where = "" if bad == text else f" in the {side} {show(text)}"
            return f"{show(bad)}{where} is not a Python name (pkg.module:function)"
    return None


def seed_problem(seed: int) -> str | None:
    """Why ``seed`` cannot seed torch, or None."""
    if not 0 <= seed <= MAX_SEED:
        return f"give an integer in 0..{MAX_SEED} (2**63-1)"
    return None


def timeout_problem(timeout: float) -> str | None:
    """Why ``timeout`` cannot be a process group's timeout, or None."""
    if not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        return f"give a finite number of seconds > 0, at most {MAX_TIMEOUT:g}"
    return None


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` is not a process group backend, or None."""
    if backend not in BACKENDS:
        from distspec.specs.options import did_you_mean

        hint = did_you_mean(backend, BACKENDS)
        return f"not a process group backend{hint}; known: {', '.join(BACKENDS)}"
    return None


def job_name(text: str) -> str:
    """A function's name made a valid job name (``<lambda>`` → ``lambda``), as
    ``--name`` is made one (:func:`distspec.components.dist.job_name`); ``fn`` when
    nothing is left."""
    return dist.job_name(text.replace("/", "-"), "fn")[0]
