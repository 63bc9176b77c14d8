"""The effectful half Slurm and PBS share: :class:`BatchScheduler`.

Compile (one script, via the backend's pure script writer), the job_dir, running
the scheduler's commands, writing the script and a record per job, finding a job's
folder again (from its record, else from what the scheduler reports), describe's
frame and the replicas' logs. A backend fills in what its scheduler says: how a job
id looks, one query of the job's state, and the status built from it.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Iterator, Mapping, Sequence

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.frozen import FrozenDict, frozen
from distspec.schedulers.api import (
    CommandResult,
    Dependency,
    JobPaths,
    Points,
    Request,
    Scheduler,
    check_capabilities,
)
from distspec.schedulers.batch.script import points_file, safe_app_id
from distspec.schedulers.logs import log_file_name, read_log_lines, with_location

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, ClassVar, Generic, Protocol, TypeVar

    from distspec.specs.app import AppDef, Role
    from distspec.specs.state import AppStatus
else:
    from distspec._typing import Generic, Protocol, TypeVar

__all__ = ["BatchScheduler", "JobRecord", "write_private"]


def write_private(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner alone (0600), also when the
    file existed with a wider mode. Job scripts hold the job's ``--env`` values and
    records point at its logs: neither is for other users."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


@frozen(kw_only=False)
class JobRecord:
    """What submit wrote down about a job, so that describe and log work from any cwd."""

    job_id: str
    app_id: str
    app: str
    folder: str
    roles: tuple[tuple[str, int], ...] = ()
    #: An array job's task count (:meth:`BatchScheduler.compile_array`); 0 for one job.
    points: int = 0


class _HasJobDir(Protocol):
    @property
    def job_dir(self) -> str | None: ...


BatchOptsT = TypeVar("BatchOptsT", bound=_HasJobDir)
#: What one query of the scheduler says about a job (the backend's own record).
InfoT = TypeVar("InfoT")


class BatchScheduler(Scheduler[BatchOptsT], Generic[BatchOptsT, InfoT]):
    """The effectful glue of a batch backend: compile, job_dir, commands, records,
    describe's frame and logs.

    A subclass sets the class attributes below and implements :meth:`_script`,
    :meth:`_submit_argv`, :meth:`_check_id`, :meth:`_query`, :meth:`_reported_folder`
    and :meth:`_status` besides :meth:`submit`, :meth:`cancel` and :meth:`list`.
    """

    #: How messages name the scheduler software ("Slurm", "PBS").
    label: ClassVar[str]
    #: The command that submits the script ("sbatch", "qsub"); its file name ends in
    #: ``.<script_suffix>``.
    submit_command: ClassVar[str]
    script_suffix: ClassVar[str]
    #: What runs a role in its image directory (``srun --chdir``, the script's ``cd``).
    runs_in: ClassVar[str]
    #: The container runtimes a message suggests for a container image (``container=``).
    runtimes: ClassVar[str] = "podman|apptainer"
    #: The UsageError message of ``log_iter(since=...)``.
    no_since: ClassVar[str]
    #: Whether a failed command's message may be on stdout alone (then it is used
    #: when stderr is empty).
    errors_on_stdout: ClassVar[bool] = False

    # -- the pure half -----------------------------------------------------------

    def compile(
        self, app: AppDef, opts: BatchOptsT, *, app_id: str, after: Sequence[Dependency] = ()
    ) -> Request:
        """One batch script; ``argv`` submits it by hand from the folder it is written to,
        ``job_dir`` is the folder submit creates for it. The script waits for ``after``
        (the backend's dependency directive)."""
        return self._compile(app, opts, app_id=app_id, after=tuple(after), points=None)

    def compile_array(
        self,
        app: AppDef,
        opts: BatchOptsT,
        *,
        app_id: str,
        points: Points,
        after: Sequence[Dependency] = (),
    ) -> Request:
        """One array job's script, which runs point ``k`` of ``points`` as array task
        ``k``, and beside it the points file ``<app_id>.points`` (see
        :func:`~distspec.schedulers.batch.script.points_file`), which submit writes
        into ``job_dir`` with the script."""
        if not self.capabilities.arrays:
            return super().compile_array(app, opts, app_id=app_id, points=points, after=after)
        if not points.values:
            raise CompileError(self.name, "a job array needs at least one point")
        return self._compile(app, opts, app_id=app_id, after=tuple(after), points=points)

    def _compile(
        self,
        app: AppDef,
        opts: BatchOptsT,
        *,
        app_id: str,
        after: tuple[Dependency, ...],
        points: Points | None,
    ) -> Request:
        check_capabilities(app, self.capabilities, self.name)
        self._check_image_dir(app, opts)
        safe_id = safe_app_id(app_id)
        job_dir = self._job_dir(opts)
        main = f"{safe_id}.{self.script_suffix}"
        files = {}
        if points is not None:
            files[f"{safe_id}.points"] = points_file(points, self.name)
        # Only what there is, so that a backend without dependencies or arrays keeps the
        # old signature.
        extra: dict[str, Any] = {"after": after} if after else {}
        if points is not None:
            extra["points"] = points
        script = self._script(app, opts, app_id=safe_id, job_dir=job_dir, **extra)
        return Request(
            scheduler=self.name,
            app=app,
            app_id=app_id,
            options=opts,
            files=FrozenDict({main: script, **files}),
            argv=self._submit_argv(main, app_id=safe_id, job_dir=job_dir),
            main_file=main,
            job_dir=job_dir,
            after=after,
            points=points,
        )

    @abc.abstractmethod
    def _script(
        self,
        app: AppDef,
        opts: BatchOptsT,
        *,
        app_id: str,
        job_dir: str,
        after: tuple[Dependency, ...] = (),
        points: Points | None = None,
    ) -> str:
        """The batch script (pure); ``app_id`` is safe in file names. ``after``: the jobs
        it waits for (passed only when there are some); ``points``: it is an array job
        over them (passed only for :meth:`compile_array`), whose task ``k`` reads line
        ``k + 1`` of ``<job_dir>/<app_id>.points``."""

    @abc.abstractmethod
    def _submit_argv(self, main: str, *, app_id: str, job_dir: str) -> tuple[str, ...]:
        """The command that submits the script ``main`` by hand, from its folder."""

    def _check_image_dir(self, app: AppDef, opts: BatchOptsT) -> None:
        """Refuse a role image that the ``container`` option cannot run.

        Without a container runtime (``container=none``) a role's image is the
        directory its processes run in (:attr:`runs_in`; also ``${img_root}``). A
        container reference (``ghcr.io/pytorch/torchx:0.7.0``) would be queued and fail
        as it starts, so it is refused here, pointing at ``-cfg container=...``. With a
        runtime, the image must be one it runs (:func:`.container.runtime_image`).
        Compile is pure: the path's syntax is checked, not whether it exists.

        Raises:
            CompileError: naming ``--image`` and what it means on this scheduler.
        """
        from distspec.schedulers.batch.container import Container, ImageKind, image_kind

        runtime = getattr(opts, "container", Container.NONE)
        if runtime is not Container.NONE and getattr(opts, "env_to_local", None):
            raise CompileError(
                self.name,
                f"env_to_local copies this machine's Python environment to the nodes; with "
                f"container={runtime.value} the image's Python runs the job: drop one of them",
            )
        for role in app.roles:
            if not role.image:
                continue
            if runtime is not Container.NONE:
                from distspec.schedulers.batch.container import runtime_image

                runtime_image(role, runtime, self.name)
            elif not role.image.startswith("/"):
                kind = image_kind(role.image)
                hint = (
                    "; to run it as a container image, choose a runtime: -cfg container="
                    + self.runtimes
                    if kind not in (ImageKind.RELATIVE, ImageKind.UNKNOWN)
                    else ""
                )
                raise CompileError(
                    self.name,
                    f"role {role.name!r}: --image {role.image!r} is not an absolute directory; "
                    f"on {self.label} the image is the directory the job runs in ({self.runs_in}), not a container: "
                    f"leave --image out to run where {self.submit_command} ran, or give an absolute path"
                    + hint,
                )

    def working_dir(self, role: Role, opts: BatchOptsT) -> str:
        """Where the role's relative paths are taken from: its image directory without a
        container runtime, else where ``distspec run`` runs (the job runs there, in the
        container, at the same path)."""
        from distspec.schedulers.batch.container import Container

        if getattr(opts, "container", Container.NONE) is not Container.NONE:
            return os.getcwd()
        return super().working_dir(role, opts)

    def preflight(self, request: Request) -> None:
        """The role scripts (:meth:`Scheduler.preflight`), and each bind mount's source:
        the nodes see this machine's files, so a source missing here is a usage error,
        caught before anything is submitted."""
        super().preflight(request)
        from distspec.specs.mounts import BindMount

        for role in request.app.roles:
            for mount in role.mounts:
                if isinstance(mount, BindMount) and not os.path.exists(mount.src_path):
                    raise UsageError(
                        f"{self.name}: role {role.name!r}: bind mount source "
                        f"{mount.src_path!r} does not exist (the nodes share this machine's files)"
                    )

    def snapshot_root(self, opts: BatchOptsT) -> str:
        """``<job_dir>/snapshots`` when ``job_dir`` is set (a folder the nodes share, as
        the state directory may not be), else ``<state dir>/snapshots``."""
        if opts.job_dir:
            return os.path.join(opts.job_dir, "snapshots")
        return super().snapshot_root(opts)

    def _job_dir(self, opts: BatchOptsT) -> str:
        """The folder for the scripts and the job folders: ``job_dir``, else
        ``<state dir>/<scheduler>``."""
        if opts.job_dir:
            return opts.job_dir
        if self._state_dir is None:
            raise CompileError(self.name, "no job_dir: set -cfg job_dir=/shared/absolute/dir")
        return os.path.join(self._state_dir, self.name)

    # -- commands ----------------------------------------------------------------

    def _run(
        self,
        argv: Sequence[str],
        what: str,
        *,
        ok: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run a scheduler command (with ``env``, in that environment); with ``ok``, a
        non-zero exit is a SchedulerError."""
        result = self.run_cmd(argv) if env is None else self.run_cmd(argv, env=env)
        if ok and result.returncode != 0:
            raise self._failed(what, result)
        return result

    def _failed(
        self, what: str, result: CommandResult, *, stderr: str | None = None
    ) -> SchedulerError:
        """The error of a command that failed: ``what`` failed, with its argv, exit code
        and message (``stderr``, else what the command printed, see
        :attr:`errors_on_stdout`)."""
        if stderr is None:
            stderr = (result.stderr or result.stdout) if self.errors_on_stdout else result.stderr
        return SchedulerError(
            f"{what} failed",
            scheduler=self.name,
            argv=result.argv,
            returncode=result.returncode,
            stderr=stderr,
        )

    def _write_script(self, request: Request) -> Path:
        """Write the request's files (its script, an array's points file) into ``job_dir``
        (created); returns the script's path."""
        from pathlib import Path

        job_dir = Path(request.job_dir or self._job_dir(request.options))
        try:
            # Private (0700) when distspec creates it; the default one (under the state
            # dir) is made private even if it exists. A job_dir the user named and
            # created keeps its mode: it may be shared on purpose.
            job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not request.options.job_dir:
                job_dir.chmod(0o700)
            # Every file the request holds (an array's points file too), beside the script.
            for name, text in request.files.items():
                write_private(job_dir / name, text)
            script = job_dir / request.main_file
        except OSError as e:
            raise SchedulerError(f"cannot write the job script into {job_dir}: {e}") from e
        return script

    # -- records -----------------------------------------------------------------

    def _records(self) -> Path | None:
        from pathlib import Path

        return None if self._state_dir is None else Path(self._state_dir) / self.name / "jobs"

    def _save_record(self, request: Request, job_id: str, folder: str) -> None:
        """Record the submitted job (nothing without a state dir)."""
        import json

        records = self._records()
        if records is None:
            return
        import time

        app = request.app
        record = {
            "submitted": time.time(),
            "job_id": job_id,
            "app_id": request.app_id,
            "app": app.name,
            "folder": folder,
            "roles": [[r.name, r.num_replicas] for r in app.roles],
        }
        if request.points is not None:
            record["points"] = len(request.points.values)
        records.mkdir(parents=True, exist_ok=True, mode=0o700)
        records.chmod(0o700)
        records.parent.chmod(0o700)
        write_private(records / f"{job_id}.json", json.dumps(record))

    def _record(self, job_id: str) -> JobRecord | None:
        import json

        records = self._records()
        if records is None:
            return None
        try:
            data = json.loads((records / f"{job_id}.json").read_text())
        except (OSError, ValueError):
            return None
        return JobRecord(
            job_id=job_id,
            app_id=data["app_id"],
            app=data["app"],
            folder=data["folder"],
            roles=tuple((str(n), int(c)) for n, c in data["roles"]),
            points=int(data.get("points", 0)),
        )

    def _times(self, job_id: str, folder: str | None, *, ended: bool) -> dict[str, str]:
        """``{"submitted": ..., "ended": ...}`` (POSIX times, as :class:`AppSummary`'s
        ``extra`` has them) of a job submitted from this state dir: submitted is when the
        record was written, ended (for a job that ended) when the job folder last changed:
        its ``exit`` file (PBS), else its newest file (a replica's ``.exit`` or log).
        ``{}`` for a job without a record."""
        import json

        records = self._records()
        if records is None:
            return {}
        path = records / f"{job_id}.json"
        try:
            data = json.loads(path.read_text())
            submitted = float(data.get("submitted") or path.stat().st_mtime)
        except (OSError, ValueError, TypeError, AttributeError):
            return {}
        out = {"submitted": repr(submitted)}
        if ended and folder:
            try:
                entries = list(os.scandir(folder))
                stamp = next(
                    (e.stat().st_mtime for e in entries if e.name == "exit"),
                    max((e.stat().st_mtime for e in entries), default=None),
                )
            except OSError:
                stamp = None
            if stamp is not None:
                out["ended"] = repr(max(stamp, submitted))
        return out

    # -- where a job is, what it is ------------------------------------------------

    @abc.abstractmethod
    def _check_id(self, app_id: str) -> str:
        """``app_id`` if it has the form of a job id, else raise UsageError."""

    @abc.abstractmethod
    def _query(self, job_id: str) -> InfoT | None:
        """What the scheduler says about the job now (one query); None when it does
        not know the job (any more)."""

    @abc.abstractmethod
    def _reported_folder(self, info: InfoT) -> Path | None:
        """The job folder as the scheduler reports it (from the script's output path),
        for a job without a record."""

    def _queried_folder(self, job_id: str) -> Path | None:
        """The job folder from a fresh query (for a job without a record)."""
        info = self._query(job_id)
        return None if info is None else self._reported_folder(info)

    def job_paths(self, app_id: str, request: Request | None = None) -> JobPaths | None:
        """The job folder (from the record submit wrote, else from what the scheduler
        reports), each replica's ``<role>-<i>.log`` in it, and the batch script's own
        output beside it, ``<folder>.out``. None for a job that was not submitted from
        this state dir and that the scheduler no longer shows."""
        job_id = self._check_id(app_id)
        record = self._record(job_id)
        if record is not None:
            from pathlib import Path

            folder: Path | None = Path(record.folder)
        else:
            folder = self._queried_folder(job_id)
        if folder is None:
            return None
        return JobPaths(
            folder=str(folder),
            log_pattern=log_file_name("{role}", "{replica}"),
            script_output=f"{folder}.out",
        )

    def describe(self, app_id: str) -> AppStatus | None:
        """The job's status from the scheduler's answer and the job folder, or None when neither the
        scheduler nor this state dir knows the job."""
        job_id = self._check_id(app_id)
        return self._describe(job_id, self._record(job_id), self._query(job_id))

    def _describe(
        self, job_id: str, record: JobRecord | None, info: InfoT | None
    ) -> AppStatus | None:
        """:meth:`describe` from the job's record and the scheduler's answer (so that a
        backend can answer many jobs from one query)."""
        if info is None and record is None:
            return None
        from pathlib import Path

        if record is not None:
            folder: Path | None = Path(record.folder)
        else:
            assert info is not None
            folder = self._reported_folder(info)
        status = self._status(job_id, record, info, folder)
        return with_location(status, str(folder or ""), job_id)

    @abc.abstractmethod
    def _status(
        self, job_id: str, record: JobRecord | None, info: InfoT | None, folder: Path | None
    ) -> AppStatus:
        """The job's status from the scheduler's answer (None: it no longer knows the
        job), the record (None: not submitted from this state dir; then ``info`` is not
        None) and the job folder (None: unknown)."""

    # -- logs --------------------------------------------------------------------

    def log_iter(
        self,
        app_id: str,
        role: str,
        replica: int,
        *,
        since: float | None = None,
        follow: bool = False,
    ) -> Iterator[str]:
        """Lines of ``<job folder>/<role>-<replica>.log``; ``since`` is not supported
        (the files carry no per-line times)."""
        if since is not None:
            raise UsageError(self.no_since)
        job_id = self._check_id(app_id)
        paths = self.job_paths(job_id)
        if paths is None:
            raise SchedulerError(
                f"cannot find the log folder of job {job_id}: it was not submitted from this "
                f"state dir and {self.label} no longer shows it",
                scheduler=self.name,
            )
        from pathlib import Path

        path = Path(paths.folder, log_file_name(role, replica))
        return read_log_lines(path, follow=follow, ended=lambda: self._ended(job_id))

    def _ended(self, job_id: str) -> bool:
        status = self.describe(job_id)
        return status is None or status.is_terminal
