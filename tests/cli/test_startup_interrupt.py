"""Ctrl-C (SIGINT) while ``distspec`` starts: one line, exit 130, never a traceback.

Each test starts the real console script (``.venv/bin/distspec``) in a subprocess
and sends it SIGINT. To hit a chosen moment of the start-up without timing, a
``sitecustomize`` module on the child's PYTHONPATH adds an import hook that, when
the child first imports a chosen module, writes a marker file and sleeps (a slow
import, as on a cold or network file system); the test waits for the marker and
sends SIGINT then. A component file that sleeps while it is imported does the same
for a dry run.

The random-delay test covers the moments in between. A SIGINT can also arrive before
any of distspec runs, while Python itself starts (``site``, the ``.pth`` files, the
console script's first import): Python handles that one itself, with its own
traceback or by dying of the signal; the test tells it apart by the frames (none of
distspec's).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DISTSPEC = Path(sys.executable).parent / "distspec"

HOOK = '''\
import os, sys, time

class _SlowImport:
    """Blocks the first import of $DISTSPEC_TEST_SLOW_IMPORT after marking it."""

    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("DISTSPEC_TEST_SLOW_IMPORT"):
            del os.environ["DISTSPEC_TEST_SLOW_IMPORT"]
            open(os.environ["DISTSPEC_TEST_MARK"], "w").close()
            time.sleep(60)
        return None

sys.meta_path.insert(0, _SlowImport())
'''

SLOW_COMPONENT = """\
import os, time

open(os.environ["DISTSPEC_TEST_MARK"], "w").close()
time.sleep(60)


def comp(msg: str = "hi"):
    from distspec.specs import AppDef, Role

    return AppDef(name="x", roles=(Role(name="r", image="", entrypoint="echo", args=(msg,)),))
"""

pytestmark = pytest.mark.skipif(not DISTSPEC.exists(), reason=f"no console script at {DISTSPEC}")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(HOOK)
    (tmp_path / "slow_component.py").write_text(SLOW_COMPONENT)
    return tmp_path


def _env(workdir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTSPEC_")}
    env["DISTSPEC_STATE_DIR"] = str(workdir / "state")
    env["DISTSPEC_TEST_MARK"] = str(workdir / "mark")
    env.update(extra)
    return env


def _interrupt_at_marker(cmd: list[str], workdir: Path, env: dict[str, str]) -> tuple[int, str]:
    """Start ``cmd``, send SIGINT once it writes the marker; its exit code and stderr."""
    mark = workdir / "mark"
    mark.unlink(missing_ok=True)
    proc = subprocess.Popen(
        cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        while not mark.exists():
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"ended ({proc.returncode}) before the marker: {out}{err}")
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


# (argv, the module whose import is slow): moments from the first module distspec
# imports after its own package to the verb's work.
START_UP = [
    (["--help"], "distspec.cli"),
    (["--help"], "argparse"),
    (["--help"], "distspec._argparse"),
    (["builtins"], "distspec.cli.builtins"),
    (["run", "--dryrun", "dist.ddp", "--script", "t.py"], "distspec.cli.run"),
    (["run", "--dryrun", "dist.ddp", "--script", "t.py"], "distspec.components.dist"),
    (
        ["run", "--dryrun", "-s", "slurm", "dist.ddp", "--script", "t.py"],
        "distspec.schedulers.slurm",
    ),
    (["status", "local_cwd://distspec/x-00000000"], "distspec.cli.status"),
    (["config"], "distspec.cli.config"),
    (["list"], "distspec.cli.list"),
]


@pytest.mark.parametrize(("argv", "module"), START_UP, ids=[f"{a[0]}-{m}" for a, m in START_UP])
def test_ctrl_c_during_a_slow_start_up_import(argv: list[str], module: str, workdir: Path) -> None:
    env = _env(workdir, PYTHONPATH=str(workdir / "hook"), DISTSPEC_TEST_SLOW_IMPORT=module)
    code, err = _interrupt_at_marker([str(DISTSPEC), *argv], workdir, env)
    assert "Traceback" not in err, err
    assert err.strip() == "distspec: interrupted", err
    assert code == 130


def test_ctrl_c_during_a_slow_component_import(workdir: Path) -> None:
    for argv in (["--dryrun"], ["--dryrun", "-s", "slurm"], []):
        code, err = _interrupt_at_marker(
            [str(DISTSPEC), "run", *argv, "slow_component.py:comp", "--msg", "x"],
            workdir,
            _env(workdir),
        )
        assert "Traceback" not in err, (argv, err)
        assert err.strip() == "distspec: interrupted", (argv, err)
        assert code == 130, argv
    assert not (workdir / "state" / "local_cwd").exists() or not any(
        (workdir / "state" / "local_cwd").iterdir()
    ), "an interrupted run left a run directory"


SET_NAME_COMPONENT = """\
import os, signal, time


class Field:
    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while a class is being created
        time.sleep(60)


class Record:
    x = Field()


def comp():
    pass
"""


def test_ctrl_c_while_a_class_is_created(workdir: Path) -> None:
    # Before Python 3.12 a KeyboardInterrupt raised in a descriptor's __set_name__
    # comes out as a RuntimeError (from it): distspec's own records are built with
    # such descriptors, and a random-moment Ctrl-C in CI once printed that traceback.
    (workdir / "set_name.py").write_text(SET_NAME_COMPONENT)
    proc = subprocess.run(
        [str(DISTSPEC), "run", "--dryrun", "set_name.py:comp"],
        check=False,
        cwd=workdir,
        env=_env(workdir),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert (proc.returncode, proc.stderr.strip()) == (130, "distspec: interrupted")


def _wchan(pid: int) -> str:
    """Where in the kernel process ``pid`` sleeps (Linux's /proc/PID/wchan)."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux's /proc/PID/wchan")
def test_ctrl_c_while_the_output_is_flushed_at_exit(workdir: Path) -> None:
    # `runopts slurm` prints ~2.3 kB, less than the output buffer Python gives a
    # pipe, so all of it is written when distspec flushes at exit. Into a pipe that
    # is already full, nobody reading it, that write blocks: Ctrl-C comes then.
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    os.set_blocking(write_end, False)
    try:
        while os.write(write_end, b"." * 512):
            pass
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)
    env = _env(workdir)
    env.pop("PYTHONUNBUFFERED", None)  # buffered, as a pipe's output normally is
    proc = subprocess.Popen(
        [str(DISTSPEC), "runopts", "slurm"],
        cwd=workdir,
        env=env,
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)
    try:
        deadline = time.monotonic() + 60
        while "pipe_write" not in _wchan(proc.pid):
            assert proc.poll() is None, "ended without blocking on its output"
            assert time.monotonic() < deadline, f"never blocked writing: {_wchan(proc.pid)!r}"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(read_end)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, err.strip()) == (130, "distspec: interrupted")


def test_python_m_distspec_too(workdir: Path) -> None:
    env = _env(workdir, PYTHONPATH=f"{workdir / 'hook'}", DISTSPEC_TEST_SLOW_IMPORT="argparse")
    code, err = _interrupt_at_marker([sys.executable, "-m", "distspec", "--help"], workdir, env)
    assert "Traceback" not in err, err
    assert (code, err.strip()) == (130, "distspec: interrupted")


def _frames(err: str) -> list[str]:
    return re.findall(r'^\s*File "([^"]+)"', err, flags=re.MULTILINE)


def _pythons_own_start_up(err: str) -> bool:
    """A traceback from before distspec's first line ran: Python failing to start
    (``Fatal Python error``: ``site``, the streams), a ``.pth`` file's line that
    ``site`` reports and skips (the editable install's finder imports ``pathlib``),
    or the console script's first import before distspec's package runs: no frame
    of distspec's, only the import system's, the standard library's, installed
    packages' and the console script's."""
    if err.startswith("Fatal Python error"):
        return True
    package = str(REPO / "distspec")
    stdlib = sysconfig.get_paths()["stdlib"]
    frames = _frames(err)
    return not any(f.startswith(package) for f in frames) and all(
        f.startswith(("<frozen", "<string>", stdlib)) or "site-packages" in f or f == str(DISTSPEC)
        for f in frames
    )


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["run", "--dryrun", "-s", "slurm", "dist.ddp", "-j", "2x2", "--script", "t.py"]],
)
def test_ctrl_c_at_random_moments(argv: list[str], workdir: Path) -> None:
    rng = random.Random(0)
    outcomes: list[tuple[float, int, str]] = []
    for delay in [0.0, 0.002, 0.005] + [rng.uniform(0.0, 0.3) for _ in range(12)]:
        proc = subprocess.Popen(
            [str(DISTSPEC), *argv],
            cwd=workdir,
            env=_env(workdir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        outcomes.append((delay, proc.returncode, err))
    for delay, code, err in outcomes:
        if "Traceback" in err or "Fatal Python error" in err:
            assert _pythons_own_start_up(err), (delay, err)
        elif (code, err.strip()) == (1, "KeyboardInterrupt"):
            # Python between `site` and the script's first line (opening, compiling
            # it): a traceback with no frame at all, and not the exit by SIGINT that
            # an interrupt in the script's own code gets.
            pass
        elif code == 0:
            assert err == "", (delay, err)  # finished before the signal came
        elif code == -signal.SIGINT:
            assert err == "", (delay, err)  # before Python's handler: the shell says 130
        else:
            assert (code, err.strip()) == (130, "distspec: interrupted"), (delay, code, err)


def test_what_counts_as_pythons_own_start_up() -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    pth_line = (  # site reports a .pth line that a Ctrl-C broke, then goes on
        "Error processing line 1 of /v/site-packages/__editable__.distspec-0.1.0.pth:\n\n"
        "  Traceback (most recent call last):\n"
        '    File "<frozen site>", line 186, in addpackage\n'
        '    File "<string>", line 1, in <module>\n'
        f'    File "{stdlib}/pathlib.py", line 14, in <module>\n'
        "  KeyboardInterrupt\n"
    )
    ours = (  # a Ctrl-C inside distspec's own code must never print this
        "Traceback (most recent call last):\n"
        f'  File "{DISTSPEC}", line 5, in <module>\n'
        f'  File "{REPO}/distspec/frozen.py", line 219, in __set_name__\n'
        "RuntimeError: Error calling __set_name__ on '_DataclassView' instance\n"
    )
    assert _pythons_own_start_up(pth_line)
    assert not _pythons_own_start_up(ours)
    assert not _pythons_own_start_up(ours.replace(f"{REPO}/distspec", "/elsewhere"))
