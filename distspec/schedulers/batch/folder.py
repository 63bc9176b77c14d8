"""Reading a job folder back: each replica's exit code, host and state.

What the batch scripts' fragments (:mod:`distspec.schedulers.batch.script`) wrote, read
by describe: the small status files, and for a failed replica the end of its log,
where torchrun's report names the worker that failed and its own exit code.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from distspec.hangs import HUNG_EXIT
from distspec.schedulers.logs import log_file_name
from distspec.specs.state import AppState
from distspec.torchrun_output import signal_name, torchrun_root_cause

__all__ = [
    "exit_code",
    "parse_int",
    "read_job_folder",
    "replica_exit",
    "replica_host",
    "replica_state",
]

# The small status files; everything else in the folder (logs, task.sh) is skipped.
# "ranks": a direct launch's number of ranks (batch/direct.py), one log file each.
_STATUS_NAMES = frozenset({"attempt", "requeues", "exit", "signal", "ranks"})


def read_job_folder(folder: str | os.PathLike[str] | None) -> dict[str, str]:
    """``{file name: stripped text}`` of the status files in a job folder; ``{}`` when
    there is no folder (yet)."""
    if folder is None:
        return {}
    out: dict[str, str] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        if name.endswith((".exit", ".host", ".start", ".reason")) or name in _STATUS_NAMES:
            try:
                with open(os.path.join(folder, name)) as f:
                    out[name] = f.read().strip()
            except OSError:
                continue
    return out


def parse_int(text: str | None) -> int | None:
    """``text`` as an int, or None when it is missing or not a (signed) integer."""
    return int(text) if text and re.fullmatch(r"-?\d+", text) else None


def exit_code(files: Mapping[str, str], role: str, replica: int) -> int | None:
    """Replica ``replica``'s recorded exit code; None while it has not exited."""
    return parse_int(files.get(log_file_name(role, replica, "exit")))


#: How much of a failed replica's log end :func:`replica_exit` reads for torchrun's report.
_TAIL_BYTES = 256 * 1024


def replica_exit(
    folder: str | os.PathLike[str] | None, files: Mapping[str, str], role: str, replica: int
) -> tuple[int | None, str]:
    """``(exit code, reason)`` of a replica: its ``.exit`` file, refined by its log.

    The wrapper records the launcher's status, and torchrun exits 1 whatever its
    worker did, so for a failed replica the end of ``<role>-<i>.log`` (from where this
    attempt started, its ``.start``: earlier attempts append to the same log) is searched for
    torchrun's root-cause report (:func:`~distspec.torchrun_output.torchrun_root_cause`,
    the same reader local_cwd uses): the worker's own code (a signal N as 128+N) and
    who it was. Without a report the recorded code stays; a code above 128 is then
    named as a signal. A ``.reason`` file beside the log (the script's own cause: the
    node could not pull the role's image) comes first. Reason "" for a replica that
    succeeded or has not exited.
    """
    code = exit_code(files, role, replica)
    if code in (None, 0):
        return code, ""
    # What the script itself found (an image that could not be pulled) says it best.
    said = files.get(log_file_name(role, replica, "reason"))
    if said:
        return code, said
    if code == HUNG_EXIT and folder is not None:
        from distspec.hangs import read_hang

        hang = read_hang(folder)
        if hang is not None:
            return code, f"hung: {hang.headline()} (-cfg watchdog)"
    found = None
    if folder is not None:
        start = parse_int(files.get(log_file_name(role, replica, "start"))) or 0
        log = os.path.join(folder, log_file_name(role, replica))
        found = torchrun_root_cause(_log_tail(log, start))
    if found is not None:
        worker, reason = found
        return worker, f"{reason}; torchrun exited with {code}"
    assert code is not None
    if 128 < code < 128 + 65:
        return code, f"killed by {signal_name(code - 128)}"
    return code, f"exited with {code}"


def _log_tail(path: str, start: int = 0) -> list[str]:
    """The last lines (up to :data:`_TAIL_BYTES`) of a log from byte ``start`` on (where
    the last attempt's output starts); [] when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            # A start beyond the end: the log was replaced; read what there is.
            begin = start if 0 <= start <= size else 0
            f.seek(max(begin, size - _TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if size - begin > _TAIL_BYTES else lines


def replica_host(files: Mapping[str, str], role: str, replica: int, hosts: Sequence[str]) -> str:
    """Where the replica ran: its ``.host`` file, else the scheduler's i-th host."""
    recorded = files.get(log_file_name(role, replica, "host"), "")
    return recorded or (hosts[replica] if replica < len(hosts) else "")


def replica_state(code: int | None, job_state: AppState) -> AppState:
    """A replica's state from its exit code (None: still running or never started)
    and the state of the job around it."""
    if code is None:
        return job_state
    if code == 0:
        return AppState.SUCCEEDED
    if job_state is AppState.CANCELLED and code > 128:
        return AppState.CANCELLED  # killed by the job's end (a signal), not on its own
    return AppState.FAILED
