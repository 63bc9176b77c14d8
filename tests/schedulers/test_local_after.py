"""local_cwd dependencies (``run --after``) with real runs: the waiting run's supervisor
starts nothing until the runs it depends on have ended as asked, and ends CANCELLED
("dependency X ended STATE: never ran") when one did not.

Runs that must still be going while something is checked wait on a gate file rather
than sleeping, so no check depends on timing.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from distspec.errors import CompileError, UsageError
from distspec.runner import Runner, new_app_id
from distspec.schedulers.api import Dependency
from distspec.schedulers.local.processes import is_alive
from distspec.schedulers.local.scheduler import LocalOptions, LocalScheduler
from distspec.specs import AppDef, AppState, Role
from distspec.specs.handles import AppHandle

pytestmark = pytest.mark.timeout(120)

LOCAL = "local_cwd"


def _app(name: str, script: str) -> AppDef:
    return AppDef(name=name, roles=(Role(name=name, entrypoint="sh", args=("-c", script)),))


def _gated(gate: Path, rc: int = 0) -> str:
    """A script that runs until ``gate`` exists, then exits with ``rc`` (at most 120 s: a
    test that fails before it opens the gate leaves nothing running for long)."""
    return (
        f"i=0; while [ ! -e {gate} ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done; "
        f"exit {rc}"
    )


def _after(runner: Runner, app: AppDef, *deps: tuple[AppHandle, str]) -> AppHandle:
    """Submit ``app`` to wait for ``deps`` (handle, condition), as ``run --after`` does."""
    sched = runner.scheduler(LOCAL)
    request = sched.compile(
        app,
        runner.options(LOCAL),
        app_id=new_app_id(app.name),
        after=[Dependency(h.app_id, cond) for h, cond in deps],
    )
    return runner.submit(request)


def _state(state_dir: Path, handle: AppHandle) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (state_dir / LOCAL / handle.app_id / "state.json").read_text()
    )
    return data


def _wait_until(cond: Callable[[], Any], what: str, limit: float = 30.0) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


def _never_started(state_dir: Path, handle: AppHandle, reason: str) -> None:
    """Every replica of ``handle`` ended CANCELLED with ``reason`` and no attempt; its
    supervisor is gone."""
    data = _state(state_dir, handle)
    assert data["ended"] is not None
    for role in data["roles"]:
        for rep in role["replicas"]:
            assert (rep["state"], rep["attempt"], rep["started"], rep["pid"]) == (
                "CANCELLED",
                0,
                None,
                None,
            )
            assert rep["reason"] == reason
    info = data["supervisor"]
    _wait_until(lambda: not is_alive(info["pid"], info["starttime"]), "the supervisor's exit")
    assert not list((state_dir / LOCAL / handle.app_id / "logs").iterdir())


def _pending(runner: Runner, handle: AppHandle, msg: str) -> None:
    status = runner.status(handle)
    assert (status.state, status.msg) == (AppState.PENDING, msg)
    assert status.started is None


# -- the plan --------------------------------------------------------------------------


def test_the_dry_run_plan_shows_the_dependencies(tmp_path: Path) -> None:
    sched = LocalScheduler("test", state_dir=tmp_path / "state")
    deps = (Dependency("a-1"), Dependency("b-2", "failed"))
    request = sched.compile(_app("c", "true"), LocalOptions(), app_id="c-3", after=deps)
    plan = json.loads(request.render())
    root = os.path.abspath(tmp_path / "state" / LOCAL)
    assert plan["after"] == [
        {"app_id": "a-1", "run_dir": f"{root}/a-1", "condition": "ok"},
        {"app_id": "b-2", "run_dir": f"{root}/b-2", "condition": "failed"},
    ]
    assert request.after == deps
    assert list(plan) == ["version", "app_id", "app_name", "options", "after", "roles"]
    alone = sched.compile(_app("c", "true"), LocalOptions(), app_id="c-3")
    assert "after" not in json.loads(alone.render()) and alone.after == ()
    assert LocalScheduler.capabilities.dependencies


def test_a_bad_dependency_is_a_usage_error(tmp_path: Path) -> None:
    sched = LocalScheduler("test", state_dir=tmp_path / "state")
    with pytest.raises(CompileError, match="unknown condition 'done'"):
        sched.compile(
            _app("c", "true"), LocalOptions(), app_id="c", after=[Dependency("a", "done")]
        )
    with pytest.raises(UsageError, match="invalid local_cwd app id"):
        sched.compile(_app("c", "true"), LocalOptions(), app_id="c", after=[Dependency("../a")])


# -- real runs -------------------------------------------------------------------------


def test_b_waits_for_a_then_runs_after_it(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    gate = tmp_path / "gate"
    a = runner.run(_app("a", _gated(gate)), LOCAL)
    b = _after(runner, _app("b", f"touch {tmp_path}/b-ran"), (a, "ok"))
    # submit returned while A still runs: B says what it waits for, and started nothing
    assert runner.status(a).state is AppState.RUNNING
    _pending(runner, b, f"waiting for {a.app_id} to end (after ok)")
    assert not (tmp_path / "b-ran").exists()
    gate.touch()
    status = runner.wait(b, timeout=60)
    assert status.state is AppState.SUCCEEDED, status.msg
    assert (tmp_path / "b-ran").exists()
    a_ended = _state(state_dir, a)["ended"]
    b_started = _state(state_dir, b)["roles"][0]["replicas"][0]["started"]
    assert a_ended <= b_started, "B started before A had ended"


def test_b_never_runs_after_a_failed(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    a = runner.run(_app("a", "sleep 0.5; exit 3"), LOCAL)
    b = _after(runner, _app("b", f"touch {tmp_path}/b-ran"), (a, "ok"))
    status = runner.wait(b, timeout=60)
    why = f"dependency {a.app_id} ended FAILED: never ran"
    assert (status.state, status.msg) == (AppState.CANCELLED, why)
    assert runner.status(a).state is AppState.FAILED
    assert not (tmp_path / "b-ran").exists()
    _never_started(state_dir, b, why)


def test_any_runs_after_a_failure(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    gate = tmp_path / "gate"
    a = runner.run(_app("a", _gated(gate, rc=5)), LOCAL)
    b = _after(runner, _app("b", "echo b ran"), (a, "any"))
    _pending(runner, b, f"waiting for {a.app_id} to end (after any)")
    gate.touch()
    assert runner.wait(b, timeout=60).state is AppState.SUCCEEDED
    assert runner.status(a).state is AppState.FAILED
    assert [line.text for line in runner.log_lines(b)] == ["b ran"]


def test_failed_runs_only_after_a_failure(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    bad = runner.run(_app("bad", "sleep 0.3; exit 1"), LOCAL)
    good = runner.run(_app("good", "sleep 0.3"), LOCAL)
    on_bad = _after(runner, _app("onbad", f"touch {tmp_path}/on-bad"), (bad, "failed"))
    on_good = _after(runner, _app("ongood", f"touch {tmp_path}/on-good"), (good, "failed"))
    assert runner.wait(on_bad, timeout=60).state is AppState.SUCCEEDED
    assert (tmp_path / "on-bad").exists()
    status = runner.wait(on_good, timeout=60)
    why = f"dependency {good.app_id} ended SUCCEEDED: never ran"
    assert (status.state, status.msg) == (AppState.CANCELLED, why)
    assert not (tmp_path / "on-good").exists()
    _never_started(state_dir, on_good, why)


def test_cancelling_a_waiting_run(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    gate = tmp_path / "gate"
    a = runner.run(_app("a", _gated(gate)), LOCAL)
    b = _after(runner, _app("b", f"touch {tmp_path}/b-ran"), (a, "ok"))
    _pending(runner, b, f"waiting for {a.app_id} to end (after ok)")
    runner.cancel(b)
    status = runner.status(b)
    assert (status.state, status.msg) == (AppState.CANCELLED, "cancel requested")
    _never_started(state_dir, b, "cancelled before it started")
    assert runner.status(a).state is AppState.RUNNING, "cancelling B leaves A alone"
    gate.touch()
    assert runner.wait(a, timeout=60).state is AppState.SUCCEEDED
    time.sleep(0.3)  # B's supervisor is gone: nothing of B can start now; make sure
    assert not (tmp_path / "b-ran").exists()
    assert runner.status(b).state is AppState.CANCELLED


def test_a_dependency_that_already_ended(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    a = runner.run(_app("a", "true"), LOCAL)
    assert runner.wait(a, timeout=60).state is AppState.SUCCEEDED
    ok = _after(runner, _app("ok", "echo ran"), (a, "ok"))
    never = _after(runner, _app("never", "echo ran"), (a, "failed"))
    assert runner.wait(ok, timeout=60).state is AppState.SUCCEEDED
    status = runner.wait(never, timeout=60)
    why = f"dependency {a.app_id} ended SUCCEEDED: never ran"
    assert (status.state, status.msg) == (AppState.CANCELLED, why)
    _never_started(state_dir, never, why)


def test_two_dependencies(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    gate1, gate2 = tmp_path / "gate1", tmp_path / "gate2"
    a1 = runner.run(_app("a", _gated(gate1)), LOCAL)
    a2 = runner.run(_app("a", _gated(gate2, rc=2)), LOCAL)
    b = _after(runner, _app("b", "echo b ran"), (a1, "ok"), (a2, "any"))
    _pending(runner, b, f"waiting for {a1.app_id} to end (after ok), {a2.app_id} (after any)")
    gate1.touch()
    assert runner.wait(a1, timeout=60).state is AppState.SUCCEEDED
    wanted = f"waiting for {a2.app_id} to end (after any)"
    _wait_until(lambda: runner.status(b).msg == wanted, "B to wait for A2 alone")
    _pending(runner, b, wanted)
    gate2.touch()
    assert runner.wait(b, timeout=60).state is AppState.SUCCEEDED
    b_started = _state(state_dir, b)["roles"][0]["replicas"][0]["started"]
    assert max(_state(state_dir, a)["ended"] for a in (a1, a2)) <= b_started


def test_one_unmet_dependency_ends_the_wait_at_once(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    gate = tmp_path / "gate"
    slow = runner.run(_app("slow", _gated(gate)), LOCAL)
    bad = runner.run(_app("bad", "exit 1"), LOCAL)
    b = _after(runner, _app("b", "true"), (slow, "ok"), (bad, "ok"))
    status = runner.wait(b, timeout=60)
    assert status.msg == f"dependency {bad.app_id} ended FAILED: never ran"
    assert runner.status(slow).state is AppState.RUNNING
    gate.touch()
    runner.wait(slow, timeout=60)


@pytest.mark.parametrize(("condition", "runs"), [("ok", False), ("any", True)])
def test_a_pruned_dependency(state_dir: Path, tmp_path: Path, condition: str, runs: bool) -> None:
    runner = Runner()
    a = runner.run(_app("a", "true"), LOCAL)
    runner.wait(a, timeout=60)
    sched = runner.scheduler(LOCAL)
    # prune leaves a run whose supervisor is still exiting: ask until it is gone
    _wait_until(lambda: [s.app_id for s in sched.prune()] == [a.app_id], "a pruned")
    b = _after(runner, _app("b", "true"), (a, condition))
    status = runner.wait(b, timeout=60)
    if runs:  # prune removes ended runs only: it ended, in some way
        assert status.state is AppState.SUCCEEDED
    else:
        why = f"dependency {a.app_id} ended UNKNOWN (no record of it is left): never ran"
        assert (status.state, status.msg) == (AppState.CANCELLED, why)


def test_a_dependency_whose_supervisor_died(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    a = runner.run(_app("a", _gated(tmp_path / "gate")), LOCAL)
    b = _after(runner, _app("b", "true"), (a, "ok"))
    _pending(runner, b, f"waiting for {a.app_id} to end (after ok)")
    os.kill(_state(state_dir, a)["supervisor"]["pid"], signal.SIGKILL)
    # Its alive.fifo hangs up: B reads A's record, finds its supervisor gone.
    status = runner.wait(b, timeout=60)
    assert (status.state, status.msg) == (
        AppState.CANCELLED,
        f"dependency {a.app_id} ended FAILED: never ran",
    )
    assert runner.status(a).state is AppState.FAILED


def test_a_chain_waits_link_by_link(state_dir: Path, tmp_path: Path) -> None:
    runner = Runner()
    gate = tmp_path / "gate"
    a = runner.run(_app("a", _gated(gate)), LOCAL)
    b = _after(runner, _app("b", "true"), (a, "ok"))
    c = _after(runner, _app("c", "true"), (b, "ok"))
    _pending(runner, c, f"waiting for {b.app_id} to end (after ok)")
    gate.touch()
    assert runner.wait(c, timeout=60).state is AppState.SUCCEEDED
    times: Sequence[float] = [
        _state(state_dir, h)["roles"][0]["replicas"][0]["started"] for h in (a, b, c)
    ]
    assert list(times) == sorted(times)
    assert _state(state_dir, b)["ended"] <= times[2]
