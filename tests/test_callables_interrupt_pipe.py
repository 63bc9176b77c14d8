"""Ctrl-C in ``job.result()`` cancels the job also when stderr is a pipe whose reader
is gone (``python script.py 2>&1 | tee log`` after the same Ctrl-C killed tee): the
cancel comes first, and saying so cannot fail."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from distspec.callables import Job
from tests.test_callables import _job_processes, _until

ROOT = Path(__file__).resolve().parents[1]

CODE = """\
import os, sys, time
import distspec
def sleeper(directory):
    with open(os.path.join(directory, "pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
job = distspec.submit(sleeper, sys.argv[1], j="1x1")
print(job.handle, flush=True)
job.result()
"""


@pytest.mark.torch
def test_ctrl_c_in_result_cancels_with_stderr_to_a_dead_reader(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch", reason="callables run under torchrun")
    monkeypatch.chdir(ROOT)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", CODE, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=write_end,
        text=True,
    )
    os.close(write_end)
    os.close(read_end)  # the reader is gone: every write to stderr fails (EPIPE)
    handle = ""
    try:
        assert proc.stdout is not None
        handle = proc.stdout.readline().strip()
        _until((tmp_path / "pid").exists, "the rank to start")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        assert proc.returncode != 0
        assert Job.from_handle(handle).status().state.value == "CANCELLED"
        assert _job_processes(handle.rsplit("/", 1)[1]) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if handle and not Job.from_handle(handle).done():
            Job.from_handle(handle).cancel()  # what the test found still running
