"""A Kubernetes sweep array against a real API server (Kubernetes 1.20.2, see
test_kubernetes_apiserver.py): the ConfigMap and the Indexed Job are accepted and
stored as sent, the ConfigMap is owned by the Job, one point is cancelled while the
others stay, and cancelling the array takes everything.

1.20 drops what it does not know (``completionMode``, ``backoffLimitPerIndex``,
``podFailurePolicy``): its Job is NonIndexed and its pods carry no completion index,
so describe numbers them in creation order. The 1.29+ schemas are checked offline
(test_kubernetes_array.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distspec.schedulers.api import Points, Request
from distspec.schedulers.kubernetes import KubernetesScheduler
from distspec.schedulers.kubernetes.array import CANCELLED
from distspec.specs.app import AppDef, Resource, Role
from distspec.specs.state import AppState
from tests.k8s_apiserver import require_apiserver
from tests.schedulers.test_kubernetes_apiserver import Cluster, wait_for

pytestmark = pytest.mark.k8s_apiserver

kubernetes = pytest.importorskip("kubernetes", reason="pip install 'kubernetes>=30,<38'")

POINTS = Points(names=("lr",), values=(("0.1",), ("0.01",), ("it's $x",)), first=0, max_parallel=2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    kubeconfig = require_apiserver()
    ns = f"distspec-sweep-{uuid.uuid4().hex[:8]}"
    c = Cluster(kubeconfig, ns)
    c.core.create_namespace({"metadata": {"name": ns}})
    try:
        yield c
    finally:
        c.core.delete_namespace(ns)
        c.api.close()


@pytest.fixture
def sched(tmp_path: Path) -> KubernetesScheduler:
    return KubernetesScheduler("test", state_dir=tmp_path / "state")


def array_request(sched: KubernetesScheduler, cluster: Cluster, kid: str) -> Request:
    role = Role(
        name="trainer",
        entrypoint="python",
        image="example.invalid/train:1",
        args=("train.py", "--lr", "{{lr}}", "--out", "/ckpt/${app_id}"),
        env={"LR": "{{lr}}"},
        resource=Resource(cpu=1, mem_mb=64),
        max_retries=1,
    )
    options = sched.parse_options({"namespace": cluster.ns, "kubeconfig": cluster.kubeconfig})
    return sched.compile_array(
        AppDef(name="sweep", roles=(role,)), options, app_id=kid, points=POINTS
    )


def config_map(cluster: Cluster, kid: str) -> Any:
    return cluster.core.read_namespaced_config_map(f"{kid}-points", cluster.ns)


def test_server_dry_run_accepts_the_array(sched: KubernetesScheduler, cluster: Cluster) -> None:
    request = array_request(sched, cluster, "sweepdry-00000001")
    objs = sched.server_dry_run(request)
    assert [o["kind"] for o in objs] == ["Job", "ConfigMap"]
    assert objs[1]["data"]["points"].count("\n") == 3
    jobs = cluster.batch.list_namespaced_job(
        cluster.ns, label_selector="distspec.io/app-id=sweepdry-00000001"
    )
    assert jobs.items == []


def test_submit_describe_cancel_a_point_then_the_array(
    sched: KubernetesScheduler, cluster: Cluster
) -> None:
    kid = "sweep-00000001"
    request = array_request(sched, cluster, kid)
    array_id = sched.submit(request)
    assert array_id == f"{cluster.ns}:{kid}"
    job = cluster.batch.read_namespaced_job(f"{kid}-trainer", cluster.ns)
    assert (job.spec.completions, job.spec.parallelism) == (3, 2)
    container = job.spec.template.spec.containers[0]
    assert container.command[:2] == ["sh", "-c"] and container.args is None
    cm = config_map(cluster, kid)
    assert (
        cm.data["points"].splitlines()[2]
        == "DISTSPEC_SWEEP_INDEX=2 DISTSPEC_SWEEP_lr='it'\"'\"'s $x'"
    )
    (owner,) = cm.metadata.owner_references
    assert (owner.kind, owner.uid) == ("Job", job.metadata.uid)

    # parallelism 2: two pods, point 2 waits for its turn. The 1.20 job controller
    # gives them no completion index: they get the annotation a newer one sets, so that
    # the pod that replaces a deleted one (no index) is not taken for them.
    pods = wait_for(lambda: len(p := cluster.pods(kid)) == 2 and p, "2 pods")
    first = sorted(pods, key=lambda p: p.metadata.name)
    for index, pod in enumerate(first):
        annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
        cluster.core.patch_namespaced_pod(
            pod.metadata.name, cluster.ns, {"metadata": {"annotations": annotations}}
        )
    points = [sched.point_id(array_id, request, i) for i in range(3)]
    assert points == [f"{cluster.ns}:{kid}:{i}" for i in range(3)]
    found = sched.describe_many(points)
    assert [s.state if s else None for s in found.values()] == [AppState.PENDING] * 3
    whole = sched.describe(array_id)
    assert whole is not None and whole.state is AppState.PENDING

    # Cancel point 1: its line is marked, its pod deleted; the others stay as they were.
    cluster.set_phase(first[0], "Running")
    sched.cancel(points[1])
    lines = config_map(cluster, kid).data["points"].splitlines()
    assert [ln.startswith(CANCELLED) for ln in lines] == [False, True, False]
    names = {p.metadata.name for p in cluster.pods(kid) if not p.metadata.deletion_timestamp}
    assert first[1].metadata.name not in names and first[0].metadata.name in names
    status = sched.describe(points[1])
    assert status is not None and status.state is AppState.CANCELLED
    status = sched.describe(points[0])
    assert status is not None and status.state is AppState.RUNNING

    # Cancel the array: the Job, its pods and (garbage-collected) its ConfigMap go.
    sched.cancel(array_id)

    def gone() -> bool:
        jobs = cluster.batch.list_namespaced_job(
            cluster.ns, label_selector=f"distspec.io/app-id={kid}"
        ).items
        cms = cluster.core.list_namespaced_config_map(
            cluster.ns, label_selector=f"distspec.io/app-id={kid}"
        ).items
        return not jobs and not cms and not cluster.pods(kid)

    wait_for(gone, "the Job, its pods and its ConfigMap to be deleted")
    found = sched.describe_many(points)
    assert [s.state if s else None for s in found.values()] == [AppState.CANCELLED] * 3
    sched.cancel(points[2])  # nothing left: a no-op
