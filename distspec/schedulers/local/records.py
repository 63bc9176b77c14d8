"""The declared shape of ``local_cwd``'s ``state.json``, and its validating reader.

A record read back from disk may be truncated (a full disk), hand-edited or written by
another version; :func:`load_state` checks it against :class:`StateRecord` with
``pyre_extensions.safe_json`` and raises :class:`~distspec.errors.SchedulerError` (one
line) instead of letting a ``KeyError`` surface later. This module imports ``typing``
and ``pyre_extensions``, so it is imported only where a record is read (``status``,
``wait``, ``cancel``...), never on the compile/dry-run path.
"""

# No ``from __future__ import annotations`` here: safe_json reads the TypedDicts'
# annotations at runtime and does not resolve them from strings.
from typing import TypedDict, Union

from distspec.errors import SchedulerError

__all__ = ["ReplicaRecord", "RoleRecord", "StateRecord", "SupervisorRecord", "load_state"]

_STATES = frozenset(
    {"UNSUBMITTED", "SUBMITTED", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}
)

# safe_json knows Optional but no other Union, nor NotRequired: plain typing forms
# here. JSON times written as integers are made floats before validation.
_Time = Union[float, None]  # noqa: UP007


class SupervisorRecord(TypedDict):
    """The supervisor in ``state.json``: its pid and its start time, which tells it from a later
    process given the same pid."""

    pid: int
    starttime: Union[int, None]  # noqa: UP007


class ReplicaRecord(TypedDict):
    """One replica in ``state.json`` (what the supervisor's ``Replica.to_dict`` writes)."""

    id: int
    state: str
    pid: Union[int, None]  # noqa: UP007
    pgid: Union[int, None]  # noqa: UP007
    exit_code: Union[int, None]  # noqa: UP007
    reason: str
    restarts: int
    attempt: int
    started: _Time
    ended: _Time


class RoleRecord(TypedDict):
    """One role in ``state.json``: its name and its replicas."""

    role: str
    replicas: list[ReplicaRecord]


class StateRecord(TypedDict):
    """``state.json`` as the supervisor writes it (``ended`` is added, a POSIX time,
    when the run has ended; it is checked by hand as safe_json has no optional keys)."""

    version: int
    app_id: str
    app_name: str
    state: str
    msg: str
    supervisor: SupervisorRecord
    created: float
    num_restarts: int
    roles: list[RoleRecord]


def load_state(path: str, app_id: str, scheduler: str = "local_cwd") -> "StateRecord | None":
    """The record at ``path``, validated; None if there is no file.

    Raises:
        SchedulerError: the file cannot be read, is not JSON (e.g. truncated), or is
            not of the declared shape; the message is one line naming the problem.
    """
    from pyre_extensions import safe_json

    def bad(why: str) -> SchedulerError:
        return SchedulerError(
            f"the state of {app_id} ({path}) is unreadable: {why}", scheduler=scheduler
        )

    from distspec.schedulers.local.files import read_regular

    try:
        # Never blocks on a FIFO nor reads /dev/zero or a huge file into memory.
        raw = read_regular(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise bad(e.strerror or str(e)) from None
    import json

    try:
        parsed = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise bad("not UTF-8") from None
    except ValueError as e:  # truncated, empty, not JSON
        raise bad(f"not JSON ({e})" if raw.strip() else "empty file") from None
    _floats(parsed, ("created", "ended"))
    if isinstance(parsed, dict):
        for role in parsed.get("roles") or ():
            for rep in (role.get("replicas") or ()) if isinstance(role, dict) else ():
                _floats(rep, ("started", "ended"))
    try:
        data: StateRecord = safe_json.validate(parsed, StateRecord)
    except ValueError as e:  # safe_json.InvalidJson
        raise bad(f"not a state record: {str(e)[:300]}".replace("\n", " ")) from None
    ended = parsed.get("ended")
    if ended is not None and not isinstance(ended, float):
        raise bad(f"ended is {ended!r}, not a time")
    states = [data["state"]] + [rep["state"] for r in data["roles"] for rep in r["replicas"]]
    unknown = [s for s in states if s not in _STATES]
    if unknown:
        raise bad(f"unknown state {unknown[0]!r}")
    return data


def _floats(record: object, keys: tuple[str, ...]) -> None:
    """Integers (not booleans) at ``keys`` of a dict become floats, in place."""
    if isinstance(record, dict):
        for key in keys:
            value = record.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                record[key] = float(value)
