"""Python callables on local_cwd, with real processes: distspec.submit runs each
function under real torchrun (2 ranks, gloo) and reads the results back.

The functions are defined in this module, which is not installed, so they travel
by value (cloudpickle), as a notebook's would.
"""

from __future__ import annotations

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

import distspec
from distspec.callables import Job, pickle_call
from distspec.errors import CallableError, RemoteError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.runtime import Dist

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


@pytest.fixture(autouse=True)
def _state(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The replicas start in the current directory; this repository makes `tests`
    # importable there too (not needed: the functions go by value).
    monkeypatch.chdir(ROOT)
    return state_dir


def _until(cond: Callable[[], Any], what: str, limit: float = 120.0) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


def _job_processes(app_id: str) -> list[int]:
    """Live processes whose environment marks them as part of ``app_id``."""
    marker = f"DISTSPEC_APP_ID={app_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
            env = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 :][:1] in (b"Z", b"X"):
            continue
        if marker in env:
            found.append(int(name))
    return found


# ------------------------------------------------------------------ functions


def tensor_sum(dist: Dist) -> Any:
    import torch
    import torch.distributed as td

    t = torch.tensor([float(dist.rank + 1)])
    td.all_reduce(t, group=dist.group)
    return t


def fail_on_rank_1(x: int) -> int:
    from distspec.runtime import current

    if current().rank == 1:
        raise ValueError(f"bad value {x} on rank 1")
    return x


def killed_on_rank_1() -> str:
    from distspec.runtime import current

    if current().rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return "ok"


def sleep_and_record(directory: str) -> None:
    from distspec.runtime import current

    Path(directory, f"pid.{current().rank}").write_text(str(os.getpid()))
    time.sleep(600)


# ------------------------------------------------------------------ jobs


def test_lambda_returns_rank_0s_value() -> None:
    job = distspec.submit(lambda: 6 * 7, j="1x2")
    assert job.result() == 42
    assert job.status().state.value == "SUCCEEDED"


def test_closure_with_dist_gives_every_rank_in_order_and_per_rank_logs() -> None:
    offset = 100

    def rank_plus(dist: Dist, scale: int, *, label: str) -> tuple[str, int]:
        print(f"hello from rank {dist.rank}", flush=True)
        return label, offset + scale * dist.rank

    job = distspec.submit(rank_plus, 10, label="x", j="1x2")
    assert job.results() == [("x", 100), ("x", 110)]
    assert job.result() == ("x", 100)
    one = job.logs(rank=1)
    assert "hello from rank 1" in one
    assert "hello from rank 0" not in one
    assert "hello from rank 0" in job.logs()


def test_function_returning_a_tensor_after_an_all_reduce() -> None:
    import torch

    # groups, seed, timeout and backend all travel to the workers' init().
    job = distspec.submit(tensor_sum, j="1x2", seed=0, groups=[[0, 1]], timeout=60, backend="gloo")
    value = job.result()
    assert isinstance(value, torch.Tensor)
    assert value.tolist() == [3.0]


def test_exception_on_rank_1_is_raised_with_rank_and_remote_traceback() -> None:
    job = distspec.submit(fail_on_rank_1, 7, j="1x2")
    with pytest.raises(RemoteError) as info:
        job.result()
    err = info.value
    assert err.rank == 1
    assert err.type_name == "ValueError"
    assert err.remote_message == "bad value 7 on rank 1"
    assert err.host
    assert "fail_on_rank_1" in err.remote_traceback
    assert 'raise ValueError(f"bad value {x} on rank 1")' in err.remote_traceback
    assert "rank 1" in str(err) and "ValueError" in str(err)
    assert isinstance(err.exception, ValueError)
    # Chained, so a traceback print (a notebook's too) shows the worker's frames.
    assert err.__cause__ is not None and "fail_on_rank_1" in str(err.__cause__)
    assert isinstance(job.exception(), RemoteError)


def test_rank_killed_without_result_reports_exit_and_last_lines() -> None:
    job = distspec.submit(killed_on_rank_1, j="1x2")
    with pytest.raises(RemoteError) as info:
        job.result()
    err = info.value
    assert err.rank == 1
    assert err.type_name == ""
    assert err.exit_code not in (None, 0)
    assert "died without a result" in str(err)
    # torchrun's failure summary names the signal in the node's last lines.
    assert "SIGKILL" in err.remote_traceback or "Signal 9" in err.remote_traceback


def test_from_handle_in_a_new_process() -> None:
    job = distspec.submit(lambda: {"answer": 42}, j="1x2")
    code = (
        "import sys, distspec\n"
        "job = distspec.Job.from_handle(sys.argv[1])\n"
        "print(repr(job.result()), job.results())\n"
    )
    out = subprocess.run(
        [PYTHON, "-c", code, job.handle], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    assert out.strip() == "{'answer': 42} [{'answer': 42}, {'answer': 42}]"


def test_cancel_mid_run_leaves_no_process(tmp_path: Path) -> None:
    job = distspec.submit(sleep_and_record, str(tmp_path), j="1x2")
    app_id = job.handle.rsplit("/", 1)[1]
    pids = _until(
        lambda: (
            {int(p.read_text()) for p in tmp_path.glob("pid.*")}
            if len(list(tmp_path.glob("pid.*"))) == 2
            else None
        ),
        "both ranks to start",
    )
    assert all(pid in _job_processes(app_id) for pid in pids)
    job.cancel()
    assert job.status().state.value == "CANCELLED"
    assert _job_processes(app_id) == []
    with pytest.raises(RemoteError, match="cancelled"):
        job.result()


def test_ctrl_c_while_waiting_cancels_the_job(tmp_path: Path) -> None:
    code = (
        "import os, sys, time\n"
        "import distspec\n"
        "def sleeper(directory):\n"
        "    from distspec.runtime import current\n"
        "    with open(os.path.join(directory, f'pid.{current().rank}'), 'w') as f:\n"
        "        f.write(str(os.getpid()))\n"
        "    time.sleep(600)\n"
        "job = distspec.submit(sleeper, sys.argv[1], j='1x2')\n"
        "print(job.handle, flush=True)\n"
        "job.result()\n"
    )
    proc = subprocess.Popen(
        [PYTHON, "-c", code, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        handle = proc.stdout.readline().strip()
        app_id = handle.rsplit("/", 1)[1]
        _until(lambda: len(list(tmp_path.glob("pid.*"))) == 2, "both ranks to start")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert f"distspec: cancelling {handle}" in err
    assert "KeyboardInterrupt" in err
    assert _job_processes(app_id) == []
    assert Job.from_handle(handle).status().state.value == "CANCELLED"


def test_decorator_call_and_submit() -> None:
    @distspec.distributed(j="1x2")
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5
    job = add.submit(4, b=5)
    assert isinstance(job, Job)
    assert job.results() == [9, 9]


def test_cli_dist_fn_runs_an_importable_function() -> None:
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "distspec",
            "run",
            "--wait",
            "dist.fn",
            "-j",
            "1x2",
            "--fn",
            "tests.callables_app:join_words",
            "--",
            "a",
            "b",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.split()[0]
    log = subprocess.run(
        [PYTHON, "-m", "distspec", "log", handle],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=60,
    ).stdout
    assert "distspec: rank 0 returned 'a-b-2'" in log


# ------------------------------------------------------------------ no job


class _NoPickle:
    def __reduce__(self) -> Any:
        raise TypeError("not today")


def test_unpicklable_argument_is_refused_before_submitting(state_dir: Path) -> None:
    with pytest.raises(CallableError, match=r"keyword argument 'x' \(_NoPickle\)"):
        distspec.submit(lambda x: x, x=_NoPickle(), j="1x2")
    assert not (state_dir / "local_cwd").exists()


def test_unpicklable_function_names_the_function() -> None:
    lock = __import__("threading").Lock()
    with pytest.raises(CallableError, match="the function"):
        pickle_call(lambda: lock, (), {})


def test_dryrun_shows_what_a_callable_submits() -> None:
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "distspec",
            "run",
            "--dryrun",
            "--json",
            "dist.fn",
            "-j",
            "1x2",
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    plan = json.loads(json.loads(proc.stdout)["files"]["plan.json"])
    argv = plan["roles"][0]["replicas"][0]["argv"]
    assert argv[0] == "torchrun"
    assert argv[argv.index("-m") + 1 :] == ["distspec.runtime.call", "--seed", "3"]


def test_import_distspec_stays_cheap() -> None:
    code = (
        "import sys, distspec\n"
        "bad = [m for m in ('distspec.callables', 'cloudpickle', 'torch', 'inspect') "
        "if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_peer_caused_failures() -> None:
    from distspec.callables import _peer_caused

    sig = "torch.distributed.elastic.multiprocessing.api.SignalException"
    assert _peer_caused({"phase": "finish", "type": "RuntimeError"})
    assert _peer_caused({"phase": "init", "type": "RuntimeError"})
    assert _peer_caused({"phase": "call", "type": sig})
    assert not _peer_caused({"phase": "call", "type": "ValueError"})
    assert not _peer_caused({"phase": "load", "type": "ModuleNotFoundError"})
