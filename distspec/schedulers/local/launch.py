"""Submitting a ``local_cwd`` run: its run directory made and written, and its
supervisor started fully detached, with a handshake.

A submit that does not complete (Ctrl-C at any moment, a full disk, a supervisor
that did not start) leaves nothing: no run directory, no process. Once the
supervisor has answered "ok" on the handshake pipe, the run is submitted and
every reader can follow it.
"""

from __future__ import annotations

import os

from distspec.errors import SchedulerError
from distspec.schedulers.environment import submit_env
from distspec.schedulers.local.processes import APP_ID_ENV, hunt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from distspec.schedulers.api import Request

__all__ = ["START_TIMEOUT", "submit_run", "undo_submit"]

#: How long ``submit`` waits for the supervisor's first state before giving up.
START_TIMEOUT = 60.0


def submit_run(request: Request, root: Path, run_dir: Path, scheduler: str) -> str:
    """Make ``run_dir`` (below ``root``, the backend's state folder), write the
    request's files into it and start the supervisor detached; returns the app id
    once the supervisor has started every replica and written its first state (a run
    with dependencies: once it has written that it waits for them, not after).

    Raises:
        SchedulerError: the run directory cannot be made or written (read-only or
            full state directory), or the supervisor did not start; nothing is left.
    """
    import signal

    # Ctrl-C is held back from just before the run directory exists until the
    # clean-up below is in place (it is raised at the unblock, inside the try).
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.mkdir(mode=0o700, exist_ok=True)
        run_dir.mkdir(mode=0o700)
    except FileExistsError:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise SchedulerError(
            f"run directory {run_dir} already exists", scheduler=scheduler
        ) from None
    except OSError as e:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise SchedulerError(
            f"cannot create the run directory {run_dir}: {e.strerror or e}",
            scheduler=scheduler,
        ) from None
    # From here on, a submit that does not complete (Ctrl-C at any moment, a full
    # disk, a supervisor that did not start) leaves nothing: no run directory, no
    # process. Once the supervisor said "ok", the run is submitted and followable.
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return _start(request, run_dir, scheduler)
    except OSError as e:
        undo_submit(request.app_id, run_dir)
        raise SchedulerError(
            f"cannot write the run directory {run_dir}: {e.strerror or e}",
            scheduler=scheduler,
        ) from None
    except BaseException:
        undo_submit(request.app_id, run_dir)
        raise


def _start(request: Request, run_dir: Path, scheduler: str) -> str:
    import sys

    from distspec.schedulers.local.supervisor import PACKAGE_ROOT, SUPERVISOR_MAIN

    (run_dir / "logs").mkdir(mode=0o700)
    for name, text in request.files.items():
        (run_dir / name).write_text(text)

    # Replicas find the programs of the interpreter distspec runs in (its venv's
    # torchrun), even when that venv is not activated; the user's PATH comes first.
    env = submit_env(os.environ)
    env[APP_ID_ENV] = request.app_id
    # The run directory is the job directory of Python callables (results go
    # there); set here, not in the plan, as only submit knows where it is.
    env["DISTSPEC_JOB_DIR"] = str(run_dir)
    ready_r, ready_w = os.pipe()
    argv = [
        sys.executable,
        "-I",  # isolated: no PYTHON* variables, no script or current dir on sys.path
        "-S",  # no site: the supervisor needs only the standard library
        "-c",
        SUPERVISOR_MAIN,
        PACKAGE_ROOT,
        "--ready-fd",
        str(ready_w),
        "--cwd",
        os.getcwd(),
        str(run_dir),
    ]
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    log = os.open(
        run_dir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666
    )
    try:
        os.set_inheritable(ready_w, True)
        # posix_spawn rather than subprocess (~5 ms of imports); the supervisor
        # closes whatever other descriptors it inherits.
        pid = os.posix_spawn(
            sys.executable,
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, null, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
            ],
            setsid=True,
        )
        # The first process forks the supervisor and exits at once.
        returncode = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    finally:
        os.close(ready_w)
        os.close(null)
        os.close(log)
    with os.fdopen(ready_r, "rb") as ready:
        answer = _read_with_timeout(ready, START_TIMEOUT)
    if answer.startswith(b"error: "):
        # The supervisor could not write the first state (a full disk): an OSError,
        # so that submit reports it in one line and removes everything.
        raise OSError(0, answer[7:].decode(errors="replace").strip())
    if returncode != 0 or answer != b"ok\n":
        log_text = (run_dir / "supervisor.log").read_text(errors="replace")
        raise SchedulerError(
            f"the supervisor of {request.app_id} did not start (see {run_dir}/supervisor.log)",
            scheduler=scheduler,
            argv=argv,
            returncode=returncode,
            stderr=log_text,
        )
    return request.app_id


def _read_with_timeout(stream: Any, timeout: float) -> bytes:
    import select

    fd = stream.fileno()
    data = b""
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            break
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    return data


def undo_submit(app_id: str, run_dir: Path) -> None:
    """Kill whatever of ``app_id`` was started and delete its run directory, with
    SIGINT blocked so a second Ctrl-C cannot interrupt the clean-up half-way."""
    import shutil
    import signal

    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        # A supervisor killed mid-fork may still have a keeper starting: hunt until
        # nothing carries the run's marker (keepers die with their supervisor anyway).
        for _ in range(50):
            if not hunt(app_id):
                break
            import time

            time.sleep(0.01)
        shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
