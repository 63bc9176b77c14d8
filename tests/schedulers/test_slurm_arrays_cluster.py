"""Job arrays and dependencies on the real local two-node Slurm cluster
(scripts/slurm-cluster): each point with its own values, a point's status, log and
cancel, afterok chains, MaxArraySize.

Mode-agnostic tests use the cluster in whatever accounting mode it is in; the two
mode-specific ones come last and ask for theirs (switching restarts every daemon).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from distspec.errors import CompileError, SchedulerError
from distspec.schedulers.api import Dependency, Points
from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppDef, AppState, AppStatus, Role
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = pytest.mark.slurm


@pytest.fixture
def cluster() -> None:
    """The cluster up in either accounting mode, or a skip with the reason."""
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()


def _until(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.3)


def _bash(name: str, script: str, *args: str, env: dict[str, str] | None = None) -> AppDef:
    """A one-node, one-role app that runs ``bash -c script x args...``."""
    return AppDef(
        name=name,
        roles=(Role(name="r", entrypoint="bash", args=("-c", script, "x", *args), env=env or {}),),
    )


def _sched(state_dir: Path) -> SlurmScheduler:
    return SlurmScheduler(state_dir=state_dir)


def _terminal(sched: SlurmScheduler, ids: list[str]) -> dict[str, AppStatus | None]:
    found: dict[str, AppStatus | None] = {}

    def done() -> bool:
        found.update(sched.describe_many(ids))
        return all(s is not None and s.is_terminal for s in found.values())

    _until(done, f"{ids} to end")
    return found


def _squeue_running(array_id: str) -> int:
    """How many tasks of the array Slurm runs now (from squeue, not from distspec)."""
    out = subprocess.run(
        ["squeue", "--noheader", "--array", "--jobs", array_id, "--states=RUNNING", "--format=%i"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return len(out.split())


def test_an_array_runs_each_point_with_its_own_values_at_most_k_at_once(
    cluster: None, state_dir: Path, tmp_path: Path
) -> None:
    values = ("plain", "two words", "it's $HOME", 'a "q" `x`')
    app = _bash(
        "arr",
        'echo "arg=<$1> env=<$V> index=<$DISTSPEC_SWEEP_INDEX> id=<$2>"; sleep 2',
        "{{v}}",
        "${app_id}",
        env={"V": "[{{v}}]"},
    )
    sched = _sched(state_dir)
    opts = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    points = Points(names=("v",), values=tuple((v,) for v in values), first=3, max_parallel=2)
    req = sched.compile_array(app, opts, app_id="arr-t", points=points)
    array_id = sched.submit(req)
    assert array_id.isdigit()
    ids = [sched.point_id(array_id, req, i) for i in range(3, 7)]
    assert ids == [f"{array_id}_{k}" for k in range(4)]
    most = 0
    found: dict[str, AppStatus | None] = {}

    def done() -> bool:
        nonlocal most
        most = max(most, _squeue_running(array_id))
        found.update(sched.describe_many(ids))
        return all(s is not None and s.is_terminal for s in found.values())

    _until(done, "the array's tasks to end")
    assert 1 <= most <= 2, f"{most} tasks ran at once with %2"
    assert [s.state if s else None for s in found.values()] == [AppState.SUCCEEDED] * 4
    for k, value in enumerate(values):
        lines = list(sched.log_iter(ids[k], "r", 0))
        assert lines == [f"arg=<{value}> env=<[{value}]> index=<{3 + k}> id=<{ids[k]}>"], lines
        paths = sched.job_paths(ids[k])
        assert paths is not None and paths.folder == str(tmp_path / "jobs" / f"arr-{ids[k]}")
        assert Path(paths.script_output or "").exists()
    whole = sched.describe(array_id)
    assert whole is not None and whole.state is AppState.SUCCEEDED, whole


def test_a_point_has_its_own_status_log_and_cancel(
    cluster: None, state_dir: Path, tmp_path: Path
) -> None:
    app = _bash("pt", 'echo "point $1 up"; exec sleep 300', "{{n}}")
    sched = _sched(state_dir)
    opts = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    points = Points(names=("n",), values=(("0",), ("1",), ("2",)))
    req = sched.compile_array(app, opts, app_id="pt-t", points=points)
    array_id = sched.submit(req)
    first, second, third = (f"{array_id}_{k}" for k in range(3))
    try:

        def started() -> bool:
            return list(sched.log_iter(first, "r", 0)) == ["point 0 up"]

        _until(started, "task 0's log")
        status = sched.describe(first)
        assert status is not None and status.state is AppState.RUNNING
        assert status.roles[0].replicas[0].hostname in {"n0", "n1"}
        # Another state dir (no record): the folder comes from what Slurm reports.
        stranger = SlurmScheduler(state_dir=tmp_path / "other")
        paths = stranger.job_paths(first)
        assert paths is not None and paths.folder == str(tmp_path / "jobs" / f"pt-{first}")
        sched.cancel(second)
        _until(
            lambda: (sched.describe(second) or status).state is AppState.CANCELLED,
            "the cancelled point",
        )
        others = sched.describe_many([first, third])
        assert all(s is not None and not s.is_terminal for s in others.values()), others
    finally:
        sched.cancel(array_id)  # the whole array: every task
    found = _terminal(sched, [first, second, third])
    assert [s.state if s else None for s in found.values()] == [AppState.CANCELLED] * 3


def test_a_job_after_a_failed_job_is_cancelled_not_left_pending(
    cluster: None, state_dir: Path, tmp_path: Path
) -> None:
    sched = _sched(state_dir)
    opts = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    marker = tmp_path / "b-ran"
    a = sched.submit(sched.compile(_bash("a", "sleep 1; exit 3"), opts, app_id="a-t"))
    b_req = sched.compile(
        _bash("b", f"touch {marker}"), opts, app_id="b-t", after=(Dependency(a, "ok"),)
    )
    b = sched.submit(b_req)
    pending = sched.describe(b)
    assert pending is not None and pending.state is AppState.PENDING, pending
    assert "Dependency" in pending.msg, pending.msg
    found = _terminal(sched, [a, b])
    assert found[a] is not None and found[a].state is AppState.FAILED
    status = found[b]
    assert status is not None and status.state is AppState.CANCELLED, status
    assert not marker.exists()


def test_a_job_after_a_successful_one_starts_after_it(
    cluster: None, state_dir: Path, tmp_path: Path
) -> None:
    sched = _sched(state_dir)
    opts = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    stamps = tmp_path / "stamps"
    a = sched.submit(
        sched.compile(_bash("a", f"sleep 2; date +%s.%N > {stamps}.a"), opts, app_id="a-t")
    )
    # A second dependency on an array task (1234_0) and one that has ended in any way.
    arr_req = sched.compile_array(
        _bash("arr", "exit {{code}}"),
        opts,
        app_id="arr-t",
        points=Points(names=("code",), values=(("0",), ("1",))),
    )
    arr = sched.submit(arr_req)
    after = (Dependency(a, "ok"), Dependency(f"{arr}_0", "ok"), Dependency(f"{arr}_1", "failed"))
    b = sched.submit(
        sched.compile(_bash("b", f"date +%s.%N > {stamps}.b"), opts, app_id="b-t", after=after)
    )
    found = _terminal(sched, [a, b])
    assert [s.state if s else None for s in found.values()] == [AppState.SUCCEEDED] * 2
    assert float(Path(f"{stamps}.b").read_text()) >= float(Path(f"{stamps}.a").read_text())
    tasks = sched.describe_many([f"{arr}_0", f"{arr}_1"])
    assert [s.state if s else None for s in tasks.values()] == [
        AppState.SUCCEEDED,
        AppState.FAILED,
    ]


def test_max_array_size_is_the_clusters_and_bounds_one_array(
    cluster: None, state_dir: Path, tmp_path: Path
) -> None:
    sched = _sched(state_dir)
    opts = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    size = sched.max_array_size(opts)
    config = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, check=True
    ).stdout
    line = next(x for x in config.splitlines() if x.startswith("MaxArraySize"))
    assert size == int(line.split("=")[1])
    assert size is not None
    app = _bash("big", "true")

    def points(n: int) -> Points:
        return Points(names=("i",), values=tuple((str(i),) for i in range(n)))

    with pytest.raises(CompileError, match=f"MaxArraySize is {size}"):
        sched.compile_array(app, opts, app_id="big-t", points=points(size + 1))
    if size > 64:
        return  # a cluster brought up with a big value (a benchmark): no need to run it
    # The limit is Slurm's: exactly MaxArraySize tasks are taken, one more is not (compiled
    # by a scheduler that has not read the limit, so that sbatch judges it).
    full = sched.submit(sched.compile_array(app, opts, app_id="big-t", points=points(size)))
    naive = _sched(state_dir)
    over = naive.compile_array(app, opts, app_id="over-t", points=points(size + 1))
    with pytest.raises(SchedulerError, match="sbatch"):
        naive.submit(over)
    found = _terminal(sched, [f"{full}_0", f"{full}_{size - 1}"])
    assert all(s is not None and s.state is AppState.SUCCEEDED for s in found.values())


def _whole_array_status(state_dir: Path, tmp_path: Path) -> list[list[list[str]]]:
    """A 6-point array's statuses by describe_many until all ended: right states, and
    each call one query of the whole array (two while slurmdbd lags: then the
    controller too), none once every task has ended. Returns each call's commands."""
    from distspec.schedulers.api import CommandResult, run_command

    calls: list[list[str]] = []

    def recording(argv: Sequence[str], **kwargs: Any) -> CommandResult:
        calls.append(list(argv))
        return run_command(argv, **kwargs)

    sched = SlurmScheduler(state_dir=state_dir, run_cmd=recording)
    opts = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    # Three at once, so that some tasks wait as one pending range for a while.
    codes = (("0",), ("4",), ("0",), ("0",), ("0",), ("0",))
    points = Points(names=("c",), values=codes, max_parallel=3)
    req = sched.compile_array(_bash("many", "exit {{c}}"), opts, app_id="many-t", points=points)
    array_id = sched.submit(req)
    ids = [f"{array_id}_{k}" for k in range(6)]
    polls: list[list[list[str]]] = []
    found: dict[str, AppStatus | None] = {}

    def done() -> bool:
        calls.clear()
        found.update(sched.describe_many(ids))
        polls.append(list(calls))
        return all(s is not None and s.is_terminal for s in found.values())

    _until(done, "the array's tasks to end")
    assert [s.state if s else None for s in found.values()] == [
        AppState.SUCCEEDED,
        AppState.FAILED,
        *[AppState.SUCCEEDED] * 4,
    ]
    failed = found[ids[1]]
    assert failed is not None and failed.roles[0].replicas[0].exit_code == 4
    for poll in polls:
        assert 1 <= len(poll) <= 2 and all(array_id in argv for argv in poll), poll
        assert not any(task in argv for argv in poll for task in ids), poll
    calls.clear()
    again = SlurmScheduler(state_dir=state_dir, run_cmd=recording).describe_many(ids)
    assert again == found and calls == []  # every task ended: kept in the state dir
    return polls


def test_describe_many_with_accounting(state_dir: Path, tmp_path: Path) -> None:
    require_slurm_cluster(accounting=True)
    polls = _whole_array_status(state_dir, tmp_path)
    assert polls[-1][0][0] == "sacct" and "--allocations" in polls[-1][0]


def test_describe_many_without_accounting(state_dir: Path, tmp_path: Path) -> None:
    require_slurm_cluster(accounting=False)
    polls = _whole_array_status(state_dir, tmp_path)
    # The first call learns that sacct does not answer; then one scontrol per call.
    assert all(p[-1][:3] == ["scontrol", "show", "job"] for p in polls), polls
    assert all(len(p) == 1 for p in polls[1:]), polls
