"""The job directory's files are read without trusting what sits at their names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distspec.runtime.call_protocol import read_bytes


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_a_result_file_that_is_not_a_file_is_an_error_not_a_hang(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "result-0.pkl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    # In a child with a timeout and 1 GiB of address space: a blocked or endless
    # read fails the test, never the machine.
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from distspec.runtime.call_protocol import read_bytes\n"
        "try:\n"
        "    read_bytes(sys.argv[1])\n"
        "except OSError as e:\n"
        "    print(e)\n"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("read_bytes blocked")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("not a regular file" in proc.stdout) or ("Is a directory" in proc.stdout), proc.stdout


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "call.pkl"
    path.write_bytes(b"x" * 300_000)
    assert read_bytes(str(path)) == b"x" * 300_000
    with pytest.raises(FileNotFoundError):
        read_bytes(str(tmp_path / "missing"))
