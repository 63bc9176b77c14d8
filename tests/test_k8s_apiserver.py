"""What a real API server (1.20.2, no kubelet) does with the objects we send it.

Needs `scripts/k8s-apiserver build` once; skipped otherwise. Pods never run:
the tests play kubelet by patching `pods/status`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from tests.k8s_apiserver import require_apiserver

pytestmark = pytest.mark.k8s_apiserver

kubernetes = pytest.importorskip("kubernetes", reason="pip install 'kubernetes>=30,<38'")
from kubernetes.client.exceptions import ApiException  # noqa: E402

T = TypeVar("T")


class Kube:
    def __init__(self, api: Any, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.batch = kubernetes.client.BatchV1Api(api)
        self.ns = namespace

    def create_job(self, name: str, **spec: Any) -> Any:
        return self.batch.create_namespaced_job(self.ns, job_manifest(name, **spec))

    def pods(self, job: str) -> list[Any]:
        return self.core.list_namespaced_pod(self.ns, label_selector=f"job-name={job}").items

    def wait_pods(self, job: str, n: int) -> list[Any]:
        return wait(lambda: (p := self.pods(job)) and len(p) == n and p, f"{n} pods of {job}")

    def set_phase(self, pod: Any, phase: str) -> None:
        self.core.patch_namespaced_pod_status(
            pod.metadata.name, self.ns, {"status": {"phase": phase}}
        )

    def wait_condition(self, job: str, type_: str) -> Any:
        def cond() -> Any:
            status = self.batch.read_namespaced_job_status(job, self.ns).status
            return next(
                (c for c in status.conditions or [] if c.type == type_ and c.status == "True"),
                None,
            )

        return wait(cond, f"Job {job} condition {type_}")

    def gone(self, read: Callable[..., Any], name: str) -> bool:
        try:
            read(name, self.ns)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    pod = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "example.invalid/train:1",
                "resources": {
                    "requests": {"cpu": "1", "example.com/gpu": "8"},
                    "limits": {"cpu": "1", "example.com/gpu": "8"},
                },
            }
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"distspec.io/app-id": name}},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"distspec.io/app-id": name}}, "spec": pod},
            **spec,
        },
    }


def wait(probe: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def kube() -> Iterator[Kube]:
    kubeconfig = require_apiserver()
    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    ns = f"distspec-test-{uuid.uuid4().hex[:8]}"
    k = Kube(api, ns)
    k.core.create_namespace({"metadata": {"name": ns}})
    # The serviceaccount controller adds `default` to new namespaces; pods
    # are admitted without it (ServiceAccount admission is off) but wait
    # anyway so that the controllers are known to be working.
    wait(lambda: not k.gone(k.core.read_namespaced_service_account, "default"), "default SA")
    try:
        yield k
    finally:
        k.core.delete_namespace(ns)
        api.close()


def test_create_duplicate_and_server_side_validation(kube: Kube) -> None:
    created = kube.create_job("dup", completionMode="Indexed")
    assert created.metadata.uid
    # Kubernetes 1.20 predates Indexed Jobs and drops the field silently.
    assert created.spec.completion_mode is None

    with pytest.raises(ApiException) as e:
        kube.create_job("dup")
    assert e.value.status == 409

    bad = job_manifest("Bad_Name")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    res = bad["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["example.com/gpu"] = "4"
    with pytest.raises(ApiException) as e:
        kube.batch.create_namespaced_job(kube.ns, bad, dry_run="All")
    assert e.value.status == 422
    for expected in ("Bad_Name", "restartPolicy", "example.com/gpu"):
        assert expected in e.value.body

    ok = job_manifest("dry")
    kube.batch.create_namespaced_job(kube.ns, ok, dry_run="All")
    assert kube.gone(kube.batch.read_namespaced_job, "dry")


@pytest.mark.parametrize(("phase", "condition"), [("Succeeded", "Complete"), ("Failed", "Failed")])
def test_pod_phases_drive_the_job(kube: Kube, phase: str, condition: str) -> None:
    name = f"phase-{phase.lower()}"
    kube.create_job(name)
    pods = kube.wait_pods(name, 2)
    assert all(p.status.phase == "Pending" for p in pods)  # no kubelet, no scheduler
    for pod in pods if phase == "Succeeded" else pods[:1]:
        kube.set_phase(pod, phase)
    cond = kube.wait_condition(name, condition)
    if condition == "Failed":
        assert cond.reason == "BackoffLimitExceeded"
    else:
        assert kube.batch.read_namespaced_job_status(name, kube.ns).status.succeeded == 2


def test_foreground_delete_collects_pods_and_owned_service(kube: Kube) -> None:
    job = kube.create_job("gc")
    kube.wait_pods("gc", 2)
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "gc",
        "uid": job.metadata.uid,
        "blockOwnerDeletion": True,
    }
    kube.core.create_namespaced_service(
        kube.ns,
        {
            "metadata": {"name": "gc", "ownerReferences": [owner]},
            "spec": {
                "clusterIP": "None",
                "selector": {"distspec.io/app-id": "gc"},
                "ports": [{"port": 29500}],
            },
        },
    )
    kube.batch.delete_namespaced_job("gc", kube.ns, propagation_policy="Foreground")
    wait(
        lambda: (
            kube.gone(kube.batch.read_namespaced_job, "gc")
            and kube.gone(kube.core.read_namespaced_service, "gc")
            and not kube.pods("gc")
        ),
        "the Job, its pods and its Service to be garbage-collected",
    )
