"""local_cwd without running jobs: the compiled plan (goldens), macros, options, the
state-file reader's handling of a dead supervisor, log records and torchrun reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from distspec.components.dist import ddp
from distspec.errors import CompileError, UsageError
from distspec.schedulers.local.files import STATE_FILE, write_json_atomic
from distspec.schedulers.local.logs import parse_log_line
from distspec.schedulers.local.processes import is_alive
from distspec.schedulers.local.scheduler import LocalOptions, LocalScheduler
from distspec.specs import AppDef, AppState, Resource, RetryPolicy, Role
from distspec.specs.mounts import BindMount
from distspec.torchrun_output import torchrun_root_cause

APP_ID = "app-0000abcd"


def _sched(tmp_path: Path) -> LocalScheduler:
    return LocalScheduler("test", state_dir=tmp_path / "state")


def _macro_app() -> AppDef:
    role = Role(
        name="worker",
        entrypoint="python",
        args=(
            "${img_root}/main.py",
            "--id=${replica_id}",
            "--of=${num_replicas}",
            "--master=${rank0_host}:29500",
            "--run=${app_id}",
            'it\'s $HOME; `x` "q"',
        ),
        env={"RUN": "${app_id}-${replica_id}", "PLAIN": "v"},
        num_replicas=2,
        resource=Resource(gpu=2),
        max_retries=3,
        retry_policy=RetryPolicy.REPLICA,
    )
    ps = Role(name="ps", entrypoint="sh", args=("-c", "echo ${replica_id}"), image="/srv/ps")
    return AppDef(name="app", roles=(role, ps))


def _plan(request_text: str) -> dict:  # type: ignore[type-arg]
    plan: dict = json.loads(request_text)  # type: ignore[type-arg]
    return plan


def test_golden_ddp_1x2(tmp_path: Path, golden: Callable[[str, str], None]) -> None:
    sched = _sched(tmp_path)
    app = ddp(script="examples/train_ddp.py", j="1x2")
    request = sched.compile(app, sched.parse_options({}), app_id="train_ddp-0000abcd")
    golden("local_cwd/ddp_1x2.json", request.render())
    assert request.main_file == "plan.json"
    assert json.loads(request.files["appdef.json"]) == app.to_dict()


def test_golden_macros_and_options(tmp_path: Path, golden: Callable[[str, str], None]) -> None:
    sched = _sched(tmp_path)
    opts = sched.parse_options(
        {
            "cwd": "/work/proj",
            "prepend_cwd": "true",
            "grace_period": "2.5",
            "auto_set_cuda_visible_devices": "yes",
            "unbuffered": "no",
        }
    )
    request = sched.compile(_macro_app(), opts, app_id=APP_ID)
    golden("local_cwd/macros_options.json", request.render())


def test_macros_map_to_local_values(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    plan = _plan(sched.compile(_macro_app(), LocalOptions(), app_id=APP_ID).render())
    worker, ps = plan["roles"]
    for i, rep in enumerate(worker["replicas"]):
        assert rep["argv"][1:6] == [
            "./main.py",
            f"--id={i}",
            "--of=2",
            "--master=localhost:29500",
            f"--run={APP_ID}",
        ]
        assert rep["argv"][6] == 'it\'s $HOME; `x` "q"', "argv is passed as is, no shell"
        assert rep["env"]["RUN"] == f"{APP_ID}-{i}"
        assert rep["env"]["DISTSPEC_APP_ID"] == APP_ID
        assert rep["env"]["DISTSPEC_REPLICA_ID"] == str(i)
        assert rep["env"]["PYTHONUNBUFFERED"] == "1"
        assert "CUDA_VISIBLE_DEVICES" not in rep["env"]
        assert rep["cwd"] is None, "no cwd option: the directory `distspec run` starts in"
        assert rep["log"] == f"logs/worker-{i}.log"
    assert worker["retry_policy"] == "replica"
    assert worker["max_retries"] == 3
    # A role's image is its directory on this backend, and ${img_root}.
    assert ps["replicas"][0]["cwd"] == "/srv/ps"
    assert ps["replicas"][0]["argv"] == ["sh", "-c", "echo 0"]


def test_cuda_devices_count_up_across_replicas(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    opts = LocalOptions(auto_set_cuda_visible_devices=True)
    plan = _plan(sched.compile(_macro_app(), opts, app_id=APP_ID).render())
    envs = [r["env"] for role in plan["roles"] for r in role["replicas"]]
    assert [e.get("CUDA_VISIBLE_DEVICES") for e in envs] == ["0,1", "2,3", None]


def test_role_env_wins_over_unbuffered_default(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    app = AppDef(name="a", roles=(Role(name="r", entrypoint="x", env={"PYTHONUNBUFFERED": "0"}),))
    plan = _plan(sched.compile(app, LocalOptions(), app_id=APP_ID).render())
    assert plan["roles"][0]["replicas"][0]["env"]["PYTHONUNBUFFERED"] == "0"


def test_mounts_are_a_compile_error(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    role = Role(name="r", entrypoint="x", mounts=(BindMount(src_path="/a", dst_path="/b"),))
    with pytest.raises(CompileError, match="bind mounts"):
        sched.compile(AppDef(name="a", roles=(role,)), LocalOptions(), app_id=APP_ID)


def test_preflight_checks_script_relative_to_cwd(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "train.py").write_text("")
    app = ddp(script="train.py", j="1x1")
    ok = sched.compile(app, LocalOptions(cwd=str(tmp_path / "proj")), app_id=APP_ID)
    sched.preflight(ok)
    missing = sched.compile(app, LocalOptions(cwd=str(tmp_path)), app_id=APP_ID)
    with pytest.raises(UsageError, match="not found"):
        sched.preflight(missing)
    nodir = sched.compile(app, LocalOptions(cwd=str(tmp_path / "nope")), app_id=APP_ID)
    with pytest.raises(UsageError, match="not a directory"):
        sched.preflight(nodir)


def test_run_dir_rejects_path_tricks(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    for bad in ("", "..", "a/b"):
        with pytest.raises(UsageError):
            sched.run_dir(bad)
    assert sched.describe("never-submitted") is None
    assert sched.list() == []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_state(sched: LocalScheduler, app_id: str, **fields: object) -> Path:
    run = sched.run_dir(app_id)
    run.mkdir(parents=True)
    data = {
        "version": 1,
        "app_id": app_id,
        "app_name": "app",
        "state": "RUNNING",
        "msg": "",
        "supervisor": {"pid": _dead_pid(), "starttime": None},
        "created": 1.0,
        "num_restarts": 0,
        "roles": [
            {
                "role": "r",
                "replicas": [
                    {
                        "id": 0,
                        "state": "RUNNING",
                        "pid": None,
                        "pgid": None,
                        "exit_code": None,
                        "reason": "",
                        "restarts": 0,
                        "attempt": 1,
                        "started": 1.0,
                        "ended": None,
                    }
                ],
            }
        ],
    }
    data.update(fields)
    write_json_atomic(str(run / STATE_FILE), data)
    return run


def test_dead_supervisor_is_reported_and_recorded(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    run = _write_state(sched, "app-1")
    status = sched.describe("app-1")
    assert status is not None
    assert status.state is AppState.FAILED
    assert status.msg == "supervisor died"
    assert status.roles[0].replicas[0].state is AppState.FAILED
    on_disk = json.loads((run / STATE_FILE).read_text())
    assert on_disk["state"] == "FAILED", "the verdict is written so every reader agrees"


def test_live_supervisor_is_trusted(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    _write_state(sched, "app-2", supervisor={"pid": os.getpid(), "starttime": None})
    status = sched.describe("app-2")
    assert status is not None and status.state is AppState.RUNNING
    assert is_alive(os.getpid())
    assert not is_alive(_dead_pid())


def test_list_is_newest_first(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    _write_state(sched, "old", state="SUCCEEDED", created=10.0)
    _write_state(sched, "new", state="FAILED", created=20.0, msg="r/0 exited with 3")
    apps = sched.list()
    assert [a.app_id for a in apps] == ["new", "old"]
    assert apps[0].state is AppState.FAILED
    assert apps[0].detail == "r/0 exited with 3"


def test_log_records() -> None:
    assert parse_log_line(b"1700000000.250000 O hello world") == (1700000000.25, "hello world")
    assert parse_log_line(b"1.0 E ") == (1.0, "")
    assert parse_log_line(b"1.0 D distspec: restart 1") == (1.0, "distspec: restart 1")
    assert parse_log_line(b"garbage") is None


def test_log_iter_since_and_order(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    run = _write_state(sched, "app-3", state="SUCCEEDED")
    (run / "logs").mkdir()
    (run / "logs" / "r-0.log").write_bytes(b"1.0 O one\n2.0 E two\n3.0 O thr\xffee\n4.0 O partial")
    assert list(sched.log_iter("app-3", "r", 0)) == ["one", "two", "thr\ufffdee"]
    assert list(sched.log_iter("app-3", "r", 0, since=2.0)) == ["two", "thr\ufffdee"]
    assert list(sched.log_iter("app-3", "r", 0, follow=True)) == ["one", "two", "thr\ufffdee"]


TORCHRUN_REPORT = """\
[train0]:step 1
[train1]:Traceback (most recent call last):
[train1]:ValueError: boom
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_23:16:26
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 25465)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 25465
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_23:16:26
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 25466)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
""".splitlines()


def test_torchrun_root_cause_names_the_rank_and_its_code() -> None:
    found = torchrun_root_cause(TORCHRUN_REPORT, "train")
    assert found is not None
    code, reason = found
    assert code == 3
    assert "rank 1 (local_rank 1) exited with 3" in reason
    assert "its last line: ValueError: boom" in reason


def test_torchrun_root_cause_signal_and_absent() -> None:
    killed = [line.replace("exitcode  : 3", "exitcode  : -9") for line in TORCHRUN_REPORT]
    found = torchrun_root_cause(killed)
    assert found is not None
    assert found[0] == 137
    assert "killed by SIGKILL" in found[1]
    assert torchrun_root_cause(["just a crash", "Traceback"]) is None


def test_supervisor_starts_on_the_standard_library_alone() -> None:
    from distspec.schedulers.local import supervisor

    # As local_cwd starts it (SUPERVISOR_MAIN), with no arguments: usage, exit 2.
    argv = [sys.executable, "-I", "-S", "-X", "importtime", "-c", supervisor.SUPERVISOR_MAIN]
    proc = subprocess.run(
        [*argv, supervisor.PACKAGE_ROOT], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2 and "usage:" in proc.stderr
    imported = {
        line.split("|")[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "json" in imported
    heavy = {"torch", "site", "subprocess", "pathlib", "ctypes", "typing"} & imported
    assert not heavy, f"the supervisor imports {heavy}"
    # Of distspec: the packages on the way (their __init__ files import nothing heavy),
    # the atomic write it shares with the runtime, and its own modules.
    on_the_way = {
        "distspec",
        "distspec._files",
        "distspec._lazy",
        "distspec.schedulers",
        "distspec.schedulers.local",
        "distspec.torchrun_output",
    }
    own = {
        f"distspec.schedulers.local.{name}"
        for name in ("exits", "files", "keeper", "processes", "replica", "supervisor")
    }
    ours = {name for name in imported if name.split(".")[0] == "distspec"}
    assert ours == on_the_way | own, f"the supervisor imports {ours ^ (on_the_way | own)}"


def test_a_replica_entry_has_the_keys_the_reader_declares() -> None:
    from distspec.schedulers.local.records import ReplicaRecord
    from distspec.schedulers.local.replica import RECORD_KEYS

    assert tuple(ReplicaRecord.__annotations__) == RECORD_KEYS


def test_job_paths_name_the_run_directory_and_its_logs(tmp_path: Path) -> None:
    sched = _sched(tmp_path)
    run = _write_state(sched, "app-3", supervisor={"pid": os.getpid(), "starttime": None})
    paths = sched.job_paths("app-3")
    assert paths.folder == str(run) == str(tmp_path / "state" / "local_cwd" / "app-3")
    assert paths.script_output is None
    # Where the supervisor writes a replica's combined log (the plan says), and where
    # describe says it is.
    plan = json.loads(sched.compile(_macro_app(), LocalOptions(), app_id="app-3").render())
    replica = plan["roles"][0]["replicas"][1]
    assert paths.replica_log("worker", 1) == str(run / replica["log"])
    status = sched.describe("app-3")
    assert status is not None
    assert status.roles[0].replicas[0].log == paths.replica_log("r", 0)
    # The request is not needed, and gives the same answer.
    request = sched.compile(_macro_app(), LocalOptions(), app_id="app-3")
    assert sched.job_paths("app-3", request) == paths
    with pytest.raises(UsageError):
        sched.job_paths("../app-3")


def test_capabilities() -> None:
    caps = LocalScheduler.capabilities
    assert caps.interactive, "run --wait streams the logs and cancels on Ctrl-C"
    assert caps.prunable, "runs live under the state dir"
    assert caps.image == "directory", "a role's image is the directory it runs in"
    assert caps.shared_files


def test_old_and_new_import_paths_name_one_backend() -> None:
    import importlib

    from distspec.schedulers._registry import BUILTIN_SCHEDULERS, SchedulerRegistry
    from distspec.schedulers.local.options import LocalOptions as Options

    old = importlib.import_module("distspec.schedulers.local_cwd")
    package = importlib.import_module("distspec.schedulers.local")
    assert old.LocalScheduler is package.LocalScheduler is LocalScheduler
    assert old.LocalOptions is package.LocalOptions is Options is LocalOptions
    assert BUILTIN_SCHEDULERS["local_cwd"] == "distspec.schedulers.local:LocalScheduler"
    assert SchedulerRegistry(use_entry_points=False).get("local_cwd") is LocalScheduler


def test_the_plan_is_the_compiled_request() -> None:
    from distspec.schedulers.local.plan import build_plan

    request = LocalScheduler("test").compile(_macro_app(), LocalOptions(), app_id=APP_ID)
    assert json.loads(request.render()) == build_plan(_macro_app(), LocalOptions(), app_id=APP_ID)
    assert request.argv == (
        "python3",
        "-m",
        "distspec.schedulers.local.supervisor",
        "--foreground",
        ".",
    )
