"""local_cwd's state directory under faults, with real processes (issue 15, items 2, 7
and the state-directory parts of 3 and 4).

Read-only and full file systems are real: a ``tmpfs`` of a few MiB is the state
directory, and a read-only bind mount is laid over a live run directory, inside a
private mount namespace (``unshare -m`` as root) so the machine's own mounts are never
touched. Those scenarios run this file as a script (``python test_faults_local.py
SCENARIO ...``) inside the namespace, because the job's supervisor must live in it;
the script prints what it saw as JSON and the tests assert on that.

Every job waits for a ``go`` file the test creates, so no assertion depends on timing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(240)

#: The job every scenario runs: it ends (exit 0) once the file ``go`` exists, and
#: prints on the way out (to a full or read-only disk in the fault scenarios).
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.05; done; echo finished; echo to-stderr >&2"


# -- helpers (also used by the script half) -------------------------------------------


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def marked(app_id: str) -> list[int]:
    """Live pids whose environment carries the run's DISTSPEC_APP_ID."""
    from distspec.schedulers.local.processes import is_alive

    marker = f"DISTSPEC_APP_ID={app_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if marker in env and is_alive(int(name)):
            found.append(int(name))
    return found


def until(check: Any, what: str, limit: float = 60.0) -> Any:
    """Poll ``check()`` until truthy (a bound against hangs, not a timed assertion)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


def read_state(run: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((run / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return data


def leftovers(run: Path) -> list[str]:
    return sorted(p.name for p in run.rglob("*.tmp"))


def one_line_no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 1, proc.stderr


# -- the script half: runs inside `unshare -m` ---------------------------------------


def _scenario(name: str, work: Path) -> dict[str, Any]:
    state = work / "state"
    state.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(state)], check=True
    )
    env = dict(os.environ, DISTSPEC_STATE_DIR=str(state))
    seen: dict[str, Any] = {}
    if name.startswith("flood_"):
        return _flood(name, work, state, env)
    if name == "big_result":
        return _big_result(work, state, env)
    if name.endswith("_at_submit"):
        if name == "full_at_submit":
            (state / "local_cwd").mkdir(mode=0o700)
            _fill(state / "filler")
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
        seen["run"] = cli(
            "run", "-s", "local_cwd", "utils.sh", "--", "true", cwd=work, env=env
        ).__dict__
        seen["left"] = sorted(str(p.relative_to(state)) for p in state.rglob("*"))
        subprocess.run(["umount", "-l", str(state)], check=False)
        return seen
    proc = cli("run", "-s", "local_cwd", "utils.sh", "--", WAIT_FOR_GO, cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.strip().splitlines()[-1]
    app_id = handle.rsplit("/", 1)[-1]
    run = state / "local_cwd" / app_id
    first = read_state(run)
    command_pid = until(lambda: read_state(run)["roles"][0]["replicas"][0]["pid"], "the command")
    supervisor = first["supervisor"]["pid"]
    from distspec.schedulers.local.processes import is_alive

    if name == "cancel_readonly":
        subprocess.run(["mount", "--bind", str(run), str(run)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(run)], check=True)
        try:
            seen["cancel"] = cli("cancel", handle, cwd=work, env=env).__dict__
        except subprocess.TimeoutExpired:
            return _hangs(seen, state, "cancel")
        seen["survivors"] = marked(app_id)
        seen["status"] = cli("status", handle, cwd=work, env=env).__dict__
        seen["tmp"] = leftovers(run)
        subprocess.run(["umount", str(run)], check=True)
        subprocess.run(["umount", "-l", str(state)], check=False)
        return seen
    if name == "readonly":
        subprocess.run(["mount", "--bind", str(run), str(run)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(run)], check=True)
        (work / "go").touch()
        until(lambda: not is_alive(command_pid), "the command's end")
        # The supervisor's log is open from before the mount: its retry note gets through.
        until(lambda: "retrying" in (run / "supervisor.log").read_text(), "a failed write")
    elif name == "full":
        # The space the supervisor set aside records the end at once, disk still full.
        _fill(state / "filler")
        (work / "go").touch()
        until(lambda: not is_alive(supervisor), "the supervisor's exit")
    elif name == "full_no_reserve":
        (run / ".reserve").unlink()
        _fill(state / "filler")
        (work / "go").touch()
        until(lambda: not is_alive(command_pid), "the command's end")
        # A supervisor that could not cope would exit now; it must keep retrying.
        for _ in range(150):
            seen.setdefault("supervisor_stayed", True)
            if not is_alive(supervisor):
                seen["supervisor_stayed"] = False
                break
            time.sleep(0.02)
    seen["during"] = cli("status", handle, cwd=work, env=env).__dict__
    seen["during_state"] = read_state(run).get("state")
    seen["during_tmp"] = leftovers(run)
    # Repair the file system: the supervisor records the true final state.
    if name == "readonly":
        subprocess.run(["umount", str(run)], check=True)
    else:
        (state / "filler").unlink()
    until(lambda: not is_alive(supervisor), "the supervisor's exit")
    seen["after"] = cli("status", "--exit-status", handle, cwd=work, env=env).__dict__
    seen["after_state"] = read_state(run).get("state")
    seen["after_tmp"] = leftovers(run)
    seen["survivors"] = marked(app_id)
    subprocess.run(["umount", "-l", str(state)], check=False)
    return seen


def _hangs(seen: dict[str, Any], state: Path, what: str) -> dict[str, Any]:
    """A command that hung: kill every run in ``state`` (their supervisors would retry
    for an hour) and say so."""
    from distspec.schedulers.local.processes import hunt

    for run in (state / "local_cwd").iterdir():
        hunt(run.name)
    seen["hung"] = what
    subprocess.run(["umount", "-l", str(state)], check=False)
    return seen


def _flood(name: str, work: Path, state: Path, env: dict[str, str]) -> dict[str, Any]:
    """A job whose own output fills the state directory's file system (6 MB printed
    onto 4 MiB), then says its last words on stderr and exits 0 or 3."""
    code = 0 if name == "flood_ok" else 3
    job = (
        f"import sys\nfor _ in range(60000): print('x' * 99)\n"
        f"print('the last words', file=sys.stderr)\nsys.exit({code})"
    )
    seen: dict[str, Any] = {}
    try:
        seen["run"] = cli(
            "run", "-s", "local_cwd", "--wait", "utils.python", "-c", job, cwd=work, env=env
        ).__dict__
    except subprocess.TimeoutExpired:
        return _hangs(seen, state, "run --wait")
    (run,) = (state / "local_cwd").iterdir()
    handle = f"local_cwd://distspec/{run.name}"
    seen["status"] = cli("status", handle, cwd=work, env=env).__dict__
    seen["describe"] = cli("describe", handle, cwd=work, env=env).__dict__
    seen["log"] = cli("log", handle, cwd=work, env=env).__dict__
    seen["left"] = sorted(p.name for p in run.iterdir())
    seen["tmp"] = leftovers(run)
    seen["survivors"] = marked(run.name)
    subprocess.run(["umount", "-l", str(state)], check=False)
    return seen


def _big_result(work: Path, state: Path, env: dict[str, str]) -> dict[str, Any]:
    """A callable returns 6 MB onto a 4 MiB file system: its result cannot be written."""
    script = work / "big.py"
    script.write_text(
        "import json, os, distspec\n"
        "job = distspec.submit(lambda: os.urandom(6_000_000), j='1x1')\n"
        "try:\n"
        "    job.result(timeout=150)\n"
        "    print(json.dumps({'raised': None}))\n"
        "except Exception as e:\n"
        "    print(json.dumps({'raised': type(e).__name__, 'says': str(e),\n"
        "                      'state': job.status().state.value}))\n"
    )
    seen: dict[str, Any] = {}
    try:
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=170,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _hangs(seen, state, "result()")
    seen["proc"] = proc.__dict__
    (run,) = (state / "local_cwd").iterdir()
    seen["tmp"] = leftovers(run)
    seen["survivors"] = marked(run.name)
    subprocess.run(["umount", "-l", str(state)], check=False)
    return seen


def _fill(path: Path) -> None:
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def _can_unshare() -> str:
    if os.geteuid() != 0:
        return "needs root for a private mount namespace (unshare -m)"
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
        capture_output=True,
        check=False,
    )
    return "" if probe.returncode == 0 else f"unshare -m fails here: {probe.stderr!r}"


def _in_namespace(name: str, tmp_path: Path) -> dict[str, Any]:
    why = _can_unshare()
    if why:
        pytest.skip(why)
    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            __file__,
            name,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    seen: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return seen


@pytest.mark.parametrize("fault", ["readonly", "full", "full_no_reserve"])
def test_a_job_that_succeeds_on_a_broken_disk_is_recorded_succeeded(
    fault: str, tmp_path: Path
) -> None:
    """The run dir turns read-only / the disk fills while the job runs and the job then
    succeeds. On a full disk the supervisor frees the space it set aside at the start
    and records SUCCEEDED at once. Without it (deleted here) or on a read-only disk it
    keeps retrying its final write instead of dying (which readers would record as
    FAILED), status stays one clean line, no temp file is left; once the disk is
    repaired the record says SUCCEEDED and nothing survives."""
    seen = _in_namespace(fault, tmp_path)
    if fault == "full_no_reserve":
        assert seen["supervisor_stayed"], "the supervisor gave up on a full disk"
    during = seen["during"]
    assert during["returncode"] == 0, during["stderr"]
    assert "Traceback" not in during["stderr"]
    assert "FAILED" not in during["stdout"]
    assert seen["during_state"] == ("SUCCEEDED" if fault == "full" else "RUNNING")
    assert seen["during_tmp"] == []
    after = seen["after"]
    assert after["returncode"] == 0, (after["stdout"], after["stderr"])
    assert seen["after_state"] == "SUCCEEDED"
    assert seen["after_tmp"] == []
    assert seen["survivors"] == []


def test_a_cancel_that_cannot_be_recorded_says_so(tmp_path: Path) -> None:
    """The run directory turns read-only, then `cancel`: every process of the run is
    stopped all the same (the supervisor too, once it is alone and cannot write), but
    cancel does not claim what it could not record: exit 1, one line saying why; and
    status then reports a final state, not RUNNING."""
    seen = _in_namespace("cancel_readonly", tmp_path)
    assert "hung" not in seen, "cancel hung"
    cancel = seen["cancel"]
    assert cancel["returncode"] == 1, (cancel["stdout"], cancel["stderr"])
    one_line_no_traceback(subprocess.CompletedProcess([], 1, cancel["stdout"], cancel["stderr"]))
    assert "cancelled" not in cancel["stdout"]
    assert "could not record the cancel" in cancel["stderr"]
    assert "Read-only file system" in cancel["stderr"]
    assert seen["survivors"] == []
    status = seen["status"]
    assert status["returncode"] == 0, status["stderr"]
    assert status["stdout"].startswith("FAILED: supervisor died"), status["stdout"]
    assert seen["tmp"] == []


@pytest.mark.parametrize("code", [0, 3])
def test_a_job_whose_output_fills_the_disk_ends_with_its_own_exit(
    code: int, tmp_path: Path
) -> None:
    """The job's own output fills the file system the records live on: the supervisor
    still records the true end at once (the space it set aside at the start), `run
    --wait` returns the job's exit code, status says the logs were truncated, and the
    failure report quotes the rank's last lines, kept in memory as the log could not
    take them."""
    seen = _in_namespace("flood_ok" if code == 0 else "flood_fail", tmp_path)
    assert "hung" not in seen, "run --wait hung: the final state was never recorded"
    run = seen["run"]
    assert run["returncode"] == code, (run["stdout"], run["stderr"][-3000:])
    assert "Traceback" not in run["stderr"]
    status = seen["status"]
    assert status["returncode"] == 0, status["stderr"]
    first = status["stdout"].splitlines()[0]
    assert first.startswith("SUCCEEDED" if code == 0 else "FAILED"), status["stdout"]
    assert "logs truncated" in first and "ENOSPC" in first, first
    assert "logs truncated" in seen["describe"]["stdout"], seen["describe"]["stdout"]
    if code:
        assert "exited with 3" in run["stderr"], run["stderr"][-3000:]
        assert "the last words" in run["stderr"], run["stderr"][-3000:]
    assert "the last words" in seen["log"]["stdout"][-5000:]
    assert seen["tmp"] == []
    assert ".reserve" not in seen["left"]
    assert seen["survivors"] == []


def test_a_result_that_fills_the_disk_is_a_clear_error(tmp_path: Path) -> None:
    """A callable's return value does not fit on the job directory's file system:
    result() raises naming ENOSPC, the run ends FAILED, no temp file holds the space."""
    seen = _in_namespace("big_result", tmp_path)
    assert "hung" not in seen, "result() hung: the run never reached a final state"
    proc = seen["proc"]
    assert proc["returncode"] == 0, proc["stderr"][-3000:]
    said = json.loads(proc["stdout"].strip().splitlines()[-1])
    assert said["raised"] == "RemoteError", said
    assert "ENOSPC" in said["says"] and "result" in said["says"], said
    assert said["state"] == "FAILED"
    assert seen["tmp"] == []
    assert seen["survivors"] == []


@pytest.mark.parametrize("fault", ["full_at_submit", "readonly_at_submit"])
def test_a_submit_onto_a_broken_disk_is_one_line_and_leaves_nothing(
    fault: str, tmp_path: Path
) -> None:
    seen = _in_namespace(fault, tmp_path)
    run = seen["run"]
    assert run["returncode"] == 1, (run["stdout"], run["stderr"])
    assert "Traceback" not in run["stderr"]
    assert len(run["stderr"].strip().splitlines()) == 1, run["stderr"]
    assert "local_cwd" in run["stderr"]
    assert run["stdout"] == ""
    assert seen["left"] in ([], ["filler", "local_cwd"]), seen["left"]


# -- run directory deleted while the job runs -----------------------------------------


def _submit_waiting(tmp_path: Path) -> tuple[str, str, Path]:
    proc = cli("run", "-s", "local_cwd", "utils.sh", "--", WAIT_FOR_GO, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.strip().splitlines()[-1]
    app_id = handle.rsplit("/", 1)[-1]
    return handle, app_id, Path(os.environ["DISTSPEC_STATE_DIR"]) / "local_cwd" / app_id


def _remove(run: Path) -> None:
    """Delete the run dir of a running job, as a user would with rm -rf: again when the
    supervisor wrote a file into it between rmtree's listing and its rmdir."""
    import errno

    for _ in range(50):
        try:
            shutil.rmtree(run)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.ENOTEMPTY:
                raise
            time.sleep(0.02)
    pytest.fail(f"{run} kept being written to; rmtree gave up")


def test_a_deleted_run_dir_can_still_be_cancelled(state_dir: Path, tmp_path: Path) -> None:
    handle, app_id, run = _submit_waiting(tmp_path)
    _remove(run)
    status = cli("status", handle, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "RUNNING" in status.stdout
    cancel = cli("cancel", handle, cwd=tmp_path)
    assert cancel.returncode == 0, cancel.stderr
    assert read_state(run)["state"] == "CANCELLED"
    assert marked(app_id) == []


def test_a_deleted_run_dir_is_followed_to_success(state_dir: Path, tmp_path: Path) -> None:
    from distspec.runner import Runner
    from distspec.specs import AppState

    handle, app_id, run = _submit_waiting(tmp_path)
    _remove(run)
    (tmp_path / "go").touch()
    status = Runner().wait(handle)
    assert status is not None and status.state is AppState.SUCCEEDED
    assert (run / "plan.json").exists(), "the supervisor wrote its plan back"
    until(lambda: marked(app_id) == [], "every process of the run to end")


def test_a_running_job_with_a_corrupt_record_heals_and_can_be_cancelled(
    state_dir: Path, tmp_path: Path
) -> None:
    """The supervisor rewrites a state file it did not write (within a second), and
    `cancel` reaches it even while the record is unreadable."""
    handle, app_id, run = _submit_waiting(tmp_path)
    (run / "state.json").write_text('{"state": "RUN')
    until(lambda: read_state(run).get("state") == "RUNNING", "the record's repair")
    status = cli("status", handle, cwd=tmp_path)
    assert status.returncode == 0 and "RUNNING" in status.stdout, status.stderr
    (run / "state.json").write_text("[]")
    cancel = cli("cancel", handle, cwd=tmp_path)
    assert cancel.returncode == 0, cancel.stderr
    until(lambda: read_state(run).get("state") == "CANCELLED", "the final record")
    assert marked(app_id) == []


# -- records of the wrong shape --------------------------------------------------------


def _good_record(app_id: str) -> dict[str, Any]:
    return {
        "version": 1,
        "app_id": app_id,
        "app_name": "app",
        "state": "SUCCEEDED",
        "msg": "",
        "supervisor": {"pid": 1, "starttime": None},
        "created": 1,
        "num_restarts": 0,
        "ended": 2,
        "roles": [
            {
                "role": "r",
                "replicas": [
                    {
                        "id": 0,
                        "state": "SUCCEEDED",
                        "pid": 5,
                        "pgid": 5,
                        "exit_code": 0,
                        "reason": "",
                        "restarts": 0,
                        "attempt": 1,
                        "started": 1.5,
                        "ended": 2,
                    }
                ],
            }
        ],
    }


def _bad_records() -> dict[str, str]:
    good = _good_record("x")
    text = json.dumps(good)
    cases = {
        "truncated": text[: len(text) // 2],
        "empty": "",
        "a list": "[]",
        "not UTF-8": '{"state": "\xff"}',
        "state is a number": json.dumps({**good, "state": 5}),
        "unknown state": json.dumps({**good, "state": "BOGUS"}),
        "no roles": json.dumps({k: v for k, v in good.items() if k != "roles"}),
        "replica id is text": json.dumps(
            {
                **good,
                "roles": [
                    {"role": "r", "replicas": [{**good["roles"][0]["replicas"][0], "id": "0"}]}
                ],
            }
        ),
        "supervisor is null": json.dumps({**good, "supervisor": None}),
        "ended is text": json.dumps({**good, "ended": "soon"}),
    }
    return cases


def test_a_well_formed_record_is_read(state_dir: Path, tmp_path: Path) -> None:
    run = state_dir / "local_cwd" / "app-ok"
    run.mkdir(parents=True)
    (run / "state.json").write_text(json.dumps(_good_record("app-ok")))
    proc = cli("status", "local_cwd://distspec/app-ok", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "SUCCEEDED" in proc.stdout


@pytest.mark.parametrize("case", sorted(_bad_records()))
def test_a_malformed_record_is_one_line(case: str, state_dir: Path, tmp_path: Path) -> None:
    run = state_dir / "local_cwd" / "app-bad"
    run.mkdir(parents=True)
    data = _bad_records()[case]
    (run / "state.json").write_bytes(
        data.encode("latin-1") if case == "not UTF-8" else data.encode()
    )
    for verb in (["status"], ["describe"], ["cancel"], ["log"]):
        proc = cli(*verb, "local_cwd://distspec/app-bad", cwd=tmp_path)
        assert proc.returncode == 1, (verb, proc.stdout, proc.stderr)
        one_line_no_traceback(proc)
        assert "unreadable" in proc.stderr, proc.stderr
    listing = cli("list", "-s", "local_cwd", cwd=tmp_path)
    assert listing.returncode == 0 and "Traceback" not in listing.stderr


# -- files that are not regular files -------------------------------------------------


def bounded_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``cli`` that cannot hang the test (a FIFO read) nor eat the machine's memory
    (/dev/zero read into memory): a timeout, and 2 GiB of address space at most."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        return subprocess.run(
            [sys.executable, "-m", "distspec", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"distspec {' '.join(args)} hung")


def _make_odd(path: Path, kind: str) -> str:
    """Put something that is not a regular file at ``path``; what the error says."""
    if kind == "fifo":
        os.mkfifo(path)
        return "not a regular file (a FIFO)"
    if kind == "dev_zero":
        path.symlink_to("/dev/zero")
        return "not a regular file (a character device)"
    if kind == "symlink_loop":
        path.symlink_to(path.name)
        return "symbolic links"
    if kind == "directory":
        path.mkdir()
        return "directory"
    assert kind == "huge"
    with open(path, "wb") as f:
        f.truncate(100 << 30)  # sparse: 100 GiB that take no space
    return "too large"


ODD = ["fifo", "dev_zero", "symlink_loop", "directory", "huge"]


@pytest.mark.parametrize("kind", ODD)
def test_an_odd_state_file_never_blocks_any_verb(
    kind: str, state_dir: Path, tmp_path: Path
) -> None:
    """state.json is a FIFO, /dev/zero, a symlink loop, a directory or 100 GiB: every
    verb answers at once in one line (or lists the run as UNKNOWN, with why)."""
    run = state_dir / "local_cwd" / "app-odd"
    run.mkdir(parents=True)
    says = _make_odd(run / "state.json", kind)
    handle = "local_cwd://distspec/app-odd"
    for verb in (["status"], ["describe"], ["log"], ["cancel"]):
        proc = bounded_cli(*verb, handle, cwd=tmp_path)
        assert proc.returncode == 1, (verb, proc.stdout, proc.stderr)
        one_line_no_traceback(proc)
        assert "unreadable" in proc.stderr and says in proc.stderr, (verb, proc.stderr)
    listing = bounded_cli("list", "-s", "local_cwd", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "Traceback" not in listing.stderr
    row = next(line for line in listing.stdout.splitlines() if "app-odd" in line)
    assert "UNKNOWN" in row and says in row, row
    prune = bounded_cli("prune", "-s", "local_cwd", cwd=tmp_path)
    assert prune.returncode == 0 and "Traceback" not in prune.stderr, prune.stderr
    assert run.exists(), "prune deleted a run it could not read"


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
@pytest.mark.parametrize("name", ["plan.json", "supervisor.log", "logs/r-0.log"])
def test_an_odd_file_beside_the_record_never_blocks(
    name: str, kind: str, state_dir: Path, tmp_path: Path
) -> None:
    """The plan (read by describe and cancel), the supervisor's log (read when the
    supervisor is dead) and a replica's log (read by log) are FIFOs or /dev/zero."""
    run = state_dir / "local_cwd" / "app-odd"
    (run / "logs").mkdir(parents=True)
    record = _good_record("app-odd")
    if name == "supervisor.log":  # a run whose supervisor is gone: its log is read
        record.update(state="RUNNING", supervisor={"pid": 2**22 + 1, "starttime": 1})
        del record["ended"]
        record["roles"][0]["replicas"][0].update(state="RUNNING", exit_code=None, ended=None)
    (run / "state.json").write_text(json.dumps(record))
    _make_odd(run / name, kind)
    handle = "local_cwd://distspec/app-odd"
    for verb in (["status"], ["describe"], ["cancel"], ["list", "-s", "local_cwd"]):
        proc = bounded_cli(*(verb if verb[0] == "list" else [*verb, handle]), cwd=tmp_path)
        assert proc.returncode == 0, (verb, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
    described = bounded_cli("describe", handle, cwd=tmp_path).stdout
    assert ("supervisor died" in described) == (name == "supervisor.log"), described
    log = bounded_cli("log", handle, cwd=tmp_path)
    if name.startswith("logs/"):
        assert log.returncode == 1, (log.stdout, log.stderr)
        one_line_no_traceback(log)
        assert "not a regular file" in log.stderr
    else:
        assert log.returncode == 0 and "Traceback" not in log.stderr, log.stderr


def test_a_run_without_a_record_is_listed_not_hidden(state_dir: Path, tmp_path: Path) -> None:
    """A run directory with a plan but no state.json and no supervisor (a submit
    SIGKILLed before its clean-up) shows in `list` as UNKNOWN, with why."""
    run = state_dir / "local_cwd" / "app-bare"
    run.mkdir(parents=True)
    (run / "plan.json").write_text("{}")
    old = time.time() - 3600
    os.utime(run / "plan.json", (old, old))
    listing = bounded_cli("list", "-s", "local_cwd", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    row = next((line for line in listing.stdout.splitlines() if "app-bare" in line), "")
    assert "UNKNOWN" in row and "no state.json" in row, listing.stdout


def test_a_dead_supervisor_is_never_left_running(state_dir: Path, tmp_path: Path) -> None:
    """A record says RUNNING but its supervisor is gone, or its pid now belongs to
    another process (pid 1, started at another time): readers record a final state."""
    from distspec.schedulers.local.processes import process_starttime

    for pid, starttime in ((2**22 + 1, 1), (1, (process_starttime(1) or 0) + 1)):
        run = state_dir / "local_cwd" / f"app-{pid}"
        run.mkdir(parents=True)
        record = _good_record(run.name)
        record.update(state="RUNNING", supervisor={"pid": pid, "starttime": starttime})
        del record["ended"]
        record["roles"][0]["replicas"][0].update(state="RUNNING", exit_code=None, ended=None)
        (run / "state.json").write_text(json.dumps(record))
        (run / "supervisor.log").write_text(
            "local_supervisor: cannot write state.json: No space left on device; retrying\n"
        )
        proc = bounded_cli("status", f"local_cwd://distspec/{run.name}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("FAILED: supervisor died: "), proc.stdout
        assert "No space left on device" in proc.stdout
        assert read_state(run)["state"] == "FAILED", "the reader did not record it"


def test_a_run_whose_first_record_cannot_be_written_does_not_start(
    state_dir: Path, tmp_path: Path
) -> None:
    """The supervisor cannot write its first state (here state.json is a directory;
    in life, a disk that filled up after plan.json): it tells the submitter why
    instead of "ok" (which would leave a running job no verb can see) and leaves no
    process behind; the submitter then removes the run directory."""
    from distspec.schedulers.local import supervisor as sup

    app_id = "app-first"
    run = state_dir / "local_cwd" / app_id
    (run / "logs").mkdir(parents=True)
    (run / "state.json").mkdir()
    replica = {
        "id": 0,
        "argv": ["sleep", "60"],
        "env": {},
        "cwd": None,
        "prepend_cwd": False,
        "stdout": "logs/r-0.stdout",
        "stderr": "logs/r-0.stderr",
        "log": "logs/r-0.log",
    }
    plan = {
        "version": 1,
        "app_id": app_id,
        "app_name": "a",
        "options": {"grace_period": 1},
        "roles": [
            {
                "name": "r",
                "num_replicas": 1,
                "max_retries": 0,
                "retry_policy": "application",
                "replicas": [replica],
            }
        ],
    }
    (run / "plan.json").write_text(json.dumps(plan))
    ready_r, ready_w = os.pipe()
    subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            sup.SUPERVISOR_MAIN,
            sup.PACKAGE_ROOT,
            "--ready-fd",
            str(ready_w),
            "--cwd",
            str(tmp_path),
            str(run),
        ],
        env=dict(os.environ, DISTSPEC_APP_ID=app_id),
        pass_fds=(ready_w,),
        check=True,
        timeout=30,
    )
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        answer = ready.read()
    try:
        assert answer.startswith(b"error: cannot write state.json: Is a directory"), answer
        until(lambda: marked(app_id) == [], "every process of the run to end", 20)
    finally:
        from distspec.schedulers.local.processes import hunt

        hunt(app_id)


# -- interrupted submits (Ctrl-C at any moment) ---------------------------------------


#: CPython's report of a KeyboardInterrupt it could not raise (and dropped).
_SWALLOWED = re.compile(
    r"Exception ignored in: [^\n]*\nTraceback \(most recent call last\):\n"
    r"(?:  [^\n]*\n)*KeyboardInterrupt: ?\n"
)


def test_ctrl_c_during_run_leaves_a_job_or_nothing(state_dir: Path, tmp_path: Path) -> None:
    """SIGINT at 16 moments across `run`: afterwards either no run directory and no
    process of it, or a run with a state file that `status` follows; never a
    "supervisor died: BrokenPipeError" record."""
    outcomes = {"before the CLI": 0, "nothing": 0, "submitted": 0}
    root = state_dir / "local_cwd"
    for i in range(16):
        before = set(os.listdir(root)) if root.exists() else set()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distspec",
                "run",
                "-s",
                "local_cwd",
                "utils.sh",
                "--",
                WAIT_FOR_GO,
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.03 * i)  # where in `run` the Ctrl-C lands (no assertion on time)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        # A SIGINT that lands in a callback of the import system (a module lock's
        # weakref) is printed by CPython as "Exception ignored in: ..." and dropped: the
        # CLI then runs on as if no Ctrl-C had come, and the cases below still hold.
        err = _SWALLOWED.sub("", err)
        new = (set(os.listdir(root)) if root.exists() else set()) - before
        assert len(new) <= 1
        if "Traceback" in err:
            # Only a Ctrl-C while Python is still importing distspec, before the CLI
            # can catch anything, may show one, and then nothing has been done yet.
            assert err.rstrip().endswith("KeyboardInterrupt") and not new, err
            outcomes["before the CLI"] += 1
            continue
        if not new:
            outcomes["nothing"] += 1
            continue
        app_id = new.pop()
        run = root / app_id
        if not (run / "state.json").exists():
            # Only the CLI's own clean-up could have left this; it ran before it exited.
            left = sorted(p.name for p in run.rglob("*")) if run.exists() else None
            assert left is None, (left, err)
            assert marked(app_id) == []
            outcomes["nothing"] += 1
            continue
        outcomes["submitted"] += 1
        handle = f"local_cwd://distspec/{app_id}"
        status = cli("status", handle, cwd=tmp_path)
        assert status.returncode == 0 and "RUNNING" in status.stdout, (status.stdout, status.stderr)
        assert cli("cancel", handle, cwd=tmp_path).returncode == 0
        assert "BrokenPipe" not in (run / "supervisor.log").read_text()
        assert "BrokenPipe" not in read_state(run).get("msg", "")
        assert marked(app_id) == []
    assert sum(outcomes.values()) == 16
    print(outcomes)


# -- bad state directories and sessions -----------------------------------------------


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("DISTSPEC_STATE_DIR", "/etc/hostname", "not a directory"),
        ("DISTSPEC_STATE_DIR", "/proc/self/distspec", "inside /proc"),
        ("DISTSPEC_STATE_DIR", "relative/dir", "not an absolute path"),
        ("DISTSPEC_STATE_DIR", "/tmp/a\nb", "control characters"),
        ("DISTSPEC_SESSION", "a/b", "not a valid session"),
        ("DISTSPEC_SESSION", "a\nb", "not a valid session"),
        ("DISTSPEC_SESSION", "a b", "not a valid session"),
    ],
)
@pytest.mark.parametrize(
    "verb",
    [
        ("run", "-s", "local_cwd", "utils.sh", "--", "true"),
        ("run", "--dryrun", "-s", "local_cwd", "utils.sh", "--", "true"),
        ("list", "-s", "local_cwd"),
        ("status", "local_cwd://distspec/x-1"),
    ],
)
def test_a_bad_state_dir_or_session_is_one_line_exit_2(
    var: str, value: str, says: str, verb: tuple[str, ...], state_dir: Path, tmp_path: Path
) -> None:
    env = dict(os.environ, **{var: value})
    proc = cli(*verb, cwd=tmp_path, env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    one_line_no_traceback(proc)
    assert says in proc.stderr
    assert proc.stdout == ""
    assert not (state_dir / "local_cwd").exists() or not os.listdir(state_dir / "local_cwd")


if __name__ == "__main__":
    print(json.dumps(_scenario(sys.argv[1], Path(sys.argv[2])), default=str))
