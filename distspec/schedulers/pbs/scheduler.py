"""PBS (OpenPBS, PBS Pro, Torque): one qsub script per AppDef, one process per node.

``compile`` is pure: the script is built by :mod:`distspec.schedulers.pbs.script`,
which also holds the options (one role of N replicas on N hosts, started by
pbsdsh or mpiexec). This module is the effectful half: qsub, qstat, qdel, and
reading the job folder through :class:`~distspec.schedulers.batch.scheduler.BatchScheduler`.

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
    parse_int,
    read_job_folder,
    replica_exit,
    replica_host,
    replica_state,
    safe_app_id,
    write_private,
)
from distspec.schedulers.pbs.script import (
    NAME,
    Launcher,
    PbsOptions,
    ResourceStyle,
    compile_script,
)
from distspec.specs.app import AppDef
from distspec.specs.frozen import FrozenDict, frozen
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "PBS_STATES",
    "Launcher",
    "PbsOptions",
    "PbsScheduler",
    "ResourceStyle",
    "parse_qstat_full",
]


#: Every PBS job state letter (PBS Pro, OpenPBS, Torque) to an AppState. C, F and X
#: are finished: the exit status (or the job folder) decides between SUCCEEDED,
#: FAILED and CANCELLED, so they map to SUCCEEDED here only as "ended".
PBS_STATES: Mapping[str, AppState] = FrozenDict(
    {
        "Q": AppState.PENDING,  # queued
        "H": AppState.PENDING,  # held
        "W": AppState.PENDING,  # waiting for its start time (-a) or for stage-in
        "T": AppState.PENDING,  # in transit to another server
        "M": AppState.PENDING,  # moved to another server (PBS Pro)
        "S": AppState.PENDING,  # suspended by the server
        "U": AppState.PENDING,  # suspended: the workstation is busy (PBS Pro)
        "R": AppState.RUNNING,
        "B": AppState.RUNNING,  # an array job with a subjob started (PBS Pro)
        "E": AppState.RUNNING,  # exiting after having run: not ended yet
        "C": AppState.SUCCEEDED,  # completed (Torque, Slurm's wrappers)
        "F": AppState.SUCCEEDED,  # finished (PBS Pro history, qstat -x)
        "X": AppState.SUCCEEDED,  # a finished subjob (PBS Pro)
    }
)
_FINISHED = frozenset("CFX")
_STATE_WORDS = {
    "Q": "queued",
    "H": "held",
    "W": "waiting",
    "T": "in transit",
    "M": "moved",
    "S": "suspended",
    "U": "suspended",
    "R": "running",
    "B": "running",
    "E": "exiting",
}

# PBS Pro's negative Exit_status values (JOB_EXEC_* in its job.h): the job did not
# run to its own end. Walltime is an external limit, so CANCELLED (as Slurm's TIMEOUT).
_EXEC_CODES: Mapping[int, tuple[AppState, str]] = FrozenDict(
    {
        -1: (AppState.FAILED, "PBS could not start the job"),
        -2: (AppState.FAILED, "PBS could not start the job (after staging files)"),
        -3: (AppState.FAILED, "PBS could not start the job; it was to be retried"),
        -4: (AppState.FAILED, "the job was aborted when MoM started"),
        -10: (AppState.FAILED, "the job's user or group is invalid on the execution host"),
        -11: (AppState.FAILED, "the job was rerun"),
        -27: (AppState.FAILED, "the job exceeded its mem limit"),
        -28: (AppState.FAILED, "the job exceeded its cput limit"),
        -29: (AppState.CANCELLED, "the job exceeded its walltime"),
    }
)

# Compiled on first use (re caches them): a dry run never needs them.
_JOB_ID = r"^\d+(\[\d*\])?(\.[A-Za-z0-9_.-]+)?$"


# -- parsing ------------------------------------------------------------------

_KEY_LINE = r"^\s+([A-Za-z_][A-Za-z0-9_.]*) = ?(.*)$"
_JOB_LINE = r"^Job Id:\s*(\S+)"


def parse_qstat_full(text: str) -> dict[str, dict[str, str]]:
    """``qstat -f`` output → ``{job id: {attribute: value}}``.

    Attributes are ``    name = value`` lines; PBS Pro and Torque wrap long values
    onto lines that start with a tab, which are joined back without a separator (the
    break can fall inside a word or a path).
    """
    jobs: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    key = ""
    for line in text.splitlines():
        head = re.compile(_JOB_LINE).match(line)
        if head:
            current = jobs.setdefault(head.group(1), {})
            key = ""
            continue
        if current is None or not line.strip():
            continue
        attr = re.compile(_KEY_LINE).match(line)
        if attr:
            key = attr.group(1)
            current[key] = attr.group(2).rstrip()
        elif key and line[:1] in "\t ":
            current[key] += line.strip()
    return jobs


def _exit_status(attrs: Mapping[str, str]) -> int | None:
    return parse_int(attrs.get("Exit_status", attrs.get("exit_status", "")).strip())


def _exec_hosts(text: str) -> list[str]:
    """``n0/0*8+n1/0*8`` (PBS Pro), ``n0/0-7+n1/0-7`` (Torque) → ``['n0', 'n1']``."""
    hosts: list[str] = []
    for part in text.split("+"):
        host = part.split("/")[0].strip()
        if host and host not in hosts:
            hosts.append(host)
    return hosts


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@frozen(kw_only=False)
class _JobInfo:
    """What ``qstat -f`` says about one job."""

    state: str
    name: str = ""
    exit_status: int | None = None
    hosts: tuple[str, ...] = ()
    comment: str = ""
    output_path: str = ""


# -- the scheduler ------------------------------------------------------------


class PbsScheduler(BatchScheduler[PbsOptions]):
    """qsub / pbsdsh or mpiexec / qstat / qdel."""

    name = NAME
    Options = PbsOptions
    capabilities = Capabilities(
        mount_kinds=frozenset(), elastic=False, multi_role=False, shared_files=True
    )
    max_poll_interval = 1.0
    label = "PBS"
    no_since = "pbs: --since is not supported (the log lines carry no times)"
    # Slurm's qsub wrapper reports sbatch's errors on stdout.
    errors_on_stdout = True

    # -- pure ------------------------------------------------------------------

    def compile(self, app: AppDef, opts: PbsOptions, *, app_id: str) -> Request:
        """One qsub script; ``argv`` submits it by hand from the folder it is written to."""
        check_capabilities(app, self.capabilities, NAME)
        check_image_dir(app, NAME, label="PBS", runs_in="cd", submitted_from="qsub")
        safe_id = safe_app_id(app_id)
        job_dir = self._job_dir(opts)
        script = compile_script(app, opts, app_id=safe_id, job_dir=job_dir)
        main = f"{safe_id}.pbs"
        out_path = f"{job_dir.rstrip('/')}/{safe_id}.out"
        return Request(
            scheduler=NAME,
            app=app,
            app_id=app_id,
            options=opts,
            files=FrozenDict({main: script}),
            argv=("qsub", "-j", "oe", "-o", out_path, main),
            main_file=main,
        )

    # -- effectful -------------------------------------------------------------

    def submit(self, request: Request) -> str:
        """Write the script into ``job_dir`` and qsub it from the current directory
        (the job's ``$PBS_O_WORKDIR``); returns the job id qsub prints."""
        import os

        script = self._write_script(request)
        # An explicit -o and -j oe on the command line: Slurm's qsub wrapper ignores
        # #PBS -o and, without -j, writes <name>.e<id> into the current directory.
        argv = ["qsub", *request.argv[1:-1], str(script)]
        result = self.run_cmd(argv, env=submit_env(os.environ))
        # PBS Pro prints 1234.server, Torque 1234.server.domain, Slurm's wrapper 1234;
        # the wrapper reports sbatch's errors on stdout.
        job_id = result.stdout.strip().splitlines()[-1].strip() if result.stdout.strip() else ""
        if result.returncode != 0 or not re.compile(_JOB_ID).match(job_id):
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
        if not re.compile(_JOB_ID).match(app_id):
            raise UsageError(f"pbs app ids are job ids such as 1234 or 1234.server, got {app_id!r}")
        return app_id

    # describe ------------------------------------------------------------------

    def _qstat(self, job_id: str) -> _JobInfo | None:
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
            raise SchedulerError(
                "qstat failed",
                scheduler=NAME,
                argv=argv,
                returncode=result.returncode,
                stderr=result.stderr,
            )
        jobs = parse_qstat_full(result.stdout)
        if not jobs:
            return None
        attrs = jobs.get(job_id) or next(iter(jobs.values()))
        return _JobInfo(
            state=attrs.get("job_state", "").strip(),
            name=attrs.get("Job_Name", ""),
            exit_status=_exit_status(attrs),
            hosts=tuple(_exec_hosts(attrs.get("exec_host", ""))),
            comment=attrs.get("comment", ""),
            output_path=attrs.get("Output_Path", ""),
        )

    def _folder(self, record: JobRecord | None, info: _JobInfo | None) -> Path | None:
        from pathlib import Path

        if record is not None:
            return Path(record.folder)
        if info is not None and info.output_path.endswith(".out"):
            # [host:]/job_dir/<app_id>.out
            path = info.output_path.partition(":")[2] or info.output_path
            return Path(path.removesuffix(".out"))
        return None

    def _queried_folder(self, job_id: str) -> Path | None:
        return self._folder(None, self._qstat(job_id))

    def _cancelled_marker(self, job_id: str) -> Path | None:
        records = self._records()
        return None if records is None else records / f"{job_id}.cancelled"

    def describe(self, app_id: str) -> AppStatus | None:
        job_id = self._check_id(app_id)
        record = self._record(job_id)
        info = self._qstat(job_id)
        if info is None and record is None:
            return None
        folder = self._folder(record, info)
        files = read_job_folder(folder)
        marker = self._cancelled_marker(job_id)
        cancelled = marker is not None and marker.exists()
        if record is not None:
            roles = list(record.roles)
        else:
            assert info is not None
            roles = [(info.name or "app", max(1, len(info.hosts)))]
        restarts = parse_int(files.get("attempt")) or 0

        if info is None or info.state in _FINISHED:
            exit_status = None if info is None else info.exit_status
            state, msg = _finished(exit_status, files, cancelled)
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
            msg = _STATE_WORDS.get(info.state, f"job_state {info.state}")
            if info.comment and state is AppState.PENDING:
                msg += f" ({info.comment})"
        hosts = info.hosts if info is not None else ()
        role_status = []
        for role, count in roles:
            replicas = tuple(
                _replica(
                    role, i, state, files, hosts, restarts, msg, str(folder) if folder else None
                )
                for i in range(count)
            )
            role_status.append(RoleStatus(role=role, replicas=replicas))
        status = AppStatus(state=state, msg=msg, num_restarts=restarts, roles=tuple(role_status))
        return with_location(status, str(folder or ""), job_id)

    # cancel, list ----------------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        """``qdel``; a job that already ended (or that PBS forgot) is left alone."""
        job_id = self._check_id(app_id)
        info = self._qstat(job_id)
        if info is None or info.state in _FINISHED:
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
        after = self._qstat(job_id)
        if after is None or after.state in _FINISHED:
            return
        if marker is not None:
            marker.unlink(missing_ok=True)
        raise SchedulerError(
            "qdel failed",
            scheduler=NAME,
            argv=result.argv,
            returncode=result.returncode,
            stderr=result.stderr or result.stdout,
        )

    def list(self) -> list[AppSummary]:
        """The user's jobs that ``qstat`` shows (PBS Pro: not finished ones; Torque and
        Slurm's wrappers: finished ones too, for a while). The table has no times: a job
        submitted from this state dir has its submission time from its record and, once
        finished, its end from the job folder (see :meth:`BatchScheduler._times`)."""
        import getpass

        user = getpass.getuser()
        result = self._run(["qstat"], "qstat")
        out = []
        for line in result.stdout.splitlines():
            cols = line.split()
            # Job id  Name  User  Time Use  S  Queue
            if len(cols) < 6 or not re.compile(_JOB_ID).match(cols[0].rstrip("*")):
                continue
            job_id, name, owner, letter = cols[0], cols[1], cols[2], cols[4]
            # Some servers cut long names in this table and mark the cut with '*'.
            if owner != user and not (owner.endswith("*") and user.startswith(owner[:-1])):
                continue
            record = self._record(job_id)
            folder = record.folder if record is not None else None
            times = self._times(job_id, folder, ended=letter in _FINISHED)
            if letter in _FINISHED:
                # The table has no exit status: what the job folder recorded decides.
                if record is None:
                    state = AppState.UNKNOWN
                else:
                    marker = self._cancelled_marker(job_id)
                    files = read_job_folder(record.folder)
                    state = _finished(None, files, marker is not None and marker.exists())[0]
            else:
                state = PBS_STATES.get(letter, AppState.UNKNOWN)
            out.append(
                AppSummary(
                    app_id=job_id,
                    name=record.app if record is not None else name,
                    state=state,
                    detail=_STATE_WORDS.get(letter, "finished" if letter in _FINISHED else letter),
                    extra=FrozenDict(times),
                )
            )
        return sorted(out, key=lambda a: _sort_key(a.app_id), reverse=True)


def _sort_key(job_id: str) -> int:
    digits = re.match(r"\d+", job_id)
    return int(digits.group(0)) if digits else 0


def _finished(
    exit_status: int | None, files: Mapping[str, str], cancelled: bool
) -> tuple[AppState, str]:
    """The end state of a finished job: from PBS's exit status where it reports one,
    else from what the job folder recorded."""
    if cancelled or "signal" in files:
        return AppState.CANCELLED, "cancelled (qdel)" if cancelled else "terminated by SIGTERM"
    if exit_status is not None:
        if exit_status == 0:
            return AppState.SUCCEEDED, "finished"
        if exit_status < 0:
            state, why = _EXEC_CODES.get(
                exit_status, (AppState.FAILED, "PBS could not run the job")
            )
            return state, f"{why} (Exit_status {exit_status})"
        if exit_status >= 256:
            # PBS reports 256 + N when the script itself was killed by signal N.
            return AppState.CANCELLED, f"killed by {_signal_name(exit_status - 256)}"
        return AppState.FAILED, f"exit status {exit_status}"
    code = parse_int(files.get("exit"))
    if code == 0:
        return AppState.SUCCEEDED, "finished"
    if code is not None:
        return AppState.FAILED, f"exit status {code} (recorded by the job)"
    if not any(name.endswith(".host") for name in files):
        return AppState.CANCELLED, "ended before any replica started"
    return AppState.FAILED, "ended without recording an exit code"


def _replica(
    role: str,
    i: int,
    job_state: AppState,
    files: Mapping[str, str],
    hosts: Sequence[str],
    restarts: int,
    msg: str,
    folder: str | None = None,
) -> ReplicaStatus:
    recorded = exit_code(files, role, i)
    code, why = replica_exit(folder, files, role, i)
    state = replica_state(recorded, job_state)
    if recorded is not None and state is AppState.FAILED:
        reason = why
    elif state in (AppState.FAILED, AppState.CANCELLED):
        reason = msg  # the job's end decided it
    else:
        reason = ""
    return ReplicaStatus(
        role=role,
        id=i,
        state=state,
        hostname=replica_host(files, role, i, hosts),
        exit_code=code,
        reason=reason,
        restarts=restarts,
    )
