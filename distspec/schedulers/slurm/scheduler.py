"""Slurm: one sbatch script per AppDef, one srun step per role, one task per node.

``compile`` is pure: the script is built by :mod:`distspec.schedulers.slurm.script`,
which also holds the options. This module is the effectful half: sbatch, sacct or
scontrol, squeue, scancel, and reading the job folder through
:class:`~distspec.schedulers.batch.scheduler.BatchScheduler`.

Files (``job_dir``, absolute; default ``<state dir>/slurm``)::

    <job_dir>/<app_id>.sbatch              the script, as submitted
    <job_dir>/<app>-<jobid>.out            the batch script's own output
    <job_dir>/<app>-<jobid>/<role>-<i>.log replica i's stdout and stderr
    <job_dir>/<app>-<jobid>/<role>-<i>.host the node it ran on
    <job_dir>/<app>-<jobid>/<role>-<i>.exit its exit code, once it exited

The ``.exit`` files give per-replica exit codes with or without accounting:
Slurm itself only records one exit code per step. ``describe`` asks ``sacct``
when accounting is enabled and ``scontrol show job`` when it is not (one query
per poll either way); when ``scontrol`` has forgotten a finished job (after
MinJobAge) it falls back to what the job folder recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from distspec.errors import SchedulerError, UsageError
from distspec.schedulers._common import check_capabilities, submit_env, with_location
from distspec.schedulers.api import AppSummary, Capabilities, Request
from distspec.schedulers.batch.scheduler import (
    BatchScheduler,
    JobRecord,
    check_image_dir,
    exit_code,
    read_job_folder,
    replica_exit,
    replica_host,
    replica_state,
    safe_app_id,
)
from distspec.schedulers.slurm.script import NAME, GpuFlag, SlurmOptions, compile_script
from distspec.specs.app import AppDef
from distspec.specs.frozen import FrozenDict, frozen
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = ["SLURM_STATES", "GpuFlag", "SlurmOptions", "SlurmScheduler", "expand_hostlist"]


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


# -- hostlists, parsing -------------------------------------------------------


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


def _state_word(text: str) -> str:
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


def _combine(states: Sequence[AppState]) -> AppState:
    for state in _SEVERITY:
        if state in states:
            return state
    return AppState.UNKNOWN


@frozen(kw_only=False)
class _Component:
    """What Slurm says about one (hetjob) component of the job."""

    state: str
    reason: str = ""
    exit_code: str = ""
    nodes: tuple[str, ...] = ()


@frozen(kw_only=False)
class _JobInfo:
    components: tuple[_Component, ...]
    restarts: int = 0
    name: str = ""
    stdout: str = ""
    source: str = "scontrol"
    #: POSIX times (of the first component) where Slurm reports them.
    submitted: float | None = None
    started: float | None = None
    ended: float | None = None


def _slurm_time(text: str) -> float | None:
    """A POSIX time from Slurm's ``2026-11-23T11:04:15`` (local time); None for
    ``Unknown``, ``None`` or an empty field."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return None


# -- the scheduler ------------------------------------------------------------


class SlurmScheduler(BatchScheduler[SlurmOptions]):
    """sbatch / srun / squeue / scontrol / sacct / scancel."""

    name = NAME
    Options = SlurmOptions
    capabilities = Capabilities(mount_kinds=frozenset(), shared_files=True)
    # One scontrol (or sacct) call per poll: at 0.5 s a waiter notices a job's end
    # ~0.25 s late on average (1.0 s cost a 2x2 benchmark job ~4% over a hand-written
    # squeue loop), at two cheap queries a second.
    max_poll_interval = 0.5
    label = "Slurm"
    no_since = "slurm: --since is not supported (Slurm log lines carry no times)"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._accounting: bool | None = None
        # (state, query) last reported per job: see describe().
        self._seen: dict[str, tuple[AppState, str]] = {}

    # -- pure ------------------------------------------------------------------

    def compile(self, app: AppDef, opts: SlurmOptions, *, app_id: str) -> Request:
        """One sbatch script; ``argv`` submits it by hand from the folder it is written to."""
        check_capabilities(app, self.capabilities, NAME)
        check_image_dir(app, NAME, label="Slurm", runs_in="srun --chdir", submitted_from="sbatch")
        safe_id = safe_app_id(app_id)
        script = compile_script(app, opts, app_id=safe_id, job_dir=self._job_dir(opts))
        main = f"{safe_id}.sbatch"
        return Request(
            scheduler=NAME,
            app=app,
            app_id=app_id,
            options=opts,
            files=FrozenDict({main: script}),
            argv=("sbatch", "--parsable", main),
            main_file=main,
        )

    # -- effectful -------------------------------------------------------------

    def submit(self, request: Request) -> str:
        """Write the script into ``job_dir``, ``sbatch --parsable`` it; returns the job id."""
        script = self._write_script(request)
        # The job inherits sbatch's environment (--export=ALL), with distspec's own
        # bin directory last on PATH (its torchrun).
        import os

        argv = ["sbatch", "--parsable", str(script)]
        result = self.run_cmd(argv, env=submit_env(os.environ))
        if result.returncode != 0:
            raise SchedulerError(
                "sbatch failed",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )
        job_id = result.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(
                f"sbatch printed {result.stdout.strip()!r}, not a job id",
                scheduler=NAME,
                argv=result.argv,
                stderr=result.stderr,
            )
        folder = f"{str(script.parent).rstrip('/')}/{request.app.name}-{job_id}"
        self._save_record(request, job_id, folder)
        return job_id

    def _check_id(self, app_id: str) -> str:
        if not app_id.isdigit():
            raise UsageError(f"slurm app ids are job ids (digits), got {app_id!r}")
        return app_id

    # describe ------------------------------------------------------------------

    def _query(self, job_id: str) -> _JobInfo | None:
        """One query: sacct with accounting, scontrol without (decided on first use)."""
        if self._accounting is not False:
            info = self._sacct(job_id)
            if info is not None:
                return info
        return self._scontrol(job_id)

    def _sacct(self, job_id: str) -> _JobInfo | None:
        argv = [
            "sacct",
            "--parsable2",
            "--noheader",
            "--jobs",
            job_id,
            "--format=JobID,JobName,State,ExitCode,NodeList,Reason,Submit,Start,End",
        ]
        result = self._run(argv, "sacct", ok=False)
        if result.returncode != 0:
            if "accounting storage is disabled" in result.stderr.lower():
                self._accounting = False
            # Otherwise slurmdbd may be restarting: ask the controller this time.
            return None
        self._accounting = True
        # sacct 22.05 --duplicates garbles the job row (name "allocation", one node),
        # so requeues are counted by the script instead ($SLURM_RESTART_COUNT).
        latest: dict[str, _Component] = {}
        name = ""
        times: list[float | None] = []
        for line in result.stdout.splitlines():
            cols = line.split("|")
            if len(cols) < 6 or "." in cols[0]:
                continue
            name = name or cols[1]
            if not times and len(cols) >= 9:
                times = [_slurm_time(c) for c in cols[6:9]]
            latest[cols[0]] = _Component(
                state=_state_word(cols[2]),
                reason=cols[5] if cols[5] != "None" else "",
                exit_code=cols[3],
                nodes=tuple(expand_hostlist(cols[4])),
            )
        if not latest:
            return None  # not yet in the database: ask the controller this once
        comps = tuple(latest[k] for k in sorted(latest, key=_component_order))
        submitted, started, ended = times or [None, None, None]
        return _JobInfo(
            components=comps,
            name=name,
            source="sacct",
            submitted=submitted,
            started=started if comps[0].state != "PENDING" else None,
            ended=ended if comps[0].state not in ("PENDING", "RUNNING") else None,
        )

    def _scontrol(self, job_id: str) -> _JobInfo | None:
        argv = ["scontrol", "show", "job", "-o", job_id]
        result = self._run(argv, "scontrol show job", ok=False)
        if result.returncode != 0:
            if "invalid job id" in result.stderr.lower():
                return None
            raise SchedulerError(
                "scontrol show job failed",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )
        comps = []
        restarts = 0
        name = stdout = ""
        times: list[float | None] = []
        for line in result.stdout.splitlines():
            if not line.strip():
                continue
            f = _scontrol_fields(line)
            if not times:
                # EndTime of a job that has not ended is its time limit, not an end.
                # StartTime of a pending job is an estimate.
                word = _state_word(f.get("JobState", ""))
                over = word not in ("PENDING", "RUNNING", "")
                times = [
                    _slurm_time(f.get("SubmitTime", "")),
                    _slurm_time(f.get("StartTime", "")) if word not in ("PENDING", "") else None,
                    _slurm_time(f.get("EndTime", "")) if over else None,
                ]
            comps.append(
                (
                    int(f.get("HetJobOffset", "0") or 0),
                    _Component(
                        state=_state_word(f.get("JobState", "")),
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
        return _JobInfo(
            components=tuple(c for _, c in comps),
            restarts=restarts,
            name=name,
            stdout=stdout,
            submitted=submitted,
            started=started,
            ended=ended,
        )

    def _folder(self, record: JobRecord | None, info: _JobInfo | None) -> Path | None:
        from pathlib import Path

        if record is not None:
            return Path(record.folder)
        if info is not None and info.stdout.endswith(".out"):
            return Path(info.stdout[: -len(".out")])
        return None

    def describe(self, app_id: str) -> AppStatus | None:
        job_id = self._check_id(app_id)
        record = self._record(job_id)
        info = self._query(job_id)
        if info is None and record is None:
            return None
        folder = self._folder(record, info)
        files = read_job_folder(folder)
        folder_str = str(folder) if folder else None
        if record is not None:
            roles = list(record.roles)
        else:
            assert info is not None
            roles = [
                (info.name or "app" if i == 0 else f"{info.name}{i}", max(1, len(c.nodes)))
                for i, c in enumerate(info.components)
            ]
        # Restarts: requeues (Slurm's count) plus in-script retries (max_retries).
        requeues = int(files.get("requeues", "0") or 0)
        if info is not None:
            requeues = max(requeues, info.restarts)
        restarts = requeues + int(files.get("attempt", "0") or 0)
        if info is None:
            return with_location(
                _from_files(job_id, roles, files, restarts, folder_str), str(folder or ""), job_id
            )
        state = _combine([SLURM_STATES.get(c.state, AppState.UNKNOWN) for c in info.components])
        # slurmdbd lags the controller: right after submit sacct has no row (so scontrol
        # answers, RUNNING) and then a stale PENDING one. Do not report that step back.
        lagging = self._seen.get(job_id) == (AppState.RUNNING, "scontrol") and (
            info.source == "sacct" and state is AppState.PENDING
        )
        if lagging:
            state = AppState.RUNNING
        else:
            self._seen[job_id] = (state, info.source)
        head = info.components[0]
        msg = "RUNNING" if lagging else head.state + (f" ({head.reason})" if head.reason else "")
        role_status = []
        for index, (role, count) in enumerate(roles):
            comp = info.components[index] if index < len(info.components) else head
            comp_state = SLURM_STATES.get(comp.state, AppState.UNKNOWN)
            if lagging and comp_state is AppState.PENDING:
                comp_state = AppState.RUNNING
            count = len(comp.nodes) if comp.nodes else count
            replicas = tuple(
                _replica(role, i, comp_state, comp, files, restarts, folder_str)
                for i in range(count)
            )
            role_status.append(RoleStatus(role=role, replicas=replicas))
        status = AppStatus(
            state=state,
            msg=msg,
            num_restarts=restarts,
            roles=tuple(role_status),
            submitted=info.submitted,
            started=info.started,
            ended=info.ended,
        )
        return with_location(status, str(folder or ""), job_id)

    def _queried_folder(self, job_id: str) -> Path | None:
        return self._folder(None, self._scontrol(job_id))

    # cancel, list ----------------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        job_id = self._check_id(app_id)
        result = self._run(["scancel", job_id], "scancel", ok=False)
        if result.returncode != 0 and "already completing or completed" not in result.stderr:
            raise SchedulerError(
                "scancel failed",
                scheduler=NAME,
                argv=result.argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )

    def list(self) -> list[AppSummary]:
        """The user's jobs: from sacct (last 7 days) with accounting, squeue without."""
        import getpass

        user = getpass.getuser()
        rows: list[list[str]] = []
        if self._accounting is not False:
            argv = [
                "sacct",
                "--parsable2",
                "--noheader",
                "--allocations",
                # A requeued job's last run may not have started inside the time
                # window; --duplicates lists every run, and the last one wins below.
                "--duplicates",
                "--user",
                user,
                "--starttime",
                "now-7days",
                "--format=JobID,JobName,State,Reason,Submit,End",
            ]
            result = self._run(argv, "sacct", ok=False, env=_time_env())
            if result.returncode == 0:
                self._accounting = True
                rows = [
                    line.split("|")[:6]
                    for line in result.stdout.splitlines()
                    if line.count("|") >= 3
                ]
            elif "accounting storage is disabled" in result.stderr.lower():
                self._accounting = False
            else:
                raise SchedulerError(
                    "sacct failed",
                    scheduler=NAME,
                    argv=argv,
                    returncode=result.returncode,
                    stderr=result.stderr,
                )
        if self._accounting is False:
            # %V: submitted, %e: ended (for a job still running, when its time is up).
            fmt = "--format=%i|%j|%T|%r|%V|%e"
            argv = ["squeue", "--noheader", "--states=all", "--user", user, fmt]
            result = self._run(argv, "squeue", env=_time_env())
            rows = [
                line.split("|")[:6] for line in result.stdout.splitlines() if line.count("|") >= 3
            ]
        latest: dict[str, list[str]] = {}
        for row in rows:
            latest[row[0]] = row  # per (hetjob component) id, the last run listed
        jobs: dict[str, list[list[str]]] = {}
        for key, row in latest.items():
            base = key.split("+")[0]
            if base.isdigit():
                jobs.setdefault(base, []).append(row)
        out = []
        for base in sorted(jobs, key=int, reverse=True):
            comps = jobs[base]
            states = [_state_word(c[2]) for c in comps]
            mapped = _combine([SLURM_STATES.get(s, AppState.UNKNOWN) for s in states])
            name, reason = comps[0][1], comps[0][3]
            detail = states[0] + (f" ({reason})" if reason and reason != "None" else "")
            extra = {}
            submitted = _posix_time(comps[0][4] if len(comps[0]) > 4 else "")
            if submitted is not None:
                extra["submitted"] = repr(submitted)
                ends = [_posix_time(c[5] if len(c) > 5 else "") for c in comps]
                if mapped.is_terminal and None not in ends:
                    extra["ended"] = repr(max(e for e in ends if e is not None))
            out.append(
                AppSummary(
                    app_id=base, name=name, state=mapped, detail=detail, extra=FrozenDict(extra)
                )
            )
        return out


def _time_env() -> dict[str, str]:
    """The environment with ``SLURM_TIME_FORMAT=standard``: squeue and sacct then print
    ISO 8601 local times, whatever the user's own setting (it may be "relative")."""
    import os

    return {**os.environ, "SLURM_TIME_FORMAT": "standard"}


def _posix_time(text: str) -> float | None:
    """A Slurm time (``2026-11-23T15:26:35``, local time) as a POSIX time; None for
    ``Unknown``, ``N/A``, ``None`` and anything else that is not a time."""
    import time

    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _component_order(key: str) -> tuple[int, int]:
    job, _, offset = key.partition("+")
    return (int(job) if job.isdigit() else 0, int(offset) if offset.isdigit() else 0)


def _replica(
    role: str,
    i: int,
    job_state: AppState,
    comp: _Component,
    files: Mapping[str, str],
    attempt: int,
    folder: str | None = None,
) -> ReplicaStatus:
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


def _from_files(
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
