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

Launchers rarely return every task's exit code (pbsdsh does not; Slurm's
``mpiexec`` wrapper always exits 0), and neither Torque's ``qstat -f`` before the
end nor Slurm's PBS wrappers report an exit status, so the ``.exit`` files decide
per-replica codes and the script's own exit code. ``describe`` asks ``qstat -f``,
then ``qstat -x -f`` when PBS Pro says the job has finished, and falls back to the
job folder when PBS has forgotten the job.
"""

from __future__ import annotations

from distspec.errors import SchedulerError, UsageError
from distspec.frozen import FrozenDict
from distspec.schedulers.api import AppSummary, Capabilities
from distspec.schedulers.batch.folder import parse_int, read_job_folder
from distspec.schedulers.batch.scheduler import BatchScheduler, JobRecord, write_private
from distspec.schedulers.environment import submit_env
from distspec.schedulers.pbs.options import NAME, PbsOptions
from distspec.schedulers.pbs.script import compile_script
from distspec.schedulers.pbs.status import (
    FINISHED,
    PBS_STATES,
    STATE_WORDS,
    JobInfo,
    finished,
    is_job_id,
    job_info,
    job_number,
    parse_qstat,
    replica_status,
)
from distspec.specs.state import AppState, AppStatus, RoleStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from distspec.schedulers.api import Request
    from distspec.specs.app import AppDef

__all__ = ["PbsScheduler"]


class PbsScheduler(BatchScheduler[PbsOptions, JobInfo]):
    """qsub / pbsdsh or mpiexec / qstat / qdel."""

    name = NAME
    Options = PbsOptions
    capabilities = Capabilities(
        mount_kinds=frozenset(),
        elastic=False,
        multi_role=False,
        shared_files=True,
        image="directory",
        snapshot_default=True,
    )
    max_poll_interval = 1.0
    label = "PBS"
    submit_command = "qsub"
    script_suffix = "pbs"
    runs_in = "cd"
    no_since = "pbs: --since is not supported (the log lines carry no times)"
    # Slurm's qsub wrapper reports sbatch's errors on stdout.
    errors_on_stdout = True

    # -- pure ------------------------------------------------------------------

    def _script(self, app: AppDef, opts: PbsOptions, *, app_id: str, job_dir: str) -> str:
        return compile_script(app, opts, app_id=app_id, job_dir=job_dir)

    def _submit_argv(self, main: str, *, app_id: str, job_dir: str) -> tuple[str, ...]:
        # An explicit -o and -j oe: Slurm's qsub wrapper ignores #PBS -o and, without
        # -j, writes <name>.e<id> into the current directory.
        return ("qsub", "-j", "oe", "-o", f"{job_dir.rstrip('/')}/{app_id}.out", main)

    # -- effectful -------------------------------------------------------------

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
            raise UsageError(f"pbs app ids are job ids such as 1234 or 1234.server, got {app_id!r}")
        return app_id

    # describe ------------------------------------------------------------------

    def _query(self, job_id: str) -> JobInfo | None:
        """``qstat -f``; for a job PBS Pro has moved to its history, ``qstat -x -f``.
        None when the server does not know the job (any more)."""
        argv = ["qstat", "-f", job_id]
        result = self._run(argv, "qstat", ok=False)
        if result.returncode != 0 and "has finished" in result.stderr:
            argv = ["qstat", "-x", "-f", job_id]
            result = self._run(argv, "qstat -x", ok=False)
        if result.returncode != 0:
            # PBS Pro and Torque: "Unknown Job Id" (rc 153); Slurm's wrapper: rc 153, silent.
            if result.returncode == 153 or "unknown job" in result.stderr.lower():
                return None
            raise self._failed("qstat", result, stderr=result.stderr)
        return job_info(result.stdout, job_id)

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
        marker = self._cancelled_marker(job_id)
        cancelled = marker is not None and marker.exists()
        if record is not None:
            roles = list(record.roles)
        else:
            assert info is not None
            roles = [(info.name or "app", max(1, len(info.hosts)))]
        restarts = parse_int(files.get("attempt")) or 0

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

    # cancel, list ----------------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        """``qdel``; a job that already ended (or that PBS forgot) is left alone."""
        job_id = self._check_id(app_id)
        info = self._query(job_id)
        if info is None or info.state in FINISHED:
            return
        marker = self._cancelled_marker(job_id)
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_private(marker, "qdel\n")
        result = self._run(["qdel", job_id], "qdel", ok=False)
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
        """The user's jobs that ``qstat`` shows (PBS Pro: not finished ones; Torque and
        Slurm's wrappers: finished ones too, for a while). The table has no times: a job
        submitted from this state dir has its submission time from its record and, once
        finished, its end from the job folder (see :meth:`BatchScheduler._times`)."""
        import getpass

        user = getpass.getuser()
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
                else:
                    marker = self._cancelled_marker(job_id)
                    files = read_job_folder(record.folder)
                    state = finished(None, files, marker is not None and marker.exists())[0]
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
