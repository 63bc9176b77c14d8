"""Recording metrics from the training loop: :func:`log`, also ``Dist.log``.

::

    from distspec.runtime import init

    with init() as dist:
        for step in range(steps):
            loss = train_step()
            dist.log(step=step, loss=loss)                  # rank 0's value
            dist.log(step=step, reduce="mean", loss=loss)   # the mean over all ranks

Rank 0 appends one line per call to ``metrics.jsonl`` in the job folder
(``$DISTSPEC_JOB_DIR``; format in :mod:`distspec.metrics`) and flushes it, so
``distspec metrics HANDLE -f`` shows a running job. Other ranks' calls record
nothing, unless ``reduce`` is given: then every rank must call, with the same metric
names, and the values are combined across ranks with one all-reduce (the only cost
beyond a line written). ``DISTSPEC_METRICS`` names another file. Without either (a
script run outside distspec, or under ``distspec launch``) nothing is written: the
same script runs under any launcher, quietly.

Values are numbers: Python ints, floats and bools, and anything with ``.item()``
(a one-element torch tensor, a NumPy scalar), which costs a device sync for a GPU
tensor, as ``.item()`` always does. NaN and the infinities are recorded as such.

``DISTSPEC_METRICS_SINKS=tensorboard,wandb,mlflow`` also sends each record rank 0
writes to those tools, into the same folder (:mod:`distspec.runtime.sinks`). The module's
writer is closed, and the sinks with it, when the outermost ``init()`` closes and at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from distspec.metrics import METRICS_FILE, RESERVED, encode_value

if TYPE_CHECKING:
    from distspec.runtime.sinks import Sinks

__all__ = [
    "ATTEMPT_ENV",
    "ATTEMPT_FILE",
    "METRICS_ENV",
    "REDUCTIONS",
    "SHIP_ENV",
    "SINKS_ENV",
    "MetricsWriter",
    "attempt_number",
    "log",
]

#: Names the file to write instead of ``$DISTSPEC_JOB_DIR/metrics.jsonl``.
METRICS_ENV = "DISTSPEC_METRICS"

#: How often (seconds) records go to a job folder that is a URL; default SHIP_SECONDS.
SHIP_ENV = "DISTSPEC_METRICS_SHIP_S"
SHIP_SECONDS = 10.0

#: Names the other places records go, comma-separated (:mod:`distspec.runtime.sinks`).
SINKS_ENV = "DISTSPEC_METRICS_SINKS"

#: What ``reduce`` may be.
REDUCTIONS = ("mean", "sum", "max", "min")


#: Set by local_cwd's supervisor on each start of a replica: how many starts came before.
ATTEMPT_ENV = "DISTSPEC_ATTEMPT"

#: The file, in the job folder, where the Slurm and PBS scripts' retry loop writes the
#: number of the attempt it runs (0, 1, ...; the loop starts at 0 on each requeue).
ATTEMPT_FILE = "attempt"


def attempt_number(environ: dict[str, str] | os._Environ[str]) -> int:
    """Which start of the job this process belongs to: 0 for the first, then one more
    for each restart of the workers by torchrun (``TORCHELASTIC_RESTART_COUNT``), each
    requeue by Slurm (``SLURM_RESTART_COUNT``), each retry of the Slurm and PBS scripts'
    retry loop (``$DISTSPEC_JOB_DIR/attempt``) and each restart by local_cwd's
    supervisor (``DISTSPEC_ATTEMPT``)."""
    total = 0
    for key in ("TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT", ATTEMPT_ENV):
        try:
            total += max(0, int(environ.get(key, "0") or 0))
        except ValueError:
            pass
    job_dir = environ.get("DISTSPEC_JOB_DIR", "")
    if job_dir and "://" not in job_dir:
        try:
            with open(os.path.join(job_dir, ATTEMPT_FILE), encoding="utf-8") as f:
                total += max(0, int(f.read().strip() or 0))
        except (OSError, ValueError):
            pass
    return total


def _rank_and_world(environ: dict[str, str] | os._Environ[str]) -> tuple[int, int]:
    if "torch" in sys.modules:
        import torch.distributed as tdist

        if tdist.is_available() and tdist.is_initialized():
            return tdist.get_rank(), tdist.get_world_size()
    try:
        return int(environ.get("RANK", "0")), int(environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def _number(name: str, value: Any) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item):
        got = item()
        if isinstance(got, (bool, int, float)):
            return float(got)
    raise TypeError(
        f"distspec.runtime.log: metric {name}={value!r} is not a number (give an int, a "
        "float, or a one-element tensor)"
    )


class MetricsWriter:
    """Where one process records metrics: rank ``rank`` of ``world_size``, writing to
    ``path`` (None: nowhere). Rank 0 opens the file on its first record, and starts the
    ``sinks`` named (:data:`~distspec.runtime.sinks.SINKS`), which write into the file's
    folder and call the run ``name`` (default: that folder's name)."""

    def __init__(
        self,
        path: str | None,
        rank: int,
        world_size: int,
        attempt: int,
        *,
        sinks: Sequence[str] = (),
        name: str | None = None,
        remote: str | None = None,
        every: float = SHIP_SECONDS,
    ) -> None:
        self.path = path
        self.rank = rank
        self.world_size = world_size
        self.attempt = attempt
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        self._sinks: Sinks | None = None
        self._shipper = _Shipper(remote, every) if remote else None
        if sinks:
            from distspec.runtime.sinks import Job, Sinks

            folder = os.path.dirname(os.path.abspath(path)) if path else ""
            job = Job(folder=folder, name=name or os.path.basename(folder))
            self._sinks = Sinks(sinks, job)  # checks the names, starts nothing

    @classmethod
    def from_env(
        cls,
        environ: dict[str, str] | os._Environ[str] = os.environ,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> MetricsWriter:
        """The writer of this process: the file from ``DISTSPEC_METRICS`` or
        ``$DISTSPEC_JOB_DIR``; the rank and world size as given, else those of an
        initialised ``torch.distributed`` process group, else ``RANK``/``WORLD_SIZE``
        (torchrun's), else rank 0 of 1; the sinks from ``DISTSPEC_METRICS_SINKS``, the run
        named by ``DISTSPEC_APP_ID``.

        Raises:
            ValueError: ``DISTSPEC_METRICS_SINKS`` names an unknown sink.
        """
        path = environ.get(METRICS_ENV) or None
        job_dir = environ.get("DISTSPEC_JOB_DIR", "")
        remote = None
        if path is None and job_dir and "://" not in job_dir:
            path = os.path.join(job_dir, METRICS_FILE)
        elif path is None and job_dir:
            # A job folder that is a URL (Kubernetes' job_dir): a file of this pod's
            # own, shipped to the folder in parts (see _Shipper).
            import tempfile

            remote = job_dir
            path = os.path.join(tempfile.gettempdir(), f"distspec-metrics-{os.getpid()}.jsonl")
        if rank is None or world_size is None:
            rank, world_size = _rank_and_world(environ)
        sinks: tuple[str, ...] = ()
        if environ.get(SINKS_ENV, "").strip():
            from distspec.runtime.sinks import parse_sinks

            sinks = parse_sinks(environ[SINKS_ENV])
        name = environ.get("DISTSPEC_APP_ID") or None
        return cls(
            path,
            rank,
            world_size,
            attempt_number(environ),
            sinks=sinks,
            name=name,
            remote=remote,
            every=_seconds(environ.get(SHIP_ENV)),
        )

    def log(self, step: int | None = None, *, reduce: str | None = None, **metrics: Any) -> None:
        """Record ``metrics`` at ``step`` (see the module's docstring)."""
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            raise TypeError(f"distspec.runtime.log: step must be an int or None, got {step!r}")
        if reduce is not None and reduce not in REDUCTIONS:
            raise ValueError(
                f"distspec.runtime.log: reduce={reduce!r}; use one of {', '.join(REDUCTIONS)}"
            )
        bad = [n for n in metrics if n in RESERVED]
        if bad:
            raise ValueError(
                f"distspec.runtime.log: {bad[0]!r} is the record's own key; name the metric "
                "otherwise"
            )
        if not metrics:
            raise ValueError("distspec.runtime.log: give at least one metric, e.g. loss=0.5")
        if reduce is not None and self.world_size > 1:
            values = self._reduce(metrics, reduce)
        elif self.rank != 0:
            return
        else:
            values = {name: _number(name, v) for name, v in metrics.items()}
        if self.rank == 0:
            self._write(step, values)

    def _reduce(self, metrics: dict[str, Any], how: str) -> dict[str, float]:
        import torch
        import torch.distributed as tdist

        if not tdist.is_available() or not tdist.is_initialized():
            raise RuntimeError(
                f"distspec.runtime.log(reduce={how!r}) needs the process group: call it "
                "inside distspec.runtime.init() (or after torch.distributed.init_process_group)"
            )
        names = sorted(metrics)
        values = [_number(n, metrics[n]) for n in names]
        # On the process group's device: gloo takes CPU tensors, nccl CUDA ones.
        device = "cpu"
        if tdist.get_backend() == "nccl":
            device = f"cuda:{torch.cuda.current_device()}"
        tensor = torch.tensor(values, dtype=torch.float64, device=device)
        op = {
            "mean": tdist.ReduceOp.SUM,
            "sum": tdist.ReduceOp.SUM,
            "max": tdist.ReduceOp.MAX,
            "min": tdist.ReduceOp.MIN,
        }[how]
        tdist.all_reduce(tensor, op=op)
        if how == "mean":
            tensor /= tdist.get_world_size()
        return dict(zip(names, tensor.tolist(), strict=True))

    def _write(self, step: int | None, values: dict[str, float]) -> None:
        if self.path is None:
            return
        when = time.time()
        record: dict[str, object] = {"step": step, "time": when, "attempt": self.attempt}
        for name, value in values.items():
            record[name] = encode_value(value)
        line = json.dumps(record, separators=(", ", ": ")) + "\n"
        with self._lock:
            if self._sinks is not None:
                self._sinks.start()  # a sink's missing package: this call records nothing
            if self._file is None:
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
            self._file.write(line)
            self._file.flush()
            if self._shipper is not None:
                self._shipper.add(line)
            if self._sinks is not None:
                self._sinks.write(step, when, values)

    def close(self) -> None:
        """Close the file and the sinks (the next record opens them again)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._sinks is not None:
                self._sinks.close()
        if self._shipper is not None:
            self._shipper.close()


def _seconds(text: str | None) -> float:
    """``DISTSPEC_METRICS_SHIP_S`` as seconds (a positive number), else the default."""
    try:
        value = float(text) if text else SHIP_SECONDS
    except ValueError:
        return SHIP_SECONDS
    return value if value > 0 else SHIP_SECONDS


class _Shipper:
    """Sends rank 0's records to a job folder that is an fsspec URL (an object store:
    no appending there). Every ``every`` seconds, from a daemon thread, the lines
    recorded since the last shipment go up as one new object,
    ``<folder>/metrics.d/<nanoseconds>-<pid>.jsonl``: the names sort in time order,
    across restarts too, and a reader joins them (:func:`distspec.metrics.read_history`).
    :meth:`close` (at the end of ``init()``, at exit) sends the rest. A failed upload is
    said once on stderr and its lines are tried again with the next."""

    def __init__(self, folder: str, every: float) -> None:
        from distspec.metrics import PARTS_DIR

        self.folder = f"{folder.rstrip('/')}/{PARTS_DIR}"
        self.every = every
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self._ship_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said = False

    def add(self, line: str) -> None:
        with self._lock:
            self._pending.append(line)
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(
                    target=self._loop, name="distspec-metrics-ship", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.ship()

    def ship(self) -> None:
        """Send what is pending now, as one object."""
        with self._ship_lock:
            with self._lock:
                lines, self._pending = self._pending, []
            if not lines:
                return
            name = f"{time.time_ns():020d}-{os.getpid()}.jsonl"
            try:
                import fsspec

                fs, root = fsspec.core.url_to_fs(self.folder)
                fs.makedirs(root, exist_ok=True)
                fs.pipe_file(f"{root}/{name}", "".join(lines).encode())
            except Exception as e:  # the store's own errors too: training goes on
                with self._lock:
                    self._pending[:0] = lines
                if not self._said:
                    self._said = True
                    print(
                        f"distspec.runtime.log: could not send metrics to {self.folder}: "
                        f"{type(e).__name__}: {e}; trying again every {self.every:g}s",
                        file=sys.stderr,
                        flush=True,
                    )

    def close(self) -> None:
        """Stop the thread and send the rest."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout=self.every + 30)
        self.ship()


_WRITER: MetricsWriter | None = None
_AT_EXIT = False


def _writer() -> MetricsWriter:
    global _WRITER, _AT_EXIT
    if _WRITER is None:
        rank = world = None
        from distspec.runtime.initialize import _ACTIVE

        if _ACTIVE:  # inside init(): its rank and world, whatever the launcher
            rank, world = _ACTIVE[-1].rank, _ACTIVE[-1].world_size
        _WRITER = MetricsWriter.from_env(rank=rank, world_size=world)
        if not _AT_EXIT:  # W&B's finish, TensorBoard's last flush
            atexit.register(_close_writer)
            _AT_EXIT = True
    return _WRITER


def _close_writer() -> None:
    """Close this process's writer, if made, and forget it (the next :func:`log` makes one
    again, from the environment then): at exit, and when the outermost ``init()`` closes."""
    global _WRITER
    writer, _WRITER = _WRITER, None
    if writer is not None:
        writer.close()


def log(step: int | None = None, *, reduce: str | None = None, **metrics: Any) -> None:
    """Record ``metrics`` (numbers, by name) at ``step`` in the job's metrics history.

    Rank 0's values are recorded; with ``reduce`` (``mean``, ``sum``, ``max`` or
    ``min``) every rank calls with the same names and the values are combined across
    ranks first, with one all-reduce. See the module's docstring for where it goes.

    Raises:
        TypeError: a value that is not a number, a step that is not an int.
        ValueError: no metric, a metric named ``step``/``time``/``attempt``, an
            unknown ``reduce``, an unknown sink in ``DISTSPEC_METRICS_SINKS``.
        RuntimeError: ``reduce`` without an initialised process group.
        ImportError: (rank 0, first record) a sink's package is not installed.
    """
    _writer().log(step, reduce=reduce, **metrics)
    from distspec.runtime.progress import beat

    beat()  # a record is progress, for the hang watchdog
