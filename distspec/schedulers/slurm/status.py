"""What Slurm says about jobs, read: states, hostlists, times, sacct and scontrol.

Pure parsing of the text sacct, scontrol and squeue print (the commands themselves
run in :mod:`distspec.schedulers.slurm.scheduler`), and the replicas' status built
from it and from the job folder (:mod:`distspec.schedulers.batch.folder`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from distspec.frozen import FrozenDict, frozen
from distspec.schedulers.api import AppSummary
from distspec.schedulers.batch.folder import exit_code, replica_exit, replica_host, replica_state
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus

__all__ = [
    "SLURM_STATES",
    "Component",
    "JobInfo",
    "array_infos",
    "combine",
    "expand_array_ids",
    "expand_hostlist",
    "list_rows",
    "parse_max_array_size",
    "parse_sacct",
    "parse_scontrol",
    "replica_status",
    "state_word",
    "status_from_files",
    "summaries",
]


#: Every Slurm job state (squeue/scontrol/sacct spelling) to an AppState.
#: TIMEOUT, PREEMPTED and DEADLINE end the job from outside, so they are CANCELLED
#: (with the Slurm state as the reason), not FAILED.
SLURM_STATES: Mapping[str, AppState] = FrozenDict(
    {
        "PENDING": AppState.PENDING,
        "CONFIGURING": AppState.PENDING,
        "REQUEUED": AppState.PENDING,
        "REQUEUE_FED": AppState.PENDING,
        "REQUEUE_HOLD": AppState.PENDING,
        "RESV_DEL_HOLD": AppState.PENDING,
        "SPECIAL_EXIT": AppState.FAILED,
        "SUSPENDED": AppState.PENDING,
        "STOPPED": AppState.PENDING,
        "RUNNING": AppState.RUNNING,
        "COMPLETING": AppState.RUNNING,
        "RESIZING": AppState.RUNNING,
        "SIGNALING": AppState.RUNNING,
        "STAGE_OUT": AppState.RUNNING,
        "UPDATE_DB": AppState.RUNNING,
        "POWER_UP_NODE": AppState.PENDING,
        "COMPLETED": AppState.SUCCEEDED,
        "FAILED": AppState.FAILED,
        "NODE_FAIL": AppState.FAILED,
        "OUT_OF_MEMORY": AppState.FAILED,
        "BOOT_FAIL": AppState.FAILED,
        "CANCELLED": AppState.CANCELLED,
        "TIMEOUT": AppState.CANCELLED,
        "PREEMPTED": AppState.CANCELLED,
        "DEADLINE": AppState.CANCELLED,
        "REVOKED": AppState.CANCELLED,
    }
)


# Worst first: the state a heterogeneous job reports when its components differ.
_SEVERITY = (
    AppState.FAILED,
    AppState.CANCELLED,
    AppState.RUNNING,
    AppState.PENDING,
    AppState.SUBMITTED,
    AppState.UNKNOWN,
    AppState.SUCCEEDED,
)


def expand_hostlist(text: str) -> list[str]:
    """``n[0-2,5],gpu01`` → ``['n0', 'n1', 'n2', 'n5', 'gpu01']`` (Slurm's compressed form)."""
    text = text.strip()
    if not text or text in {"(null)", "None assigned", "None"}:
        return []
    items: list[str] = []
    depth = 0
    start = 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    hosts: list[str] = []
    for item in items:
        hosts += _expand_one(item)
    return hosts


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item] if item else []
    head, tail = item[: match.start()], item[match.end() :]
    values: list[str] = []
    for part in match.group(1).split(","):
        low, sep, high = part.partition("-")
        if sep and low.isdigit() and high.isdigit():
            width = len(low)
            values += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
        else:
            values.append(part)
    return [head + v + rest for v in values for rest in _expand_one(tail) or [""]]


def expand_array_ids(key: str) -> list[str]:
    """The ids a job id field stands for: an array's pending tasks come as one row,
    ``1234_[4-9%2]`` or ``1234_[1,3,5-7]`` (``%K``: its throttle), which is
    ``1234_4`` ... ; any other id is itself."""
    match = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(?:%\d+)?\]", key)
    if match is None:
        return [key]
    base, spec = match.groups()
    out = []
    for part in spec.split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            continue
        out += [f"{base}_{i}" for i in range(int(low), int(high if sep else low) + 1)]
    return out


def parse_max_array_size(text: str) -> int | None:
    """``MaxArraySize`` from ``scontrol show config``; None when it is not there."""
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)\s*$", text, re.M)
    return int(match.group(1)) if match else None


def state_word(text: str) -> str:
    """``CANCELLED by 0`` → ``CANCELLED``; ``RUNNING+`` → ``RUNNING``."""
    word = text.strip().split(" ")[0] if text.strip() else ""
    return word.rstrip("+")


def _scontrol_fields(line: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces ...`` from ``scontrol show job -o``."""
    out: dict[str, str] = {}
    for chunk in re.split(r"\s+(?=[A-Za-z][A-Za-z0-9_/:]*=)", line.strip()):
        key, sep, value = chunk.partition("=")
        if sep:
            out.setdefault(key, value)
    return out


def combine(states: Sequence[AppState]) -> AppState:
    """The state of a job whose (hetjob) components are in ``states``: the worst."""
    for state in _SEVERITY:
        if state in states:
            return state
    return AppState.UNKNOWN


@frozen(kw_only=False)
class Component:
    """What Slurm says about one (hetjob) component of the job."""

    state: str
    reason: str = ""
    exit_code: str = ""
    nodes: tuple[str, ...] = ()


@frozen(kw_only=False)
class JobInfo:
    """What one query (sacct or scontrol) says about the job."""

    components: tuple[Component, ...]
    restarts: int = 0
    name: str = ""
    stdout: str = ""
    source: str = "scontrol"
    #: POSIX times (of the first component) where Slurm reports them.
    submitted: float | None = None
    started: float | None = None
    ended: float | None = None


# What Slurm prints under SLURM_TIME_FORMAT=standard (and by default): local time.
_TIME_SHAPE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", re.ASCII)


def _slurm_time(text: str) -> float | None:
    """A Slurm time (``2026-11-23T15:26:35``, local time) as a POSIX time, the same as
    ``time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))``; None for ``Unknown``,
    ``N/A``, ``None``, an empty field and anything else that is not such a time.

    Read by ``datetime.fromisoformat`` (``distspec list`` reads two per job; strptime
    took ~0.5 s for 7,000 jobs). Only the exact shape above is read: ``fromisoformat``
    also takes ISO forms (week dates, offsets) that strptime refuses. A wall time that
    a DST change makes happen twice is read as its first occurrence.
    """
    from datetime import datetime  # here, not at import: a dry run reads no time

    text = text.strip()
    if len(text) != 19 or _TIME_SHAPE.fullmatch(text) is None:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        pass
    # What datetime refuses and mktime takes: a leap second (:60), year 1 east of UTC.
    import time

    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _component_order(key: str) -> tuple[int, int]:
    job, _, offset = key.partition("+")
    return (int(job) if job.isdigit() else 0, int(offset) if offset.isdigit() else 0)


def parse_sacct(text: str) -> JobInfo | None:
    """``sacct --parsable2 --noheader --format=JobID,JobName,State,ExitCode,NodeList,
    Reason,Submit,Start,End`` of one job; None when it has no row (yet)."""
    # sacct 22.05 --duplicates garbles the job row (name "allocation", one node),
    # so requeues are counted by the script instead ($SLURM_RESTART_COUNT).
    latest: dict[str, Component] = {}
    name = ""
    times: list[float | None] = []
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) < 6 or "." in cols[0]:
            continue
        name = name or cols[1]
        if not times and len(cols) >= 9:
            times = [_slurm_time(c) for c in cols[6:9]]
        latest[cols[0]] = Component(
            state=state_word(cols[2]),
            reason=cols[5] if cols[5] != "None" else "",
            exit_code=cols[3],
            nodes=tuple(expand_hostlist(cols[4])),
        )
    if not latest:
        return None
    comps = tuple(latest[k] for k in sorted(latest, key=_component_order))
    submitted, started, ended = times or [None, None, None]
    return JobInfo(
        components=comps,
        name=name,
        source="sacct",
        submitted=submitted,
        started=started if comps[0].state != "PENDING" else None,
        ended=ended if comps[0].state not in ("PENDING", "RUNNING") else None,
    )


def parse_scontrol(text: str) -> JobInfo | None:
    """``scontrol show job -o`` of one job (a line per hetjob component); None when
    it printed none."""
    comps = []
    restarts = 0
    name = stdout = ""
    times: list[float | None] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        f = _scontrol_fields(line)
        if not times:
            # EndTime of a job that has not ended is its time limit, not an end.
            # StartTime of a pending job is an estimate.
            word = state_word(f.get("JobState", ""))
            over = word not in ("PENDING", "RUNNING", "")
            times = [
                _slurm_time(f.get("SubmitTime", "")),
                _slurm_time(f.get("StartTime", "")) if word not in ("PENDING", "") else None,
                _slurm_time(f.get("EndTime", "")) if over else None,
            ]
        comps.append(
            (
                int(f.get("HetJobOffset", "0") or 0),
                Component(
                    state=state_word(f.get("JobState", "")),
                    reason=f.get("Reason", "") if f.get("Reason") != "None" else "",
                    exit_code=f.get("ExitCode", ""),
                    nodes=tuple(expand_hostlist(f.get("NodeList", ""))),
                ),
            )
        )
        restarts = max(restarts, int(f.get("Restarts", "0") or 0))
        name = name or f.get("JobName", "")
        stdout = stdout or f.get("StdOut", "")
    if not comps:
        return None
    comps.sort(key=lambda c: c[0])
    submitted, started, ended = times or [None, None, None]
    return JobInfo(
        components=tuple(c for _, c in comps),
        restarts=restarts,
        name=name,
        stdout=stdout,
        submitted=submitted,
        started=started,
        ended=ended,
    )


def array_infos(
    text: str, source: str, wanted: Collection[str] | None = None
) -> dict[str, JobInfo]:
    """Each array task's :class:`JobInfo` from one query of the whole array, by task id
    (``1234_7``): ``sacct --allocations`` (``source="sacct"``; the format of
    :func:`parse_sacct`) or ``scontrol show job -o`` (``source="scontrol"``). The
    tasks that have not started yet are one row (see :func:`expand_array_ids`).
    ``wanted``: only these tasks (the others' rows are not parsed)."""
    own: dict[str, str] = {}  # a task's own row
    pending: dict[str, str] = {}  # the row of the pending range that holds the task
    for line in text.splitlines():
        if source == "sacct":
            key = line.split("|", 1)[0]
            if "." in key:
                continue
            ids = expand_array_ids(key)
        else:
            f = _scontrol_fields(line)
            task, array = f.get("ArrayTaskId", ""), f.get("ArrayJobId", "")
            if not (task and array):
                continue
            ids = expand_array_ids(f"{array}_[{task}]")
        if len(ids) == 1:
            own[ids[0]] = line
        else:
            for task_id in ids:
                pending.setdefault(task_id, line)
    parse = parse_sacct if source == "sacct" else parse_scontrol
    out = {}
    parsed: dict[str, JobInfo | None] = {}  # a pending range's row is parsed once
    for task_id, line in {**pending, **own}.items():
        if wanted is not None and task_id not in wanted:
            continue
        if line not in parsed:
            parsed[line] = parse(line)
        info = parsed[line]
        if info is not None:
            out[task_id] = info
    return out


def list_rows(text: str) -> list[list[str]]:
    """The rows of ``sacct --parsable2`` or ``squeue --format=%i|%j|%T|%r|%V|%e``:
    id, name, state, reason, submitted, ended."""
    return [line.split("|")[:6] for line in text.splitlines() if line.count("|") >= 3]


def _newest_first(job_id: str) -> tuple[int, int]:
    """Sort key of a job id: the newest job first, an array's tasks in order."""
    job, _, task = job_id.partition("_")
    return -int(job), int(task or 0)


def summaries(rows: Sequence[Sequence[str]]) -> list[AppSummary]:
    """One summary per job, newest first, from :func:`list_rows`' rows: a hetjob's
    components (``7+0``, ``7+1``) make one job; each task of a job array is one
    (``1234_7``; the pending ones come as one row, ``1234_[4-9%2]``); of a job listed
    more than once (a requeued job with ``--duplicates``), the last row counts."""
    latest: dict[str, Sequence[str]] = {}
    for row in rows:
        latest[row[0]] = row  # per (hetjob component) id, the last run listed
    jobs: dict[str, list[Sequence[str]]] = {}
    pending: dict[str, Sequence[str]] = {}
    for key, row in latest.items():
        if "[" in key:  # an array's pending tasks: one line each, unless listed on their own
            for task_id in expand_array_ids(key):
                pending.setdefault(task_id, row)
            continue
        base = key.split("+")[0]
        if re.fullmatch(r"\d+(_\d+)?", base):
            jobs.setdefault(base, []).append(row)
    for task_id, row in pending.items():
        jobs.setdefault(task_id, [row])
    out = []
    for base in sorted(jobs, key=_newest_first):
        comps = jobs[base]
        states = [state_word(c[2]) for c in comps]
        mapped = combine([SLURM_STATES.get(s, AppState.UNKNOWN) for s in states])
        name, reason = comps[0][1], comps[0][3]
        detail = states[0] + (f" ({reason})" if reason and reason != "None" else "")
        extra = {}
        submitted = _slurm_time(comps[0][4] if len(comps[0]) > 4 else "")
        if submitted is not None:
            extra["submitted"] = repr(submitted)
            ends = [_slurm_time(c[5] if len(c) > 5 else "") for c in comps]
            if mapped.is_terminal and None not in ends:
                extra["ended"] = repr(max(e for e in ends if e is not None))
        out.append(
            AppSummary(app_id=base, name=name, state=mapped, detail=detail, extra=FrozenDict(extra))
        )
    return out


def replica_status(
    role: str,
    i: int,
    job_state: AppState,
    comp: Component,
    files: Mapping[str, str],
    attempt: int,
    folder: str | None = None,
) -> ReplicaStatus:
    """Replica ``i`` of ``role``: its state from the exit code it recorded in the job folder
    (``files``) and the job's state, its host from the step ``comp``, and why it ended."""
    recorded = exit_code(files, role, i)
    code, why = replica_exit(folder, files, role, i)
    reason = comp.state if comp.state not in {"RUNNING", "COMPLETED", "PENDING"} else ""
    if comp.reason:
        reason = f"{reason}: {comp.reason}" if reason else comp.reason
    state = replica_state(recorded, job_state)
    if why and state is AppState.FAILED:
        reason = why  # the replica's own end says more than the job's
    return ReplicaStatus(
        role=role,
        id=i,
        state=state,
        hostname=replica_host(files, role, i, comp.nodes),
        exit_code=code,
        reason="" if code == 0 else reason,
        restarts=attempt,
    )


def status_from_files(
    job_id: str,
    roles: Sequence[tuple[str, int]],
    files: Mapping[str, str],
    attempt: int,
    folder: str | None = None,
) -> AppStatus:
    """Slurm forgot the job (no accounting, past MinJobAge): what the job folder recorded."""
    role_status = []
    codes: list[int | None] = []
    for role, count in roles:
        replicas = []
        for i in range(count):
            code, reason = replica_exit(folder, files, role, i)
            codes.append(code)
            state = (
                AppState.UNKNOWN
                if code is None
                else AppState.SUCCEEDED
                if code == 0
                else AppState.FAILED
            )
            replicas.append(
                ReplicaStatus(
                    role=role,
                    id=i,
                    state=state,
                    exit_code=code,
                    hostname=replica_host(files, role, i, ()),
                    reason=reason,
                    restarts=attempt,
                )
            )
        role_status.append(RoleStatus(role=role, replicas=tuple(replicas)))
    if codes and all(c == 0 for c in codes):
        state = AppState.SUCCEEDED
    elif any(c not in (None, 0) for c in codes):
        state = AppState.FAILED
    else:
        state = AppState.UNKNOWN
    return AppStatus(
        state=state,
        msg=f"Slurm no longer lists job {job_id}; state from the exit codes in its job folder",
        num_restarts=attempt,
        roles=tuple(role_status),
    )
