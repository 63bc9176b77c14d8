"""What a ``local_cwd`` run's record says, as the interface's values: ``state.json``
(already read and validated) to :class:`AppStatus`, and the ``list`` lines of runs
whose record is missing or unreadable.
"""

from __future__ import annotations

import os

from distspec.errors import SchedulerError
from distspec.frozen import frozendict
from distspec.schedulers.api import AppSummary
from distspec.schedulers.logs import log_file_name
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = [
    "TERMINAL",
    "record_summary",
    "recordless_summary",
    "role_commands",
    "to_status",
    "unreadable_summary",
]

#: The states after which a run or a replica changes no more (as ``state.json`` says them).
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


def to_status(
    data: dict[str, Any], run_dir: str = "", commands: dict[str, str] | None = None
) -> AppStatus:
    """The status a record says: each replica's log in ``run_dir``, each role's
    command from ``commands`` (role -> command)."""
    roles = []
    starts: list[float] = []
    for role in data.get("roles", ()):
        replicas = tuple(
            ReplicaStatus(
                role=role["role"],
                id=int(rep["id"]),
                state=AppState(rep["state"]),
                hostname="localhost",
                exit_code=rep.get("exit_code"),
                reason=rep.get("reason", ""),
                restarts=int(rep.get("restarts", 0)),
                log=os.path.join(run_dir, "logs", log_file_name(role["role"], rep["id"], "log"))
                if run_dir
                else "",
                started=rep.get("started"),
                ended=rep.get("ended"),
            )
            for rep in role["replicas"]
        )
        starts.extend(r.started for r in replicas if r.started is not None)
        roles.append(
            RoleStatus(
                role=role["role"], replicas=replicas, command=(commands or {}).get(role["role"], "")
            )
        )
    return AppStatus(
        state=AppState(data["state"]),
        msg=data.get("msg", ""),
        num_restarts=int(data.get("num_restarts", 0)),
        roles=tuple(roles),
        submitted=data.get("created"),
        started=min(starts) if starts else None,
        ended=data.get("ended"),
        location=run_dir,
        native_id=str(data.get("supervisor", {}).get("pid", "")),
    )


def role_commands(run_dir: Path) -> dict[str, str]:
    """role -> the command its first replica runs, shell-quoted (from ``plan.json``)."""
    import shlex

    from distspec.schedulers.local.files import read_json

    try:
        plan = read_json(str(run_dir / "plan.json"))
        return {
            role["name"]: shlex.join(role["replicas"][0]["argv"])
            for role in plan.get("roles", ())
            if role.get("replicas")
        }
    except (OSError, ValueError, LookupError, TypeError, AttributeError):
        return {}  # the commands are a courtesy of `describe`


def record_summary(name: str, data: dict[str, Any]) -> AppSummary:
    """The ``list`` line of the run ``name`` from its record; ``extra`` has
    ``submitted`` and, once it ended, ``ended`` (POSIX times as text)."""
    created = float(data.get("created", 0.0))
    extra = {"submitted": repr(created)}
    if data.get("ended") is not None:
        extra["ended"] = repr(float(data["ended"]))
    return AppSummary(
        app_id=name,
        name=str(data.get("app_name", "")),
        state=AppState(data["state"]),
        detail=str(data.get("msg", "")),
        extra=frozendict(extra),
    )


def recordless_summary(root: Path, name: str) -> AppSummary | None:
    """A run directory without a record and without a supervisor (a submit killed
    before its clean-up), listed as UNKNOWN rather than hidden; None for a folder
    that is not a run directory, or a run that a submit may still be starting."""
    import time

    from distspec.schedulers.local.launch import START_TIMEOUT

    try:
        made = os.stat(root / name / "plan.json").st_mtime
    except OSError:
        return None  # not a run directory
    if time.time() - made < START_TIMEOUT:
        return None  # a submit may still be starting it
    return AppSummary(
        app_id=name,
        name="",
        state=AppState.UNKNOWN,
        detail="no state.json: its supervisor never recorded one",
        extra=frozendict({}),
    )


def unreadable_summary(name: str, error: SchedulerError) -> AppSummary:
    """A run whose record is unreadable: listed, not hidden, as UNKNOWN with why."""
    return AppSummary(
        app_id=name,
        name="",
        state=AppState.UNKNOWN,
        detail="unreadable: " + str(error).partition("is unreadable: ")[2][:200],
        extra=frozendict({}),
    )
