"""The effectful half of the Slurm backend: sbatch, sacct or scontrol, squeue, scancel.

``compile`` is pure: the script is :mod:`distspec.schedulers.slurm.script`'s. Reading
the job folder, the records and the logs is
:class:`~distspec.schedulers.batch.scheduler.BatchScheduler`'s.

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

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.schedulers.api import AppSummary, Capabilities
from distspec.schedulers.batch.direct import task_count
from distspec.schedulers.batch.folder import read_job_folder
from distspec.schedulers.batch.scheduler import BatchScheduler, JobRecord
from distspec.schedulers.environment import submit_env
from distspec.schedulers.slurm.options import NAME, SlurmOptions, check_options
from distspec.schedulers.slurm.script import check_job_id, check_spares, compile_script
from distspec.schedulers.slurm.status import (
    SLURM_STATES,
    JobInfo,
    array_infos,
    combine,
    list_rows,
    parse_max_array_size,
    parse_sacct,
    parse_scontrol,
    replica_status,
    status_from_files,
    summaries,
)
from distspec.specs.state import AppState, AppStatus, RoleStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from distspec.schedulers.api import Dependency, JobPaths, Points, Request
    from distspec.specs.app import AppDef

__all__ = ["SlurmScheduler"]


class SlurmScheduler(BatchScheduler[SlurmOptions, JobInfo]):
    """sbatch / srun / squeue / scontrol / sacct / scancel."""

    name = NAME
    Options = SlurmOptions
    capabilities = Capabilities(
        # Bind mounts need -cfg container=... (checked by the script's compile).
        mount_kinds=frozenset({"bind"}),
        shared_files=True,
        image="directory",
        snapshot_default=True,
        dependencies=True,
        arrays=True,
    )
    # One scontrol (or sacct) call per poll: at 0.5 s a waiter notices a job's end
    # ~0.25 s late on average (1.0 s cost a 2x2 benchmark job ~4% over a hand-written
    # squeue loop), at two cheap queries a second.
    max_poll_interval = 0.5
    label = "Slurm"
    submit_command = "sbatch"
    script_suffix = "sbatch"
    runs_in = "srun --chdir"
    runtimes = "podman|apptainer|pyxis|oci"
    no_since = "slurm: --since is not supported (Slurm log lines carry no times)"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._accounting: bool | None = None
        # (state, query) last reported per job: see _status().
        self._seen: dict[str, tuple[AppState, str]] = {}
        # MaxArraySize as max_array_size() read it (None: unknown or not read yet).
        self._max_array: int | None = None
        self._max_array_read = False

    # -- pure ------------------------------------------------------------------

    def check(self, app: AppDef, opts: SlurmOptions) -> None:
        """Refuse bad options, and spare nodes for a job that cannot keep them."""
        check_options(opts)
        check_spares(app, opts)

    def _script(
        self,
        app: AppDef,
        opts: SlurmOptions,
        *,
        app_id: str,
        job_dir: str,
        after: tuple[Dependency, ...] = (),
        points: Points | None = None,
    ) -> str:
        return compile_script(app, opts, app_id=app_id, job_dir=job_dir, after=after, points=points)

    def compile_array(
        self,
        app: AppDef,
        opts: SlurmOptions,
        *,
        app_id: str,
        points: Points,
        after: Sequence[Dependency] = (),
    ) -> Request:
        """One sbatch script with ``--array=0-(n-1)[%K]`` (K: ``points.max_parallel``)
        and the points file beside it: task ``k`` runs point ``points.first + k`` in its
        own job folder ``<app>-<array id>_<k>``, with ``{{name}}`` read from
        ``$DISTSPEC_SWEEP_<name>`` (see :func:`~.script.compile_script`).

        Pure: more points than the cluster's ``MaxArraySize`` are refused only once
        :meth:`max_array_size` has read it (the Runner asks it first, and splits);
        compile itself asks the cluster nothing.

        Raises:
            CompileError: no points, more than ``MaxArraySize``, a multi-role app
                (Slurm runs no arrays of heterogeneous jobs), or a value that cannot be
                carried (a NUL byte).
        """
        n = len(points.values)
        limit = self._max_array
        if limit is not None and n > limit:
            raise CompileError(
                NAME,
                f"{n} points in one job array, and this cluster's MaxArraySize is {limit} "
                f"(task ids 0..{limit - 1}): split the sweep into arrays of at most {limit}",
            )
        return super().compile_array(app, opts, app_id=app_id, points=points, after=after)

    def point_id(self, array_id: str, request: Request, index: int) -> str:
        """``<array id>_<task>``, the id squeue, sacct and scancel know point ``index``
        (sweep-wide) by: task ``index - points.first``."""
        points = request.points
        if points is None or not 0 <= index - points.first < len(points.values):
            raise ValueError(f"point {index} is not in the array request {request.app_id}")
        return f"{array_id}_{index - points.first}"

    def max_array_size(self, opts: SlurmOptions) -> int | None:
        """The cluster's ``MaxArraySize`` (``scontrol show config``; an array holds at
        most that many tasks, 0..MaxArraySize-1), asked once per scheduler object; None
        when it cannot be read (then nothing is split or refused here: sbatch has the
        last word)."""
        if not self._max_array_read:
            self._max_array_read = True
            try:
                result = self._run(["scontrol", "show", "config"], "scontrol show config", ok=False)
            except SchedulerError:  # no scontrol here
                self._max_array = None
            else:
                ok = result.returncode == 0
                self._max_array = parse_max_array_size(result.stdout) if ok else None
        return self._max_array

    def _submit_argv(self, main: str, *, app_id: str, job_dir: str) -> tuple[str, ...]:
        return ("sbatch", "--parsable", main)

    # -- effectful -------------------------------------------------------------

    def submit(self, request: Request) -> str:
        """Write the script into ``job_dir``, ``sbatch --parsable`` it; returns the job id."""
        script = self._write_script(request)
        # The job inherits sbatch's environment (--export=ALL), with distspec's own
        # bin directory last on PATH (its torchrun).
        import os

        argv = ["sbatch", "--parsable", str(script)]
        result = self._run(argv, "sbatch", env=submit_env(os.environ))
        job_id = result.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(
                f"sbatch printed {result.stdout.strip()!r}, not a job id",
                scheduler=NAME,
                argv=result.argv,
                stderr=result.stderr,
            )
        # An array's tasks' folders are this one's name + _<task> (see _record).
        folder = f"{str(script.parent).rstrip('/')}/{request.app.name}-{job_id}"
        self._save_record(request, job_id, folder)
        ended = self._ended_path(job_id)
        if ended is not None:
            # An earlier array of this id (a cluster whose ids started again) ended there.
            ended.unlink(missing_ok=True)
        return job_id

    def _check_id(self, app_id: str) -> str:
        if not check_job_id(app_id):
            raise UsageError(
                f"slurm app ids are job ids (1234) or array tasks (1234_7), got {app_id!r}"
            )
        return app_id

    def _record(self, job_id: str) -> JobRecord | None:
        """The job's record; an array task's comes from its array's one record (folder
        ``<app>-<array id>_<task>``)."""
        array_id, sep, task = job_id.partition("_")
        if not sep:
            return super()._record(job_id)
        return _task_record(super()._record(array_id), job_id, task)

    # describe ------------------------------------------------------------------

    def _query(self, job_id: str) -> JobInfo | None:
        """One query: sacct with accounting, scontrol without (decided on first use)."""
        if self._accounting is not False:
            info = self._sacct(job_id)
            if info is not None:
                return info
        return self._scontrol(job_id)

    def _sacct(self, job_id: str) -> JobInfo | None:
        argv = [
            "sacct",
            "--parsable2",
            "--noheader",
            "--jobs",
            job_id,
            "--format=JobID,JobName,State,ExitCode,NodeList,Reason,Submit,Start,End",
        ]
        result = self._run(argv, "sacct", ok=False, env=_time_env())
        if result.returncode != 0:
            if "accounting storage is disabled" in result.stderr.lower():
                self._accounting = False
            # Otherwise slurmdbd may be restarting: ask the controller this time.
            return None
        self._accounting = True
        # None: not yet in the database, so the controller is asked this once.
        return parse_sacct(result.stdout)

    def _scontrol(self, job_id: str) -> JobInfo | None:
        argv = ["scontrol", "show", "job", "-o", job_id]
        result = self._run(argv, "scontrol show job", ok=False, env=_time_env())
        if result.returncode != 0:
            if "invalid job id" in result.stderr.lower():
                return None
            raise self._failed("scontrol show job", result)
        return parse_scontrol(result.stdout)

    def _reported_folder(self, info: JobInfo) -> Path | None:
        from pathlib import Path

        if info.stdout.endswith(".out"):
            return Path(info.stdout[: -len(".out")])
        return None

    def _queried_folder(self, job_id: str) -> Path | None:
        # sacct does not report the output path; scontrol does, while it knows the job.
        info = self._scontrol(job_id)
        if info is not None and "_" in job_id and "%" in info.stdout:
            # A pending array task: its output path is still the pattern (%A_%a).
            array_id, _, task = job_id.partition("_")
            stdout = info.stdout.replace("%A", array_id).replace("%a", task)
            return self._reported_folder(JobInfo(components=info.components, stdout=stdout))
        return None if info is None else self._reported_folder(info)

    def describe(self, app_id: str) -> AppStatus | None:
        """The job's status; an array task's (``1234_7``) as any job's. The id of a
        whole job array submitted from here (``1234``) gets the tasks' states summed
        up: running while any task runs or waits, else succeeded when all did, else
        failed when any did, else cancelled."""
        job_id = self._check_id(app_id)
        if "_" not in job_id:
            record = super()._record(job_id)
            if record is not None and record.points:
                return self._describe_array(job_id, record.points)
        return super().describe(job_id)

    def _describe_array(self, array_id: str, count: int) -> AppStatus:
        found = self.describe_many([f"{array_id}_{k}" for k in range(count)])
        states = [s.state if s is not None else AppState.UNKNOWN for s in found.values()]
        if all(state.is_terminal for state in states):
            state = (
                AppState.SUCCEEDED
                if all(s is AppState.SUCCEEDED for s in states)
                else AppState.FAILED
                if AppState.FAILED in states
                else AppState.CANCELLED
            )
        else:
            waiting = {AppState.PENDING, AppState.SUBMITTED}
            state = (
                AppState.RUNNING
                if AppState.RUNNING in states
                else AppState.PENDING
                if waiting & set(states)
                else AppState.UNKNOWN
            )
        counts = {s.value: states.count(s) for s in AppState if s in states}
        tally = ", ".join(f"{n} {name}" for name, n in counts.items())
        times = [s for s in found.values() if s is not None]
        ended = [s.ended for s in times]
        return AppStatus(
            state=state,
            msg=f"job array of {count} tasks ({array_id}_0..{array_id}_{count - 1}): {tally}",
            submitted=min((s.submitted for s in times if s.submitted), default=None),
            started=min((s.started for s in times if s.started), default=None),
            ended=max(e for e in ended if e) if state.is_terminal and all(ended) else None,
            native_id=array_id,
        )

    def job_paths(self, app_id: str, request: Request | None = None) -> JobPaths | None:
        """The job folder and logs of a job or of an array task (``1234_7``); None for a
        whole job array, whose tasks each have their own."""
        job_id = self._check_id(app_id)
        if request is not None and request.points is not None and "_" not in job_id:
            return None
        if "_" not in job_id:
            record = super()._record(job_id)
            if record is not None and record.points:
                return None
        return super().job_paths(job_id, request)

    def log_iter(
        self,
        app_id: str,
        role: str,
        replica: int,
        *,
        since: float | None = None,
        follow: bool = False,
    ) -> Iterator[str]:
        """A replica's log lines (see :class:`BatchScheduler`); a whole job array has
        none: its tasks (``1234_7``) each have theirs."""
        job_id = self._check_id(app_id)
        record = super()._record(job_id) if "_" not in job_id else None
        if record is not None and record.points:
            raise UsageError(
                f"slurm job {job_id} is an array of {record.points} tasks, each with its own "
                f"logs: name one, {job_id}_0 .. {job_id}_{record.points - 1}"
            )
        return super().log_iter(job_id, role, replica, since=since, follow=follow)

    def describe_many(self, app_ids: Sequence[str]) -> dict[str, AppStatus | None]:
        """:meth:`describe` of each id, with one query per job array for the tasks
        of the same array (``sacct --jobs ARRAY`` or ``scontrol show job ARRAY`` lists
        every task) and its record read once: a sweep of 1,000 points costs what one
        job's status does, plus reading the job folder of each task that has started.

        The status of a task that has ended is final: for an array submitted from this
        state dir it is kept beside the array's record (``<id>.ended.json``), so that
        the next call reads neither its folder nor, once every task asked for has
        ended, Slurm."""
        arrays: dict[str, list[str]] = {}
        for app_id in app_ids:
            array_id, sep, _ = self._check_id(app_id).partition("_")
            if sep:
                arrays.setdefault(array_id, []).append(app_id)
        out: dict[str, AppStatus | None] = {}
        arrays = {a: ids for a, ids in arrays.items() if len(ids) >= 2}
        base_record = super()._record  # the array's own record (no comprehension: super())
        records = {a: base_record(a) for a in arrays}
        endeds = {a: self._ended_statuses(a) if records[a] is not None else {} for a in arrays}
        lefts = {a: [i for i in ids if i not in endeds[a]] for a, ids in arrays.items()}
        # One query for every array of the sweep, not one per array.
        infos = self._query_arrays({a: left for a, left in lefts.items() if left})
        for array_id, task_ids in arrays.items():
            record, ended, left = records[array_id], endeds[array_id], lefts[array_id]
            new = 0
            for task_id in left:
                task_record = _task_record(record, task_id, task_id.partition("_")[2])
                status = self._describe(task_id, task_record, infos.get(task_id))
                out[task_id] = status
                if record is not None and status is not None and status.is_terminal:
                    ended[task_id] = status
                    new += 1
            out.update((task_id, ended[task_id]) for task_id in task_ids if task_id in ended)
            if new:
                self._save_ended(array_id, ended)
        return {
            app_id: out[app_id] if app_id in out else self.describe(app_id) for app_id in app_ids
        }

    def _ended_path(self, array_id: str) -> Path | None:
        records = self._records()
        return None if records is None else records / f"{array_id}.ended.json"

    def _ended_statuses(self, array_id: str) -> dict[str, AppStatus]:
        """The statuses of the array's tasks that have ended, as last saved."""
        import json

        path = self._ended_path(array_id)
        if path is None:
            return {}
        try:
            data = json.loads(path.read_text())
            return {task_id: _status_from_dict(d) for task_id, d in data.items()}
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def _save_ended(self, array_id: str, ended: Mapping[str, AppStatus]) -> None:
        import json

        from distspec._files import write_atomic

        path = self._ended_path(array_id)
        if path is None:
            return
        data = {task_id: status.to_dict() for task_id, status in ended.items()}
        try:
            write_atomic(str(path), json.dumps(data).encode())
        except OSError:
            pass  # only a cache: the next call asks again

    def _query_arrays(self, tasks: Mapping[str, Sequence[str]]) -> dict[str, JobInfo]:
        """What Slurm says about the tasks ``tasks`` names (array id -> task ids), by
        task id, in one query however many arrays: sacct with accounting
        (``--allocations``: no step rows), scontrol without, and scontrol too for tasks
        sacct does not list yet (slurmdbd lags); ``scontrol show job`` takes one id, so
        for several arrays it lists every job and keeps these."""
        if not tasks:
            return {}
        infos: dict[str, JobInfo] = {}
        wanted = {task_id for ids in tasks.values() for task_id in ids}
        array_id = ",".join(tasks)
        if self._accounting is not False:
            argv = [
                "sacct",
                "--parsable2",
                "--noheader",
                "--allocations",
                "--jobs",
                array_id,
                "--format=JobID,JobName,State,ExitCode,NodeList,Reason,Submit,Start,End",
            ]
            result = self._run(argv, "sacct", ok=False, env=_time_env())
            if result.returncode == 0:
                self._accounting = True
                infos = array_infos(result.stdout, "sacct", wanted)
            elif "accounting storage is disabled" in result.stderr.lower():
                self._accounting = False
        if all(task_id in infos for task_id in wanted):
            return infos
        argv = ["scontrol", "show", "job", "-o", *([array_id] if len(tasks) == 1 else [])]
        result = self._run(argv, "scontrol show job", ok=False, env=_time_env())
        if result.returncode != 0:
            if "invalid job id" in result.stderr.lower():
                return infos
            raise self._failed("scontrol show job", result)
        return {**array_infos(result.stdout, "scontrol", wanted), **infos}

    def _status(
        self, job_id: str, record: JobRecord | None, info: JobInfo | None, folder: Path | None
    ) -> AppStatus:
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
        # A direct launch (workers=direct): one replica per rank, not per node.
        roles = [(role, task_count(files, count)) for role, count in roles]
        # Restarts: requeues (Slurm's count) plus in-script retries (max_retries).
        requeues = int(files.get("requeues", "0") or 0)
        if info is not None:
            requeues = max(requeues, info.restarts)
        restarts = requeues + int(files.get("attempt", "0") or 0)
        if info is None:
            return status_from_files(job_id, roles, files, restarts, folder_str)
        state = combine([SLURM_STATES.get(c.state, AppState.UNKNOWN) for c in info.components])
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
            count = task_count(files, len(comp.nodes) if comp.nodes else count)
            replicas = tuple(
                replica_status(role, i, comp_state, comp, files, restarts, folder_str)
                for i in range(count)
            )
            role_status.append(RoleStatus(role=role, replicas=replicas))
        return AppStatus(
            state=state,
            msg=msg,
            num_restarts=restarts,
            roles=tuple(role_status),
            submitted=info.submitted,
            started=info.started,
            ended=info.ended,
        )

    # cancel, list ----------------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        """``scancel`` the job; a job already completing or completed is no error."""
        self.cancel_many([app_id])

    def cancel_many(self, app_ids: Sequence[str]) -> None:
        """One ``scancel A B ...`` for all of ``app_ids`` (jobs, arrays, array tasks; a
        sweep split into 63 arrays is one command, not 63), in chunks of
        :data:`_CANCEL_CHUNK` ids. A job already completing or completed is no error;
        any other error is raised after scancel has tried every id."""
        job_ids = [self._check_id(app_id) for app_id in app_ids]
        failed = None
        for start in range(0, len(job_ids), _CANCEL_CHUNK):
            chunk = job_ids[start : start + _CANCEL_CHUNK]
            result = self._run(["scancel", *chunk], "scancel", ok=False)
            if result.returncode != 0 and not _only_already_done(result.stderr):
                failed = failed or result
        if failed is not None:
            raise self._failed("scancel", failed)

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
                rows = list_rows(result.stdout)
            elif "accounting storage is disabled" in result.stderr.lower():
                self._accounting = False
            else:
                raise self._failed("sacct", result)
        if self._accounting is False:
            # %V: submitted, %e: ended (for a job still running, when its time is up).
            fmt = "--format=%i|%j|%T|%r|%V|%e"
            argv = ["squeue", "--noheader", "--states=all", "--user", user, fmt]
            result = self._run(argv, "squeue", env=_time_env())
            rows = list_rows(result.stdout)
        return summaries(rows)


#: The most job ids one ``scancel`` is given (a command line stays far below ARG_MAX).
_CANCEL_CHUNK = 500


def _only_already_done(stderr: str) -> bool:
    """Whether every complaint of a failed scancel is about a job that had ended:
    scancel says so once per such id (``Kill job error on job id 12: Job/step already
    completing or completed``), goes on with the other ids and exits 1."""
    errors = [line for line in stderr.splitlines() if "error" in line.lower()]
    return bool(errors) and all("already completing or completed" in e for e in errors)


def _time_env() -> dict[str, str]:
    """The environment with ``SLURM_TIME_FORMAT=standard``: squeue, sacct and scontrol
    then print ISO 8601 local times, the one form :func:`status._slurm_time` reads,
    whatever the user's own setting (``relative`` prints ``05:39:44``; a format with a
    space splits scontrol's ``SubmitTime=`` field)."""
    import os

    return {**os.environ, "SLURM_TIME_FORMAT": "standard"}


def _task_record(record: JobRecord | None, job_id: str, task: str) -> JobRecord | None:
    """The record of task ``task`` of the job array whose record is ``record``: its job
    folder is the array's folder name + ``_<task>`` (``<app>-1234_7``)."""
    if record is None:
        return None
    return JobRecord(
        job_id=job_id,
        app_id=record.app_id,
        app=record.app,
        folder=f"{record.folder}_{task}",
        roles=record.roles,
    )


def _status_from_dict(data: Mapping[str, Any]) -> AppStatus:
    """An :class:`AppStatus` back from its :meth:`~AppStatus.to_dict`."""
    from distspec.specs.state import ReplicaStatus

    return AppStatus(
        state=AppState(data["state"]),
        msg=data["msg"],
        num_restarts=data["num_restarts"],
        roles=tuple(
            RoleStatus(
                role=role["role"],
                command=role["command"],
                replicas=tuple(
                    ReplicaStatus(
                        role=r["role"],
                        id=r["id"],
                        state=AppState(r["state"]),
                        hostname=r["hostname"],
                        exit_code=r["exit_code"],
                        reason=r["reason"],
                        restarts=r["restarts"],
                        log=r["log"],
                        started=r["started"],
                        ended=r["ended"],
                    )
                    for r in role["replicas"]
                ),
            )
            for role in data["roles"]
        ),
        ui_url=data["ui_url"],
        submitted=data["submitted"],
        started=data["started"],
        ended=data["ended"],
        location=data["location"],
        native_id=data["native_id"],
    )
