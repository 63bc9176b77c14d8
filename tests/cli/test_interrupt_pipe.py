"""Ctrl-C on ``distspec run --wait ... 2>&1 | tee run.log``: the terminal sends SIGINT
to the whole foreground process group, so the reader of distspec's output (tee) dies
of the same Ctrl-C. The local job must be cancelled all the same (distspec cancels
first and only then says so), and also when the reader was gone before the Ctrl-C;
a reader that goes away by itself (``| head -1``) counts as a Ctrl-C too.

Each test starts distspec and a tee-like reader as one process group in a new
session, distspec's stdout and stderr piped into the reader, as a shell does for a
foreground pipeline, and signals the group as a terminal would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_follow import cli

#: The job: says its pid (that of the `sleep` it becomes), then sleeps.
JOB = "echo pid $$; exec sleep 600"

#: tee, in Python: copies stdin to a file line by line; SIGINT kills it as it kills tee.
READER = """\
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
with open(sys.argv[1], "w") as out:
    for line in sys.stdin:
        out.write(line)
        out.flush()
"""


#: Starts ``distspec ARGS 2>&1 | reader`` in its process group (that of a new session)
#: as a shell does, says both pids, and when both have ended, their exit codes. Ctrl-C
#: reaches it too; like a shell it lives on to report.
LAUNCHER = """\
import json, signal, subprocess, sys
signal.signal(signal.SIGINT, lambda *a: None)
reader_argv, distspec_argv, cwd = json.loads(sys.argv[1])
reader = subprocess.Popen(reader_argv, stdin=subprocess.PIPE)
distspec = subprocess.Popen(
    distspec_argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=reader.stdin,
    stderr=subprocess.STDOUT,
)
reader.stdin.close()
print("pids", reader.pid, distspec.pid, flush=True)
print("codes", reader.wait(), distspec.wait(), flush=True)
"""


class Pipeline:
    """``distspec run --wait ARGS 2>&1 | reader``: one process group, its own session."""

    def __init__(self, tmp_path: Path, *args: str, reader: str = READER) -> None:
        self.copy = tmp_path / "run.log"
        (tmp_path / "reader.py").write_text(reader)
        argv = [
            [sys.executable, str(tmp_path / "reader.py"), str(self.copy)],
            [sys.executable, "-m", "distspec", "run", "--wait", *args],
            str(tmp_path),
        ]
        self.launcher = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, json.dumps(argv)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.launcher.stdout is not None
        words = self.launcher.stdout.readline().split()
        assert words[0] == "pids", words
        self.reader, self.distspec = int(words[1]), int(words[2])
        self.group = self.launcher.pid
        self.codes: tuple[int, int] | None = None

    def read_until(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text(), re.M)
            if found:
                return found
            time.sleep(0.1)
        pytest.fail(f"no {pattern!r} in the reader's copy:\n{self.text()}")

    def text(self) -> str:
        return self.copy.read_text() if self.copy.exists() else ""

    def wait(self, timeout: float = 60) -> tuple[int, int]:
        """The exit codes of (reader, distspec), shell-style: -N for signal N."""
        assert self.launcher.stdout is not None
        out, _ = self.launcher.communicate(timeout=timeout)
        words = out.split()
        assert words[:1] == ["codes"], (out, self.text())
        self.codes = (int(words[1]), int(words[2]))
        return self.codes

    def stop(self, cwd: Path) -> None:
        """Kill what is left, and cancel the job if it still runs."""
        if self.launcher.poll() is None:
            for pid in (self.distspec, self.reader):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.launcher.communicate(timeout=60)
        for handle in re.findall(r"^local_cwd://\S+", self.text(), re.M):
            cli("cancel", handle, cwd=cwd)


@pytest.fixture
def pipelines(tmp_path: Path) -> Iterator[list[Pipeline]]:
    started: list[Pipeline] = []
    yield started
    for p in started:
        p.stop(tmp_path)


def _gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _cancelled(handle: str, cwd: Path) -> str:
    status = cli("status", handle, cwd=cwd)
    return status.stdout.split(":")[0].strip()


def _start(tmp_path: Path, pipelines: list[Pipeline]) -> tuple[Pipeline, str, int]:
    p = Pipeline(tmp_path, "utils.sh", "--", JOB)
    pipelines.append(p)
    handle = p.read_until(r"^local_cwd://\S+").group(0)
    pid = int(p.read_until(r"^sh/0\| pid (\d+)$").group(1))
    return p, handle, pid


def test_ctrl_c_cancels_a_local_job_whose_reader_dies_of_it(
    state_dir: Path, tmp_path: Path, pipelines: list[Pipeline]
) -> None:
    p, handle, pid = _start(tmp_path, pipelines)
    os.killpg(p.group, signal.SIGINT)  # Ctrl-C: distspec and its reader alike
    assert p.wait() == (-signal.SIGINT, 130), p.text()
    assert _gone(pid), "the job's process still runs"
    assert _cancelled(handle, tmp_path) == "CANCELLED"


def test_ctrl_c_cancels_a_local_job_whose_reader_died_before(
    state_dir: Path, tmp_path: Path, pipelines: list[Pipeline]
) -> None:
    p, handle, pid = _start(tmp_path, pipelines)
    os.kill(p.reader, signal.SIGINT)  # the reader alone, first
    assert _gone(p.reader)
    time.sleep(0.5)
    assert p.launcher.poll() is None, "a silent job keeps being followed"
    os.killpg(p.group, signal.SIGINT)
    assert p.wait() == (-signal.SIGINT, 130), p.text()
    assert _gone(pid), "the job's process still runs"
    assert _cancelled(handle, tmp_path) == "CANCELLED"


def test_a_reader_that_goes_away_cancels_a_local_job(
    state_dir: Path, tmp_path: Path, pipelines: list[Pipeline]
) -> None:
    # `| head -2`: the reader leaves after the handle and the job's first line; the
    # job then prints a line a second into the closed pipe.
    head = READER.replace("out.flush()", "out.flush()\n        if 'pid' in line: break")
    job = "echo pid $$; while true; do echo tick; sleep 1; done"
    p = Pipeline(tmp_path, "utils.sh", "--", job, reader=head)
    pipelines.append(p)
    handle = p.read_until(r"^local_cwd://\S+").group(0)
    pid = int(p.read_until(r"^sh/0\| pid (\d+)$").group(1))
    # 128 + SIGPIPE, as a shell reports a writer whose reader left.
    assert p.wait() == (0, 141), p.text()
    assert _gone(pid), "the job's process still runs"
    assert _cancelled(handle, tmp_path) == "CANCELLED"


def test_a_job_that_ends_after_its_reader_left_still_gives_its_exit_code(
    state_dir: Path, tmp_path: Path, pipelines: list[Pipeline]
) -> None:
    # The reader leaves after the job's first line; the job then ends with 7 without
    # writing more, so distspec finds the pipe closed only when it sums up.
    head = READER.replace("out.flush()", "out.flush()\n        if 'pid' in line: break")
    p = Pipeline(tmp_path, "utils.sh", "--", "echo pid $$; sleep 3; exit 7", reader=head)
    pipelines.append(p)
    assert p.wait() == (0, 7), p.text()
