"""``distspec.map`` and ``submit(after=...)``: on local_cwd with real processes (one job
per item, max_parallel kept by dependencies), on Slurm through a recording command
runner (one array per MaxArraySize items, each item's payload in its task's folder),
and the bad arguments (one line, nothing submitted).

The functions are defined in this module, which is not installed, so they travel by
value (cloudpickle), as a notebook's would.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from pathlib import Path

import cloudpickle
import pytest

import distspec
from distspec.callables import compile_call
from distspec.errors import ArgumentError, CallableError, RemoteError, UsageError
from distspec.runner import Runner
from distspec.runtime.call_protocol import read_bytes
from distspec.specs.state import AppState
from tests.conftest import FakeCommands
from tests.k8s_apiserver import require_apiserver
from tests.slurm_cluster import require_slurm_cluster

ROOT = Path(__file__).resolve().parents[1]
#: The environment before the state_dir fixture gives each test a HOME of its own:
#: scripts/k8s-apiserver finds its build under the real one.
_ENV = dict(os.environ)


@pytest.fixture(autouse=True)
def _state(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(ROOT)
    return state_dir


def square_plus_one(x: int) -> int:
    return x * x + 1


def ten_over(x: int) -> int:
    return 10 // x


def loud_ten_over(x: int) -> int:
    print(f"item {x} here", flush=True)
    return 10 // x


def started_at(_: object = None) -> float:
    return time.time()


def slow_then_time() -> float:
    time.sleep(3)
    return time.time()


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one time (an end at t closes before a start at t)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _runs(state_dir: Path) -> list[str]:
    root = state_dir / "local_cwd"
    return sorted(os.listdir(root)) if root.exists() else []


# ------------------------------------------------------------------ local_cwd, real


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_map_20_items_at_most_3_at_once_in_input_order() -> None:
    items = list(range(20))
    jobs = distspec.map(square_plus_one, items, j="1x1", max_parallel=3)
    assert len(jobs) == 20
    assert [job.result(timeout=1000) for job in jobs] == [x * x + 1 for x in items]
    statuses = [job.status() for job in jobs]
    spans = [(s.started, s.ended) for s in statuses]
    assert all(a is not None and b is not None for a, b in spans), spans
    most = _max_overlap(spans)  # type: ignore[arg-type]
    assert 2 <= most <= 3, spans
    # The jobs form one sweep, whose handle distspec status takes.
    sweep = jobs[0].sweep
    assert sweep is not None and all(job.sweep == sweep for job in jobs)
    assert Runner().status(sweep).state is AppState.SUCCEEDED
    # Each item's Job re-attaches from its handle, sweep and all.
    again = distspec.Job.from_handle(jobs[7].handle)
    assert again.result() == 50 and again.sweep == sweep


@pytest.mark.slow
def test_a_failing_item_raises_its_remote_error_and_the_others_give_results() -> None:
    jobs = distspec.map(ten_over, [5, 0, 2], j="1x1")
    assert jobs[0].result(timeout=600) == 2
    assert jobs[2].result(timeout=600) == 5
    with pytest.raises(RemoteError) as info:
        jobs[1].result(timeout=600)
    assert info.value.type_name == "ZeroDivisionError"
    assert isinstance(jobs[1].exception(), RemoteError)
    assert jobs[0].exception() is None
    assert Runner().status(jobs[0].sweep or "").state is AppState.FAILED


@pytest.mark.slow
def test_submit_after_starts_once_the_first_has_ended() -> None:
    first = distspec.submit(slow_then_time, j="1x1")
    second = distspec.submit(started_at, j="1x1", after=first)
    never = distspec.submit(started_at, j="1x1", after=f"{first.handle}:failed")
    began = second.result(timeout=600)
    ended = first.status().ended
    assert ended is not None and began > ended
    assert first.result() < began
    second_started = second.status().started
    assert second_started is not None and second_started >= ended
    # A dependency that can never be met ends the waiting job, nothing run.
    assert never.wait(timeout=600).state is AppState.CANCELLED
    with pytest.raises(RemoteError, match="cancelled"):
        never.result()


def test_compile_call_shows_the_dependency(state_dir: Path) -> None:
    first = distspec.submit(slow_then_time, j="1x1")
    try:
        call = compile_call(started_at, j="1x1", after=[f"{first.handle}:any"])
        assert call.request.after[0].app_id == first.handle.rsplit("/", 1)[1]
        assert call.request.after[0].condition == "any"
        assert '"condition": "any"' in call.request.render()
    finally:
        first.cancel()


# ------------------------------------------------------------------ Slurm, recorded


def test_map_on_slurm_is_one_array_per_max_array_size_with_each_payload_in_its_folder(
    fake_commands: FakeCommands, state_dir: Path
) -> None:
    runner = Runner(run_cmd=fake_commands)
    runner.scheduler("slurm").max_array_size = lambda opts: 4  # type: ignore[method-assign]
    fake_commands.on("sbatch", stdout="100\n")
    fake_commands.on("sbatch", stdout="101\n")
    jobs = distspec.map(
        square_plus_one,
        range(6),
        j="1x2",
        scheduler="slurm",
        cfg={"snapshot": "off"},
        max_parallel=2,
        runner=runner,
    )
    sbatches = [c for c in fake_commands.calls if c[0] == "sbatch"]
    assert len(sbatches) == 2
    scripts = [Path(c[-1]).read_text() for c in sbatches]
    assert "#SBATCH --array=0-3%2" in scripts[0]
    assert "#SBATCH --array=0-1%2" in scripts[1]
    assert "#SBATCH --dependency=afterany:100" in scripts[1]  # never more than 2 at once
    assert [j.handle.rsplit("/", 1)[1] for j in jobs] == [
        "100_0",
        "100_1",
        "100_2",
        "100_3",
        "101_0",
        "101_1",
    ]
    for i, job in enumerate(jobs):
        assert job.job_dir.endswith(f"-{job.handle.rsplit('/', 1)[1]}")
        call = cloudpickle.loads(Path(job.job_dir, "call.pkl").read_bytes())
        assert call["args"] == (i,) and call["fn"](i) == i * i + 1
        assert (job.nodes, job.nproc_per_node, job.role) == (1, 2, "fn")
        again = distspec.Job.from_handle(job.handle, runner=runner)
        assert (again.job_dir, again.sweep) == (job.job_dir, job.sweep)
    assert runner.sweep(jobs[0].sweep or "") is not None


# ------------------------------------------------------------------ Slurm, the real cluster


@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_map_on_the_slurm_cluster_is_one_array_of_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_slurm_cluster()
    # sbatch passes the submitter's environment on: torchrun must be on its PATH.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    items = [1, 2, 5, 0, 10, 3]
    jobs = distspec.map(loud_ten_over, items, j="1x2", scheduler="slurm", max_parallel=2)
    try:
        ids = [job.handle.rsplit("/", 1)[1] for job in jobs]
        array = ids[0].partition("_")[0]
        assert ids == [f"{array}_{k}" for k in range(6)]  # one sbatch --array
        for i, job in enumerate(jobs):
            if items[i] == 0:
                with pytest.raises(RemoteError) as info:
                    job.result(timeout=600)
                assert info.value.type_name == "ZeroDivisionError"
            else:
                assert job.results(timeout=600) == [10 // items[i]] * 2
            assert f"item {items[i]} here" in job.logs(rank=1)  # each item's own log
        assert Runner().status(jobs[0].sweep or "").state is AppState.FAILED
    finally:
        for job in jobs:
            if not job.done():
                job.cancel()


# ------------------------------------------------------------------ Kubernetes, the test API server


@pytest.mark.k8s_apiserver
def test_map_on_kubernetes_writes_each_payload_before_its_one_indexed_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubernetes = pytest.importorskip("kubernetes", reason="pip install 'kubernetes>=30,<38'")
    with monkeypatch.context() as m:
        for key, value in _ENV.items():
            if key == "HOME" or key.startswith("DISTSPEC_K8S_"):
                m.setenv(key, value)
        kubeconfig = require_apiserver()
    ns = f"distspec-map-{uuid.uuid4().hex[:8]}"
    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    try:
        job_dir = (tmp_path / "job_dir").as_uri()
        cfg = {"namespace": ns, "kubeconfig": kubeconfig, "job_dir": job_dir, "snapshot": "off"}
        jobs = distspec.map(
            square_plus_one,
            [3, 4, 5],
            j="1x1",
            scheduler="kubernetes",
            cfg=cfg,
            options={"image": "example.invalid/py:1"},
            max_parallel=2,
        )
        ids = [job.handle.rsplit("/", 1)[1] for job in jobs]
        kid = ids[0].split(":")[1]
        assert ids == [f"{ns}:{kid}:{k}" for k in range(3)]
        made = kubernetes.client.BatchV1Api(api).list_namespaced_job(
            ns, label_selector=f"distspec.io/app-id={kid}"
        )
        assert [(j.spec.completions, j.spec.parallelism) for j in made.items] == [(3, 2)]
        for i, job in enumerate(jobs):
            # the folder the pod of index i reads ($DISTSPEC_JOB_DIR: <job_dir>/<id>-<i>)
            assert job.job_dir == f"{job_dir}/{kid}-{i}"
            call = cloudpickle.loads(read_bytes(f"{job.job_dir}/call.pkl"))
            assert call["args"] == (3 + i,)
    finally:
        core.delete_namespace(ns)
        api.close()


# ------------------------------------------------------------------ bad arguments


@pytest.mark.parametrize(
    ("iterable", "kw", "argument", "text"),
    [
        (5, {}, "iterable", "give the items as an iterable"),
        ([], {}, "iterable", "it has no items"),
        (iter(()), {}, "iterable", "it has no items"),
        ([1], {"max_parallel": 0}, "max_parallel", "give an integer >= 1"),
        ([1], {"max_parallel": 1.5}, "max_parallel", "give an integer >= 1"),
        ([1], {"after": 3}, "after", "give a Job, a handle string"),
        ([1], {"after": ["local_cwd://s/x", None]}, "after[1]", "give a Job"),
        ([1], {"j": 2}, "j", "give a str"),
    ],
)
def test_bad_arguments_are_one_line_and_submit_nothing(
    state_dir: Path, iterable: object, kw: dict[str, object], argument: str, text: str
) -> None:
    with pytest.raises(ArgumentError) as info:
        distspec.map(square_plus_one, iterable, **kw)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith("distspec.map: ") and "\n" not in message and text in message
    assert info.value.argument == argument
    assert _runs(state_dir) == []


def test_bad_after_and_fn_are_refused_before_anything_runs(state_dir: Path) -> None:
    with pytest.raises(CallableError, match="give a function"):
        distspec.map(42, [1])  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="knows no such job"):
        distspec.map(square_plus_one, [1, 2], after="local_cwd://distspec/nope-12345678")
    with pytest.raises(UsageError, match="not a condition"):
        distspec.submit(started_at, after="local_cwd://distspec/nope-12345678:sometimes")
    with pytest.raises(ArgumentError, match=r"distspec.submit: after=3\.5"):
        distspec.submit(started_at, after=3.5)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"distspec.distributed: after\[0\]=1"):
        distspec.distributed(after=[1])  # type: ignore[list-item]
    with pytest.raises(CallableError, match=r"distspec.map: item 1 \(a lock\)"):
        distspec.map(square_plus_one, [1, threading.Lock()])
    assert _runs(state_dir) == []
