"""Following a Kubernetes replica's log across a late pod and a retry pod.

Against the loopback fake API server (tests/k8s_fake_server.py): no Kubernetes
controller or kubelet runs here, so the test plays their part — it creates the
retry pod a Job controller would, and marks the first attempt Failed as a kubelet
would. The client half (the real ``kubernetes`` package over HTTP) is real.
"""

from __future__ import annotations

import copy
import threading
import time

import pytest

from distspec.schedulers.kubernetes import KubernetesScheduler
from distspec.schedulers.kubernetes import scheduler as k8s
from tests.k8s_fake_server import FakeApiServer
from tests.schedulers.test_kubernetes_client import NS, api, compile_, pod_of, sched

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")
__all__ = ["api", "sched"]  # the fixtures, used by name


def test_follow_moves_to_the_retry_pod(
    sched: KubernetesScheduler, api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s, "FOLLOW_POLL", 0.05)
    app_id = sched.submit(compile_(sched, 1))
    first = pod_of(api, 0)
    api.log(NS, first, "attempt 1 line 1", "attempt 1 line 2")

    def kubelet_and_controller() -> None:
        time.sleep(0.3)
        api.patch_pod(NS, first, {"phase": "Failed"})
        api.close_log(NS, first)
        time.sleep(0.3)  # the Job controller's back-off: nothing to read meanwhile
        retry = copy.deepcopy(api.get("", "v1", NS, "pods", first))
        assert retry is not None
        retry["metadata"]["name"] = first + "-retry"
        retry["metadata"].pop("uid")
        retry["metadata"].pop("creationTimestamp")
        retry["status"] = {"phase": "Running"}
        time.sleep(1.1)  # creationTimestamp has one-second resolution
        api.put(retry, "", "v1", "pods")
        api.log(NS, first + "-retry", "attempt 2 line 1")
        api.patch_pod(NS, first + "-retry", {"phase": "Succeeded"})
        api.close_log(NS, first + "-retry")

    threading.Thread(target=kubelet_and_controller, daemon=True).start()
    lines = list(sched.log_iter(app_id, "trainer", 0, follow=True))
    assert lines == ["attempt 1 line 1", "attempt 1 line 2", "attempt 2 line 1"]


def test_follow_waits_for_a_pod_that_is_not_there_yet(
    sched: KubernetesScheduler, api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(k8s, "FOLLOW_POLL", 0.05)
    app_id = sched.submit(compile_(sched, 1))
    pod = api.get("", "v1", NS, "pods", pod_of(api, 0))
    assert pod is not None
    api.objects.pop(("", "v1", NS, "pods", pod["metadata"]["name"]))  # not created yet

    def scheduler_creates_it() -> None:
        time.sleep(0.4)
        pod["metadata"].pop("resourceVersion", None)
        api.put(pod, "", "v1", "pods")
        api.log(NS, pod["metadata"]["name"], "late hello")
        api.patch_pod(NS, pod["metadata"]["name"], {"phase": "Succeeded"})
        api.close_log(NS, pod["metadata"]["name"])

    threading.Thread(target=scheduler_creates_it, daemon=True).start()
    assert list(sched.log_iter(app_id, "trainer", 0, follow=True)) == ["late hello"]


def test_describe_names_the_job_and_each_replicas_pod(
    sched: KubernetesScheduler, api: FakeApiServer
) -> None:
    app_id = sched.submit(compile_(sched, 2))
    status = sched.describe(app_id)
    assert status is not None
    assert status.native_id == f"{NS}/ddp-1a2b3c4d"
    assert status.submitted is not None
    logs = [r.log for r in status.roles[0].replicas]
    assert logs == [f"pod/{pod_of(api, i)} (namespace {NS})" for i in (0, 1)]


def test_runner_follows_a_replica_listed_only_later(
    sched: KubernetesScheduler, api: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distspec import runner as runner_module
    from distspec.config import Config
    from distspec.runner import Runner

    monkeypatch.setattr(runner_module, "DISCOVER_INTERVAL", 0.1)
    monkeypatch.setattr(k8s, "FOLLOW_POLL", 0.05)
    app_id = sched.submit(compile_(sched, 2))
    first, second = pod_of(api, 0), pod_of(api, 1)
    late = api.get("", "v1", NS, "pods", second)
    assert late is not None
    api.objects.pop(("", "v1", NS, "pods", second))  # replica 1's pod comes later
    runner = Runner(config=Config())
    runner._schedulers["kubernetes"] = sched  # the scheduler talking to the fake server
    api.log(NS, first, "from replica 0")

    def later() -> None:
        time.sleep(0.5)
        late["metadata"].pop("resourceVersion", None)
        api.put(late, "", "v1", "pods")
        api.log(NS, second, "from replica 1")
        for name in (first, second):
            api.patch_pod(NS, name, {"phase": "Succeeded"})
            api.close_log(NS, name)

    threading.Thread(target=later, daemon=True).start()
    lines = list(runner.log_lines(f"kubernetes://test/{app_id}", follow=True))
    assert sorted(ln.format() for ln in lines) == [
        "trainer/0| from replica 0",
        "trainer/1| from replica 1",
    ]
