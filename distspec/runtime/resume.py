"""Restart from the last checkpoint: which attempt this is and why, where checkpoints go,
saving and loading the latest one atomically, and pre-emption.

::

    from distspec.runtime import init

    with init() as dist:
        got = dist.load_checkpoint()                  # (state, step), or None: a fresh start
        start = 0 if got is None else got[1]
        if got is not None:
            model.load_state_dict(got[0]["model"])
            print(f"resuming from step {start} (attempt {dist.attempt}, "
                  f"reason {dist.restart_reason})")
        for step in range(start + 1, steps + 1):
            train_step()
            if step % 100 == 0 or dist.preempted:
                dist.save_checkpoint({"model": model.state_dict()}, step)
            if dist.preempted:                        # the requeue signal came
                break                                 # exit 0: distspec requeues the job

- :func:`attempt`: 0 on the first run of the job, then one more for each torchrun
  restart, Slurm requeue, retry of the Slurm/PBS scripts' retry loop and local_cwd
  restart (:func:`distspec.runtime.metrics.attempt_number`).
- :func:`restart_reason`: None on the first attempt, else one of :data:`REASONS`.
  Whoever restarts the job writes the reason, one word, to
  ``$DISTSPEC_JOB_DIR/restart_reason``: the Slurm script's requeue trap
  (``time-limit``), the Slurm and PBS scripts' retry loop and local_cwd's supervisor
  (``failed-rank``, or ``hang`` when the hang watchdog's ``hang/hung`` is newer than the
  attempt's start). A Slurm job requeued by Slurm itself (a node failure, pre-emption
  by another job, ``scontrol requeue``) is ``unknown``: no accounting database tells
  the script why; with ``-cfg exclude_failed_nodes=true`` the script writes
  ``node-failure`` when it finds a node of the last run gone, and so does the
  script of a job with spare nodes (``-cfg spares``) that runs its step again on
  them (:mod:`distspec.schedulers.slurm.nodes`). ``preempted`` is reserved. Workers restarted by torchrun itself (``TORCHELASTIC_RESTART_COUNT``)
  are ``failed-rank``.
- :func:`checkpoint_dir`: ``$DISTSPEC_CHECKPOINT_DIR`` (``-cfg checkpoint_dir=...``), else
  ``$DISTSPEC_JOB_DIR/checkpoints``, else ``./checkpoints``; the job folder is the same
  across requeues and retries, so the checkpoints are too. A URL
  (``s3://bucket/run``, ``memory://x``) is kept as a string and written through fsspec.
- :func:`save_checkpoint` / :func:`load_checkpoint`: ``step-00000042.pt`` files written
  under a temporary name and renamed (atomic on a POSIX file system; on an object
  store one PUT), the newest ``keep`` kept, a ``latest`` file naming the newest
  (written the same way). Only the main rank (rank 0) saves; every rank loads the same
  file. With ``all_ranks=True`` each rank saves and loads its own files, in
  ``rank-<R>/`` below the folder (sharded state). Neither call synchronises the ranks.
- :func:`preempted` / :func:`on_preempt`: the Slurm script's requeue trap creates
  ``$DISTSPEC_JOB_DIR/preempt`` when the requeue signal arrives (``requeue_before``
  seconds ahead of the time limit); :func:`preempted` is a stat of it (true from then
  on). A rank that sees it writes ``preempt.seen``, which tells the script that the
  job stopped because of it (and is to be requeued) rather than finished.
  :func:`on_preempt` callbacks run once, in the main thread, from the first
  :func:`preempted`, heartbeat or ``log`` call after the flag appears.

Torch is imported only by :func:`save_checkpoint` and :func:`load_checkpoint`.
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distspec.runtime.metrics import attempt_number

__all__ = [
    "CHECKPOINT_ENV",
    "LATEST_FILE",
    "PREEMPT_FILE",
    "PREEMPT_SEEN_FILE",
    "REASONS",
    "REASON_FILE",
    "attempt",
    "checkpoint_dir",
    "load_checkpoint",
    "on_preempt",
    "preempted",
    "restart_reason",
    "save_checkpoint",
]

#: Names the checkpoint folder (a path or an fsspec URL); ``-cfg checkpoint_dir=`` sets it.
CHECKPOINT_ENV = "DISTSPEC_CHECKPOINT_DIR"

#: The file, in the job folder, naming why the job was restarted (one of REASONS).
REASON_FILE = "restart_reason"

#: The file, in the job folder, the requeue trap creates when the requeue signal comes.
PREEMPT_FILE = "preempt"

#: The file, in the job folder, a rank writes when it has seen PREEMPT_FILE.
PREEMPT_SEEN_FILE = "preempt.seen"

#: The file, in the checkpoint folder, naming the newest checkpoint.
LATEST_FILE = "latest"

#: What :func:`restart_reason` may say.
REASONS = ("time-limit", "preempted", "node-failure", "failed-rank", "hang", "unknown")

_STEP_FILE = r"step-([0-9]{8,})\.pt"

_HOOKS: list[Callable[[], None]] = []
_state: dict[str, Any] = {"seen": False, "registered": False, "checked": 0.0}
_lock = threading.Lock()
#: How often (seconds) a heartbeat or log call looks for the pre-emption flag.
_CHECK_EVERY = 0.5


def _job_dir() -> Path | None:
    job_dir = os.environ.get("DISTSPEC_JOB_DIR", "")
    if not job_dir or "://" in job_dir:
        return None
    return Path(job_dir)


def _rank() -> int:
    from distspec.runtime.initialize import _ACTIVE

    if _ACTIVE:
        return _ACTIVE[-1].rank
    if "torch" in sys.modules:
        import torch.distributed as tdist

        if tdist.is_available() and tdist.is_initialized():
            return int(tdist.get_rank())
    for key in ("RANK", "SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(key, "")
        if value.isdigit():
            return int(value)
    return 0


# -- attempt and restart reason ---------------------------------------------------------


def attempt() -> int:
    """Which start of the job this is: 0 for the first (see the module's docstring)."""
    return attempt_number(os.environ)


def restart_reason() -> str | None:
    """Why the job was restarted: None on the first attempt, else one of :data:`REASONS`
    (see the module's docstring for who says which)."""
    if attempt() == 0:
        return None
    try:
        if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0:
            return "failed-rank"  # torchrun restarted the workers: the latest restart
    except ValueError:
        pass
    job_dir = _job_dir()
    if job_dir is None:
        return "unknown"
    try:
        word = (job_dir / REASON_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return "unknown"
    return word if word in REASONS else "unknown"


# -- the checkpoint folder --------------------------------------------------------------


def checkpoint_dir() -> Path | str:
    """Where checkpoints go (see the module's docstring): a Path, or an fsspec URL as a
    string."""
    named = os.environ.get(CHECKPOINT_ENV, "").strip()
    if named:
        return named.rstrip("/") if "://" in named else Path(named)
    job_dir = os.environ.get("DISTSPEC_JOB_DIR", "")
    if job_dir:
        return (
            f"{job_dir.rstrip('/')}/checkpoints"
            if "://" in job_dir
            else Path(job_dir) / "checkpoints"
        )
    return Path("checkpoints")


class _Folder:
    """The few file operations a checkpoint folder needs, on a local path or a URL."""

    def __init__(self, where: Path | str) -> None:
        self.url = isinstance(where, str) and "://" in where
        self.where = where
        if self.url:
            import fsspec

            self.fs, self.root = fsspec.core.url_to_fs(str(where))
        else:
            self.path = Path(where)

    def names(self) -> list[str]:
        if self.url:
            try:
                return [
                    p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False)
                ]
            except FileNotFoundError:
                return []
        try:
            return os.listdir(self.path)
        except FileNotFoundError:
            return []

    def read(self, name: str) -> bytes | None:
        try:
            if self.url:
                data: bytes = self.fs.cat_file(f"{self.root}/{name}")
                return data
            return (self.path / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def write(self, name: str, data: bytes) -> None:
        """``data`` as ``name``, all or nothing: a temporary file renamed over it, synced
        to disk first (an object store's PUT is all or nothing by itself)."""
        if self.url:
            self.fs.makedirs(self.root, exist_ok=True)
            self.fs.pipe_file(f"{self.root}/{name}", data)
            return
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{name}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)  # the rename itself, on a crash
        except OSError:
            pass
        finally:
            os.close(fd)

    def remove(self, name: str) -> None:
        try:
            if self.url:
                self.fs.rm_file(f"{self.root}/{name}")
            else:
                (self.path / name).unlink()
        except FileNotFoundError:
            pass


def _folder(all_ranks: bool) -> _Folder:
    where = checkpoint_dir()
    if all_ranks:
        sub = f"rank-{_rank()}"
        where = f"{where}/{sub}" if isinstance(where, str) else where / sub
    return _Folder(where)


def _steps(folder: _Folder) -> list[tuple[int, str]]:
    """The checkpoint files there, newest step first (temporary files are not among them)."""
    found = []
    for name in folder.names():
        match = re.fullmatch(_STEP_FILE, name)
        if match:
            found.append((int(match.group(1)), name))
    return sorted(found, reverse=True)


def save_checkpoint(
    state: Any, step: int, *, keep: int = 3, all_ranks: bool = False
) -> Path | str | None:
    """Save ``state`` (anything ``torch.save`` takes) as the checkpoint of ``step``.

    The main rank writes ``<checkpoint_dir>/step-<step>.pt`` atomically, then
    ``latest``, then removes all but the newest ``keep`` checkpoints (by step; the one
    just written is always kept); the other ranks return at once, writing nothing. With
    ``all_ranks=True`` every rank does this in its own ``rank-<R>/`` folder. No rank
    waits for another.

    Returns:
        Where the checkpoint went, or None on a rank that saves nothing.

    Raises:
        ValueError: a negative ``step``, or ``keep`` below 1.
        OSError: the folder cannot be written.
    """
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"save_checkpoint: step must be an int >= 0, got {step!r}")
    if keep < 1:
        raise ValueError(f"save_checkpoint: keep must be at least 1, got {keep!r}")
    if not all_ranks and _rank() != 0:
        return None
    import torch

    folder = _folder(all_ranks)
    buffer = io.BytesIO()
    torch.save({"step": step, "state": state}, buffer)
    name = f"step-{step:08d}.pt"
    folder.write(name, buffer.getvalue())
    folder.write(LATEST_FILE, f"{name}\n".encode())
    for _, old in [s for s in _steps(folder) if s[1] != name][keep - 1 :]:
        folder.remove(old)
    where = folder.where
    return f"{where}/{name}" if isinstance(where, str) else where / name


def load_checkpoint(
    *, map_location: Any = "cpu", all_ranks: bool = False, weights_only: bool = False
) -> tuple[Any, int] | None:
    """The latest checkpoint as ``(state, step)``, or None when there is none.

    ``latest`` names it; when that file is missing or names a checkpoint that cannot be
    read, the newest one that can be read is taken (a half-written temporary file is
    never one). Every rank reads the main rank's checkpoint (with ``all_ranks=True``,
    its own). ``map_location`` and ``weights_only`` go to ``torch.load``.
    """
    import torch

    folder = _folder(all_ranks)
    candidates = [name for _, name in _steps(folder)]
    pointer = folder.read(LATEST_FILE)
    if pointer is not None:
        named = pointer.decode("utf-8", "replace").strip()
        if re.fullmatch(_STEP_FILE, named):
            candidates = [named, *(c for c in candidates if c != named)]
    for name in candidates:
        data = folder.read(name)
        if data is None:
            continue
        try:
            saved = torch.load(
                io.BytesIO(data), map_location=map_location, weights_only=weights_only
            )
        except Exception as e:  # a damaged file: say so, take the one before
            print(
                f"distspec: checkpoint {name} cannot be read ({type(e).__name__}: {e}); "
                "trying an older one",
                file=sys.stderr,
                flush=True,
            )
            continue
        if isinstance(saved, dict) and isinstance(saved.get("step"), int) and "state" in saved:
            return saved["state"], saved["step"]
    return None


# -- pre-emption ------------------------------------------------------------------------


def preempted() -> bool:
    """Whether the requeue signal has come (the job folder's ``preempt`` flag exists):
    save and exit, distspec requeues the job. Runs the :func:`on_preempt` callbacks the
    first time it is true (in the main thread)."""
    if not _state["seen"]:
        job_dir = _job_dir()
        if job_dir is None or not (job_dir / PREEMPT_FILE).exists():
            return False
        _state["seen"] = True
        try:
            (job_dir / PREEMPT_SEEN_FILE).touch()
        except OSError:
            pass
    _fire()
    return True


def on_preempt(fn: Callable[[], None]) -> None:
    """Call ``fn()`` once, in the main thread, from the first :func:`preempted` check, heartbeat
    (``distspec.runtime.heartbeat``) or ``log`` call after the requeue signal came."""
    with _lock:
        _HOOKS.append(fn)
        if not _state["registered"]:
            _state["registered"] = True
            from distspec.runtime import progress

            progress.HOOKS.append(_check)
    if _state["seen"]:
        _fire()


def _check() -> None:
    """The heartbeat hook: look for the flag, at most every ``_CHECK_EVERY`` seconds."""
    if _state["seen"]:
        _fire()
        return
    now = time.monotonic()
    if now - _state["checked"] < _CHECK_EVERY:
        return
    _state["checked"] = now
    preempted()


def _fire() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    while True:
        with _lock:
            if not _HOOKS:
                return
            fn = _HOOKS.pop(0)
        fn()


def _reset() -> None:
    """Forget the flag and the callbacks (for tests)."""
    with _lock:
        _HOOKS.clear()
        _state.update(seen=False, checked=0.0)
