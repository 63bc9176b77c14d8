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
    from distspec.schedulers.local_supervisor import is_alive

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
    from distspec.schedulers.local_supervisor import is_alive

    if name == "readonly":
        subprocess.run(["mount", "--bind", str(run), str(run)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(run)], check=True)
        (work / "go").touch()
        until(lambda: not is_alive(command_pid), "the command's end")
        # The supervisor's log is open from before the mount: its retry note gets through.
        until(lambda: "retrying" in (run / "supervisor.log").read_text(), "a failed write")
    elif name == "full":
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


@pytest.mark.parametrize("fault", ["readonly", "full"])
def test_a_job_that_succeeds_on_a_broken_disk_is_recorded_succeeded(
    fault: str, tmp_path: Path
) -> None:
    """The run dir turns read-only / the disk fills while the job runs and the job then
    succeeds: the supervisor keeps retrying its final write instead of dying (which
    readers would record as FAILED), status stays one clean line, no temp file is
    left; once the disk is repaired the record says SUCCEEDED and nothing survives."""
    seen = _in_namespace(fault, tmp_path)
    if fault == "full":
        assert seen["supervisor_stayed"], "the supervisor gave up on a full disk"
    during = seen["during"]
    assert during["returncode"] == 0, during["stderr"]
    assert "Traceback" not in during["stderr"]
    assert "FAILED" not in during["stdout"]
    assert seen["during_state"] == "RUNNING"
    assert seen["during_tmp"] == []
    after = seen["after"]
    assert after["returncode"] == 0, (after["stdout"], after["stderr"])
    assert seen["after_state"] == "SUCCEEDED"
    assert seen["after_tmp"] == []
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


# -- interrupted submits (Ctrl-C at any moment) ---------------------------------------


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
