"""Following a job as a user does: ``run --wait`` streaming real local jobs' output
(numbered lines from every rank, restarts, late writers), the failing rank's
traceback at the end, ``log`` filters, Ctrl-C, and the live view on a terminal (pty).

Jobs are real: torchrun (without importing torch in the workers where the test is
about lines, not training), ``utils.sh`` replicas under the local supervisor.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_cli import REPO

torch_missing = False
try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - the dev environment has torch
    torch_missing = True
needs_torch = pytest.mark.skipif(torch_missing, reason="torch is not installed")

#: Every rank prints LINES numbered lines, flushing each (a worker under torchrun),
#: and after every ERR_EVERY-th one a line on stderr.
ERR_EVERY = 10
NUMBERED = """\
import os, sys
rank = os.environ.get("RANK", "x")
for i in range({lines}):
    print(f"seq {{rank}} {{i}}", flush=True)
    if i % 10 == 0:  # ERR_EVERY
        print(f"err {{rank}} {{i}}", file=sys.stderr, flush=True)
"""


def cli(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def numbered(stdout: str, ranks: int, lines: int) -> None:
    """Each rank's numbered lines are there exactly once, prefixed once, in the order
    the rank wrote them across stdout and stderr: each ``err`` line right after the
    ``seq`` line before it (torchrun's --tee copies the two streams from two threads;
    distspec's worker Python joins them)."""
    for rank in range(ranks):
        got = re.findall(rf"^\S+/\d+ rank {rank}\| (seq|err) {rank} (\d+)$", stdout, re.M)
        want = []
        for i in range(lines):
            want.append(("seq", str(i)))
            if i % ERR_EVERY == 0:
                want.append(("err", str(i)))
        assert got == want, f"rank {rank}:\n{stdout[-3000:]}"
    # No line carries torchrun's or torch's own prefixes any more.
    assert not re.search(r"\[rank\d+\]:|\[\w+\d\]:", stdout), stdout[-3000:]


@needs_torch
@pytest.mark.torch
@pytest.mark.parametrize("ranks", [2, 4])
def test_run_wait_streams_every_rank_exactly_once(
    ranks: int, state_dir: Path, tmp_path: Path
) -> None:
    lines = 300
    (tmp_path / "count.py").write_text(NUMBERED.format(lines=lines))
    proc = cli(
        "run", "--wait", "dist.ddp", "-j", f"1x{ranks}", "--script", "count.py", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("local_cwd://")
    numbered(proc.stdout, ranks, lines)
    # `log` gives the same lines afterwards, one rank at a time.
    handle = proc.stdout.splitlines()[0]
    one = cli("log", handle, "--rank", str(ranks - 1), cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert len(one.stdout.splitlines()) == lines + lines // ERR_EVERY
    assert all(f" rank {ranks - 1}| " in ln for ln in one.stdout.splitlines())
    tail = cli(
        "log", handle, "--rank", "0", "--regex", "^seq", "--tail", "2", "--raw", cwd=tmp_path
    )
    assert tail.stdout.splitlines() == [f"seq 0 {lines - 2}", f"seq 0 {lines - 1}"]


@needs_torch
@pytest.mark.torch
def test_two_replicas_and_a_late_writer_are_followed(state_dir: Path, tmp_path: Path) -> None:
    # Two replicas (torchrun agents) of two workers; replica 1's workers start
    # printing only after a pause, once the others are done. Each line is one write:
    # print() writes the text and the newline separately (unbuffered under torchrun),
    # and torchrun's --tee tailer, reading between the two on a loaded machine, would
    # print the line in two pieces; that is torchrun's, not what this test is about.
    (tmp_path / "late.py").write_text(
        "import os, sys, time\n"
        "rank = int(os.environ['RANK'])\n"
        "if os.environ['GROUP_RANK'] == '1':\n"
        "    time.sleep(2)\n"
        "for i in range(100):\n"
        "    sys.stdout.write(f'seq {rank} {i}\\n')\n"
        "    sys.stdout.flush()\n"
    )
    port = str(20000 + os.getpid() % 20000)
    proc = cli(
        "run",
        "--wait",
        "dist.ddp",
        "-j",
        "2x2",
        "--rdzv_port",
        port,
        "--script",
        "late.py",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    for rank in range(4):
        got = re.findall(rf"^late/[01] rank {rank}\| seq {rank} (\d+)$", proc.stdout, re.M)
        assert [int(i) for i in got] == list(range(100)), proc.stdout[-2000:]
    assert {m for m in re.findall(r"^late/([01]) ", proc.stdout, re.M)} == {"0", "1"}


@needs_torch
@pytest.mark.torch
def test_a_restarted_replica_is_followed_across_attempts(state_dir: Path, tmp_path: Path) -> None:
    # The first attempt prints 0..49 and fails; the restart prints 50..99 and succeeds.
    (tmp_path / "flaky.py").write_text(
        "import os, sys\n"
        "first = not os.path.exists('attempt1')\n"
        "open('attempt1', 'a').close()\n"
        "start = 0 if first else 50\n"
        "for i in range(start, start + 50):\n"
        "    print(f'n {i}', flush=True)\n"
        "sys.exit(1 if first else 0)\n"
    )
    proc = cli(
        "run",
        "--wait",
        "dist.ddp",
        "-j",
        "1x1",
        "--max_retries",
        "1",
        "--script",
        "flaky.py",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    got = re.findall(r"^flaky/0 rank 0\| n (\d+)$", proc.stdout, re.M)
    assert [int(i) for i in got] == list(range(100)), proc.stdout
    assert re.search(r"^flaky/0\| distspec: restart 1", proc.stdout, re.M), proc.stdout


@needs_torch
@pytest.mark.torch
def test_failure_ends_with_the_failing_ranks_traceback(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text(
        "import os, time\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "def inner():\n"
        "    raise ValueError('boom from rank ' + os.environ['RANK'])\n"
        "if dist.get_rank() == 1:\n"
        "    inner()\n"
        "time.sleep(30)\n"
    )
    proc = cli("run", "--wait", "dist.ddp", "-j", "1x2", "--script", "boom.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    handle = proc.stdout.splitlines()[0]
    err = proc.stderr
    assert re.search(
        rf"{re.escape(handle)} FAILED after [\d.]+s: boom/0 rank 1 on localhost exited with 1", err
    ), err
    block = err[err.index("--- rank 1: last") :]
    body = block.split("\n---\n")[0].splitlines()[1:]
    assert body[0] == "Traceback (most recent call last):", block
    assert body[-1] == "ValueError: boom from rank 1", block
    assert "in inner" in block and "Failures:" not in block and "[rank1]" not in block
    assert f"distspec log {handle} --rank 1" in err
    assert "run directory: " in err
    # The traceback was also streamed live, prefixed once.
    assert "boom/0 rank 1| ValueError: boom from rank 1" in proc.stdout


@needs_torch
@pytest.mark.torch
def test_a_ranks_progress_comes_before_its_traceback(state_dir: Path, tmp_path: Path) -> None:
    # A rank prints its progress (stdout) with warnings between (stderr), then fails at
    # once (the traceback, stderr). torchrun's --tee copied the two streams from two
    # threads: the traceback could come before the last progress lines, and the
    # summary then quoted a traceback with progress lines inside it.
    (tmp_path / "late_fail.py").write_text(
        "import os, sys\n"
        "rank = os.environ['RANK']\n"
        "for i in range(100):\n"
        "    print(f'step {i}')\n"
        "    if i % 7 == 0:\n"
        "        print(f'warn {i}', file=sys.stderr)\n"
        "if rank == '1':\n"
        "    raise RuntimeError('failed after step 99')\n"
    )
    proc = cli("run", "--wait", "dist.ddp", "-j", "1x2", "--script", "late_fail.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    for rank in (0, 1):
        said = re.findall(rf"^late_fail/0 rank {rank}\| (.*)$", proc.stdout, re.M)
        want = []
        for i in range(100):
            want.append(f"step {i}")
            if i % 7 == 0:
                want.append(f"warn {i}")
        assert said[: len(want)] == want, proc.stdout[-3000:]
        if rank == 1:
            assert said[len(want)] == "Traceback (most recent call last):", said[len(want) :]
            assert said[-1] == "RuntimeError: failed after step 99", said[len(want) :]
    block = proc.stderr[proc.stderr.index("--- rank 1: last") :]
    body = block.split("\n---\n")[0].splitlines()[1:]
    assert body[0] == "Traceback (most recent call last):", block
    assert body[-1] == "RuntimeError: failed after step 99", block
    assert not any(line.startswith(("step ", "warn ")) for line in body), block
    assert "rank 1 on localhost exited with 1" in proc.stderr, proc.stderr


@needs_torch
@pytest.mark.torch
def test_main_job_streams_the_loss_and_says_where_things_are(
    state_dir: Path, tmp_path: Path
) -> None:
    ckpt = tmp_path / "model.pt"
    proc = cli(
        "run",
        "--wait",
        "dist.ddp",
        "-j",
        "1x2",
        "--script",
        str(REPO / "examples" / "train_ddp.py"),
        "--",
        "--steps",
        "150",
        "--checkpoint",
        str(ckpt),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    losses = [
        float(m) for m in re.findall(r"rank 0\| step +\d+ +loss ([\d.]+)$", proc.stdout, re.M)
    ]
    assert len(losses) >= 3 and losses[-1] < losses[0], proc.stdout
    assert f"rank 0| checkpoint: {ckpt}" in proc.stdout
    assert re.search(r"SUCCEEDED in [\d.]+s", proc.stderr), proc.stderr
    assert "run directory: " + str(state_dir / "local_cwd") in proc.stderr


def test_no_log_keeps_stdout_to_the_handle(state_dir: Path, tmp_path: Path) -> None:
    proc = cli("run", "--wait", "--no-log", "utils.echo", "--msg", "hi", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines() == [proc.stdout.split()[0]]
    streamed = cli("run", "--wait", "utils.echo", "--msg", "hi", cwd=tmp_path)
    assert streamed.stdout.splitlines()[1:] == ["echo/0| hi"], streamed.stdout


# -- on a terminal (a pty), as a person sees it ----------------------------------------


class Terminal:
    """The CLI under a pseudo-terminal: what it writes is read as a screen would get it."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # pragma: no cover - the child
            os.chdir(cwd)
            os.environ["TERM"] = "xterm"
            os.execv(sys.executable, [sys.executable, "-m", "distspec", *args])
        self.seen = ""

    def read_until(self, check: Callable[[str], bool], what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not check(self.seen):
            if time.monotonic() > deadline:
                pytest.fail(f"gave up waiting for {what}; screen:\n{self.seen[-3000:]}")
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:  # EIO: the child has gone
                    data = b""
                if not data:
                    if not check(self.seen):
                        pytest.fail(f"the CLI ended before {what}; screen:\n{self.seen[-3000:]}")
                    return
                self.seen += data.decode(errors="replace").replace("\r\n", "\n")

    def wait(self, timeout: float = 120) -> int:
        """Read the screen to the end (the pty reports EIO once the CLI has gone), then
        return the exit code."""
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                pytest.fail(f"the CLI did not end; screen:\n{self.seen[-3000:]}")
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                data = b""
            if not data:
                break
            self.seen += data.decode(errors="replace").replace("\r\n", "\n")
        os.close(self.fd)
        return os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


def test_terminal_shows_lines_live_then_the_summary(state_dir: Path, tmp_path: Path) -> None:
    # The job prints one line and then waits for a file that the test creates only
    # once that line is on the screen: it can end only if lines are shown live.
    job = "echo first; while [ ! -e go ]; do sleep 0.1; done; echo second"
    term = Terminal(["run", "--wait", "utils.sh", "--", job], tmp_path)
    term.read_until(lambda s: "sh/0| first" in s, "the first line")
    assert "second" not in term.seen
    (tmp_path / "go").touch()
    assert term.wait() == 0, term.seen
    lines = term.seen.splitlines()
    assert lines.index("sh/0| first") < lines.index("sh/0| second")
    assert re.search(r"SUCCEEDED in [\d.]+s", term.seen)
    assert "distspec log local_cwd://" in term.seen


def test_ctrl_c_on_a_terminal_cancels_a_local_job(state_dir: Path, tmp_path: Path) -> None:
    term = Terminal(["run", "--wait", "utils.sh", "--", "echo started; exec sleep 600"], tmp_path)
    term.read_until(lambda s: "sh/0| started" in s, "the job to start")
    os.write(term.fd, b"\x03")  # Ctrl-C, as the terminal delivers it: SIGINT to the group
    code = term.wait()
    assert code == 130, term.seen
    handle = re.search(r"local_cwd://\S+", term.seen)
    assert handle and f"cancelling {handle.group(0)}" in term.seen
    status = cli("status", handle.group(0), cwd=tmp_path)
    assert status.stdout.startswith("CANCELLED"), status.stdout


def test_follow_log_of_a_running_job_ends_with_it(state_dir: Path, tmp_path: Path) -> None:
    proc = cli(
        "run", "utils.sh", "--", "for i in $(seq 1 5); do echo n $i; sleep 0.2; done", cwd=tmp_path
    )
    handle = proc.stdout.strip()
    followed = subprocess.Popen(
        [sys.executable, "-m", "distspec", "log", "-f", "--tail", "1", handle],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = followed.communicate(timeout=120)
    assert followed.returncode == 0
    got = [int(m) for m in re.findall(r"^sh/0\| n (\d+)$", out, re.M)]
    # --tail 1 then follow: a suffix of 1..5, each once, ending with the job.
    assert got and got == list(range(got[0], 6)), out


@needs_torch
@pytest.mark.torch
def test_terminal_shows_the_failing_ranks_traceback(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "crash.py").write_text(
        "import os, time\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n"
        "    raise KeyError('missing key on rank 0')\n"
        "time.sleep(30)\n"
    )
    term = Terminal(["run", "--wait", "dist.ddp", "-j", "1x2", "--script", "crash.py"], tmp_path)
    assert term.wait(timeout=180) == 1, term.seen
    screen = term.seen
    summary = screen[screen.index("FAILED after") :]
    # After the streamed output, the summary shows rank 0's own traceback (without
    # prefixes) and where to look next.
    assert "crash/0 rank 0 on localhost exited with 1" in summary
    block = summary[summary.index("--- rank 0: last") :].split("\n---\n")[0]
    assert block.splitlines()[1] == "Traceback (most recent call last):"
    assert block.splitlines()[-1] == "KeyError: 'missing key on rank 0'"
    assert "--rank 0" in summary


def test_json_keeps_stdout_to_the_json(state_dir: Path, tmp_path: Path) -> None:
    streamed = cli("run", "--wait", "--json", "utils.echo", "--msg", "hi", cwd=tmp_path)
    assert streamed.returncode == 0, streamed.stderr
    data = json.loads(streamed.stdout)
    assert data["status"]["state"] == "SUCCEEDED"
    assert "echo/0| hi" in streamed.stderr.splitlines()
    quiet = cli("run", "--wait", "--json", "--no-log", "utils.echo", "--msg", "hi", cwd=tmp_path)
    assert json.loads(quiet.stdout)["status"]["state"] == "SUCCEEDED"
    assert "echo/0| hi" not in quiet.stderr
