"""Cancelling many Slurm jobs with one ``scancel A B ...`` (Scheduler.cancel_many), and a
sweep's cancel using it: a sweep split into arrays is one scancel, not one per array.
Against a recording command runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from distspec.components.loader import load
from distspec.errors import SchedulerError, UsageError
from distspec.runner import Runner
from distspec.schedulers.api import Scheduler
from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppState, AppStatus
from distspec.sweep.plan import plan_sweep
from distspec.sweep.spec import parse
from distspec.sweep.submit import submit_sweep
from tests.conftest import FakeCommands

DONE = "scancel: error: Kill job error on job id {}: Job/step already completing or completed\n"


@pytest.fixture
def sched(fake_commands: FakeCommands, tmp_path: Path) -> SlurmScheduler:
    return SlurmScheduler(run_cmd=fake_commands, state_dir=tmp_path / "state")


def test_many_jobs_are_one_scancel(sched: SlurmScheduler, fake_commands: FakeCommands) -> None:
    fake_commands.on("scancel")
    sched.cancel_many(["12", "13_4", "14"])
    assert fake_commands.calls == [("scancel", "12", "13_4", "14")]


def test_jobs_that_already_ended_are_no_error(
    sched: SlurmScheduler, fake_commands: FakeCommands
) -> None:
    fake_commands.on("scancel", returncode=1, stderr=DONE.format(12) + DONE.format(14))
    sched.cancel_many(["12", "13", "14"])
    assert fake_commands.calls == [("scancel", "12", "13", "14")]


def test_any_other_error_is_raised(sched: SlurmScheduler, fake_commands: FakeCommands) -> None:
    denied = "scancel: error: Kill job error on job id 13: Access/permission denied\n"
    fake_commands.on("scancel", returncode=1, stderr=DONE.format(12) + denied)
    with pytest.raises(SchedulerError, match="permission"):
        sched.cancel_many(["12", "13"])
    fake_commands.on("scancel", returncode=1)  # failed and said nothing
    with pytest.raises(SchedulerError, match="scancel failed"):
        sched.cancel_many(["12", "13"])


def test_a_bad_id_cancels_nothing(sched: SlurmScheduler, fake_commands: FakeCommands) -> None:
    with pytest.raises(UsageError, match="job ids"):
        sched.cancel_many(["12", "12; rm -rf /"])
    sched.cancel_many([])
    assert fake_commands.calls == []


def test_thousands_of_ids_are_split_and_every_chunk_is_tried(
    sched: SlurmScheduler, fake_commands: FakeCommands
) -> None:
    ids = [str(1000 + i) for i in range(1201)]
    fake_commands.on("scancel", returncode=1, stderr="scancel: error: Access/permission denied\n")
    fake_commands.on("scancel")
    fake_commands.on("scancel")
    with pytest.raises(SchedulerError, match="permission"):
        sched.cancel_many(ids)
    assert [c[0] for c in fake_commands.calls] == ["scancel"] * 3
    assert [i for c in fake_commands.calls for i in c[1:]] == ids
    assert max(len(c) - 1 for c in fake_commands.calls) <= 500


def test_the_default_cancels_one_by_one(tmp_path: Path) -> None:
    cancelled: list[str] = []

    class OneByOne(SlurmScheduler):
        def cancel(self, app_id: str) -> None:
            cancelled.append(app_id)

    Scheduler.cancel_many(OneByOne(state_dir=tmp_path), ["7", "8", "9_1"])
    assert cancelled == ["7", "8", "9_1"]


# -- a sweep's cancel through the Runner ---------------------------------------------


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _submit(
    fake: FakeCommands, max_array: int | None, args: list[str], defs: list[str], jobs: list[str]
) -> tuple[Runner, str]:
    """A Runner and the handle of the sweep it submitted (sbatch printing ``jobs``)."""
    runner = Runner(run_cmd=fake)
    sched = runner.scheduler("slurm")
    sched.max_array_size = lambda opts: max_array  # type: ignore[method-assign]
    req = plan_sweep(runner, load("dist.ddp"), args, parse(defs), "slurm", {"snapshot": "off"})
    for job in jobs:
        fake.on("sbatch", stdout=job + "\n")
    return runner, submit_sweep(runner, req).handle


def test_a_sweep_split_into_arrays_is_cancelled_by_one_scancel(
    work: Path, fake_commands: FakeCommands
) -> None:
    args = ["-j", "1x2", "--script", "train.py", "--", "--lr", "{{lr}}"]
    defs = ["lr=0.1,0.2,0.3,0.4,0.5"]
    runner, handle = _submit(fake_commands, 2, args, defs, ["100", "101", "102"])
    fake_commands.calls.clear()
    fake_commands.on("scancel")
    runner.cancel(handle)
    assert fake_commands.calls == [("scancel", "100", "101", "102")]


def test_a_sweep_of_single_jobs_cancels_those_not_ended_by_one_scancel(
    work: Path, fake_commands: FakeCommands
) -> None:
    args = ["-j", "{{n}}x1", "--script", "train.py"]
    runner, handle = _submit(fake_commands, None, args, ["n=1,2,3"], ["200", "201", "202"])
    sched = runner.scheduler("slurm")
    states = {"200": AppState.RUNNING, "201": AppState.SUCCEEDED, "202": AppState.PENDING}

    def describe_many(ids: list[str]) -> dict[str, AppStatus | None]:
        return {i: AppStatus(state=states[i]) for i in ids}

    sched.describe_many = describe_many  # type: ignore[method-assign,assignment]
    fake_commands.calls.clear()
    fake_commands.on("scancel")
    runner.cancel(handle)
    assert fake_commands.calls == [("scancel", "200", "202")]
