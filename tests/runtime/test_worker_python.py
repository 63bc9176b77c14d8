"""distspec's worker Python (``distspec/runtime/worker-python``), the program torchrun
starts each worker with under distspec (``PYTHON_EXEC``): the worker's stderr joined
to its stdout, then the Python torchrun itself runs. Run here as torchrun runs it, by
a Python parent; the jobs that use it are in tests/cli/test_follow.py (local) and
tests/cli/test_follow_slurm.py (Slurm)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distspec.schedulers.environment import submit_env, worker_exec
from distspec.torchrun_output import WORKER_EXEC_ENV

WORKER = worker_exec()
DISTSPEC = [sys.executable, "-m", "distspec"]

#: What a worker does: alternate stdout and stderr, then say which Python it is.
SCRIPT = (
    "import sys\n"
    "for i in range(50):\n"
    "    print(f'out {i}')\n"
    "    print(f'err {i}', file=sys.stderr)\n"
    "print(sys.prefix)\n"
)


def test_the_file_is_there_and_executable() -> None:
    assert Path(WORKER).is_file()
    assert os.access(WORKER, os.X_OK)
    # The submitting process hands its path to the job.
    assert submit_env({})[WORKER_EXEC_ENV] == WORKER
    assert submit_env({WORKER_EXEC_ENV: "/elsewhere"})[WORKER_EXEC_ENV] == "/elsewhere"


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")
def test_stderr_joins_stdout_in_order_under_the_parents_python(tmp_path: Path) -> None:
    # A python3 first on PATH that is not the parent's: the worker must not be it.
    decoy = tmp_path / "bin"
    decoy.mkdir()
    (decoy / "python3").write_text("#!/bin/sh\necho decoy; exit 99\n")
    (decoy / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{decoy}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [WORKER, "-u", "-c", SCRIPT], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    want = [f"{kind} {i}" for i in range(50) for kind in ("out", "err")]
    assert lines[:-1] == want
    # The parent's Python (this test's, a virtual environment's), not the decoy.
    assert lines[-1] == sys.prefix


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")
def test_exit_code_and_signal_are_the_workers(tmp_path: Path) -> None:
    # exec all the way: torchrun sees the worker's own code and signal, not a shell's.
    code = subprocess.run([WORKER, "-c", "raise SystemExit(7)"], check=False)
    assert code.returncode == 7
    killed = subprocess.run(
        [WORKER, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], check=False
    )
    assert killed.returncode == -15


def _run_local(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "who.py").write_text(
        "import os, sys\nprint('stderr-was', 'joined' if os.path.sameopenfile(1, 2) else 'apart')\n"
    )
    return subprocess.run(
        [*DISTSPEC, "run", "--wait", "dist.ddp", "-j", "1x1", "--script", "who.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.torch
def test_a_local_job_uses_it_unless_the_user_sets_python_exec(
    tmp_path: Path, state_dir: Path
) -> None:
    pytest.importorskip("torch", reason="the job runs torchrun")
    plain = _run_local(tmp_path, dict(os.environ))
    assert plain.returncode == 0, plain.stderr
    assert "rank 0| stderr-was joined" in plain.stdout, plain.stdout
    # The user's own PYTHON_EXEC wins (torchrun's documented override).
    mine = tmp_path / "my-python"
    mine.write_text(f'#!/bin/sh\necho mine > "{tmp_path}/marker"\nexec "{sys.executable}" "$@"\n')
    mine.chmod(0o755)
    theirs = _run_local(tmp_path, {**os.environ, "PYTHON_EXEC": str(mine)})
    assert theirs.returncode == 0, theirs.stderr
    assert (tmp_path / "marker").read_text() == "mine\n"
    assert "rank 0| stderr-was apart" in theirs.stdout, theirs.stdout
    # A worker Python this machine cannot run (a node that does not see distspec's
    # installation) leaves torchrun's default: the job runs as before.
    gone = _run_local(tmp_path, {**os.environ, WORKER_EXEC_ENV: str(tmp_path / "nowhere")})
    assert gone.returncode == 0, gone.stderr
    assert "rank 0| stderr-was apart" in gone.stdout, gone.stdout


@pytest.mark.skipif(not Path("/usr/bin/setpriv").exists(), reason="needs util-linux's setpriv")
def test_the_worker_dies_with_its_parent(tmp_path: Path) -> None:
    """A worker whose torchrun is SIGKILLed dies too (PR_SET_PDEATHSIG), although it
    runs in a session of its own, as torchrun starts it (#29)."""
    import signal
    import time

    pid_file = tmp_path / "worker.pid"
    child = tmp_path / "child.py"
    child.write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    )
    # The parent: starts the worker in a new session, as torchrun does, then waits.
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "subprocess.Popen(sys.argv[1:], start_new_session=True)\n"
            "time.sleep(60)\n",
            WORKER,
            str(child),
        ]
    )
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    while Path(f"/proc/{worker}").exists():
        stat = Path(f"/proc/{worker}/stat").read_text().rpartition(")")[2].split()
        if stat and stat[0] == "Z":
            break
        assert time.monotonic() < deadline + 10, "the worker outlived its parent"
        time.sleep(0.05)
