"""local_cwd with real jobs: the CLI in subprocesses, real torchrun, real signals.

"No survivors" is checked three ways after a job ends: every recorded pid (the
supervisor, each replica's keeper = process group id, each command), every process
in each recorded process group, and every process whose environment carries the
job's ``DISTSPEC_APP_ID`` (torchrun's workers sit in sessions of their own).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from distspec.runner import Runner
from distspec.specs import AppDef, AppState, RetryPolicy, Role

REPO = Path(__file__).resolve().parents[2]
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")

pytestmark = pytest.mark.timeout(180)


# -- helpers --------------------------------------------------------------------------


def cli(*args: str, cwd: Path, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kw,
    )


def submit(*args: str, cwd: Path) -> str:
    proc = cli("run", *args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.strip().splitlines()[-1]
    assert handle.startswith("local_cwd://")
    return handle


def app_id(handle: str) -> str:
    return handle.rsplit("/", 1)[-1]


def state(state_dir: Path, handle: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (state_dir / "local_cwd" / app_id(handle) / "state.json").read_text()
    )
    return data


def wait_until(cond: Callable[[], Any], what: str, limit: float = 60.0) -> Any:
    """Poll ``cond`` until truthy; fail (not a timing assertion: a generous bound) if never."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


def _proc_stat(pid: int) -> tuple[str, int] | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2])


def survivors(app: str, data: dict[str, Any], extra: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Live (non-zombie) processes that belong to the job by any of the three tests."""
    recorded = {int(data["supervisor"]["pid"]), *extra}
    groups = set()
    for role in data["roles"]:
        for rep in role["replicas"]:
            for key in ("pid", "pgid"):
                if rep.get(key):
                    recorded.add(int(rep[key]))
            if rep.get("pgid"):
                groups.add(int(rep["pgid"]))
    marker = f"DISTSPEC_APP_ID={app}".encode()
    alive = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        stat = _proc_stat(int(name))
        if stat is None or stat[0] in ("Z", "X"):
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            env = []
        if int(name) in recorded or stat[1] in groups or marker in env:
            alive.append(int(name))
    return alive


def pids_written(directory: Path, count: int) -> set[int]:
    files = list(directory.glob("pid.*"))
    if len(files) < count:
        return set()
    try:
        return {int(f.read_text()) for f in files}
    except ValueError:  # a file being written
        return set()


SLEEPER = """\
import os, signal, sys, time
from pathlib import Path
rank = os.environ.get("RANK", os.environ.get("DISTSPEC_REPLICA_ID", "0"))
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
# A grandchild in a session of its own, as torchrun makes its workers: it must die too.
child = __import__("subprocess").Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                       start_new_session=True)
Path(f"pid.{rank}").write_text(str(os.getpid()))
Path(f"pid.{rank}.child").write_text(str(child.pid))
print("sleeping", rank, flush=True)
time.sleep(600)
"""


# -- real torchrun --------------------------------------------------------------------


@pytest.mark.torch
@needs_torch
def test_main_job_trains_and_exits_0(state_dir: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt.pt"
    proc = cli(
        "run",
        "--wait",
        "dist.ddp",
        "-j",
        "1x2",
        "--script",
        "examples/train_ddp.py",
        "--",
        "--steps",
        "100",
        "--checkpoint",
        str(ckpt),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert ckpt.exists()
    handle = proc.stdout.strip().splitlines()[0]
    assert "SUCCEEDED" in proc.stderr
    log = cli("log", handle, "--regex", "loss", cwd=REPO)
    assert log.returncode == 0
    losses = [float(line.split()[-1]) for line in log.stdout.splitlines() if "step" in line]
    assert len(losses) >= 2 and losses[-1] < losses[0], log.stdout
    assert cli("status", handle, cwd=REPO).stdout.strip() == "SUCCEEDED"
    listed = cli("list", "-s", "local_cwd", cwd=REPO).stdout
    assert handle in listed and "SUCCEEDED" in listed


@pytest.mark.torch
@needs_torch
def test_failing_rank_exit_code_is_propagated(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "fail.py").write_text(
        "import os, sys\n"
        "if os.environ['RANK'] == '1':\n"
        "    print('rank 1 gives up', file=sys.stderr)\n"
        "    sys.exit(3)\n"
    )
    proc = cli("run", "--wait", "dist.ddp", "-j", "1x2", "--script", "fail.py", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "fail/0 rank 1 on localhost exited with 3" in proc.stderr
    assert "rank 1 (local_rank 1) exited with 3" in proc.stderr
    # The failing rank's own last lines, without its prefix, in the summary.
    assert "--- rank 1: last line ---\nrank 1 gives up\n---" in proc.stderr
    handle = proc.stdout.strip().splitlines()[0]
    data = state(state_dir, handle)
    assert data["state"] == "FAILED"
    assert data["roles"][0]["replicas"][0]["exit_code"] == 3


@pytest.mark.torch
@needs_torch
def test_kill_9_of_the_supervisor_leaves_no_survivors(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    handle = submit("dist.ddp", "-j", "1x2", "--script", "sleeper.py", cwd=tmp_path)
    workers = wait_until(lambda: pids_written(tmp_path, 4), "the workers and their children")
    data = state(state_dir, handle)
    assert data["state"] == "RUNNING"
    assert survivors(app_id(handle), data, workers), "the job should be running"
    os.kill(int(data["supervisor"]["pid"]), signal.SIGKILL)
    # Nobody calls status here: the replicas must die with the supervisor on their own.
    wait_until(lambda: not survivors(app_id(handle), data, workers), "every process to die")
    status = cli("status", handle, cwd=tmp_path)
    assert status.stdout.strip() == "FAILED: supervisor died"
    described = cli("describe", handle, cwd=tmp_path).stdout
    assert "reason=supervisor died" in described


@pytest.mark.torch
@needs_torch
def test_cancel_from_another_process(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    handle = submit(
        "-cfg", "grace_period=1", "dist.ddp", "-j", "1x2", "--script", "sleeper.py", cwd=tmp_path
    )
    workers = wait_until(lambda: pids_written(tmp_path, 4), "the workers and their children")
    # Workers ignore SIGTERM, so this also proves the SIGKILL after the grace period.
    cancel = cli("cancel", handle, cwd=tmp_path)
    assert cancel.returncode == 0, cancel.stderr
    data = state(state_dir, handle)
    assert data["state"] == "CANCELLED"
    assert not survivors(app_id(handle), data, workers)
    assert cli("status", handle, cwd=tmp_path).stdout.startswith("CANCELLED")
    assert cli("cancel", handle, cwd=tmp_path).returncode == 0, "cancelling twice is a no-op"


@pytest.mark.torch
@needs_torch
def test_retries_restart_the_job(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "flaky.py").write_text(
        "import os, sys\nfrom pathlib import Path\n"
        "mark = Path(f\"tried.{os.environ['RANK']}\")\n"
        "if os.environ['RANK'] == '0' and not mark.exists():\n"
        "    mark.write_text('1'); sys.exit(5)\n"
        "print('ok on rank', os.environ['RANK'])\n"
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
    handle = proc.stdout.strip().splitlines()[0]
    data = state(state_dir, handle)
    assert data["num_restarts"] == 1
    assert data["roles"][0]["replicas"][0]["restarts"] == 1
    assert "restarts=1" in cli("describe", handle, cwd=tmp_path).stdout
    log = cli("log", handle, cwd=tmp_path).stdout
    assert "distspec: restart 1" in log and "ok on rank 0" in log


@pytest.mark.torch
@needs_torch
def test_five_concurrent_jobs_keep_their_own_states(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "code.py").write_text(
        "import sys, time\ntime.sleep(0.5)\nsys.exit(int(sys.argv[1]))\n"
    )
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distspec",
                "run",
                "--wait",
                "dist.ddp",
                "-j",
                "1x1",
                "--script",
                "code.py",
                "--",
                str(code),
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for code in range(5)
    ]
    results = [(p.communicate(timeout=150), p.returncode) for p in runs]
    handles = []
    for code, ((out, err), rc) in enumerate(results):
        assert rc == code, err
        handles.append(out.strip().splitlines()[0])
    assert len(set(handles)) == 5
    for code, handle in enumerate(handles):
        data = state(state_dir, handle)
        assert data["state"] == ("SUCCEEDED" if code == 0 else "FAILED")
        assert data["roles"][0]["replicas"][0]["exit_code"] == code
    listed = cli("list", "--json", "-s", "local_cwd", cwd=tmp_path)
    by_handle = {row["handle"]: row["state"] for row in json.loads(listed.stdout)}
    assert [by_handle[h] for h in handles] == ["SUCCEEDED"] + ["FAILED"] * 4


@pytest.mark.torch
@needs_torch
def test_log_follow_while_the_job_runs(state_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "ticker.py").write_text(
        "import os, sys, time\nfrom pathlib import Path\n"
        "r = os.environ['RANK']\n"
        "for i in range(5):\n"
        "    print(f'tick {i} from {r}', flush=True)\n"
        "    if i == 0: print(f'warn from {r}', file=sys.stderr, flush=True)\n"
        "    while i == 2 and not Path('go').exists(): time.sleep(0.05)\n"
    )
    handle = submit("dist.ddp", "-j", "1x2", "--script", "ticker.py", cwd=tmp_path)
    follow = subprocess.Popen(
        [sys.executable, "-m", "distspec", "log", "-f", handle],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert follow.stdout is not None
    seen = []
    for line in follow.stdout:  # lines arrive while the job is still running
        seen.append(line)
        if "tick 2 from 1" in line or "tick 2 from 0" in line:
            break
    assert cli("status", handle, cwd=tmp_path).stdout.strip() == "RUNNING"
    (tmp_path / "go").write_text("")
    rest = follow.stdout.read()  # -f ends by itself when the job ends
    follow.wait(timeout=60)
    text = "".join(seen) + rest
    assert follow.returncode == 0
    for r in (0, 1):
        for i in range(5):
            assert f"tick {i} from {r}" in text
        assert f"warn from {r}" in text, "stderr is in the log too"


# -- without torch: plain processes through the Runner or the CLI --------------------


def _runner() -> Runner:
    return Runner()


def test_replica_retry_policy_restarts_only_the_failed_replica(
    state_dir: Path, tmp_path: Path
) -> None:
    script = (
        f"cd {tmp_path}; "
        'if [ "$DISTSPEC_REPLICA_ID" = 1 ] && [ ! -e tried ]; then touch tried; exit 4; fi; '
        "sleep 0.3; echo done $DISTSPEC_REPLICA_ID"
    )
    role = Role(
        name="w",
        entrypoint="sh",
        args=("-c", script),
        num_replicas=2,
        max_retries=2,
        retry_policy=RetryPolicy.REPLICA,
    )
    runner = _runner()
    handle = runner.run(AppDef(name="retry", roles=(role,)), "local_cwd")
    status = runner.wait(handle, timeout=60)
    assert status.state is AppState.SUCCEEDED
    restarts = [r.restarts for r in status.roles[0].replicas]
    assert restarts == [0, 1]
    assert status.roles[0].replicas[1].state is AppState.SUCCEEDED


def test_retries_run_out_then_fail(state_dir: Path, tmp_path: Path) -> None:
    role = Role(
        name="w",
        entrypoint="sh",
        args=("-c", "echo try; exit 6"),
        max_retries=2,
        retry_policy=RetryPolicy.ROLE,
    )
    runner = _runner()
    handle = runner.run(AppDef(name="doomed", roles=(role,)), "local_cwd")
    status = runner.wait(handle, timeout=60)
    assert status.state is AppState.FAILED
    replica = status.roles[0].replicas[0]
    assert (replica.exit_code, replica.restarts) == (6, 2)
    assert status.num_restarts == 2
    lines = [ln.text for ln in runner.log_lines(handle)]
    assert lines.count("try") == 3


def test_a_failure_stops_the_siblings(state_dir: Path, tmp_path: Path) -> None:
    roles = (
        Role(name="bad", entrypoint="sh", args=("-c", "sleep 0.2; exit 2")),
        Role(name="slow", entrypoint="sleep", args=("600",), num_replicas=2),
    )
    runner = _runner()
    handle = runner.run(AppDef(name="mixed", roles=roles), "local_cwd")
    status = runner.wait(handle, timeout=60)
    assert status.state is AppState.FAILED
    assert status.msg == "bad/0 exited with 2"
    failed = status.first_failure()
    assert failed is not None and (failed.role, failed.exit_code) == ("bad", 2)
    assert [r.state for r in status.roles[1].replicas] == [AppState.CANCELLED] * 2


def test_missing_program_fails_with_127(state_dir: Path, tmp_path: Path) -> None:
    role = Role(name="x", entrypoint="no-such-program-distspec")
    runner = _runner()
    handle = runner.run(AppDef(name="missing", roles=(role,)), "local_cwd")
    status = runner.wait(handle, timeout=30)
    replica = status.roles[0].replicas[0]
    assert (status.state, replica.exit_code) == (AppState.FAILED, 127)
    assert "cannot start 'no-such-program-distspec'" in replica.reason


def test_job_paths_are_where_the_job_keeps_its_files(state_dir: Path, tmp_path: Path) -> None:
    """JobPaths, the contract callers use instead of the backend's layout: the run
    directory ($DISTSPEC_JOB_DIR in the job) and each replica's combined log in it."""
    role = Role(
        name="w",
        entrypoint="sh",
        args=("-c", 'echo "hello $DISTSPEC_REPLICA_ID"; echo "$DISTSPEC_JOB_DIR"'),
        num_replicas=2,
    )
    runner = _runner()
    handle = runner.run(AppDef(name="paths", roles=(role,)), "local_cwd")
    status = runner.wait(handle, timeout=60)
    assert status.state is AppState.SUCCEEDED
    paths = runner.scheduler("local_cwd").job_paths(handle.app_id)
    assert paths is not None
    assert paths.folder == str(state_dir / "local_cwd" / handle.app_id) == status.location
    for i in range(2):
        log = Path(paths.replica_log("w", i)).read_text()
        assert f" O hello {i}\n" in log
        assert f" O {paths.folder}\n" in log


def test_logs_prefix_tail_regex_since(state_dir: Path, tmp_path: Path) -> None:
    handle = submit(
        "utils.sh",
        "--num_replicas",
        "2",
        "--",
        'echo "out $DISTSPEC_REPLICA_ID"; echo "err $DISTSPEC_REPLICA_ID" >&2; echo last',
        cwd=tmp_path,
    )
    assert cli("log", handle, "-f", cwd=tmp_path).returncode == 0  # ends with the job
    both = cli("log", handle, cwd=tmp_path).stdout.splitlines()
    assert sorted(both) == sorted(
        ["sh/0| out 0", "sh/0| err 0", "sh/0| last", "sh/1| out 1", "sh/1| err 1", "sh/1| last"]
    )
    # One replica; --raw: the text alone. Within a stream the order is kept; stdout and
    # stderr are separate pipes, so how they interleave is the order their data arrived in.
    one = cli("log", handle, "sh/1", "--raw", cwd=tmp_path).stdout.splitlines()
    assert sorted(one) == ["err 1", "last", "out 1"]
    assert one.index("out 1") < one.index("last")
    tail = cli("log", handle, "sh/0", "--regex", "out|last", "--tail", "1", cwd=tmp_path)
    assert tail.stdout == "sh/0| last\n"
    assert cli("log", handle, "--regex", "^err", cwd=tmp_path).stdout.splitlines() == [
        "sh/0| err 0",
        "sh/1| err 1",
    ]
    assert cli("log", handle, "--since", "1h", cwd=tmp_path).stdout.count("\n") == 6
    future = "2999-01-01T00:00:00"
    assert cli("log", handle, "--since", future, cwd=tmp_path).stdout == ""
    run = state_dir / "local_cwd" / app_id(handle)
    assert (run / "logs" / "sh-0.stdout").read_text() == "out 0\nlast\n"
    assert (run / "logs" / "sh-0.stderr").read_text() == "err 0\n"
    assert oct(run.stat().st_mode & 0o777) == "0o700"
    assert oct(state_dir.stat().st_mode & 0o777) == "0o700"
    assert {p.name for p in run.iterdir()} >= {"appdef.json", "plan.json", "state.json", "logs"}


def test_sigterm_during_wait_cancels_the_job(state_dir: Path, tmp_path: Path) -> None:
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distspec",
            "run",
            "--wait",
            "utils.sh",
            "--",
            "echo started; exec sleep 600",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert waiter.stdout is not None
    handle = waiter.stdout.readline().strip()
    run = state_dir / "local_cwd" / app_id(handle)
    log = run / "logs" / "sh-0.log"
    wait_until(lambda: log.exists() and b"started" in log.read_bytes(), "the job to start")
    # The first progress line comes from inside the wait, where SIGTERM means cancel.
    assert waiter.stderr is not None
    assert "RUNNING" in waiter.stderr.readline()
    waiter.send_signal(signal.SIGTERM)
    err = waiter.stderr.read()
    waiter.wait(timeout=60)
    assert waiter.returncode == 130, err
    assert f"cancelling {handle}" in err
    data = state(state_dir, handle)
    assert data["state"] == "CANCELLED"
    assert not survivors(app_id(handle), data)


def test_status_right_after_run_and_from_a_new_process(state_dir: Path, tmp_path: Path) -> None:
    handle = submit("utils.sh", "--", "sleep 600", cwd=tmp_path)
    data = state(state_dir, handle)
    assert data["state"] == "RUNNING", "submit returns once the replicas are started"
    assert data["roles"][0]["replicas"][0]["pgid"]
    assert cli("status", handle, cwd=tmp_path).stdout.strip() == "RUNNING"
    assert cli("cancel", handle, cwd=tmp_path).returncode == 0
    assert not survivors(app_id(handle), state(state_dir, handle))


def test_the_supervisor_keeps_no_inherited_descriptor(state_dir: Path, tmp_path: Path) -> None:
    """A pipe the CLI inherited (as from make or a test harness) must reach EOF when
    the CLI exits, not stay open in the supervisor for as long as the job runs."""
    import select

    r, w = os.pipe()
    proc = cli("run", "utils.sh", "--", "sleep 600", cwd=tmp_path, pass_fds=(w,))
    os.close(w)
    assert proc.returncode == 0, proc.stderr
    try:
        ready, _, _ = select.select([r], [], [], 30)  # a generous bound, not a timing test
        assert ready and os.read(r, 1) == b"", "some process of the job holds the pipe open"
    finally:
        os.close(r)
        cancel = cli("cancel", proc.stdout.strip().splitlines()[0], cwd=tmp_path)
        assert cancel.returncode == 0, cancel.stderr


# -- waiting on alive.fifo ------------------------------------------------------------


def _fifo_writers(fifo: Path) -> set[int]:
    """Pids that hold ``fifo`` open (the supervisor opens it read-write)."""
    holders = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") == str(fifo):
                    holders.add(int(name))
            except OSError:
                continue
    return holders


def test_only_the_supervisor_holds_alive_fifo(state_dir: Path, tmp_path: Path) -> None:
    """Keepers and commands must not inherit it: one left open would keep `wait`
    from seeing the end (or the death) of the supervisor."""
    handle = submit("utils.sh", "--", "sleep 600", cwd=tmp_path)
    data = state(state_dir, handle)
    fifo = state_dir / "local_cwd" / app_id(handle) / "alive.fifo"
    assert fifo.is_fifo()
    assert _fifo_writers(fifo) == {int(data["supervisor"]["pid"])}
    assert cli("cancel", handle, cwd=tmp_path).returncode == 0
    assert _fifo_writers(fifo) == set(), "the supervisor closes it once the state is final"


@pytest.fixture
def slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """State-file checks and liveness checks so rare that only the FIFO can end a wait."""
    from distspec.schedulers.local import scheduler

    monkeypatch.setattr(scheduler, "WAIT_SLOW_INTERVAL", 3600.0)
    monkeypatch.setattr(scheduler, "LIVENESS_INTERVAL", 3600.0)


def _wait_in_thread(runner: Runner, handle: Any, **kw: Any) -> Any:
    """``runner.wait(handle)`` without a timeout, given a generous bound (not a timing
    assertion: with :func:`slow_polls`, a wait that misses the FIFO blocks for an hour)."""
    import threading

    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(runner.wait(handle, **kw)), daemon=True)
    waiter.start()
    waiter.join(60)
    assert result, "wait did not return: it missed the supervisor's hang-up"
    return result[0]


def test_wait_wakes_up_at_the_end_through_the_fifo(
    state_dir: Path, tmp_path: Path, slow_polls: None
) -> None:
    runner = _runner()
    role = Role(name="w", entrypoint="sh", args=("-c", "sleep 0.5; exit 3"))
    handle = runner.run(AppDef(name="short", roles=(role,)), "local_cwd")
    seen: list[AppState] = []
    status = _wait_in_thread(runner, handle, on_status=lambda s: seen.append(s.state))
    assert status is not None and status.state is AppState.FAILED
    assert seen[0] is AppState.RUNNING and seen[-1] is AppState.FAILED


def test_wait_sees_a_killed_supervisor_through_the_fifo(
    state_dir: Path, tmp_path: Path, slow_polls: None
) -> None:
    runner = _runner()
    role = Role(name="w", entrypoint="sleep", args=("600",))
    handle = runner.run(AppDef(name="orphan", roles=(role,)), "local_cwd")
    data = state(state_dir, str(handle))
    killed: list[int] = []

    def kill_once_waiting(status: Any) -> None:
        # The first status comes after wait opened the FIFO: the hang-up is what ends
        # it. (Had the supervisor died before that, only the liveness check would.)
        if not killed:
            killed.append(int(data["supervisor"]["pid"]))
            os.kill(killed[0], signal.SIGKILL)

    try:
        status = _wait_in_thread(runner, handle, on_status=kill_once_waiting)
    finally:  # a failed wait must not leave the job behind
        from distspec.schedulers.local.processes import hunt

        hunt(app_id(str(handle)))
    assert status is not None and status.state is AppState.FAILED
    assert status.msg == "supervisor died"
    wait_until(lambda: not survivors(app_id(str(handle)), data), "every process to die")


def test_wait_without_fifo_polls(state_dir: Path, tmp_path: Path, slow_polls: None) -> None:
    """A run directory without alive.fifo (a file system without FIFOs) still ends."""
    runner = _runner()
    role = Role(name="w", entrypoint="sh", args=("-c", "sleep 0.5"))
    handle = runner.run(AppDef(name="nofifo", roles=(role,)), "local_cwd")
    (state_dir / "local_cwd" / app_id(str(handle)) / "alive.fifo").unlink()
    status = _wait_in_thread(runner, handle)
    assert status is not None and status.state is AppState.SUCCEEDED
