"""The effectful half of the PBS backend: qsub, qstat, qdel.

``compile`` is pure: the script is :mod:`distspec.schedulers.pbs.script`'s (one role
of N replicas on N hosts, started by pbsdsh or mpiexec). Reading the job folder, the
records and the logs is :class:`~distspec.schedulers.batch.scheduler.BatchScheduler`'s.

Files (``job_dir``, absolute; default ``<state dir>/pbs``)::

    <job_dir>/<app_id>.pbs              the script, as submitted
    <job_dir>/<app_id>.out              the batch script's own output (-j oe, -o)
    <job_dir>/<app_id>/<role>-<i>.log   replica i's stdout and stderr
    <job_dir>/<app_id>/<role>-<i>.host  the host it ran on
    <job_dir>/<app_id>/<role>-<i>.exit  its exit code, once it exited
    <job_dir>/<app_id>/exit             the batch script's exit code
    <job_dir>/<app_id>/signal           present when the script was terminated (qdel)

An array job (a sweep's points, :meth:`PbsScheduler.compile_array`) adds::

    <job_dir>/<app_id>.points           one line of values per subjob
    <job_dir>/<app_id>_<k>/...          subjob k's job folder, as above, and its
    <job_dir>/<app_id>_<k>.out          own output (the array's -o file gets only
                                        what the script prints before it knows k)

A subjob's id is the array's with its index, ``1234[7].server`` (Slurm's PBS
wrappers, which print the array's number alone: ``1234[7]``); describe, log,
cancel and job_paths take it, from the array's one record.

Launchers rarely return every task's exit code (pbsdsh does not; Slurm's
``mpiexec`` wrapper always exits 0), and neither Torque's ``qstat -f`` before the
end nor Slurm's PBS wrappers report an exit status, so the ``.exit`` files decide
per-replica codes and the script's own exit code. ``describe`` asks ``qstat -f``,
then ``qstat -x -f`` when PBS Pro says the job has finished, and falls back to the
job folder when PBS has forgotten the job.
"""

from __future__ import annotations

from distspec.errors import SchedulerError, UsageError
from distspec.frozen import FrozenDict, replace
from distspec.schedulers.api import AppSummary, Capabilities
from distspec.schedulers.batch.direct import task_count
from distspec.schedulers.batch.folder import parse_int, read_job_folder
from distspec.schedulers.batch.scheduler import BatchScheduler, JobRecord, write_private
from distspec.schedulers.environment import submit_env
from distspec.schedulers.pbs.options import NAME, PbsOptions, check_container, check_options
from distspec.schedulers.pbs.script import DEPENDENCY_KINDS, compile_script
from distspec.schedulers.pbs.status import (
    FINISHED,
    PBS_STATES,
    STATE_WORDS,
    JobInfo,
    array_of,
    finished,
    is_job_id,
    job_info,
    job_infos,
    job_number,
    parse_max_array_size,
    parse_qstat,
    replica_status,
    subjob_id,
)
from distspec.specs.state import AppState, AppStatus, RoleStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any

    from distspec.schedulers.api import Dependency, Points, Request
    from distspec.specs.app import AppDef

__all__ = ["PbsScheduler"]


class PbsScheduler(BatchScheduler[PbsOptions, JobInfo]):
    """qsub / pbsdsh or mpiexec / qstat / qdel."""

    name = NAME
    Options = PbsOptions
    capabilities = Capabilities(
        # Bind mounts need -cfg container=... (checked by the script's compile).
        mount_kinds=frozenset({"bind"}),
        elastic=False,
        multi_role=False,
        shared_files=True,
        image="directory",
        snapshot_default=True,
        dependencies=True,
        arrays=True,
    )
    max_poll_interval = 1.0
    label = "PBS"
    submit_command = "qsub"
    script_suffix = "pbs"
    runs_in = "cd"
    no_since = "pbs: --since is not supported (the log lines carry no times)"
    # Slurm's qsub wrapper reports sbatch's errors on stdout.
    errors_on_stdout = True

    def _check_image_dir(self, app: AppDef, opts: PbsOptions) -> None:
        # A runtime PBS has not is the first thing to say, before what it would run.
        check_container(opts)
        super()._check_image_dir(app, opts)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The server's array size limit as max_array_size() read it (None: none known).
        self._max_array: int | None = None
        self._max_array_read = False

    # -- pure ------------------------------------------------------------------

    def check(self, app: AppDef, opts: PbsOptions) -> None:
        """Refuse bad options before the snapshot."""
        check_options(opts)

    def _script(
        self,
        app: AppDef,
        opts: PbsOptions,
        *,
        app_id: str,
        job_dir: str,
        after: tuple[Dependency, ...] = (),
        points: Points | None = None,
    ) -> str:
        return compile_script(app, opts, app_id=app_id, job_dir=job_dir, after=after, points=points)

    def point_id(self, array_id: str, request: Request, index: int) -> str:
        """Subjob ``index - points.first`` of the array job ``array_id`` (what qsub
        printed): ``1234[].server`` gives ``1234[7].server``; Slurm's PBS wrappers'
        ``1234`` gives ``1234[7]``."""
        points = request.points
        if points is None or not 0 <= index - points.first < len(points.values):
            raise ValueError(f"point {index} is not in the array request {request.app_id}")
        return subjob_id(array_id, index - points.first)

    def _submit_argv(self, main: str, *, app_id: str, job_dir: str) -> tuple[str, ...]:
        # An explicit -o and -j oe: Slurm's qsub wrapper ignores #PBS -o and, without
        # -j, writes <name>.e<id> into the current directory.
        return ("qsub", "-j", "oe", "-o", f"{job_dir.rstrip('/')}/{app_id}.out", main)

    # -- effectful -------------------------------------------------------------

    def max_array_size(self, opts: PbsOptions) -> int | None:
        """The most subjobs one array job may have: the server's ``max_array_size``
        (PBS Pro, OpenPBS) or ``max_job_array_size`` (Torque), from ``qstat -B -f``,
        asked once per scheduler object. None when the server shows none (OpenPBS then
        allows 10,000) or cannot be asked: then nothing is split here, and qsub has
        the last word."""
        if not self._max_array_read:
            self._max_array_read = True
            try:
                result = self._run(["qstat", "-B", "-f"], "qstat -B", ok=False)
            except SchedulerError:  # no qstat here
                return None
            if result.returncode == 0:
                self._max_array = parse_max_array_size(result.stdout)
        return self._max_array

    def submit(self, request: Request) -> str:
        """Write the script into ``job_dir`` and qsub it from the current directory
        (the job's ``$PBS_O_WORKDIR``); returns the job id qsub prints."""
        import os

        script = self._write_script(request)
        argv = ["qsub", *request.argv[1:-1], str(script)]
        result = self.run_cmd(argv, env=submit_env(os.environ))
        # PBS Pro prints 1234.server, Torque 1234.server.domain, Slurm's wrapper 1234;
        # the wrapper reports sbatch's errors on stdout.
        job_id = result.stdout.strip().splitlines()[-1].strip() if result.stdout.strip() else ""
        if result.returncode != 0 or not is_job_id(job_id):
            raise SchedulerError(
                "qsub failed" if result.returncode else f"qsub printed {job_id!r}, not a job id",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                # The wrapper quotes sbatch's output in '...': keep the words.
                stderr="\n".join(
                    line.strip(" '")
                    for line in (result.stderr + result.stdout).splitlines()
                    if line.strip(" '")
                ),
            )
        folder = f"{str(script.parent).rstrip('/')}/{script.stem}"
        self._save_record(request, job_id, folder)
        return job_id

    def _check_id(self, app_id: str) -> str:
        if not is_job_id(app_id):
            raise UsageError(
                "pbs app ids are job ids such as 1234, 1234.server or 1234[7].server (a "
                f"subjob), got {app_id!r}"
            )
        return app_id

    # records: an array job has one, its subjobs share it -----------------------

    def _save_record(self, request: Request, job_id: str, folder: str) -> None:
        """The record, with the jobs it waits for (``after``): a job PBS deleted because
        they ended the wrong way is then described as such."""
        super()._save_record(request, job_id, folder)
        records = self._records()
        if request.after and records is not None:
            import json

            path = records / f"{job_id}.json"
            data = json.loads(path.read_text())
            data["after"] = [[dep.app_id, dep.condition] for dep in request.after]
            write_private(path, json.dumps(data))

    def _array_record(self, array_id: str) -> JobRecord | None:
        """The record of the array job ``array_id`` (``1234[].server``), kept under the
        id qsub printed: that one, or the number alone (Slurm's PBS wrappers)."""
        return super()._record(array_id) or super()._record(array_id.replace("[]", "", 1))

    def _record(self, job_id: str) -> JobRecord | None:
        """The job's record; a subjob's comes from its array job's: its folder is the
        array's + ``_<index>``."""
        parts = array_of(job_id)
        if parts is None:
            return super()._record(job_id)
        record = self._array_record(parts[0])
        if record is None:
            return None
        return JobRecord(
            job_id=job_id,
            app_id=record.app_id,
            app=record.app,
            folder=f"{record.folder}_{parts[1]}",
            roles=record.roles,
        )

    def _times(self, job_id: str, folder: str | None, *, ended: bool) -> dict[str, str]:
        # A subjob was submitted with its array job.
        parts = array_of(job_id)
        if parts is None:
            return super()._times(job_id, folder, ended=ended)
        record = self._array_record(parts[0])
        return {} if record is None else super()._times(record.job_id, folder, ended=ended)

    def _after(self, job_id: str) -> list[str]:
        """``afterok:1234.server`` ... for each job the job's record says it waited for."""
        import json

        records = self._records()
        if records is None:
            return []
        try:
            data = json.loads((records / f"{job_id}.json").read_text())
            after = data.get("after", ())
            return [f"{DEPENDENCY_KINDS.get(kind, kind)}:{job}" for job, kind in after]
        except (OSError, ValueError, TypeError):
            return []

    # describe ------------------------------------------------------------------

    def _qstat(self, job_id: str, *, each: bool = False) -> str | None:
        """What ``qstat -f`` prints about ``job_id`` (with ``each``, ``-t``: an array
        job's subjobs too); for a job PBS Pro has moved to its history, ``qstat -x -f``.
        None when the server does not know the job (any more)."""
        flags = ["-f", *(["-t"] if each else [])]
        result = self._run(["qstat", *flags, job_id], "qstat", ok=False)
        if result.returncode != 0 and "has finished" in result.stderr:
            result = self._run(["qstat", "-x", *flags, job_id], "qstat -x", ok=False)
        if result.returncode != 0:
            # PBS Pro and Torque: "Unknown Job Id" (rc 153); Slurm's wrapper: rc 153, silent.
            if result.returncode == 153 or "unknown job" in result.stderr.lower():
                return None
            raise self._failed("qstat", result, stderr=result.stderr)
        return result.stdout

    def _query(self, job_id: str) -> JobInfo | None:
        """``qstat -f`` (see :meth:`_qstat`). None when the server does not know the job
        (any more).

        A subjob that the server does not list (Slurm's PBS wrappers know each by a
        job number of its own) is asked for by the number its job folder recorded
        (``jobid``); before it started (no such file) it is queued while its array
        job is."""
        text = self._qstat(job_id)
        info = None if text is None else job_info(text, job_id)
        parts = array_of(job_id)
        if parts is None:
            return info
        if info is not None:
            return _subjob_info(info, parts[1])
        array = self._array_record(parts[0])
        if array is None or "[]" in array.job_id:
            return None  # a PBS that names subjobs has forgotten this one
        from pathlib import Path

        try:
            alias = (Path(f"{array.folder}_{parts[1]}") / "jobid").read_text().strip()
        except OSError:
            alias = ""
        if alias:
            text = self._qstat(alias) if is_job_id(alias) else None
            info = None if text is None else job_info(text, alias)
            return None if info is None else replace(info, alias=alias)
        text = self._qstat(array.job_id)
        whole = None if text is None else job_info(text, array.job_id)
        if whole is None or whole.state in FINISHED:
            return None
        word = STATE_WORDS.get(whole.state, whole.state)
        return JobInfo(
            state="Q",
            name=whole.name,
            comment=f"not started; its array job {array.job_id} is {word}",
            listed=False,
        )

    def describe_many(self, app_ids: Sequence[str]) -> dict[str, AppStatus | None]:
        """:meth:`describe` of each id; the subjobs of one array job (two or more) come
        from one ``qstat -f -t`` of the array, which lists every subjob (PBS Pro,
        OpenPBS, Torque), and its one record. Slurm's PBS wrappers list no subjobs:
        there each is asked for alone."""
        arrays: dict[str, list[tuple[str, int]]] = {}
        for app_id in app_ids:
            parts = array_of(self._check_id(app_id))
            if parts is not None:
                arrays.setdefault(parts[0], []).append((app_id, parts[1]))
        out: dict[str, AppStatus | None] = {}
        for array_id, members in arrays.items():
            record = self._array_record(array_id)
            if len(members) < 2 or (record is not None and "[]" not in record.job_id):
                continue
            text = self._qstat(array_id, each=True)
            infos: dict[int, JobInfo] = {}
            for job_id, info in (job_infos(text) if text else {}).items():
                parts = array_of(job_id)
                if parts is not None:
                    infos[parts[1]] = _subjob_info(info, parts[1])
            for job_id, index in members:
                out[job_id] = self._describe(job_id, self._record(job_id), infos.get(index))
        return {
            app_id: out[app_id] if app_id in out else self.describe(app_id) for app_id in app_ids
        }

    def _reported_folder(self, info: JobInfo) -> Path | None:
        from pathlib import Path

        if info.output_path.endswith(".out"):
            # [host:]/job_dir/<app_id>.out
            path = info.output_path.partition(":")[2] or info.output_path
            return Path(path.removesuffix(".out"))
        return None

    def _cancelled_marker(self, job_id: str) -> Path | None:
        records = self._records()
        return None if records is None else records / f"{job_id}.cancelled"

    def _status(
        self, job_id: str, record: JobRecord | None, info: JobInfo | None, folder: Path | None
    ) -> AppStatus:
        files = read_job_folder(folder)
        cancelled = self._was_cancelled(job_id)
        if record is not None:
            roles = list(record.roles)
        else:
            assert info is not None
            roles = [(info.name or "app", max(1, len(info.hosts)))]
        # A direct launch (workers=direct): one replica per rank, not per host.
        roles = [(role, task_count(files, count)) for role, count in roles]
        restarts = parse_int(files.get("attempt")) or 0
        if info is not None and info.run_count > 1:
            # The server ran the job again (qrerun, a requeue): every run is a restart.
            restarts += info.run_count - 1

        if info is None or info.state in FINISHED:
            exit_status = None if info is None else info.exit_status
            state, msg = finished(exit_status, files, cancelled)
            if folder is None and exit_status is None and not cancelled:
                # Nothing recorded the outcome where it can be found: a job submitted by
                # hand (the -o DIR files), which PBS lists without its Output_Path.
                state = AppState.UNKNOWN
                msg = (
                    "ended, but its job folder is unknown (not submitted from this state "
                    "dir, and PBS names no output path), so its outcome is too"
                )
            elif record is not None and record.points and array_of(job_id) is None:
                state, msg = self._array_end(record, cancelled)
            elif state is AppState.CANCELLED and not cancelled and not files:
                after = self._after(job_id)
                if after:
                    # PBS deletes a job whose dependency can no longer be met.
                    msg = (
                        f"deleted before it started: it waited for {','.join(after)}, "
                        "which can no longer be met (or it was deleted by hand)"
                    )
            if info is None:
                msg = f"PBS no longer lists job {job_id}; {msg}"
        else:
            state = PBS_STATES.get(info.state, AppState.UNKNOWN)
            msg = STATE_WORDS.get(info.state, f"job_state {info.state}")
            if info.comment and state is AppState.PENDING:
                msg += f" ({info.comment})"
        hosts = info.hosts if info is not None else ()
        role_status = []
        for role, count in roles:
            replicas = tuple(
                replica_status(
                    role, i, state, files, hosts, restarts, msg, str(folder) if folder else None
                )
                for i in range(count)
            )
            role_status.append(RoleStatus(role=role, replicas=replicas))
        return AppStatus(state=state, msg=msg, num_restarts=restarts, roles=tuple(role_status))

    def _was_cancelled(self, job_id: str) -> bool:
        """Whether ``cancel`` deleted the job (or, for a subjob, its whole array)."""
        ids = [job_id]
        parts = array_of(job_id)
        if parts is not None:
            record = self._array_record(parts[0])
            ids.append(record.job_id if record is not None else parts[0])
        markers = [self._cancelled_marker(i) for i in ids]
        return any(marker is not None and marker.exists() for marker in markers)

    def _array_end(self, record: JobRecord, cancelled: bool) -> tuple[AppState, str]:
        """How an array job that ended went, from its subjobs' job folders: succeeded
        when every point did, else failed (or cancelled) with the count."""
        states = [
            finished(None, read_job_folder(f"{record.folder}_{k}"), cancelled)[0]
            for k in range(record.points)
        ]
        failed = states.count(AppState.FAILED)
        stopped = len(states) - failed - states.count(AppState.SUCCEEDED)
        if failed:
            return AppState.FAILED, f"{failed} of {len(states)} subjobs failed"
        if stopped:
            return AppState.CANCELLED, f"{stopped} of {len(states)} subjobs did not finish"
        return AppState.SUCCEEDED, "finished"

    # cancel, list ----------------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        """``qdel``; a job that already ended (or that PBS forgot) is left alone. An
        array job's id (``1234[].server``) deletes every subjob; a subjob's, that one."""
        job_id = self._check_id(app_id)
        info = self._query(job_id)
        if info is None or info.state in FINISHED:
            return
        if not info.listed:
            parts = array_of(job_id)
            raise SchedulerError(
                f"cannot cancel {job_id} before it starts: this PBS (Slurm's PBS wrappers) "
                f"names no subjob; cancel the whole array job {parts[0] if parts else job_id}",
                scheduler=NAME,
            )
        marker = self._cancelled_marker(job_id)
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_private(marker, "qdel\n")
        # A subjob that Slurm's PBS wrappers know by its own job number: qdel that.
        result = self._run(["qdel", info.alias or job_id], "qdel", ok=False)
        if result.returncode == 0:
            return
        # PBS Pro: "Job has finished" (rc 35), Torque: "Unknown Job Id" (rc 153), Slurm's
        # wrapper: rc 1 and nothing said. Ended in between is fine; anything else is not.
        after = self._query(job_id)
        if after is None or after.state in FINISHED:
            return
        if marker is not None:
            marker.unlink(missing_ok=True)
        raise self._failed("qdel", result)

    def list(self) -> list[AppSummary]:
        """The user's jobs that ``qstat -x`` shows (PBS Pro, OpenPBS: finished ones too,
        from the server's job history), else plain ``qstat`` (Torque, whose ``-x`` is XML,
        and Slurm's wrappers, which have no ``-x``: finished ones for a while). The table
        has no times: a job submitted from this state dir has its submission time from
        its record and, once finished, its end from the job folder (see
        :meth:`BatchScheduler._times`)."""
        import getpass

        user = getpass.getuser()
        result = self._run(["qstat", "-x"], "qstat -x", ok=False)
        if result.returncode != 0 or not any(
            line.startswith("Job id") for line in result.stdout.splitlines()
        ):
            result = self._run(["qstat"], "qstat")
        out = []
        for job_id, name, owner, letter in parse_qstat(result.stdout):
            # Some servers cut long names in this table and mark the cut with '*'.
            if owner != user and not (owner.endswith("*") and user.startswith(owner[:-1])):
                continue
            record = self._record(job_id)
            folder = record.folder if record is not None else None
            times = self._times(job_id, folder, ended=letter in FINISHED)
            if letter in FINISHED:
                # The table has no exit status: what the job folder recorded decides.
                if record is None:
                    state = AppState.UNKNOWN
                elif record.points and array_of(job_id) is None:
                    state = self._array_end(record, self._was_cancelled(job_id))[0]
                else:
                    files = read_job_folder(record.folder)
                    state = finished(None, files, self._was_cancelled(job_id))[0]
            else:
                state = PBS_STATES.get(letter, AppState.UNKNOWN)
            out.append(
                AppSummary(
                    app_id=job_id,
                    name=record.app if record is not None else name,
                    state=state,
                    detail=STATE_WORDS.get(letter, "finished" if letter in FINISHED else letter),
                    extra=FrozenDict(times),
                )
            )
        return sorted(out, key=lambda a: job_number(a.app_id), reverse=True)


def _subjob_info(info: JobInfo, index: int) -> JobInfo:
    """A subjob's :class:`JobInfo`, its output path its own (the server reports the
    array's, ``<job_dir>/<app_id>.out``; the subjob writes ``<app_id>_<index>.out``), so
    that its job folder is found without a record."""
    path = info.output_path
    if not path.endswith(".out") or path.endswith(f"_{index}.out"):
        return info
    return replace(info, output_path=f"{path.removesuffix('.out')}_{index}.out")
