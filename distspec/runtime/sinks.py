"""Where else rank 0's metrics go: TensorBoard, W&B, MLflow (``DISTSPEC_METRICS_SINKS``).

``DISTSPEC_METRICS_SINKS=tensorboard,wandb,mlflow`` (any of them, comma-separated)
makes :func:`distspec.runtime.log` send each record it appends to ``metrics.jsonl`` to
these as well. Each writes into the job folder (the folder of the metrics file) unless
the tool's own variables say otherwise:

- ``tensorboard``: an event file in ``<job folder>/tensorboard/``, one scalar event per
  record, written and flushed in the caller's thread with TensorBoard's own record
  writer and protos (``torch.utils.tensorboard`` and ``EventFileWriter`` hand each
  record to a thread, 3-4x the cost per call); scalars are float32, TensorBoard's format;
- ``wandb``: ``wandb.init(dir=<job folder>)``, so runs land in ``<job folder>/wandb/``
  (``WANDB_DIR`` instead, when set); offline (sync later with ``wandb sync``) unless
  ``WANDB_MODE`` is set or an API key is at hand (``WANDB_API_KEY`` or a netrc entry
  for ``WANDB_BASE_URL``'s host); a run the script already started is logged into and
  left open;
- ``mlflow``: a ``MlflowClient`` on ``MLFLOW_TRACKING_URI``, else the file store
  ``file://<job folder>/mlruns`` (MLflow 3 refuses a file store unless
  ``MLFLOW_ALLOW_FILE_STORE=true``, which is then set if unset); a new run in
  ``MLFLOW_EXPERIMENT_ID``/``MLFLOW_EXPERIMENT_NAME`` or :data:`DEFAULT_PROJECT`, or
  the run ``MLFLOW_RUN_ID`` names (left open).

W&B's project is :data:`DEFAULT_PROJECT` and both runs are named for the job (its app
id, else its folder's name) unless ``WANDB_PROJECT``/``WANDB_NAME`` say otherwise.
These tools need an integer step: a record without one gets the last step sent plus
one (0 for the first). NaN and the infinities are sent as they are.

Failures: an unknown name is a ``ValueError`` when the writer is made; a sink whose
package is not installed is an ``ImportError`` of one line from the first record (which
then records nothing); a sink that fails to start or to write is reported once on
stderr, in one line, and dropped, while ``metrics.jsonl`` goes on. Nothing here is
imported before a sink is asked for, and each library only when its sink starts.
"""

from __future__ import annotations

import atexit
import importlib
import itertools
import os
import re
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from distspec.runtime.metrics import SINKS_ENV

__all__ = [
    "DEFAULT_PROJECT",
    "SINKS",
    "Job",
    "MlflowSink",
    "Sink",
    "Sinks",
    "TensorBoardSink",
    "WandbSink",
    "parse_sinks",
]

#: The W&B project and MLflow experiment of a job whose environment names none.
DEFAULT_PROJECT = "distspec"

_PREFIX = "distspec.runtime.log"


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """What a sink is told about the job: the folder its files go to, and its name."""

    folder: str
    name: str


class Sink(Protocol):
    """One destination: started with the :class:`Job`, then one call per record."""

    def write(self, step: int, when: float, values: Mapping[str, float]) -> None:
        """Send the record's ``values`` at ``step``, recorded at ``when`` (Unix seconds)."""

    def close(self) -> None:
        """Write out what is pending and let go of the destination."""


def _module(sink: str, name: str) -> ModuleType:
    """Import module ``name`` for ``sink``: an ImportError of one line if its package is
    missing or broken."""
    package = name.partition(".")[0]
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing = isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == package
        if missing:
            why = f"needs the {package} package: pip install 'distspec[{sink}]'"
        else:  # installed, but broken (a dependency missing or of the wrong version)
            why = f"could not import {name} ({_first_line(e)})"
        raise ImportError(f"{_PREFIX}: the {sink} sink {why}", name=package) from None


class TensorBoardSink:
    """Scalars in an event file in ``<job folder>/tensorboard/``, each record written and
    flushed in the caller's thread with TensorBoard's own record writer."""

    #: The modules it imports, in order (the first is the package to install).
    modules = (
        "tensorboard",
        "tensorboard.summary.writer.record_writer",
        "tensorboard.compat.proto.event_pb2",
        "tensorboard.compat.proto.summary_pb2",
    )
    _files = itertools.count()

    def __init__(self, job: Job) -> None:
        records, events, summaries = (_module("tensorboard", m) for m in self.modules[1:])
        self._event = events.Event
        self._summary = summaries.Summary
        folder = os.path.join(job.folder, "tensorboard")
        os.makedirs(folder, exist_ok=True)
        # Named as TensorBoard's own writers name theirs, which its reader looks for.
        host, pid, n = socket.gethostname(), os.getpid(), next(self._files)
        name = f"events.out.tfevents.{int(time.time()):010d}.{host}.{pid}.{n}"
        self._writer = records.RecordWriter(open(os.path.join(folder, name), "wb"))  # noqa: SIM115
        self._put(self._event(wall_time=time.time(), file_version="brain.Event:2"))

    def _put(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())
        self._writer.flush()

    def write(self, step: int, when: float, values: Mapping[str, float]) -> None:
        """One event holding a scalar per metric, flushed to the file."""
        summary = self._summary(
            value=[self._summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        )
        self._put(self._event(wall_time=when, step=step, summary=summary))

    def close(self) -> None:
        """Close the event file."""
        self._writer.close()


def _wandb_key_at_hand() -> bool:
    """Whether W&B can log in: an API key in the environment or in netrc for its host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    if not host:
        return False
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


class WandbSink:
    """A W&B run: offline in ``<job folder>/wandb/`` unless W&B is told or able to go online."""

    modules = ("wandb",)

    def __init__(self, job: Job) -> None:
        wandb = _module("wandb", "wandb")
        self._own = wandb.run is None
        if not self._own:
            self._run = wandb.run
            return
        # W&B's own variables win: pass an argument only where its variable is unset.
        kwargs: dict[str, Any] = {}
        for variable, argument, value in (
            ("WANDB_DIR", "dir", job.folder),
            ("WANDB_PROJECT", "project", DEFAULT_PROJECT),
            ("WANDB_NAME", "name", job.name),
        ):
            if not os.environ.get(variable):
                kwargs[argument] = value
        if not os.environ.get("WANDB_MODE") and not _wandb_key_at_hand():
            kwargs["mode"] = "offline"
        self._run = wandb.init(**kwargs)

    def write(self, step: int, when: float, values: Mapping[str, float]) -> None:
        """``run.log`` at ``step`` (W&B keeps its own time)."""
        self._run.log(dict(values), step=step)

    def close(self) -> None:
        """Finish the run, if this sink started it."""
        if self._own:
            self._run.finish()


class MlflowSink:
    """An MLflow run, in ``<job folder>/mlruns`` unless ``MLFLOW_TRACKING_URI`` is set."""

    modules = (
        "mlflow",
        "mlflow.entities",
        "mlflow.environment_variables",
        "mlflow.exceptions",
        "mlflow.tracking",
    )

    def __init__(self, job: Job) -> None:
        entities, variables, exceptions, tracking = (_module("mlflow", m) for m in self.modules[1:])
        self._conflict = exceptions.MlflowException
        self._metric = entities.Metric
        self._pending: Any = None  # the last batch queued, with MLFLOW_ENABLE_ASYNC_LOGGING
        uri = variables.MLFLOW_TRACKING_URI.get()
        if not uri:
            uri = Path(job.folder, "mlruns").resolve().as_uri()
            # MLflow 3 keeps the file store for those who ask; this default asks.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = tracking.MlflowClient(uri)
        run_id = variables.MLFLOW_RUN_ID.get()
        self._own = not run_id
        if not run_id:
            experiment = variables.MLFLOW_EXPERIMENT_ID.get() or self._experiment(
                variables.MLFLOW_EXPERIMENT_NAME.get() or DEFAULT_PROJECT
            )
            run_id = self._client.create_run(experiment, run_name=job.name).info.run_id
        self.run_id: str = run_id

    def _experiment(self, name: str) -> str:
        found = self._client.get_experiment_by_name(name)
        if found is None:
            try:
                return str(self._client.create_experiment(name))
            except self._conflict:
                # Another job made it in the meantime.
                found = self._client.get_experiment_by_name(name)
                if found is None:
                    raise
        return str(found.experiment_id)

    def write(self, step: int, when: float, values: Mapping[str, float]) -> None:
        """One ``log_batch`` of the metrics, stamped ``when``."""
        millis = int(when * 1000)
        metrics = [self._metric(k, v, millis, step) for k, v in values.items()]
        self._pending = self._client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        """Wait for queued batches; end the run (FINISHED) if this sink made it."""
        if self._pending is not None:  # queued batches are written in order
            self._pending.wait()
            self._pending = None
        if self._own:
            self._client.set_terminated(self.run_id)


#: Every sink, by the name ``DISTSPEC_METRICS_SINKS`` gives it.
SINKS: Mapping[str, type[TensorBoardSink | WandbSink | MlflowSink]] = {
    "tensorboard": TensorBoardSink,
    "wandb": WandbSink,
    "mlflow": MlflowSink,
}


def parse_sinks(names: str | Sequence[str], source: str = SINKS_ENV) -> tuple[str, ...]:
    """The sink names in ``names`` (text separated by commas, ``+`` or spaces, or a
    sequence), each once, in order, in lower case; blanks are ignored.

    Raises:
        ValueError: a name that is not in :data:`SINKS` (one line naming the known ones).
    """
    items = re.split(r"[,+\s]", names) if isinstance(names, str) else names
    out: dict[str, None] = {}
    for text in items:
        item = text.strip().lower()
        if not item:
            continue
        if item not in SINKS:
            import difflib

            close = difflib.get_close_matches(item, list(SINKS), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(
                f"{_PREFIX}: {source} names an unknown metrics sink {text.strip()!r}{hint}; "
                f"the known ones: {', '.join(SINKS)}"
            )
        out.setdefault(item, None)
    return tuple(out)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else ""
    if len(line) > 200:
        line = line[:199] + "…"
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


class Sinks:
    """The sinks a writer sends records to: started on the first record, each dropped
    (with one line on stderr) when it fails; ``close`` closes them, and the next record
    starts them again."""

    def __init__(self, names: Sequence[str], job: Job) -> None:
        self.names = parse_sinks(names, "sinks")
        self.job = job
        self._started = False
        self._open: list[tuple[str, Sink]] = []
        self._last_step = -1

    @property
    def active(self) -> tuple[str, ...]:
        """The names of the sinks started and still working."""
        return tuple(name for name, _ in self._open)

    def start(self) -> None:
        """Start the sinks unless started.

        Raises:
            ImportError: a sink's package is missing (one line; no sink is started).
        """
        if self._started:
            return
        for name in self.names:  # every package first: all or none
            _module(name, SINKS[name].modules[0])
        self._started = True
        for name in self.names:
            try:
                self._open.append((name, SINKS[name](self.job)))
            except Exception as e:  # reported, and the job goes on
                self._report(name, "could not start", e)
        # Registered after the libraries' own exit hooks, so it runs before them: W&B's
        # tears down its service process, after which its run can no longer finish.
        atexit.register(self.close)

    def write(self, step: int | None, when: float, values: Mapping[str, float]) -> None:
        """Send one record to every sink (``step`` None: the last step plus one)."""
        self.start()
        if step is None:
            step = self._last_step + 1
        self._last_step = step
        for name, sink in list(self._open):
            try:
                sink.write(step, when, values)
            except Exception as e:  # reported, and the job goes on
                self._open.remove((name, sink))
                self._report(name, "failed", e)
                self._close_quietly(sink)

    def close(self) -> None:
        """Close every sink; a failure to is reported, the others still closed."""
        atexit.unregister(self.close)
        opened, self._open, self._started = self._open, [], False
        for name, sink in opened:
            try:
                sink.close()
            except Exception as e:  # reported; the others are still closed
                self._report(name, "failed to close", e, dropped=False)

    @staticmethod
    def _close_quietly(sink: Sink) -> None:
        try:
            sink.close()
        except Exception:  # already reported as failed
            pass

    @staticmethod
    def _report(name: str, what: str, error: BaseException, *, dropped: bool = True) -> None:
        after = "; it is off from here on, metrics.jsonl goes on" if dropped else ""
        print(
            f"{_PREFIX}: the {name} sink {what} ({_first_line(error)}){after}",
            file=sys.stderr,
            flush=True,
        )
