"""What ``distspec launch`` promises every process and every failure, without a cluster.

- the environment: :mod:`distspec.runtime.torchrun_env` gives a task of ``srun`` or
  ``mpiexec`` the variables torchrun gives its workers (compared with torch's own
  agent source), and ``python -m`` it runs the command with them;
- the failure report: from torchrun's real stderr (recorded here, a rank exiting 7
  after a printed traceback, and a rank raising after ``init_process_group``),
  the failed rank, its host and traceback, torchrun's own traceback held back;
- mistakes refused in one line, exit 2, before anything starts: a missing program
  or script, a directory, an absurd ``-j``.

Real runs: test_launch.py (local fallback), test_launch_slurm.py (salloc -N2).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from distspec.errors import UsageError
from distspec.runtime.env import DistEnv, Launcher, detect
from distspec.runtime.launch import check_command, plan_launch
from distspec.runtime.launch_failure import TorchrunStderr, failure_report
from distspec.runtime.torchrun_env import MODULE, TORCHRUN_VARIABLES, torchrun_environ

DATA = Path(__file__).resolve().parents[1] / "data" / "launch"
BIN = Path(sys.executable).parent

# The variables of task 3 (second on n1) of `srun` in `salloc -N2 --ntasks-per-node=2`.
SRUN_TASK = {
    "SLURM_JOB_ID": "77",
    "SLURM_JOB_NODELIST": "n[0-1]",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "n[0-1]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
}

# Rank 2 of `mpiexec -n 4 -ppn 2 -genv MASTER_ADDR n0` (MPICH/Hydra).
MPICH_TASK = {
    "PMI_RANK": "2",
    "PMI_SIZE": "4",
    "MPI_LOCALRANKID": "0",
    "MPI_LOCALNRANKS": "2",
    "MASTER_ADDR": "n0",
}


def test_srun_task_gets_torchruns_variables() -> None:
    env = torchrun_environ(detect(SRUN_TASK), SRUN_TASK)
    port = env.pop("MASTER_PORT")
    assert env == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "ROLE_RANK": "3",
        "ROLE_WORLD_SIZE": "4",
        "ROLE_NAME": "default",
        "MASTER_ADDR": "n0",
        "TORCHELASTIC_RUN_ID": "77",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "OMP_NUM_THREADS": "1",
    }
    # Every task of the step computes the same port from the step's id.
    rank0 = {**SRUN_TASK, "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    assert torchrun_environ(detect(rank0), rank0)["MASTER_PORT"] == port


def test_mpich_task_and_kept_settings() -> None:
    task = {**MPICH_TASK, "OMP_NUM_THREADS": "8", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    env = torchrun_environ(detect(task), task)
    assert (env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"], env["MASTER_ADDR"]) == (
        "2",
        "0",
        "1",
        "n0",
    )
    # As under torchrun: a setting of the user's is kept.
    assert env["OMP_NUM_THREADS"] == "8" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
    # One process per node: torchrun leaves OMP_NUM_THREADS alone.
    one = DistEnv(rank=0, local_rank=0, world_size=2, local_world_size=1, node_rank=0,
                  num_nodes=2, master_addr="n0", master_port=29500, launcher=Launcher.SLURM)  # fmt: skip
    assert "OMP_NUM_THREADS" not in torchrun_environ(one, {})


def test_the_variables_are_those_torchruns_agent_sets() -> None:
    """The list is torch's: read from LocalElasticAgent's source in the installed torch."""
    pytest.importorskip("torch", reason="torch is not installed")
    import inspect

    from torch.distributed.elastic.agent.server import local_elastic_agent as agent

    source = inspect.getsource(agent.LocalElasticAgent)
    start = source.index("worker_env = {")
    block = source[start : source.index("}", start)]
    torch_names = set(re.findall(r'"([A-Z_]+)":', block))
    assert "RANK" in torch_names and "TORCHELASTIC_RUN_ID" in torch_names
    assert torch_names <= set(TORCHRUN_VARIABLES), torch_names - set(TORCHRUN_VARIABLES)
    env = torchrun_environ(detect(SRUN_TASK), SRUN_TASK)
    assert torch_names | {"LOCAL_RANK"} <= set(env)


def _shim(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "PMI"))}
    return subprocess.run(
        [sys.executable, "-m", MODULE, *command],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_detect_in_the_command_still_names_the_real_launcher() -> None:
    env = {**SRUN_TASK, **torchrun_environ(detect(SRUN_TASK), SRUN_TASK)}
    assert detect(env).launcher is Launcher.TORCHRUN  # TORCHELASTIC_RUN_ID alone
    assert detect({**env, "DISTSPEC_LAUNCHER": "slurm"}).launcher is Launcher.SLURM
    assert detect({**env, "DISTSPEC_LAUNCHER": "bogus"}).launcher is Launcher.TORCHRUN


def test_python_m_torchrun_env_execs_the_command_with_them() -> None:
    # A stale RANK (an outer torchrun's, or the user's shell) does not win over srun's.
    proc = _shim(
        {**SRUN_TASK, "RANK": "9", "WORLD_SIZE": "99"},
        "sh",
        "-c",
        'echo "$RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $TORCHELASTIC_RUN_ID $DISTSPEC_LAUNCHER"',
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "1", "4", "1", "77", "slurm"]
    # exec: the command is the same process (srun's signals reach it), its code is launch's.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    shim = subprocess.Popen(
        [sys.executable, "-m", MODULE, "sh", "-c", "echo $$; exit 7"],
        env={**clean, **SRUN_TASK},
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = shim.communicate(timeout=60)
    assert (int(out), shim.returncode) == (shim.pid, 7)


def test_python_m_torchrun_env_fails_in_one_line() -> None:
    proc = _shim(SRUN_TASK, "no-such-program-here")
    assert proc.returncode == 127
    assert re.fullmatch(
        r"distspec launch: rank 3 on \S+: cannot run 'no-such-program-here': .*\n", proc.stderr
    )
    proc = _shim({**SRUN_TASK, "SLURM_PROCID": "x"}, "true")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and "SLURM_PROCID" in proc.stderr


def test_srun_and_mpiexec_plans_run_the_command_through_it() -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[0-1]"}
    plan = plan_launch(["python", "t.py"], env, python="/py", torchrun="/tr", which=lambda _: None)
    assert plan.argv[-5:] == ("/py", "-m", MODULE, "python", "t.py")
    # torchrun per node sets them itself: no shim.
    plan = plan_launch(["t.py"], env, launcher="torchrun", python="/py", torchrun="/tr")
    assert MODULE not in plan.argv
    hostfile = {"PBS_JOBID": "3.pbs"}
    plan = plan_launch(
        ["t.py"], hostfile, hostfile="h", read_hostfile=lambda _: ["a", "b"],
        which={"mpiexec": "/usr/bin/mpiexec.mpich"}.get, python="/py", torchrun="/tr",
    )  # fmt: skip
    assert plan.argv[-5:] == ("/py", "-m", MODULE, "/py", "t.py")


# ---------------------------------------------------------------------------
# torchrun's failure, as launch reports it


def _feed(path: Path) -> tuple[bytes, TorchrunStderr]:
    watch = TorchrunStderr()
    out = b""
    for line in path.read_bytes().splitlines(keepends=True):
        out += b"".join(watch.feed(line))
    return out + b"".join(watch.unwritten()), watch


def test_report_of_a_rank_that_printed_a_traceback_and_exited_7() -> None:
    """Recorded: torchrun --standalone --nproc_per_node 2 on ddp_tutorial.py with
    DDP_FAIL_RANK=1 DDP_FAIL_CODE=7 (traceback.print_exc(), no rank prefix)."""
    passed, watch = _feed(DATA / "torchrun-exit7.stderr")
    text = passed.decode()
    # torchrun's own traceback and table are held back; the workers' lines are not.
    assert "ChildFailedError" not in text and "Root Cause" not in text
    assert "/opt/venv/bin/torchrun" not in text
    assert "ValueError: rank 1 is broken on purpose" in text
    assert "failed (exitcode: 7)" in text  # torchrun's log line stays
    failure = failure_report(watch.written, watch.hidden)
    assert failure is not None
    assert failure.exit_code == 7
    assert failure.lines == (
        "distspec launch: failed: rank 1 (local rank 1) on localhost exited with 7",
        "--- rank 1: last 4 lines ---",
        "Traceback (most recent call last):",
        '  File "/work/ddp_tutorial.py", line 81, in main',
        '    raise ValueError(f"rank {rank} is broken on purpose")',
        "ValueError: rank 1 is broken on purpose",
        "---",
    )


def test_report_blames_the_rank_that_exited_not_the_one_gloo_aborted() -> None:
    """The same run when rank 0, waiting on rank 1 in gloo, is aborted (SIGABRT,
    "terminate called without an active exception") within the second rank 1 exits
    7: torchrun's clock ties them and its table names rank 0 as root cause (seen in
    CI under torch 2.13). launch blames rank 1 and exits 7 all the same."""
    recorded = (DATA / "torchrun-exit7.stderr").read_text()
    sigterm = "  exitcode  : -15 (pid: 21795)  (SIGTERM)"
    assert sigterm in recorded
    table = recorded.index("Failures:")
    head, tail = (
        recorded[:table],
        recorded[table:].replace(sigterm, "  exitcode  : -6 (pid: 21795)"),
    )
    entries = tail.split("[1]:\n")[1].split("---")[0], tail.split("[0]:\n")[1].split("===")[0]
    swapped = tail.replace(entries[0], "@ROOT@").replace(entries[1], entries[0])
    swapped = swapped.replace("@ROOT@", entries[1])
    assert swapped != tail and "rank      : 0 (local_rank: 0)\n  exitcode  : -6" in swapped
    stream = (head + swapped).encode()
    watch = TorchrunStderr()
    for line in stream.splitlines(keepends=True):
        watch.feed(line)
    watch.unwritten()
    failure = failure_report(watch.written, watch.hidden)
    assert failure is not None and failure.exit_code == 7
    assert failure.lines[0] == (
        "distspec launch: failed: rank 1 (local rank 1) on localhost exited with 7"
    )
    assert failure.lines[-2:] == ("ValueError: rank 1 is broken on purpose", "---")


def test_report_of_a_rank_that_raised_after_init() -> None:
    """Recorded: the same with DDP_FAIL_RANK=1 alone: torch's exception hook prefixes
    the traceback with [rank1]: and the worker exits 1."""
    passed, watch = _feed(DATA / "torchrun-raise.stderr")
    assert b"ChildFailedError" not in passed
    failure = failure_report(watch.written, watch.hidden)
    assert failure is not None and failure.exit_code == 1
    assert failure.lines[0] == (
        "distspec launch: failed: rank 1 (local rank 1) on localhost exited with 1"
    )
    assert failure.lines[2] == "Traceback (most recent call last):"
    assert failure.lines[-2] == "RuntimeError: rank 1 fails on purpose"


def test_report_of_srun_with_a_torchrun_per_node() -> None:
    """Recorded: salloc -N2 --ntasks-per-node=2 on the local cluster, srun of one
    torchrun per node (the line launch --launcher torchrun builds) on ddp_tutorial.py
    with DDP_FAIL_RANK=3 DDP_FAIL_CODE=7: n1's torchrun prints its table, srun stops
    n0's torchrun, which prints a SignalException traceback of its own."""
    passed, watch = _feed(DATA / "srun-torchrun-exit7.stderr")
    text = passed.decode()
    assert "ChildFailedError" not in text and "SignalException" not in text
    assert "srun: error: n1: task 1: Exited with exit code 1" in text
    failure = failure_report(watch.written, watch.hidden)
    assert failure is not None and failure.exit_code == 7
    assert failure.lines[:3] == (
        "distspec launch: failed: rank 3 (local rank 1) on n1 exited with 7",
        "--- rank 3: last 4 lines ---",
        "Traceback (most recent call last):",
    )
    assert failure.lines[-2:] == ("ValueError: rank 3 is broken on purpose", "---")


def test_report_of_a_killed_rank_and_of_no_table() -> None:
    table = [
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-26_09:15:07",
        "  host      : n1",
        "  rank      : 3 (local_rank: 1)",
        "  exitcode  : -9 (pid: 812)",
        "  error_file: <N/A>",
        "============================================================",
    ]
    failure = failure_report(["some output of rank 0"], table)
    assert failure is not None and failure.exit_code == 137
    assert failure.lines == (
        "distspec launch: failed: rank 3 (local rank 1) on n1 was killed by SIGKILL "
        "(exit code 137)",
        "  (it printed no traceback)",
    )
    assert failure_report(["Traceback (most recent call last):", "x"], []) is None


def test_a_traceback_that_is_not_torchruns_is_passed_on() -> None:
    watch = TorchrunStderr()
    lines = [b"Traceback (most recent call last):\n", b'  File "train.py", line 1\n', b"E: x\n"]
    out = b"".join(b"".join(watch.feed(line)) for line in lines)
    assert out == b"".join(lines)
    # A table that never ends (torchrun killed mid-write) is not lost either.
    watch = TorchrunStderr()
    lines = [b"Traceback (most recent call last):\n", b'  File "/v/bin/torchrun", line 6\n']
    out = b"".join(b"".join(watch.feed(line)) for line in lines)
    assert out == b"" and b"".join(watch.unwritten()) == b"".join(lines)


# ---------------------------------------------------------------------------
# mistakes: one line, exit 2, nothing started


def test_check_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"PATH": os.environ["PATH"]}
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("")
    (tmp_path / "plain").write_text("")
    os.mkfifo(tmp_path / "fifo.py")
    check_command(["python", "train.py"], env)
    check_command([sys.executable, "-u", "-X", "dev", "train.py"], env)
    check_command(["python", "app"], env)  # a folder with __main__.py runs
    check_command(["python", "-m", "nope"], env)  # a module: Python's to find
    check_command(["true"], env)
    bad = {
        ("no-such-program",): "'no-such-program' is not a program on PATH",
        ("./missing",): "'./missing' does not exist",
        (str(tmp_path / "pkg"),): f"'{tmp_path}/pkg' is a directory, not a program",
        ("./plain",): "'./plain' is not an executable file",
        ("python", "missing.py"): f"'missing.py' does not exist (in '{tmp_path}')",
        ("python3", "-u", "pkg"): "'pkg' is a directory, not a Python script",
        ("python", "fifo.py"): "'fifo.py' is not a regular file",
    }
    for argv, message in bad.items():
        with pytest.raises(UsageError) as info:
            check_command(list(argv), env)
        assert str(info.value) == message


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("python3") is None,
    reason="root reads every file: needs root and setpriv to check as user nobody",
)
def test_check_command_refuses_an_unreadable_script() -> None:
    folder = Path(tempfile.mkdtemp(prefix="distspec-unreadable-"))
    try:
        folder.chmod(0o755)
        secret = folder / "secret.py"
        secret.write_text("print(1)\n")
        secret.chmod(0o000)
        code = (
            "import os\n"
            "from distspec.errors import UsageError\n"
            "from distspec.runtime.launch import check_command\n"
            "try:\n"
            f"    check_command(['python3', {str(secret)!r}], os.environ)\n"
            "except UsageError as e:\n"
            "    print(e)\n"
        )
        proc = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-c", code],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.stdout == f"cannot read {str(secret)!r}: Permission denied\n", proc.stderr
    finally:
        shutil.rmtree(folder)


def _launch(*args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PBS_", "DISTSPEC_")) and k not in ("NCPUS", "NGPUS")
    }
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return subprocess.run(
        [str(BIN / "distspec"), "launch", *args],
        env={**env, **extra},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_refuses_what_cannot_start(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "dir").mkdir()
    cases = {
        ("--", "nope.py", str(marker)): "distspec launch: error: 'nope.py' does not exist",
        ("--", "python", "dir"): "distspec launch: error: 'dir' is a directory, not a Python",
        ("--", "./dir"): "distspec launch: error: './dir' is a directory, not a program",
        ("--", "no-such-program"): "distspec launch: error: 'no-such-program' is not a program",
        ("-j", "1x5000", "--", "true"): "distspec launch: error: invalid -j '1x5000': at most",
        ("--nproc-per-node", "5000", "--", "true"): (
            "distspec launch: error: 5000 processes per host asked for: at most 1024"
        ),
        ("-j", "0", "--", "true"): "distspec launch: error: ",
        ("--nproc-per-node", "0", "--", "true"): "distspec launch: error: --nproc-per-node",
        ("-j", "99999999999999999999x1", "--", "true"): (
            "distspec launch: error: invalid -j '99999999999999999999x1': at most 65536 nodes"
        ),
        ("--nnodes", "9999", "--", "true"): (
            "distspec launch: error: 9999 nodes asked for but this host (no allocation) has 1"
        ),
    }
    for args, start in cases.items():
        for dry in ((), ("--dryrun",)):
            proc = _launch(*dry, *args, cwd=tmp_path)
            assert proc.returncode == 2, (args, proc.stderr)
            assert proc.stdout == ""
            lines = proc.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith(start), (args, lines)
    assert not marker.exists()


def test_cli_refuses_more_processes_than_the_hostfile_has_slots(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node7\nnode7\n")  # two slots
    proc = _launch("--dryrun", "--hostfile", str(hostfile), "-j", "x4", "--", "true")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"distspec launch: error: 4 processes per host asked for but the host file "
        f"{hostfile} gives each host 2 slots: use -j x2 or fewer"
    ]
    ok = _launch("--dryrun", "--hostfile", str(hostfile), "-j", "x2", "--launcher", "torchrun",
                 "--", "true")  # fmt: skip
    assert ok.returncode == 0, ok.stderr


def test_a_progress_bar_goes_through_as_it_moves() -> None:
    """torchrun's stderr always goes through launch now; a tqdm bar (redrawn after
    \\r, no newline until it ends) must still show each update when it is written."""
    import io
    import threading
    import time

    from distspec.runtime.launch import _copy_lines

    class Sink:
        buffer = io.BytesIO()

    sink = Sink()
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as source:
        thread = threading.Thread(
            target=_copy_lines, args=(source, sink, [], TorchrunStderr()), daemon=True
        )
        thread.start()
        os.write(write_fd, b"step 1\n 10%|#    |\r")
        deadline = time.monotonic() + 10
        while sink.buffer.getvalue() != b"step 1\n 10%|#    |\r" and time.monotonic() < deadline:
            time.sleep(0.05)
        early = sink.buffer.getvalue()
        os.write(write_fd, b"100%|#####|\r\n")
        os.close(write_fd)  # (before any assert: a copy blocked in a read ends now)
        thread.join(timeout=10)
    assert early == b"step 1\n 10%|#    |\r"
    assert sink.buffer.getvalue() == b"step 1\n 10%|#    |\r100%|#####|\r\n"
