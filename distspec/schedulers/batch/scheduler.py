"""The job folder that the batch-script backends (Slurm, PBS) share, written and read.

Both submit one script per app. The script runs every replica through a wrapper,
``distspec_task``, and keeps its bookkeeping beside the replicas' logs::

    <folder>/<role>-<i>.host   the host it runs on, written by the wrapper at start
    <folder>/<role>-<i>.exit   its exit code, written by the wrapper when it exits
    <folder>/<role>-<i>.start  the size of its log when this attempt started
    <folder>/attempt           the in-script attempt (0 first), from the retry loop
    <folder>/requeues          Slurm only: how often the job was requeued
    <folder>/exit, signal      PBS only: the script's exit code; present after SIGTERM

since neither scheduler reports an exit code per replica. ``submit`` also writes a
record per job, ``<state dir>/<scheduler>/jobs/<job id>.json``, so that describe and
log find the folder from any working directory.

Here are both halves of that contract: the script fragments that write the files
(pure text, used by ``slurm.script`` and ``pbs.script``) and :class:`BatchScheduler`,
the effectful glue both schedulers share (job_dir, writing the script and the
record, reading the folder and the replicas' logs). Backends never import each
other; what they share is here.
"""

from __future__ import annotations

import abc
import os
import re
from collections.abc import Iterator, Mapping, Sequence

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.schedulers._common import (
    MacroValues,
    log_file_name,
    read_log_lines,
    shell_join,
    shell_word,
    signal_name,
    torchrun_root_cause,
)
from distspec.schedulers.api import CommandResult, Request, Scheduler
from distspec.specs.app import NAME_CHARS, AppDef, Role
from distspec.specs.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import ClassVar, Protocol, TypeVar

    from distspec.specs.state import AppState
else:
    from distspec._typing import Protocol, TypeVar

__all__ = [
    "KILL_FUNCTION",
    "START",
    "STAY",
    "WAIT_FUNCTIONS",
    "BatchScheduler",
    "JobRecord",
    "attempt_loop",
    "check_job_dir",
    "check_rank0_host",
    "cpus_per_node",
    "exit_code",
    "parse_int",
    "rank0_host_word",
    "read_job_folder",
    "replica_exit",
    "replica_host",
    "replica_state",
    "role_function",
    "safe_app_id",
    "task_function",
    "write_private",
]


# -- the script side (pure) ---------------------------------------------------


def safe_app_id(app_id: str) -> str:
    """``app_id`` as used in file names: anything but ``[A-Za-z0-9_.-]`` becomes ``_``."""
    return "".join(c if c in NAME_CHARS else "_" for c in app_id)


def check_job_dir(job_dir: str, scheduler: str) -> None:
    """Raise CompileError unless ``job_dir`` is absolute (logs are read from any cwd)."""
    if not job_dir.startswith("/"):
        raise CompileError(
            scheduler, f"job_dir={job_dir!r} must be an absolute path (logs are read from any cwd)"
        )


def cpus_per_node(role: Role) -> int | None:
    """The CPUs to request per node: the role's own (``--cpu``, ``-h``), else, for a
    torchrun role without GPUs, one per process it starts (``-j NxM``: M). Without it
    the cluster's default applies, often one CPU per task, and where cores are
    confined (task/affinity, cgroups) all M processes would share that one core.
    None: request nothing."""
    res = role.resource
    if res.cpu:
        return res.cpu
    if res.gpu:
        return None
    from distspec.torchrun import nproc_per_node

    return nproc_per_node(role.entrypoint, role.args)


def check_rank0_host(template: str, scheduler: str) -> None:
    """Raise CompileError unless the ``rank0_host`` option holds ``{host}`` exactly once."""
    if template.count("{host}") != 1:
        raise CompileError(
            scheduler, f"rank0_host={template!r}: the template must contain {{host}} once"
        )


def rank0_host_word(template: str, host: str) -> str:
    """The rendezvous host as one shell word: ``template`` (see :func:`check_rank0_host`)
    with ``{host}`` replaced by ``host``, a runtime expression already in double quotes."""
    prefix, _, suffix = template.partition("{host}")
    return (
        (shell_word(prefix, {}) if prefix else "")
        + host
        + (shell_word(suffix, {}) if suffix else "")
    )


def role_function(func: str, role: Role, values: MacroValues) -> str:
    """A shell function ``func`` that exports the role's env and runs its command, with
    each macro mapped through ``values``."""
    lines = [f"{func}() {{  # role {role.name}"]
    for key, value in role.env.items():
        lines.append(f"  export {key}={shell_word(value, values)}")
    lines.append("  " + shell_join([role.entrypoint, *role.args], values))
    lines.append("}")
    return "\n".join(lines) + "\n"


def task_function(
    *,
    base: str,
    host: str,
    run: Sequence[str],
    setup: Sequence[str] = (),
    attempts: bool = True,
) -> str:
    """``distspec_task``: runs one replica and writes its ``.host`` and ``.exit`` files.

    Args:
        base: shell expression of ``<folder>/<role>-<i>`` (without suffix).
        host: command that prints the host's name.
        run: lines that run the replica; the last one's status is its exit code.
        setup: lines before anything is written (they may ``return`` early).
        attempts: whether the script retries (:func:`attempt_loop`): then a task of
            a stopped attempt must not write into the next attempt's files.
    """
    body = [
        *setup,
        f"local base={base}",
        STAY,
        *(['local attempt=$(< "$DISTSPEC_JOB_DIR/attempt")'] if attempts else []),
        START,
        f'{host} > "$base.host"',
        *run,
        "local code=$?",
    ]
    if attempts:
        body += [
            "# A task of a stopped attempt that outlived its launcher (pbsdsh leaves the",
            "# remote ones running) must not write into the next attempt's files.",
            '[[ $(< "$DISTSPEC_JOB_DIR/attempt") == "$attempt" ]] && echo "$code" > "$base.exit"',
        ]
    else:
        body.append('echo "$code" > "$base.exit"')
    body.append('return "$code"')
    return "distspec_task() {\n" + "".join(f"  {line}\n" for line in body) + "}\n"


STAY = 'trap "exit 143" TERM  # after the launcher ends: proctrack/linuxproc loses orphans'
"""The line a replica's shell runs first. On SIGTERM (scancel, --kill-on-bad-exit, a
stopped attempt) a shell without a trap dies at once, and the launcher it waits on
(torchrun, which can sit up to 300 s in its exit barrier, deaf to signals) is
re-parented to init, where ``proctrack/linuxproc`` no longer sees it: it outlives the
job and keeps the rendezvous port. A trapped signal waits for the foreground command,
so the shell stays its parent and the step's SIGKILL reaches both; then it exits 143
without recording an exit code, as before (a stopped replica is not a failed one). No
single quote in it: it goes inside single-quoted task bodies."""

START = 'stat -c %s "$base.log" > "$base.start" 2> /dev/null  # where this run starts in the log'
"""The line a replica runs first: its log's size, so that what is read back about the
replica (torchrun's report) is this attempt's, not an earlier one's in the same log."""

KILL_FUNCTION = """\
# distspec_kill PID...: SIGTERM to each launcher's process group (job control is on
# while the launchers start, so each leads one), which holds what it started on this
# host; to the launcher alone where it leads none.
distspec_kill() {
  local pid
  for pid in "$@"; do
    kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null
  done
}
"""
"""Shell function ``distspec_kill``, which the scripts' TERM traps use too."""

WAIT_FUNCTIONS = (
    """\
# distspec_wait PID...: waits for the launchers started in the background and returns
# 0, or the first failure's exit code after stopping the others. Each status comes from
# `wait PID`, which bash keeps even after it reaped the process. `wait -n` only wakes
# the loop (a child ended, or a trapped signal came): its own status may be that of a
# launcher of an earlier attempt, since `wait` with no operand does not consume a
# finished job, and counting that one would end the wait before this attempt's tasks.
distspec_wait() {
  local -a left=("$@") running
  local i pid code woke
  while (( ${#left[@]} > 0 )); do
    wait -n
    woke=$?
    running=()
    for ((i = 0; i < ${#left[@]}; i++)); do
      pid=${left[i]}
      # kill -0 fails once bash has reaped the launcher; 127: bash has no child left.
      if (( woke != 127 )) && kill -0 "$pid" 2> /dev/null; then
        running+=("$pid")
        continue
      fi
      wait "$pid"
      code=$?
      if (( code != 0 )); then
        distspec_stop "${running[@]}" "${left[@]:i+1}"
        return "$code"
      fi
    done
    left=("${running[@]}")
  done
  return 0
}
"""
    + "\n"
    + KILL_FUNCTION
    + "\n"
    + """\
# distspec_stop PID...: kills the launchers and waits for each, so that none is left
# over, to write into the next attempt's files or to be counted by its wait.
distspec_stop() {
  distspec_kill "$@"
  local pid
  for pid in "$@"; do
    wait "$pid" 2> /dev/null
  done
}
"""
)
"""Shell functions ``distspec_wait``, ``distspec_kill`` and ``distspec_stop`` that
:func:`attempt_loop` needs; a script defines them before the loop."""


def attempt_loop(launch: Sequence[str], retries: int, *, check: Sequence[str] = ()) -> list[str]:
    """The script's end: a loop of attempts, then ``exit`` with the last one's code.

    Each attempt clears the previous attempt's ``.exit`` and ``.host`` files, writes
    its number to ``attempt``, runs ``launch`` with job control on (each background
    launcher gets a process group of its own, so that stopping it stops what it
    started on this host), waits for the launchers with ``distspec_wait`` (see
    :data:`WAIT_FUNCTIONS`: the first failure stops the others) and runs ``check``.
    A failure is retried ``retries`` times.

    Args:
        launch: lines that start the launchers in the background, each followed by
            ``distspec_pids+=($!)``; job control leaves their stdin alone, so each
            one reads ``< /dev/null``.
        retries: how often a failed attempt is rerun.
        check: lines after the wait, which may change ``distspec_code``, the
            attempt's exit code.

    All lines are indented by two.
    """
    return [
        "distspec_attempt=0",
        "while :; do",
        '  rm -f "$DISTSPEC_JOB_DIR"/*.{exit,host,start}',
        '  echo "$distspec_attempt" > "$DISTSPEC_JOB_DIR/attempt"',
        "  distspec_pids=()",
        "  set -m",
        *launch,
        "  set +m",
        '  distspec_wait "${distspec_pids[@]}"',
        "  distspec_code=$?",
        *check,
        f"  (( distspec_code == 0 || distspec_attempt >= {retries} )) && break",
        "  distspec_attempt=$((distspec_attempt + 1))",
        f'  echo "distspec: attempt failed (exit code $distspec_code); retry $distspec_attempt of {retries}" >&2',
        "done",
        'exit "$distspec_code"',
    ]


# -- the reading side ---------------------------------------------------------

# The small status files; everything else in the folder (logs, task.sh) is skipped.
_STATUS_NAMES = frozenset({"attempt", "requeues", "exit", "signal"})


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
        if name.endswith((".exit", ".host", ".start")) or name in _STATUS_NAMES:
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
    torchrun's root-cause report (:func:`~distspec.schedulers._common.torchrun_root_cause`,
    the same reader local_cwd uses): the worker's own code (a signal N as 128+N) and
    who it was. Without a report the recorded code stays; a code above 128 is then
    named as a signal. Reason "" for a replica that succeeded or has not exited.
    """
    code = exit_code(files, role, replica)
    if code in (None, 0):
        return code, ""
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
    from distspec.specs.state import AppState

    """A replica's state from its exit code (None: still running or never started)
    and the state of the job around it."""
    if code is None:
        return job_state
    if code == 0:
        return AppState.SUCCEEDED
    if job_state is AppState.CANCELLED and code > 128:
        return AppState.CANCELLED  # killed by the job's end (a signal), not on its own
    return AppState.FAILED


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


class _HasJobDir(Protocol):
    @property
    def job_dir(self) -> str | None: ...


BatchOptsT = TypeVar("BatchOptsT", bound=_HasJobDir)


class BatchScheduler(Scheduler[BatchOptsT]):
    """The effectful glue of a batch backend: job_dir, commands, records and logs.

    A subclass sets ``label`` and ``no_since``, and implements :meth:`_check_id` and
    :meth:`_queried_folder` besides the :class:`Scheduler` methods.
    """

    #: How messages name the scheduler software ("Slurm", "PBS").
    label: ClassVar[str]
    #: The UsageError message of ``log_iter(since=...)``.
    no_since: ClassVar[str]
    #: Whether a failed command's message may be on stdout alone (then it is used
    #: when stderr is empty).
    errors_on_stdout: ClassVar[bool] = False

    @abc.abstractmethod
    def _check_id(self, app_id: str) -> str:
        """``app_id`` if it has the form of a job id, else raise UsageError."""

    @abc.abstractmethod
    def _queried_folder(self, job_id: str) -> Path | None:
        """The job folder as the scheduler reports it (for a job without a record)."""

    def _job_dir(self, opts: BatchOptsT) -> str:
        if opts.job_dir:
            return opts.job_dir
        if self._state_dir is None:
            raise CompileError(self.name, "no job_dir: set -cfg job_dir=/shared/absolute/dir")
        return os.path.join(self._state_dir, self.name)

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
            raise SchedulerError(
                f"{what} failed",
                scheduler=self.name,
                argv=argv,
                returncode=result.returncode,
                stderr=(result.stderr or result.stdout) if self.errors_on_stdout else result.stderr,
            )
        return result

    def _write_script(self, request: Request) -> Path:
        """Write the request's script into ``job_dir`` (created); returns its path."""
        from pathlib import Path

        job_dir = Path(self._job_dir(request.options))
        try:
            # Private (0700) when distspec creates it; the default one (under the state
            # dir) is made private even if it exists. A job_dir the user named and
            # created keeps its mode: it may be shared on purpose.
            job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not request.options.job_dir:
                job_dir.chmod(0o700)
            script = job_dir / request.main_file
            write_private(script, request.render())
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
        record = self._record(job_id)
        from pathlib import Path

        folder = Path(record.folder) if record is not None else self._queried_folder(job_id)
        if folder is None:
            raise SchedulerError(
                f"cannot find the log folder of job {job_id}: it was not submitted from this "
                f"state dir and {self.label} no longer shows it",
                scheduler=self.name,
            )
        path = folder / log_file_name(role, replica)
        return read_log_lines(path, follow=follow, ended=lambda: self._ended(job_id))

    def _ended(self, job_id: str) -> bool:
        status = self.describe(job_id)
        return status is None or status.is_terminal


def check_image_dir(
    app: AppDef, scheduler: str, *, label: str, runs_in: str, submitted_from: str
) -> None:
    """Refuse a role image that is not an absolute directory path.

    On Slurm and PBS a role's image is the directory its processes run in
    (``runs_in``: ``srun --chdir``, the script's ``cd``; also ``${img_root}``);
    there is no container runtime. A container reference
    (``ghcr.io/pytorch/torchx:0.7.0``) would be queued and fail as it starts, so it
    is refused here. Compile is pure: the path's syntax is checked (it starts with
    ``/``), not whether it exists.

    Raises:
        CompileError: naming ``--image`` and what it means on ``scheduler``.
    """
    for role in app.roles:
        if role.image and not role.image.startswith("/"):
            raise CompileError(
                scheduler,
                f"role {role.name!r}: --image {role.image!r} is not an absolute directory; "
                f"on {label} the image is the directory the job runs in ({runs_in}), not a container: "
                f"leave --image out to run where {submitted_from} ran, or give an absolute path",
            )
