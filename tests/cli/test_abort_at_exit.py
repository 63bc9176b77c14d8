"""A rank that aborts as its process exits, after its script returned (torch's
threads meeting the C++ runtime's ``terminate`` when a script never calls
``destroy_process_group()``): ``run --wait`` still fails the job with the rank's
code, and says the training completed and the abort came at exit.

A real C++ ``terminate`` at interpreter exit cannot be caused on demand, so the
script prints the runtime's message and calls ``os.abort()`` (SIGABRT), which is
what the process does in that case; the job itself is a real torchrun job.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distspec.torchrun_output import TERMINATE_AT_EXIT, aborted_at_exit

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SCRIPT = f"""\
import os, sys
rank = int(os.environ["RANK"])
print(f"rank {{rank}} done: trained 3 steps", flush=True)
if rank == 1:
    print({TERMINATE_AT_EXIT!r}, file=sys.stderr, flush=True)
    os.abort()
"""


def test_abort_after_the_script_returned_is_named_as_such(tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    argv = ["run", "--wait", "dist.ddp", "-j", "1x2", "--script", "train.py"]
    done = subprocess.run(
        [sys.executable, "-m", "distspec", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode != 0, done.stderr
    assert "rank 1" in done.stderr
    assert "note: rank 1 aborted as its process exited" in done.stderr, done.stderr[-3000:]
    assert "the training completed" in done.stderr


@pytest.mark.parametrize(
    ("excerpt", "expected"),
    [
        (["rank 1 done", TERMINATE_AT_EXIT], True),
        (["rank 1 done", TERMINATE_AT_EXIT, ""], True),
        (["Traceback (most recent call last):", '  File "t.py"', TERMINATE_AT_EXIT], False),
        ([TERMINATE_AT_EXIT, "step 1", "step 2", "step 3", "step 4"], False),
        (["ValueError: bad"], False),
        ([], False),
    ],
)
def test_aborted_at_exit_reads_only_an_abort_after_the_last_line(
    excerpt: list[str], expected: bool
) -> None:
    assert aborted_at_exit(excerpt) is expected
