"""Kubernetes backend, the client half, against the loopback fake API server.

The real `kubernetes` client talks HTTP to tests/k8s_fake_server.py: logs (with
follow), Indexed pod names, per-replica reasons and faults (500, 410 on watch,
dropped streams) are tested here; what the real API server validates and its
controllers do is in test_kubernetes_apiserver.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distspec.errors import AppNotFound, CompileError, SchedulerError, UsageError
from distspec.schedulers.api import JobPaths, Request
from distspec.schedulers.kubernetes import KubernetesScheduler
from distspec.specs.app import AppDef, Resource, Role
from distspec.specs.state import AppState
from tests.k8s_fake_server import FakeApiServer, matches

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")

NS = "default"


def app(nodes: int = 2) -> AppDef:
    return AppDef(
        name="ddp",
        roles=(
            Role(
                name="trainer",
                entrypoint="torchrun",
                image="img:1",
                args=("--node-rank", "${replica_id}", "--rdzv-endpoint", "${rank0_host}:29500"),
                num_replicas=nodes,
                resource=Resource(cpu=1, gpu=1, mem_mb=1024),
            ),
        ),
    )


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def sched(api: FakeApiServer, tmp_path: Path) -> KubernetesScheduler:
    return KubernetesScheduler(
        "test", state_dir=tmp_path / "state", api_client_factory=lambda *_: api.api_client()
    )


def compile_(sched: KubernetesScheduler, nodes: int = 2, **opts: Any) -> Request:
    return sched.compile(app(nodes), sched.parse_options(opts), app_id="ddp-1a2b3c4d")


def pod_of(api: FakeApiServer, index: int) -> str:
    names = [
        p["metadata"]["name"]
        for p in api.pods()
        if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
        == str(index)
    ]
    assert len(names) == 1, names
    return names[0]


def test_label_selector_semantics() -> None:
    labels = {"a": "1", "b": "2"}
    assert matches("a=1,b=2", labels) and matches("a==1", labels) and matches("a", labels)
    assert not matches("a=2", labels) and not matches("c", labels) and not matches("a!=1", labels)
    assert matches("!c", labels) and not matches("!a", labels)


def test_submit_creates_job_then_owned_service(
    sched: KubernetesScheduler, api: FakeApiServer
) -> None:
    app_id = sched.submit(compile_(sched))
    assert app_id == f"{NS}:ddp-1a2b3c4d"
    posts = [path for method, path in api.requests if method == "POST"]
    assert "/jobs" in posts[0] and "/services" in posts[1]
    job = api.get("batch", "v1", NS, "jobs", "ddp-1a2b3c4d-trainer")
    svc = api.get("", "v1", NS, "services", "ddp-1a2b3c4d")
    assert job is not None and svc is not None
    (owner,) = svc["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Job", job["metadata"]["uid"])
    # Indexed pod names and hostnames: <job>-<index>-<suffix>, hostname <job>-<index>.
    pod0 = pod_of(api, 0)
    assert pod0.startswith("ddp-1a2b3c4d-trainer-0-")
    (pod,) = [p for p in api.pods() if p["metadata"]["name"] == pod0]
    assert pod["spec"]["hostname"] == "ddp-1a2b3c4d-trainer-0"
    assert pod["spec"]["subdomain"] == "ddp-1a2b3c4d"


def test_job_paths_from_the_record_submit_keeps(
    sched: KubernetesScheduler, api: FakeApiServer, tmp_path: Path
) -> None:
    app_id = sched.submit(compile_(sched, job_dir="gs://bucket/jobs/"))
    want = JobPaths(folder="gs://bucket/jobs/ddp-1a2b3c4d", log_pattern=None)
    assert sched.job_paths(app_id) == want
    # Another process with the same state dir (distspec status, Job.from_handle).
    fresh = KubernetesScheduler("test", state_dir=tmp_path / "state")
    assert fresh.job_paths(app_id) == want
    assert fresh.job_paths("ddp-1a2b3c4d") == want  # a bare id is in namespace default
    assert fresh.job_paths(f"{NS}:ddp-99999999") is None  # not submitted from here


def test_job_paths_of_a_job_without_job_dir_is_none(
    sched: KubernetesScheduler, api: FakeApiServer
) -> None:
    app_id = sched.submit(compile_(sched))
    assert sched.job_paths(app_id) is None


def test_duplicate_submit_is_409_and_leaves_the_first(
    sched: KubernetesScheduler, api: FakeApiServer
) -> None:
    request = compile_(sched)
    sched.submit(request)
    with pytest.raises(UsageError, match=r"already exists \(409\)"):
        sched.submit(request)
    assert api.get("batch", "v1", NS, "jobs", "ddp-1a2b3c4d-trainer") is not None


def test_failed_service_takes_the_job_back(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    api.fail("POST", r"/services$", 403)
    with pytest.raises(SchedulerError, match=r"forbidden \(403\).*RBAC"):
        sched.submit(compile_(sched))
    assert api.get("batch", "v1", NS, "jobs", "ddp-1a2b3c4d-trainer") is None
    assert api.pods() == []


@pytest.mark.parametrize(
    ("status", "error", "match"),
    [
        (401, SchedulerError, "credentials"),
        (404, SchedulerError, "namespace"),
        (422, CompileError, "422 Invalid"),
        (500, SchedulerError, "500"),
    ],
)
def test_api_errors_are_mapped(
    status: int, error: type[Exception], match: str, sched: KubernetesScheduler, api: FakeApiServer
) -> None:
    api.fail("POST", r"/jobs$", status)
    with pytest.raises(error, match=match):
        sched.submit(compile_(sched))


def test_server_dry_run_persists_nothing(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    objs = sched.server_dry_run(compile_(sched))
    assert [o["kind"] for o in objs] == ["Job", "Service"]
    assert api.objects == {}


def test_describe_per_replica(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched, 3))
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.PENDING
    assert [r.id for r in status.roles[0].replicas] == [0, 1, 2]
    api.patch_pod(
        NS,
        pod_of(api, 0),
        {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
        nodeName="gpu-a",
    )
    api.patch_pod(
        NS,
        pod_of(api, 1),
        {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ],
        },
        nodeName="gpu-b",
    )
    api.patch_pod(
        NS,
        pod_of(api, 2),
        {
            "phase": "Pending",
            "containerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
        },
    )
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.RUNNING
    r0, r1, r2 = status.roles[0].replicas
    assert status.roles[0].role == "trainer"
    assert (r0.state, r0.hostname) == (AppState.RUNNING, "gpu-a")
    assert (r1.state, r1.exit_code, r1.reason, r1.hostname) == (
        AppState.FAILED,
        137,
        "OOMKilled: killed by SIGKILL",
        "gpu-b",
    )
    assert (r2.state, r2.reason) == (AppState.PENDING, "ImagePullBackOff")
    api.set_condition(
        "batch", "v1", NS, "jobs", "ddp-1a2b3c4d-trainer", "Failed",
        reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit",
    )  # fmt: skip
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.FAILED
    assert "BackoffLimitExceeded" in status.msg
    first = status.first_failure()
    assert first is not None and (first.id, first.exit_code) == (1, 137)


@pytest.mark.parametrize(
    ("container_statuses", "exit_code", "reason"),
    [
        # A plain program: its code, and the last line the kubelet kept of its log.
        (
            [{"name": "trainer", "state": {"terminated": {"exitCode": 3, "reason": "Error",
              "message": "step 1\nValueError: bad batch\n\n"}}}],
            3,
            "exited with 3; its last line: ValueError: bad batch",
        ),
        # Killed by a signal, no message: the signal's name.
        (
            [{"name": "trainer", "state": {"terminated": {"exitCode": 143}}}],
            143,
            "killed by SIGTERM",
        ),
        # The kubelet's own reason comes first.
        (
            [{"name": "trainer", "state": {"terminated": {"exitCode": 1,
              "reason": "DeadlineExceeded"}}}],
            1,
            "DeadlineExceeded: exited with 1",
        ),
        # Restarted in place and waiting: how the last run ended.
        (
            [{"name": "trainer", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
              "lastState": {"terminated": {"exitCode": 139}}, "restartCount": 2}],
            139,
            "CrashLoopBackOff; last run: killed by SIGSEGV",
        ),
        # An injected sidecar that ended is not the program: the role's container is.
        (
            [{"name": "istio-proxy", "state": {"terminated": {"exitCode": 0}}},
             {"name": "trainer", "state": {"terminated": {"exitCode": 9}}}],
            9,
            "exited with 9",
        ),
    ],
)  # fmt: skip
def test_a_failed_containers_exit_code_and_reason(
    sched: KubernetesScheduler,
    api: FakeApiServer,
    container_statuses: list[dict[str, Any]],
    exit_code: int,
    reason: str,
) -> None:
    app_id = sched.submit(compile_(sched, 1))
    api.patch_pod(NS, pod_of(api, 0), {"phase": "Failed", "containerStatuses": container_statuses})
    status = sched.describe(app_id)
    assert status is not None
    (replica,) = status.roles[0].replicas
    assert (replica.state, replica.exit_code, replica.reason) == (
        AppState.FAILED,
        exit_code,
        reason,
    )


def test_evicted_pod_reason(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched, 1))
    api.patch_pod(NS, pod_of(api, 0), {"phase": "Failed", "reason": "Evicted"})
    status = sched.describe(app_id)
    assert status is not None
    assert status.roles[0].replicas[0].reason == "Evicted"


def test_succeeded(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched, 1))
    api.set_condition("batch", "v1", NS, "jobs", "ddp-1a2b3c4d-trainer", "Complete")
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.SUCCEEDED


def test_describe_unknown_app_is_none(sched: KubernetesScheduler) -> None:
    assert sched.describe(f"{NS}:nope-00000000") is None


def test_describe_retries_a_500(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched, 1))
    api.fail("GET", r"/pods$", 500)
    status = sched.describe(app_id)
    assert status is not None and status.roles[0].replicas
    api.fail("GET", r"/pods$", 500, times=10)
    with pytest.raises(SchedulerError, match="500"):
        sched.describe(app_id)


def test_logs_and_follow(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched))
    pod1 = pod_of(api, 1)
    api.log(NS, pod1, "step 1", "step 2 $(not expanded) ünïcode")
    assert list(sched.log_iter(app_id, "trainer", 1)) == [
        "step 1",
        "step 2 $(not expanded) ünïcode",
    ]
    assert list(sched.log_iter(app_id, "trainer", 0)) == []

    def finish() -> None:
        time.sleep(0.3)
        api.log(NS, pod1, "step 3")
        api.close_log(NS, pod1)

    threading.Thread(target=finish, daemon=True).start()
    lines = list(sched.log_iter(app_id, "trainer", 1, follow=True))
    assert lines == ["step 1", "step 2 $(not expanded) ünïcode", "step 3"]


def test_logs_since(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched, 1))
    pod0 = pod_of(api, 0)
    api.log(NS, pod0, "old", at=time.time() - 3600)
    api.log(NS, pod0, "new")
    assert list(sched.log_iter(app_id, "trainer", 0, since=time.time() - 60)) == ["new"]


def test_follow_survives_a_dropped_stream(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched, 1))
    pod0 = pod_of(api, 0)
    api.log(NS, pod0, "a", "b", "c", at=time.time() - 5)
    api.drop_log(NS, pod0, after_lines=2)

    def finish() -> None:
        time.sleep(0.5)
        api.log(NS, pod0, "d")
        api.close_log(NS, pod0)

    threading.Thread(target=finish, daemon=True).start()
    assert list(sched.log_iter(app_id, "trainer", 0, follow=True)) == ["a", "b", "c", "d"]


def test_dropped_stream_without_follow_is_an_error(
    sched: KubernetesScheduler, api: FakeApiServer
) -> None:
    app_id = sched.submit(compile_(sched, 1))
    pod0 = pod_of(api, 0)
    api.log(NS, pod0, "a", "b", "c")
    api.drop_log(NS, pod0, after_lines=1)
    with pytest.raises(SchedulerError, match="dropped"):
        list(sched.log_iter(app_id, "trainer", 0))


def test_logs_of_a_missing_replica(sched: KubernetesScheduler) -> None:
    app_id = sched.submit(compile_(sched, 1))
    with pytest.raises(AppNotFound):
        list(sched.log_iter(app_id, "trainer", 5))


def test_wait_rides_out_410_and_returns_on_completion(
    sched: KubernetesScheduler, api: FakeApiServer
) -> None:
    app_id = sched.submit(compile_(sched, 1))
    api.watch_gone = 2
    pod0 = pod_of(api, 0)

    def finish() -> None:
        time.sleep(0.5)
        api.patch_pod(
            NS,
            pod0,
            {
                "phase": "Succeeded",
                "containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}],
            },
        )
        api.set_condition("batch", "v1", NS, "jobs", "ddp-1a2b3c4d-trainer", "Complete")

    threading.Thread(target=finish, daemon=True).start()
    seen: list[AppState] = []
    status = sched.wait(app_id, timeout=30, on_status=lambda s: seen.append(s.state))
    assert status is not None and status.state is AppState.SUCCEEDED
    assert api.watch_gone == 0  # both expired watches were re-established
    assert seen[0] is AppState.PENDING


def test_cancel_deletes_everything_and_is_idempotent(
    sched: KubernetesScheduler, api: FakeApiServer
) -> None:
    app_id = sched.submit(compile_(sched))
    sched.cancel(app_id)
    deletes = [path for method, path in api.requests if method == "DELETE"]
    assert any("/jobs/ddp-1a2b3c4d-trainer" in p for p in deletes)
    assert api.objects == {}  # pods and the Service went with the Job
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.CANCELLED
    sched.cancel(app_id)  # already gone: a no-op


def test_list_by_label(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    sched.submit(compile_(sched))
    other = sched.compile(app(1), sched.parse_options({"namespace": "ml"}), app_id="ddp-99999999")
    sched.submit(other)
    apps = {s.app_id: s for s in sched.list()}
    assert set(apps) == {f"{NS}:ddp-1a2b3c4d", "ml:ddp-99999999"}
    assert apps["ml:ddp-99999999"].name == "ddp"
    assert all(s.state is AppState.PENDING for s in apps.values())


def test_jobset_submit_describe_cancel(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched, flavor="jobset"))
    assert api.get("jobset.x-k8s.io", "v1alpha2", NS, "jobsets", "ddp-1a2b3c4d") is not None
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.PENDING
    api.set_condition("jobset.x-k8s.io", "v1alpha2", NS, "jobsets", "ddp-1a2b3c4d", "Completed")
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.SUCCEEDED
    sched.cancel(app_id)
    assert api.objects == {}


def test_volcano_state_from_its_phase(sched: KubernetesScheduler, api: FakeApiServer) -> None:
    app_id = sched.submit(compile_(sched, flavor="volcano"))
    job = api.get("batch.volcano.sh", "v1alpha1", NS, "jobs", "ddp-1a2b3c4d")
    assert job is not None
    job["status"] = {"state": {"phase": "Failed", "reason": "PodFailed"}}
    api.put(job, "batch.volcano.sh", "v1alpha1", "jobs")
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.FAILED
    assert "PodFailed" in status.msg


def test_kubeconfig_from_the_environment(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig(tmp_path / "config")))
    sched = KubernetesScheduler("test", state_dir=tmp_path / "state")
    app_id = sched.submit(sched.compile(app(1), sched.parse_options({}), app_id="ddp-1a2b3c4d"))
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.PENDING


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ([], "kubernetes: no Kubernetes configuration: set KUBECONFIG"),
        (
            ["-cfg", "kubeconfig=/no/such/kubeconfig"],
            "kubeconfig '/no/such/kubeconfig' does not exist",
        ),
        (["-cfg", "kubeconfig={empty}"], "kubernetes: cannot load kubeconfig: "),
    ],
)
def test_a_missing_or_broken_kubeconfig_is_one_line_exit_2(
    tmp_path: Path, cfg: list[str], message: str
) -> None:
    """The user's configuration to fix, like any bad value: exit 2, nothing submitted."""
    import os
    import subprocess
    import sys

    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "DISTSPEC_"))}
    env.update(HOME=str(tmp_path), DISTSPEC_STATE_DIR=str(tmp_path / "state"))
    argv = [Path(sys.executable).parent / "distspec", "run", "-s", "kubernetes"]
    argv += [c.replace("{empty}", str(empty)) for c in cfg]
    argv += ["dist.ddp", "-j", "2x1", "--image", "img:1", "--script", "train.py"]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.json"))
