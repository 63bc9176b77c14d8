"""Progress marks for the hang watchdog: :func:`heartbeat`, also ``Dist.heartbeat``.

::

    from distspec.runtime import heartbeat, init

    with init() as dist:
        for batch in loader:
            train_step(batch)
            dist.heartbeat()          # or dist.log(...), which beats too

Each call marks that this rank made progress: the modification time of
``$DISTSPEC_JOB_DIR/hang/beats/rank-<RANK>`` is set to now, at most once a second
(a call costs a clock read otherwise), when the job runs under the watchdog
(``$DISTSPEC_WATCHDOG``, set by it). The watchdog (:mod:`distspec.runtime.watchdog`,
``-cfg watchdog=15m``) reads those times; a job whose ranks never beat is watched
through its output instead. Outside a job folder, or without the watchdog, nothing
is written.

Under the watchdog the first call also registers :mod:`faulthandler` on ``SIGUSR2``
(unless the script set its own handler), so that the watchdog can ask this process
for its Python stack when `py-spy` cannot read it. Callbacks in :data:`HOOKS` run on each call (in the
calling thread): the pre-emption check of :mod:`distspec.runtime.resume` is one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["BEATS_DIR", "HOOKS", "STACK_SIGNAL", "WATCHDOG_ENV", "beat", "heartbeat"]

#: The folder, in the job folder, of the ranks' heartbeat files.
BEATS_DIR = "hang/beats"

#: Set by the watchdog for the command it runs (its period in seconds): only then are
#: heartbeats written and the stack-dump signal handled.
WATCHDOG_ENV = "DISTSPEC_WATCHDOG"

#: The signal the watchdog sends for a faulthandler stack dump (see :func:`heartbeat`).
STACK_SIGNAL = "SIGUSR2"

#: Called on every :func:`heartbeat` (and every ``log``), in the calling thread.
HOOKS: list[Callable[[], None]] = []

#: At most one mark a second.
_EVERY = 1.0

_state: dict[str, object] = {"last": 0.0, "path": None, "set_up": False}


def _path() -> Path | None:
    job_dir = os.environ.get("DISTSPEC_JOB_DIR", "")
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0"
    if not os.environ.get(WATCHDOG_ENV) or not job_dir or "://" in job_dir or not rank.isdigit():
        return None
    return Path(job_dir) / BEATS_DIR / f"rank-{int(rank)}"


def _set_up() -> None:
    _state["set_up"] = True
    _state["path"] = _path()
    if os.environ.get(WATCHDOG_ENV):
        _register_stack_dump()


def _register_stack_dump() -> None:
    """faulthandler on SIGUSR2, all threads, to stderr (the rank's log), unless the
    process already handles SIGUSR2 itself."""
    import faulthandler
    import signal
    import sys

    sig = getattr(signal, STACK_SIGNAL, None)
    if sig is None or signal.getsignal(sig) not in (signal.SIG_DFL, None):
        return
    try:
        faulthandler.register(sig, file=sys.stderr, all_threads=True, chain=False)
    except (ValueError, RuntimeError, OSError, AttributeError):  # no usable stderr
        return


def beat(now: float | None = None) -> None:
    """Mark progress (see the module's docstring) and run :data:`HOOKS`."""
    if not _state["set_up"]:
        _set_up()
    now = time.time() if now is None else now
    last = _state["last"]
    assert isinstance(last, float)
    if now - last >= _EVERY:
        _state["last"] = now
        path = _state["path"]
        if isinstance(path, Path):
            _touch(path, now)
    for hook in list(HOOKS):
        hook()


def _touch(path: Path, now: float) -> None:
    try:
        os.utime(path, (now, now))
    except FileNotFoundError:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        except OSError:
            _state["path"] = None  # a read-only job folder: stop trying
    except OSError:
        _state["path"] = None


def heartbeat() -> None:
    """Tell the hang watchdog this rank is making progress (cheap: call it every step)."""
    beat()
