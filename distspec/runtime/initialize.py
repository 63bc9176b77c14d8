"""``init()``: device, backend, process group, subgroups, seeds and a DeviceMesh.

::

    from distspec.runtime import init

    with init(seed=0, degrees={"tp": 2}) as dist:     # or: dist = init(); ...; dist.close()
        model = build().to(dist.device)
        tp_group = dist.mesh["tp"].get_group()
        if dist.is_main:
            print(dist.coords)

What it decides, in order:

1. **who** — :func:`~distspec.runtime.env.detect` (or the ``env`` given);
2. **device** — cuda → xpu → mps → cpu, or as told; the local device is
   ``local_rank`` modulo the visible devices and is made current;
3. **backend** — nccl for cuda, xccl for xpu (where the build has it), gloo otherwise.
   When the preferred backend cannot start (not compiled in, no device, fewer
   devices than ranks on the node) it falls back to gloo on the CPU with one
   warning (``RuntimeWarning``, from local rank 0) that says why;
4. **process group** — ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE``/...
   are exported for libraries that read them, then the default group is made
   (``env://`` with a timeout; a world of one uses an in-memory store and opens
   no port). ``groups=None`` makes no group at all;
5. **subgroups** — ``groups=[[0, 2], [1, 3]]``: one group per list, disjoint and
   covering every rank; the caller's own on :attr:`Dist.group`;
6. **seeds** — Python's ``random``, NumPy (when installed) and torch (CPU and every
   accelerator); ``seed_per_rank`` adds the rank;
7. **mesh** — degrees from ``degrees=`` or ``$DISTSPEC_DEGREES``: a ``DeviceMesh``
   with named dims ``pp, dp, cp, tp`` (outermost first) and each rank's
   :class:`Coords`.

Rank 0 logs one line with all of it, and writes it as JSON to
``$DISTSPEC_JOB_DIR/runtime.json`` when the job has a job directory.
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import random
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from distspec.errors import RuntimeEnvError, SpecError
from distspec.runtime.env import DistEnv, detect
from distspec.specs.degrees import DEGREES_ENV, DIMS, Degrees

if TYPE_CHECKING:
    import torch

__all__ = ["RUNTIME_INFO_FILE", "Coords", "Dist", "current", "init"]

#: The file, in ``$DISTSPEC_JOB_DIR``, that rank 0 writes the job's runtime facts to.
RUNTIME_INFO_FILE = "runtime.json"

_DEVICE_TYPES = ("cuda", "xpu", "mps", "cpu")
_BACKEND_FOR = {"cuda": "nccl", "xpu": "xccl"}
_ACTIVE: list[Dist] = []


@dataclass(frozen=True, slots=True, kw_only=True)
class Coords:
    """A rank's position in the mesh, one index per dimension."""

    pp: int
    dp: int
    cp: int
    tp: int

    def __str__(self) -> str:
        return ",".join(f"{d}={getattr(self, d)}" for d in DIMS)


@dataclass(slots=True, kw_only=True, eq=False)
class Dist:
    """The initialised job, as one process sees it. Close it (or leave the ``with``)."""

    env: DistEnv
    device: torch.device
    backend: str | None
    group: Any = None
    groups: tuple[tuple[int, ...], ...] = ()
    degrees: Degrees | None = None
    mesh: Any = None
    coords: Coords | None = None
    seed: int | None = None
    _owns_group: bool = field(default=False, repr=False)
    _closed: bool = field(default=False, repr=False)

    @property
    def rank(self) -> int:
        """This process's global rank."""
        return self.env.rank

    @property
    def local_rank(self) -> int:
        """This process's rank on its node."""
        return self.env.local_rank

    @property
    def world_size(self) -> int:
        """The number of processes in the job."""
        return self.env.world_size

    @property
    def local_world_size(self) -> int:
        """The number of processes on this node."""
        return self.env.local_world_size

    @property
    def node_rank(self) -> int:
        """The index of this node."""
        return self.env.node_rank

    @property
    def num_nodes(self) -> int:
        """The number of nodes in the job."""
        return self.env.num_nodes

    @property
    def is_main(self) -> bool:
        """True on global rank 0."""
        return self.env.rank == 0

    def barrier(self) -> None:
        """Wait for every rank (no-op without a process group)."""
        if self.backend is None or self._closed:
            return
        import torch.distributed as tdist

        if self.backend == "nccl":
            tdist.barrier(device_ids=[self.device.index or 0])
        else:
            tdist.barrier()

    def log(self, step: int | None = None, *, reduce: str | None = None, **metrics: Any) -> None:
        """Record ``metrics`` at ``step`` in the job's metrics history (rank 0's values,
        or with ``reduce`` every rank's combined): :func:`distspec.runtime.metrics.log`."""
        from distspec.runtime.metrics import log

        log(step, reduce=reduce, **metrics)

    # Restart from the last checkpoint: distspec.runtime.resume.

    @property
    def attempt(self) -> int:
        """Which start of the job this is: 0 for the first (:func:`distspec.runtime.resume.attempt`)."""
        from distspec.runtime.resume import attempt

        return attempt()

    @property
    def restart_reason(self) -> str | None:
        """Why the job was restarted: None on the first attempt, else one of
        :data:`distspec.runtime.resume.REASONS`."""
        from distspec.runtime.resume import restart_reason

        return restart_reason()

    @property
    def checkpoint_dir(self) -> Path | str:
        """The job's checkpoint folder, the same across requeues and retries (a Path, or
        an fsspec URL): :func:`distspec.runtime.resume.checkpoint_dir`."""
        from distspec.runtime.resume import checkpoint_dir

        return checkpoint_dir()

    @property
    def preempted(self) -> bool:
        """Whether the requeue signal has come: save, then exit (distspec requeues)."""
        from distspec.runtime.resume import preempted

        return preempted()

    def on_preempt(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` once, in the main thread, when the requeue signal has come:
        :func:`distspec.runtime.resume.on_preempt`."""
        from distspec.runtime.resume import on_preempt

        on_preempt(fn)

    def save_checkpoint(
        self, state: Any, step: int, *, keep: int = 3, all_ranks: bool = False
    ) -> Path | str | None:
        """Save ``state`` as step ``step``'s checkpoint, atomically, keeping the newest
        ``keep`` (the main rank only, unless ``all_ranks``):
        :func:`distspec.runtime.resume.save_checkpoint`."""
        from distspec.runtime.resume import save_checkpoint

        return save_checkpoint(state, step, keep=keep, all_ranks=all_ranks)

    def load_checkpoint(
        self, *, map_location: Any = None, all_ranks: bool = False, weights_only: bool = False
    ) -> tuple[Any, int] | None:
        """The latest checkpoint as ``(state, step)``, or None; tensors on this rank's
        device unless ``map_location`` says otherwise:
        :func:`distspec.runtime.resume.load_checkpoint`."""
        from distspec.runtime.resume import load_checkpoint

        where = self.device if map_location is None else map_location
        return load_checkpoint(map_location=where, all_ranks=all_ranks, weights_only=weights_only)

    def heartbeat(self) -> None:
        """Tell the hang watchdog this rank is making progress (``-cfg watchdog``;
        :func:`distspec.runtime.progress.heartbeat`). Cheap: call it every step."""
        from distspec.runtime.progress import heartbeat

        heartbeat()

    def close(self) -> None:
        """Destroy the process group this :func:`init` made; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if not _ACTIVE:
            # The job's distributed part ends here: close the metrics sinks (W&B's finish)
            # now, while the process is sound, rather than at exit.
            from distspec.runtime.metrics import _close_writer

            _close_writer()
        # Drop our references to the groups first: a ProcessGroup object still alive at
        # interpreter shutdown is destroyed there, where gloo aborts the process now and
        # then ("terminate called without an active exception", torch 2.13).
        self.group = self.mesh = None
        if self._owns_group:
            import gc

            import torch.distributed as tdist

            # DDP's reducer lives on in reference cycles (autograd hooks on the model's
            # parameters) after the script drops it, holding gloo work objects; freed only
            # at interpreter shutdown, they abort the process (pytorch PR 179291 explains
            # the mechanism). Collect them now, while the group and interpreter are alive.
            gc.collect()
            if tdist.is_initialized():
                tdist.destroy_process_group()

    def describe(self) -> str:
        """One log line: launcher, world, hosts, backend, device, degrees."""
        parts = [self.env.describe(), f"backend={self.backend or 'none'}", f"device={self.device}"]
        if self.degrees is not None:
            parts.append(f"degrees={self.degrees.format()}")
        if self.groups:
            parts.append(f"groups={[list(g) for g in self.groups]}")
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """What this process knows of the job as JSON-ready values (the runtime facts rank 0
        writes)."""
        return {
            **self.env.to_dict(),
            "backend": self.backend,
            "device": str(self.device.type),
            "degrees": (
                {d: getattr(self.degrees, d) for d in DIMS} if self.degrees is not None else None
            ),
            "groups": [list(g) for g in self.groups],
            "seed": self.seed,
        }

    def __enter__(self) -> Dist:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def current() -> Dist:
    """The :class:`Dist` of the innermost :func:`init` still open.

    Raises:
        RuntimeEnvError: :func:`init` has not been called (or was closed).
    """
    if not _ACTIVE:
        raise RuntimeEnvError("distspec.runtime.init() has not been called in this process")
    return _ACTIVE[-1]


def init(
    *,
    backend: str | None = None,
    device: str | None = None,
    groups: Sequence[Sequence[int]] | None = (),
    seed: int | None = None,
    seed_per_rank: bool = False,
    timeout: float | datetime.timedelta = 1800.0,
    degrees: Mapping[str, int] | Degrees | None = None,
    env: DistEnv | None = None,
    log: bool = True,
) -> Dist:
    """Initialise this process for distributed work; see the module docstring.

    Args:
        backend: ``nccl``, ``xccl``, ``gloo`` (or any name torch knows); None picks by device.
        device: ``cuda``, ``xpu``, ``mps`` or ``cpu``; None picks the first available.
        groups: None: no process group; ``()``: the world group only; a list of rank
            lists: also one subgroup per list (disjoint, covering every rank).
        seed: seed Python, NumPy and torch with this; None leaves them alone.
        seed_per_rank: add the global rank to ``seed``.
        timeout: for the process group's collectives and rendezvous (seconds).
        degrees: ``{"tp": 2, "pp": 2, "cp": 1, "dp": ...}`` or a :class:`Degrees`; None
            reads ``$DISTSPEC_DEGREES`` (set by ``dist.ddp --tp/--pp/--cp``).
        env: where this process stands; :func:`~distspec.runtime.env.detect` by default.
        log: rank 0 prints one line describing the job to stderr.

    Raises:
        RuntimeEnvError: the launcher's variables are wrong, or the groups or degrees do
            not fit the world size (the message names the rank or the numbers).
    """
    import torch

    if env is None:
        # A nested init() (a library inside an initialised script) keeps the outer view:
        # the variables the outer one exported would otherwise read as a hand-set launcher.
        env = _ACTIVE[-1].env if _ACTIVE else detect()
    spec = _degrees(degrees, env.world_size)
    subgroups = _check_groups(groups, env.world_size)
    if spec is not None and groups is None:
        raise RuntimeEnvError("parallel degrees need a process group: pass groups=() or a list")

    dev, chosen = _pick_device_and_backend(
        torch, env, device, backend, want_group=groups is not None
    )
    if seed is not None:
        _seed_everything(torch, seed + (env.rank if seed_per_rank else 0))

    dist = Dist(
        env=env,
        device=dev,
        backend=chosen,
        groups=subgroups,
        degrees=spec,
        seed=seed,
    )
    meeting: float | None = None  # seconds init_process_group took
    if groups is not None:
        import torch.distributed as tdist

        os.environ.update(env.as_torch_env())
        pg_timeout = (
            timeout
            if isinstance(timeout, datetime.timedelta)
            else datetime.timedelta(seconds=timeout)
        )
        if not tdist.is_initialized():
            kwargs: dict[str, Any] = {"backend": chosen, "timeout": pg_timeout}
            if env.world_size == 1:
                # Nothing to meet: an in-memory store, no port to collide on.
                kwargs.update(store=tdist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
            else:
                kwargs.update(init_method="env://", rank=env.rank, world_size=env.world_size)
            if chosen == "nccl":
                kwargs["device_id"] = dev
            began = time.monotonic()
            tdist.init_process_group(**kwargs)
            dist._owns_group = True
            meeting = time.monotonic() - began
        elif tdist.get_world_size() != env.world_size:
            raise RuntimeEnvError(
                f"a process group of {tdist.get_world_size()} ranks already exists, "
                f"but the launcher says {env.world_size}"
            )
        dist.group = tdist.group.WORLD
        try:
            for ranks in subgroups:
                made = tdist.new_group(list(ranks))
                if env.rank in ranks:
                    dist.group = made
            if spec is not None:
                dist.mesh, dist.coords = _mesh(dev, spec)
        except BaseException:
            dist.close()
            raise
    _ACTIVE.append(dist)
    atexit.register(dist.close)
    if dist.is_main:
        _announce(dist, log, meeting)
    from distspec.runtime.progress import beat

    beat()  # the process group is up: progress, and the stack dump signal registered
    return dist


# ---------------------------------------------------------------------------


def _degrees(degrees: Mapping[str, int] | Degrees | None, world: int) -> Degrees | None:
    try:
        if degrees is None:
            text = os.environ.get(DEGREES_ENV, "").strip()
            if not text:
                return None
            spec = Degrees.parse(text)
        elif isinstance(degrees, Degrees):
            spec = degrees
        else:
            spec = Degrees.from_mapping(degrees)
        return spec.resolve(world)
    except SpecError as e:
        raise RuntimeEnvError(f"parallel degrees: {e}") from None


def _check_groups(
    groups: Sequence[Sequence[int]] | None, world: int
) -> tuple[tuple[int, ...], ...]:
    if not groups:
        return ()
    seen: dict[int, int] = {}
    result = []
    for i, ranks in enumerate(groups):
        members = tuple(ranks)
        if not members:
            raise RuntimeEnvError(f"groups[{i}] is empty")
        for r in members:
            if not isinstance(r, int) or not 0 <= r < world:
                raise RuntimeEnvError(f"groups[{i}] names rank {r!r}, not in 0..{world - 1}")
            if r in seen:
                raise RuntimeEnvError(f"rank {r} is in groups[{seen[r]}] and groups[{i}]")
            seen[r] = i
        result.append(members)
    missing = [r for r in range(world) if r not in seen]
    if missing:
        raise RuntimeEnvError(
            f"rank {missing[0]} is in no group"
            + (f" (nor are {len(missing) - 1} more)" if len(missing) > 1 else "")
            + f"; every rank of the {world} needs one"
        )
    return tuple(result)


def _device_count(torch: Any, kind: str) -> int:
    if kind == "cuda":
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    if kind == "xpu":
        xpu = getattr(torch, "xpu", None)
        return int(xpu.device_count()) if xpu is not None and xpu.is_available() else 0
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        return 1 if mps is not None and mps.is_available() else 0
    return 1


def _backend_available(kind: str) -> bool:
    import torch.distributed as tdist

    check = getattr(tdist, f"is_{kind}_available", None)
    if check is not None:
        return bool(check())
    try:
        return kind in tdist.Backend.backend_list
    except AttributeError:
        return False


def _pick_device_and_backend(
    torch: Any, env: DistEnv, device: str | None, backend: str | None, *, want_group: bool
) -> tuple[torch.device, str | None]:
    if device is not None and device not in _DEVICE_TYPES:
        raise RuntimeEnvError(f"device {device!r} is not one of {', '.join(_DEVICE_TYPES)}")
    if device is None:
        if backend in ("nccl", "xccl"):
            device = "cuda" if backend == "nccl" else "xpu"
        else:
            device = next(k for k in _DEVICE_TYPES if _device_count(torch, k) > 0)
    if backend is None:
        backend = _BACKEND_FOR.get(device, "gloo")

    why = ""
    count = _device_count(torch, device)
    if device != "cpu" and count == 0:
        why = f"no {device} device is visible (no driver, or none given to this job)"
    elif device in ("cuda", "xpu") and count < env.local_world_size and backend in ("nccl", "xccl"):
        why = (
            f"{env.local_world_size} ranks on this node share {count} {device} device(s); "
            f"{backend} needs one device per rank"
        )
    elif want_group and backend not in ("gloo", "mpi") and not _backend_available(backend):
        why = f"this torch build has no {backend} backend"
    if why:
        if env.local_rank == 0:
            warnings.warn(
                f"distspec.runtime: using gloo on the CPU instead of {backend} on {device}: {why}",
                RuntimeWarning,
                stacklevel=3,
            )
        device, backend = "cpu", "gloo"

    if device == "cpu":
        dev = torch.device("cpu")
    elif device == "mps":
        dev = torch.device("mps")
    else:
        dev = torch.device(device, env.local_rank % count)
        getattr(torch, device).set_device(dev)
    return dev, backend if want_group else None


def _seed_everything(torch: Any, seed: int) -> None:
    random.seed(seed)
    if "numpy" in sys.modules or _numpy_installed():
        import numpy

        numpy.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also every CUDA/XPU/MPS device torch knows
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _numpy_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("numpy") is not None


def _mesh(dev: torch.device, spec: Degrees) -> tuple[Any, Coords]:
    from torch.distributed.device_mesh import init_device_mesh

    shape = tuple(int(getattr(spec, d)) for d in DIMS)
    mesh = init_device_mesh(dev.type, shape, mesh_dim_names=DIMS)
    coordinate = mesh.get_coordinate()
    assert coordinate is not None  # every rank is in the mesh: it covers the world
    return mesh, Coords(**dict(zip(DIMS, coordinate, strict=True)))


def _announce(dist: Dist, log: bool, meeting: float | None) -> None:
    if log:
        print(f"distspec.runtime: {dist.describe()}", file=sys.stderr, flush=True)
    job_dir = os.environ.get("DISTSPEC_JOB_DIR")
    if not job_dir or "://" in job_dir or not Path(job_dir).is_dir():
        return
    _record_event(Path(job_dir), dist, meeting)
    target = Path(job_dir) / RUNTIME_INFO_FILE
    tmp = target.with_name(f".{RUNTIME_INFO_FILE}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(dist.to_dict(), indent=2) + "\n")
        tmp.replace(target)
    except OSError:
        tmp.unlink(missing_ok=True)  # informational only: never fail a job over it


def _record_event(job_dir: Path, dist: Dist, meeting: float | None) -> None:
    """Append the process group's coming up to the job's timeline
    (:mod:`distspec.timeline`): when, how long ``init_process_group`` took (None: the
    group was there already, or none was made), which attempt."""
    from distspec.runtime.metrics import attempt_number
    from distspec.timeline import TIMELINE_FILE

    event = {
        "event": "process_group",
        "time": time.time(),
        "attempt": attempt_number(os.environ),
        "world_size": dist.world_size,
        "backend": dist.backend,
        "seconds": None if meeting is None else round(meeting, 4),
    }
    try:
        with open(job_dir / TIMELINE_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")
    except OSError:
        pass  # informational only: never fail a job over it
