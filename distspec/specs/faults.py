"""The fault-tolerance run options of every backend: ``-cfg watchdog=15m`` and
``-cfg checkpoint_dir=PATH`` (docs/fault-tolerance.md).

Both are applied where the job is compiled (:meth:`distspec.runner.Runner.compile`),
the same way on every backend, by :func:`apply`:

- ``watchdog`` runs each replica's command under :mod:`distspec.runtime.watchdog`
  (``python -m distspec.runtime.watchdog --every SECONDS ... -- COMMAND``), which ends
  a job whose ranks made no progress for that long, after writing every rank's
  Python stack into the job folder;
- ``checkpoint_dir`` reaches the ranks as ``$DISTSPEC_CHECKPOINT_DIR``, where
  :mod:`distspec.runtime.resume` saves and finds checkpoints.

Standard library only: this is on the CLI's compile path.
"""

from __future__ import annotations

import os
import re

from distspec.errors import UsageError
from distspec.frozen import frozen, frozendict, replace
from distspec.snapshot.options import SnapshotOptions
from distspec.specs.macros import Macro
from distspec.specs.options import option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.specs.app import AppDef, Role

__all__ = [
    "CHECKPOINT_ENV",
    "MAX_WATCHDOG",
    "MIN_WATCHDOG",
    "WATCHDOG_MODULE",
    "FaultOptions",
    "apply",
    "launcher",
    "parse_period",
]

#: The module each replica's command runs under with ``-cfg watchdog``.
WATCHDOG_MODULE = "distspec.runtime.watchdog"
#: Where the ranks find ``-cfg checkpoint_dir``.
CHECKPOINT_ENV = "DISTSPEC_CHECKPOINT_DIR"
#: The shortest and longest watchdog periods, in seconds: below 10 s a slow step or a
#: pause of the file system looks like a hang; above 30 days the period outlasts any
#: time limit a scheduler grants.
MIN_WATCHDOG = 10.0
MAX_WATCHDOG = 30 * 86400.0

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")


@frozen
class FaultOptions(SnapshotOptions):
    """The fault-tolerance options (docs/fault-tolerance.md); a base of every backend's
    options, after the snapshot's."""

    watchdog: str | None = option(
        None,
        "End the job when no rank has made progress for this long (15m, 90s, 1h30m): "
        "progress is distspec.runtime.heartbeat()/log(), else new output; every rank's "
        "Python stack is written into the job folder first, and the job ends HUNG (124).",
    )
    checkpoint_dir: str | None = option(
        None,
        "Where distspec.runtime's save_checkpoint/load_checkpoint keep checkpoints "
        "(an absolute path every node sees, or an fsspec URL); default: "
        "checkpoints/ in the job folder, the same across requeues and retries.",
    )


def parse_period(text: str) -> float:
    """``15m``, ``90s``, ``1h30m``, ``2d`` or plain seconds (``600``) as seconds.

    Raises:
        UsageError: not a duration, or outside :data:`MIN_WATCHDOG`..:data:`MAX_WATCHDOG`.
    """
    spec = text.strip().lower()
    pos, total, units = 0, 0.0, set()
    while pos < len(spec):
        match = _PART.match(spec, pos)
        if match is None or match.group(2) in units:
            raise _bad_period(text, "expected a duration such as 15m, 90s or 1h30m")
        units.add(match.group(2))
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
        if not match.group(2) and pos < len(spec):  # "10 m" or "10x"
            raise _bad_period(text, "expected a duration such as 15m, 90s or 1h30m")
    if not spec:
        raise _bad_period(text, "expected a duration such as 15m, 90s or 1h30m")
    if not MIN_WATCHDOG <= total <= MAX_WATCHDOG:
        raise _bad_period(
            text, f"give a period from {MIN_WATCHDOG:.0f}s to {MAX_WATCHDOG / 86400:.0f}d"
        )
    return total


def _bad_period(text: str, why: str) -> UsageError:
    return UsageError(f"watchdog={text!r}: {why}")


def check(opts: Any, *, shared_files: bool) -> None:
    """Refuse ``opts``' fault-tolerance options that cannot work (see :func:`apply`);
    the runner asks before the code snapshot, so a bad option is said first.

    Raises:
        UsageError: a bad period, a watchdog in a container, a ``checkpoint_dir`` that
            is relative or cannot be written.
    """
    period = getattr(opts, "watchdog", None)
    folder = getattr(opts, "checkpoint_dir", None)
    if period is not None:
        parse_period(period)
    if folder:
        _check_folder(folder, shared_files)
    if period is not None:
        container = getattr(opts, "container", None)
        runtime = str(getattr(container, "value", container or "none"))
        if runtime != "none":
            raise UsageError(
                f"watchdog: not available inside containers yet (-cfg container={runtime}); "
                "run without the container or without the watchdog"
            )


def apply(app: AppDef, opts: Any, *, shared_files: bool, python: str) -> AppDef:
    """``app`` with ``opts``' fault-tolerance options applied (see the module's
    docstring). ``shared_files``: the job sees this machine's files (local_cwd, Slurm,
    PBS), so a local ``checkpoint_dir`` is checked here; ``python``: the interpreter
    the watchdog runs with (this one where the job sees this machine's files).

    Raises:
        UsageError: what :func:`check` refuses.
    """
    period = getattr(opts, "watchdog", None)
    folder = getattr(opts, "checkpoint_dir", None)
    if period is None and folder is None:
        return app
    check(opts, shared_files=shared_files)
    seconds = parse_period(period) if period is not None else None
    total = sum(r.num_replicas for r in app.roles)
    roles = tuple(_role(r, seconds, folder, total, python) for r in app.roles)
    return replace(app, roles=roles)


def _role(role: Role, seconds: float | None, folder: str | None, total: int, python: str) -> Role:
    env = dict(role.env)
    if folder:
        env.setdefault(CHECKPOINT_ENV, folder)
    if seconds is None:
        return replace(role, env=frozendict(env))
    args = (
        "-m",
        WATCHDOG_MODULE,
        "--every",
        f"{seconds:g}",
        "--role",
        role.name,
        "--replica",
        Macro.REPLICA_ID.token,
        "--replicas",
        str(total),
        "--",
        role.entrypoint,
        *role.args,
    )
    return replace(role, entrypoint=python, args=args, env=frozendict(env))


def launcher(role: Role) -> str:
    """The program the role's replicas run: its entrypoint, or under ``-cfg watchdog``
    the command the watchdog runs (so a wrapped ``torchrun`` is still torchrun to the
    backends that treat it specially)."""
    args = role.args
    if args[:2] == ("-m", WATCHDOG_MODULE) and "--" in args:
        rest = args[args.index("--") + 1 :]
        if rest:
            return rest[0]
    return role.entrypoint


def _check_folder(folder: str, shared_files: bool) -> None:
    if not folder.strip():
        raise UsageError("checkpoint_dir='': empty; give an absolute path every node sees")
    if "://" in folder:
        return  # an fsspec URL: its store is checked by the job that writes it
    if not os.path.isabs(folder):
        raise UsageError(
            f"checkpoint_dir={folder!r}: give an absolute path every node sees, or a URL"
        )
    if not shared_files:
        return  # a path inside the job's containers: not this machine's
    probe = folder
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise UsageError(f"checkpoint_dir={folder!r}: {probe} is not a directory")
    # Root passes any access() test: try a nameless file (O_TMPFILE), which leaves
    # nothing behind, where the job would write.
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        raise UsageError(
            f"checkpoint_dir={folder!r}: {probe} is not writable ({err.strerror or err})"
        ) from None
