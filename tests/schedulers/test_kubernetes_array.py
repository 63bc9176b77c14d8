"""Kubernetes sweep arrays (one Indexed Job over the points): the manifest, the script
each pod runs (run for real by dash and bash), what is refused, point ids, and the
status, log and cancel of one point (against a recording fake of the API calls)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from distspec.errors import AppNotFound, CompileError
from distspec.schedulers.api import Dependency, Points, Request
from distspec.schedulers.kubernetes import KubernetesScheduler
from distspec.schedulers.kubernetes.array import (
    CANCELLED,
    MAX_POINTS_TEXT,
    cancel_line,
    points_text,
)
from distspec.schedulers.kubernetes.names import split_point_id
from distspec.schedulers.kubernetes.status import in_indexes, point_status, summary_state
from distspec.specs.app import AppDef, Resource, Role
from distspec.specs.state import AppState
from tests.schedulers.test_kubernetes import ddp, validate_all

APP_ID = "ddp-1a2b3c4d"
POINTS = Points(
    names=("lr", "seed"),
    values=(("0.1", "1"), ("0.01", "2"), ("1e-3", "3")),
    first=4,
    max_parallel=2,
)


@pytest.fixture
def sched(tmp_path: Path) -> KubernetesScheduler:
    return KubernetesScheduler("test", state_dir=tmp_path / "state")


def sweep_app(**role_kw: Any) -> AppDef:
    """dist.ddp on one node with two sweep variables in its arguments and env."""
    (role,) = ddp(1, 8, args=("--lr", "{{lr}}", "--seed={{seed}}")).roles
    env = {"LOGLEVEL": "INFO", "SEED": "{{seed}}", "RUN": "${app_id}"}
    return AppDef(name="ddp", roles=(dataclasses.replace(role, env=env, **role_kw),))


def compile_array(
    sched: KubernetesScheduler, app: AppDef, points: Points = POINTS, **opts: Any
) -> Request:
    return sched.compile_array(app, sched.parse_options(opts), app_id=APP_ID, points=points)


def docs_of(request: Request) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(request.render()) if d]


# ----------------------------------------------------------------------------- the manifest


def test_golden(sched: KubernetesScheduler, golden: Callable[[str, str], None]) -> None:
    request = compile_array(sched, sweep_app(), job_dir="s3://bucket/jobs")
    golden("kubernetes/array-3-points.yaml", request.render())


def test_manifest_is_valid_and_shaped(sched: KubernetesScheduler) -> None:
    request = compile_array(sched, sweep_app())
    docs = docs_of(request)
    validate_all(docs)
    config_map, job = docs
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job"]
    assert request.argv == ("kubectl", "create", "-f", f"{APP_ID}.yaml")
    assert request.points == POINTS
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 2)
    assert spec["backoffLimitPerIndex"] == 2 and "backoffLimit" not in spec
    actions = [r["action"] for r in spec["podFailurePolicy"]["rules"]]
    assert actions == ["Ignore", "FailIndex"]
    pod = spec["template"]["spec"]
    assert "subdomain" not in pod  # no Service: each point is its own rank 0
    assert {"name": "sweep-points", "configMap": {"name": f"{APP_ID}-points"}} in pod["volumes"]
    assert config_map["metadata"]["labels"]["distspec.io/app-id"] == APP_ID
    assert config_map["data"]["points"].splitlines() == [
        "DISTSPEC_SWEEP_INDEX=4 DISTSPEC_SWEEP_lr=0.1 DISTSPEC_SWEEP_seed=1",
        "DISTSPEC_SWEEP_INDEX=5 DISTSPEC_SWEEP_lr=0.01 DISTSPEC_SWEEP_seed=2",
        "DISTSPEC_SWEEP_INDEX=6 DISTSPEC_SWEEP_lr=1e-3 DISTSPEC_SWEEP_seed=3",
    ]
    # Without --max-parallel every point may run at once.
    unlimited = dataclasses.replace(POINTS, max_parallel=None)
    assert docs_of(compile_array(sched, sweep_app(), unlimited))[1]["spec"]["parallelism"] == 3


def test_compile_is_deterministic(sched: KubernetesScheduler) -> None:
    assert compile_array(sched, sweep_app()) == compile_array(sched, sweep_app())


# ----------------------------------------------------------------------------- the pod's script


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """What Kubernetes does to a command word: ``$$`` -> ``$``, ``$(VAR)`` -> its value
    (kept as written when VAR is not defined)."""

    def one(m: re.Match[str]) -> str:
        return "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]
PROBE = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'env': {k: v for k, v in "
    "os.environ.items() if k.startswith(('DISTSPEC_', 'SEED', 'RUN', 'LOGLEVEL'))}}))"
)


def run_point(
    request: Request, index: int, tmp_path: Path, shell: str, points: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the pod of index ``index`` as the kubelet would: the container's env, the
    controller's JOB_COMPLETION_INDEX, the ConfigMap as a file, the command after
    Kubernetes' expansion, with ``sh`` replaced by ``shell``."""
    config_map, job = docs_of(request)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    file = tmp_path / "points"
    file.write_text(config_map["data"]["points"] if points is None else points)
    env = {"PATH": "/usr/bin:/bin", "JOB_COMPLETION_INDEX": str(index)}
    for var in container["env"]:
        if "value" in var:  # expanded too, seeing the variables before it
            env[var["name"]] = k8s_expand(var["value"], env)
    env["DISTSPEC_SWEEP_FILE"] = str(file)
    command = [k8s_expand(word, env) for word in container["command"]]
    assert command[:2] == ["sh", "-c"] and "args" not in container
    return subprocess.run(
        [shell, *command[1:]], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def probe_app() -> AppDef:
    role = Role(
        name="trainer",
        entrypoint=sys.executable,
        image="img:1",
        args=(
            "-c", PROBE, "--lr", "{{lr}}", "--out=/ckpt/${app_id}/{{seed}}",
            "--rank", "${replica_id}", "--of", "${num_replicas}", "${rank0_host}:${rdzv_port}",
            "lit $(HOME) $$ '\" {{lr}}{{lr}}",
        ),
        env={"SEED": "{{seed}}", "RUN": "${app_id}", "LOGLEVEL": "$(NOT_SET) x"},
        resource=Resource(cpu=1, mem_mb=64),
    )  # fmt: skip
    return AppDef(name="probe", roles=(role,))


ODD = 'it\'s "$HOME" `id` $(x)\nline two\\ \t end'


@pytest.mark.parametrize("shell", SHELLS)
def test_each_pod_runs_its_own_point(
    sched: KubernetesScheduler, tmp_path: Path, shell: str
) -> None:
    points = Points(names=("lr", "seed"), values=(("0.1", "1"), (ODD, "")), first=10)
    request = compile_array(sched, probe_app(), points, job_dir="file:///shared/jobs")
    for k, (lr, seed) in enumerate(points.values):
        proc = run_point(request, k, tmp_path, shell)
        assert proc.returncode == 0, proc.stderr
        seen = json.loads(proc.stdout)
        point = f"{APP_ID}-{k}"
        assert seen["argv"] == [
            "--lr", lr, f"--out=/ckpt/{point}/{seed}", "--rank", "0", "--of", "1",
            "localhost:29500", f"lit $(HOME) $$ '\" {lr}{lr}",
        ]  # fmt: skip
        assert seen["env"] == {
            "DISTSPEC_SWEEP_INDEX": str(10 + k),
            "DISTSPEC_SWEEP_lr": lr,
            "DISTSPEC_SWEEP_seed": seed,
            "DISTSPEC_SWEEP_FILE": str(tmp_path / "points"),
            "DISTSPEC_JOB_DIR": f"file:///shared/jobs/{point}",
            "SEED": seed,
            "RUN": point,
            "LOGLEVEL": "$(NOT_SET) x",
        }


@pytest.mark.parametrize("shell", SHELLS)
def test_a_missing_or_cancelled_point_exits_2_and_says_why(
    sched: KubernetesScheduler, tmp_path: Path, shell: str
) -> None:
    request = compile_array(sched, probe_app())
    proc = run_point(request, 3, tmp_path, shell)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"distspec: no sweep point for index 3 in {tmp_path / 'points'}\n"
    text = docs_of(request)[0]["data"]["points"]
    marked = cancel_line(text, 1)
    assert marked is not None and marked.splitlines()[1].startswith(CANCELLED)
    assert cancel_line(marked, 1) is None  # marked already
    proc = run_point(request, 1, tmp_path, shell, points=marked)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "distspec: sweep point 1 was cancelled\n"
    # The other points run on.
    assert run_point(request, 0, tmp_path, shell, points=marked).returncode == 0
    assert run_point(request, 2, tmp_path, shell, points=marked).returncode == 0


def test_cancel_line_out_of_range() -> None:
    assert cancel_line("a\nb\n", 2) is None
    assert cancel_line("a\nb\n", -1) is None


def test_snapshot_unpacks_before_the_script(sched: KubernetesScheduler) -> None:
    app = sweep_app(metadata={"distspec.snapshot": "t" * 8})
    (container,) = docs_of(compile_array(sched, app, job_dir="s3://b/j"))[1]["spec"]["template"][
        "spec"
    ]["containers"]
    assert container["command"][:7] == [
        "python", "-m", "distspec.runtime.unpack",
        "s3://b/j/snapshots/tttttttt.tar.gz", "/tmp/distspec-snapshot/tttttttt", "--", "sh",
    ]  # fmt: skip


# ----------------------------------------------------------------------------- refused


@pytest.mark.parametrize(
    ("app", "opts", "match"),
    [
        (lambda: ddp(2, 8, args=("{{lr}}",)), {}, "runs 2 pods per point"),
        (lambda: ddp(4, 8, min_nodes=1, args=("{{lr}}",)), {"flavor": "volcano"}, "volcano"),
        (lambda: ddp(1, 8, roles=2), {}, "has 2 roles"),
        (sweep_app, {"flavor": "jobset"}, "flavor=jobset"),
    ],
    ids=["2-nodes", "volcano", "2-roles", "jobset"],
)
def test_multi_pod_points_are_refused(
    sched: KubernetesScheduler, app: Callable[[], AppDef], opts: dict[str, Any], match: str
) -> None:
    with pytest.raises(CompileError, match=match) as e:
        compile_array(sched, app(), **opts)
    assert "a sweep of multi-pod points runs as one Job per point" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("points", "match"),
    [
        (Points(names=("lr", "seed"), values=()), "at least one point"),
        (Points(names=("lr", "seed"), values=(("1",),)), "has 1 values for 2 variables"),
        (Points(names=("lr", "seed"), values=(("a\x00", "1"),)), "NUL byte"),
        (Points(names=("lr", "seed"), values=(("1", "1"),), max_parallel=0), "at least 1"),
        (Points(names=("seed",), values=(("1",),)), r"uses \{\{lr\}\}, which the sweep does not"),
        (
            Points(names=("lr", "seed"), values=(("x" * 1000, "1"),) * 1001),
            "use fewer points per array or shorter values",
        ),
    ],
    ids=["empty", "short-point", "nul", "max-parallel-0", "undefined", "too-big"],
)
def test_bad_points_are_refused(sched: KubernetesScheduler, points: Points, match: str) -> None:
    with pytest.raises(CompileError, match=match) as e:
        compile_array(sched, sweep_app(), points)
    assert "\n" not in str(e.value)


def test_the_size_limit_is_on_the_text() -> None:
    head = len("DISTSPEC_SWEEP_INDEX=0 DISTSPEC_SWEEP_v=\n")
    fits = Points(names=("v",), values=(("x" * (MAX_POINTS_TEXT - head),),))
    assert len(points_text(fits).encode()) == MAX_POINTS_TEXT
    with pytest.raises(CompileError, match="1,000,001 bytes.*use fewer points"):
        points_text(Points(names=("v",), values=(("x" * (MAX_POINTS_TEXT - head + 1),),)))


def test_dependencies_are_refused(sched: KubernetesScheduler) -> None:
    with pytest.raises(CompileError, match="--after"):
        sched.compile_array(
            sweep_app(),
            sched.parse_options({}),
            app_id=APP_ID,
            points=POINTS,
            after=(Dependency("default:x-1"),),
        )


# ----------------------------------------------------------------------------- ids


def test_point_ids(sched: KubernetesScheduler) -> None:
    request = compile_array(sched, sweep_app(), namespace="ml")
    assert sched.point_id(f"ml:{APP_ID}", request, 4) == f"ml:{APP_ID}:0"
    assert sched.point_id(APP_ID, request, 6) == f"ml:{APP_ID}:2"
    for bad in (3, 7):
        with pytest.raises(ValueError, match="not in the array"):
            sched.point_id(f"ml:{APP_ID}", request, bad)
    assert split_point_id(f"ml:{APP_ID}:2") == ("ml", APP_ID, 2)
    assert split_point_id(f"ml:{APP_ID}") == ("ml", APP_ID, None)
    assert split_point_id(APP_ID) == (None, APP_ID, None)
    assert sched.max_array_size(sched.parse_options({})) == 100_000


def test_job_paths_of_a_point(sched: KubernetesScheduler) -> None:
    request = compile_array(sched, sweep_app(), job_dir="s3://b/jobs/")
    paths = sched.job_paths(f"default:{APP_ID}:2", request)
    assert paths is not None and paths.folder == f"s3://b/jobs/{APP_ID}-2"
    paths = sched.job_paths(f"default:{APP_ID}", request)
    assert paths is not None and paths.folder == f"s3://b/jobs/{APP_ID}"


def test_capabilities_say_arrays() -> None:
    assert KubernetesScheduler.capabilities.arrays


# ----------------------------------------------------------------------------- status


def pod(index: int, phase: str, *, n: int = 0, exit_code: int | None = None, msg: str = "") -> dict:
    state: dict[str, Any] = {"running": {}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "message": msg}}
    return {
        "metadata": {
            "name": f"{APP_ID}-trainer-{index}-{n}",
            "namespace": "default",
            "creationTimestamp": f"2024-01-01T00:00:0{n}Z",
            "labels": {"distspec.io/role": "trainer"},
            "annotations": {
                "distspec.io/role-name": "trainer",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        },
        "spec": {"nodeName": "node-1"},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "trainer", "state": state}],
        },
    }


def job(**status: Any) -> dict:
    return {
        "kind": "Job",
        "metadata": {"name": f"{APP_ID}-trainer", "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {
            "completions": 3,
            "template": {"metadata": {"annotations": {"distspec.io/role-name": "trainer"}}},
        },
        "status": status,
    }


def test_in_indexes() -> None:
    assert [i for i in range(10) if in_indexes("1,3-5,8", i)] == [1, 3, 4, 5, 8]
    assert not in_indexes(None, 0) and not in_indexes("", 0)


@pytest.mark.parametrize(
    ("the_job", "attempts", "cancelled", "state"),
    [
        (job(completedIndexes="0-2"), [pod(1, "Succeeded", exit_code=0)], False, "SUCCEEDED"),
        (job(completedIndexes="1"), [pod(1, "Succeeded", exit_code=0)], True, "SUCCEEDED"),
        (job(failedIndexes="1"), [pod(1, "Failed", exit_code=3)], False, "FAILED"),
        (job(failedIndexes="1"), [pod(1, "Failed", exit_code=143)], True, "CANCELLED"),
        (
            job(),
            [pod(1, "Failed", exit_code=2, msg="distspec: sweep point 1 was cancelled")],
            False,
            "CANCELLED",
        ),
        (job(), [pod(1, "Failed", exit_code=1), pod(1, "Pending", n=1)], False, "PENDING"),
        (job(), [pod(1, "Failed", exit_code=1)], False, "PENDING"),
        (job(), [pod(1, "Running")], False, "RUNNING"),
        (job(), [], False, "PENDING"),
        (None, [pod(1, "Running")], False, "CANCELLED"),
    ],
    ids=[
        "completed", "completed-before-cancel", "failed", "cancelled", "marked",
        "retrying", "failed-pod-awaiting-retry", "running", "waiting-its-turn", "job-gone",
    ],
)  # fmt: skip
def test_point_status(
    the_job: dict | None, attempts: list[dict], cancelled: bool, state: str
) -> None:
    status = point_status(the_job, attempts, 1, cancelled=cancelled, native_id="x")
    assert status is not None and status.state is AppState[state]
    (role,) = status.roles
    assert role.role == "trainer" and [r.id for r in role.replicas] == [0]


def test_point_status_of_nothing_is_none() -> None:
    assert point_status(None, [], 0, cancelled=False, native_id="x") is None


def test_a_completed_array_with_failed_indexes_failed() -> None:
    done = {"type": "Complete", "status": "True"}
    state, msg = summary_state([job(conditions=[done], failedIndexes="2", completedIndexes="0,1")])
    assert state is AppState.FAILED and "indexes 2 failed" in msg
    assert summary_state([job(conditions=[done], completedIndexes="0-2")])[0] is AppState.SUCCEEDED


# ----------------------------------------------------------------------------- the effectful half


class FakeKube:
    """The API calls the scheduler makes for a sweep array, recorded, over a Job, its
    pods and its ConfigMap held here."""

    def __init__(self, points: str, pods: list[dict], **status: Any) -> None:
        self.job = job(**status)
        self.job["spec"]["template"]["spec"] = {
            "volumes": [{"name": "sweep-points", "configMap": {"name": f"{APP_ID}-points"}}]
        }
        self.config = {
            "metadata": {"name": f"{APP_ID}-points", "resourceVersion": "1"},
            "data": {"points": points},
        }
        self._pods = pods
        self.calls: list[tuple[str, ...]] = []
        self.conflicts = 0

    def list_objects(self, gvr: Any, ns: str, selector: str, **kw: Any) -> list[dict]:
        self.calls.append(("list", gvr[2], selector))
        return [self.job] if gvr[0] == "batch" else []

    def pods(self, ns: str, selector: str) -> list[dict]:
        self.calls.append(("pods", selector))
        return self._pods

    def get(self, gvr: Any, ns: str, name: str, **kw: Any) -> None:
        self.calls.append(("get", gvr[2], name))

    def config_map(self, ns: str, name: str) -> dict | None:
        self.calls.append(("read-configmap", name))
        return json.loads(json.dumps(self.config))

    def replace_config_map(self, ns: str, body: dict) -> bool:
        self.calls.append(("replace-configmap", body["metadata"]["name"]))
        if self.conflicts:
            self.conflicts -= 1
            return False
        self.config = body
        return True

    def delete_pod(self, ns: str, name: str, *, missing_ok: bool) -> None:
        self.calls.append(("delete-pod", name))

    def log_lines(self, ns: str, name: str, *args: Any) -> Iterator[tuple[str, str]]:
        self.calls.append(("log", name))
        yield "", f"log of {name}"


@pytest.fixture
def fake(sched: KubernetesScheduler, monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    text = points_text(POINTS)
    kube = FakeKube(
        text,
        [
            pod(0, "Succeeded", exit_code=0),
            pod(1, "Running"),
            pod(2, "Failed", exit_code=1),
            pod(2, "Pending", n=1),
        ],
        completedIndexes="0",
    )
    monkeypatch.setattr(sched, "_client", lambda conn: kube)
    return kube


def test_describe_many_reads_an_array_once(sched: KubernetesScheduler, fake: FakeKube) -> None:
    ids = [f"default:{APP_ID}:{k}" for k in (2, 0, 1, 7)]
    found = sched.describe_many(ids)
    assert list(found) == ids
    states = {i: s.state if s else None for i, s in found.items()}
    assert list(states.values()) == [
        AppState.PENDING,
        AppState.SUCCEEDED,
        AppState.RUNNING,
        None,  # no such index
    ]
    assert fake.calls == [
        ("list", "jobs", f"distspec.io/app-id={APP_ID}"),
        ("pods", f"distspec.io/app-id={APP_ID}"),
    ]
    status = sched.describe(f"default:{APP_ID}:2")
    assert status is not None and status.num_restarts == 1
    assert status.roles[0].replicas[0].log.startswith(f"pod/{APP_ID}-trainer-2-1 ")


def test_cancel_a_point_marks_it_and_deletes_its_live_pods(
    sched: KubernetesScheduler, fake: FakeKube
) -> None:
    fake.conflicts = 1  # someone else wrote the ConfigMap between our read and write
    sched.cancel(f"default:{APP_ID}:2")
    lines = fake.config["data"]["points"].splitlines()
    assert lines[2].startswith(CANCELLED) and not any(ln.startswith(CANCELLED) for ln in lines[:2])
    deleted = [c[1] for c in fake.calls if c[0] == "delete-pod"]
    assert deleted == [f"{APP_ID}-trainer-2-1"]  # not the attempt that had failed already
    assert [c[0] for c in fake.calls].count("replace-configmap") == 2
    status = sched.describe(f"default:{APP_ID}:2")
    assert status is not None and status.state is AppState.CANCELLED
    other = sched.describe(f"default:{APP_ID}:1")
    assert other is not None and other.state is AppState.RUNNING
    # Again: marked already, nothing written.
    fake.calls.clear()
    sched.cancel(f"default:{APP_ID}:2")
    assert not [c for c in fake.calls if c[0] == "replace-configmap"]


def test_cancel_of_a_point_that_ended_is_a_no_op(
    sched: KubernetesScheduler, fake: FakeKube
) -> None:
    sched.cancel(f"default:{APP_ID}:0")
    sched.cancel(f"default:{APP_ID}:3")  # no such point
    assert [c[0] for c in fake.calls] == ["list", "list"]
    status = sched.describe(f"default:{APP_ID}:0")
    assert status is not None and status.state is AppState.SUCCEEDED


def test_log_of_a_point_is_its_index_pod(sched: KubernetesScheduler, fake: FakeKube) -> None:
    lines = list(sched.log_iter(f"default:{APP_ID}:1", "trainer", 0))
    assert lines == [f"log of {APP_ID}-trainer-1-0"]
    # The array's replica k is its point k.
    assert list(sched.log_iter(f"default:{APP_ID}", "trainer", 2)) == [
        f"log of {APP_ID}-trainer-2-1"
    ]
    with pytest.raises(AppNotFound, match="a sweep point has replica 0"):
        list(sched.log_iter(f"default:{APP_ID}:1", "trainer", 1))
