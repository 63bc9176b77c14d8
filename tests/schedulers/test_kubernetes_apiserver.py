"""Kubernetes backend against a real API server: Kubernetes 1.20.2 on 127.0.0.1.

`scripts/k8s-apiserver` runs etcd, kube-apiserver and kube-controller-manager
(job + garbage-collector controllers), no kubelet and no scheduler: pods stay
Pending until a test patches `pods/status`, and there are no pod logs (those
are tested against tests/k8s_fake_server.py).

1.20 predates Indexed Jobs: it silently DROPS `completionMode`,
`podFailurePolicy` and `podReplacementPolicy`, so the Job comes back
NonIndexed, its pods carry no completion index and describe numbers replicas
in creation order. The manifests themselves are checked against the 1.29+
schemas offline (test_kubernetes.py).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from distspec.errors import CompileError, UsageError
from distspec.frozen import FrozenDict
from distspec.schedulers.api import Request
from distspec.schedulers.kubernetes import KubernetesScheduler
from distspec.specs.app import AppDef, Resource, Role
from distspec.specs.state import AppState
from tests.k8s_apiserver import require_apiserver

pytestmark = pytest.mark.k8s_apiserver

kubernetes = pytest.importorskip("kubernetes", reason="pip install 'kubernetes>=30,<38'")

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


class Cluster:
    def __init__(self, kubeconfig: str, ns: str) -> None:
        self.kubeconfig = kubeconfig
        self.ns = ns
        self.api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.batch = kubernetes.client.BatchV1Api(self.api)

    def pods(self, app: str) -> list[Any]:
        items: list[Any] = self.core.list_namespaced_pod(
            self.ns, label_selector=f"distspec.io/app-id={app}"
        ).items
        return items

    def set_phase(self, pod: Any, phase: str) -> None:
        self.core.patch_namespaced_pod_status(
            pod.metadata.name, self.ns, {"status": {"phase": phase}}
        )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    kubeconfig = require_apiserver()
    ns = f"distspec-k8s-{uuid.uuid4().hex[:8]}"
    c = Cluster(kubeconfig, ns)
    c.core.create_namespace({"metadata": {"name": ns}})
    try:
        yield c
    finally:
        c.core.delete_namespace(ns)
        c.api.close()


CRDS = Path(__file__).resolve().parents[1] / "data" / "k8s-crds"


def install_crd(cluster: Cluster, file: str) -> None:
    """Install one of tests/data/k8s-crds (cluster-wide; kept, as a cluster keeps its
    operators' CRDs) and wait until the API server serves it. Only the CRD: no
    operator runs, so its objects are stored and validated but nothing acts on them.

    One change for this old server: 1.20 refuses a CRD whose schema has
    ``default: ""`` (it reads the empty default as null: "in body must be of type
    string"); newer servers accept it. Those defaults (Secret/ConfigMap names, a
    gRPC probe's service) fill in fields our manifests never leave empty, so they
    are dropped here, and a list-map key that loses its default becomes required
    (as 1.20 demands); every other rule of the schema stays.
    """
    import yaml

    def strip_empty_defaults(node: Any) -> Any:
        if isinstance(node, dict):
            keys = node.get("x-kubernetes-list-map-keys")
            if keys and isinstance(node.get("items"), dict):
                items = node["items"]
                items["required"] = sorted(set(items.get("required", [])) | set(keys))
            return {
                k: strip_empty_defaults(v)
                for k, v in node.items()
                if not (k == "default" and v == "")
            }
        if isinstance(node, list):
            return [strip_empty_defaults(v) for v in node]
        return node

    body = strip_empty_defaults(yaml.safe_load((CRDS / file).read_text()))
    ext = kubernetes.client.ApiextensionsV1Api(cluster.api)
    try:
        ext.create_custom_resource_definition(body)
    except kubernetes.client.exceptions.ApiException as e:
        if e.status != 409:
            raise
    name = body["metadata"]["name"]

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_for(established, f"CRD {name} established")


@pytest.fixture
def sched(tmp_path: Path) -> KubernetesScheduler:
    return KubernetesScheduler("test", state_dir=tmp_path / "state")


def app(nodes: int = 2, retries: int = 0) -> AppDef:
    return AppDef(
        name="ddp",
        roles=(
            Role(
                name="trainer",
                entrypoint="torchrun",
                image="example.invalid/train:1",
                args=("--node-rank", "${replica_id}", "--rdzv-endpoint", "${rank0_host}:29500"),
                num_replicas=nodes,
                max_retries=retries,
                resource=Resource(cpu=1, gpu=8, mem_mb=1024),
            ),
        ),
    )


def request_for(
    sched: KubernetesScheduler, cluster: Cluster, app_id: str, nodes: int = 2, **opts: Any
) -> Request:
    options = sched.parse_options(
        {"namespace": cluster.ns, "kubeconfig": cluster.kubeconfig, **opts}
    )
    return sched.compile(app(nodes), options, app_id=app_id)


def test_submit_then_duplicate(sched: KubernetesScheduler, cluster: Cluster) -> None:
    app_id = sched.submit(request_for(sched, cluster, "dup-00000001"))
    assert app_id == f"{cluster.ns}:dup-00000001"
    job = cluster.batch.read_namespaced_job("dup-00000001-trainer", cluster.ns)
    # 1.20 drops what it does not know: the Job is NonIndexed there.
    assert job.spec.completion_mode is None
    assert job.spec.completions == job.spec.parallelism == 2
    svc = cluster.core.read_namespaced_service("dup-00000001", cluster.ns)
    assert svc.spec.cluster_ip == "None"
    assert svc.spec.publish_not_ready_addresses is True
    (owner,) = svc.metadata.owner_references
    assert (owner.kind, owner.uid) == ("Job", job.metadata.uid)
    with pytest.raises(UsageError, match=r"409"):
        sched.submit(request_for(sched, cluster, "dup-00000001"))


def test_server_side_dry_run(sched: KubernetesScheduler, cluster: Cluster) -> None:
    objs = sched.server_dry_run(request_for(sched, cluster, "dry-00000001"))
    assert [o["kind"] for o in objs] == ["Job", "Service"]
    assert objs[0]["metadata"]["uid"]  # defaulted by the server, yet nothing persisted
    jobs = cluster.batch.list_namespaced_job(
        cluster.ns, label_selector="distspec.io/app-id=dry-00000001"
    )
    assert jobs.items == []
    # distspec refuses a bad label value and pull policy itself, before any server...
    with pytest.raises(CompileError, match="node_selector"):
        request_for(sched, cluster, "dry-00000002", node_selector="pool=not a label!")
    with pytest.raises(CompileError, match="image_pull_policy"):
        request_for(sched, cluster, "dry-00000002", image_pull_policy="Sometimes")
    # ... and the server agrees: the same values written into a valid manifest get a 422.
    good = request_for(
        sched, cluster, "dry-00000002", node_selector="pool=ok", image_pull_policy="IfNotPresent"
    )
    text = good.render().replace("pool: ok", "pool: not a label!")
    text = text.replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Sometimes")
    assert text != good.render()
    bad = dataclasses.replace(good, files=FrozenDict({**good.files, good.main_file: text}))
    with pytest.raises(CompileError, match="422") as e:
        sched.server_dry_run(bad)
    assert "nodeSelector" in str(e.value) and "imagePullPolicy" in str(e.value)


@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_status_from_the_job_controller(
    sched: KubernetesScheduler, cluster: Cluster, outcome: str
) -> None:
    kid = f"st{outcome.lower()}-00000001"
    app_id = sched.submit(request_for(sched, cluster, kid))
    pods = wait_for(lambda: len(p := cluster.pods(kid)) == 2 and p, "2 pods")
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.PENDING
    # NonIndexed on 1.20: replicas numbered in creation order.
    assert [r.id for r in status.roles[0].replicas] == [0, 1]
    cluster.set_phase(pods[0], "Running")
    status = wait_for(
        lambda: (s := sched.describe(app_id)) and s.state is AppState.RUNNING and s, "RUNNING"
    )
    for pod in pods if outcome == "Succeeded" else pods[:1]:
        cluster.set_phase(pod, outcome)
    final = sched.wait(app_id, timeout=60)
    assert final is not None
    if outcome == "Succeeded":
        assert final.state is AppState.SUCCEEDED
    else:
        assert final.state is AppState.FAILED
        assert "BackoffLimitExceeded" in final.msg
        assert final.first_failure() is not None


def test_cancel_collects_pods_and_service(sched: KubernetesScheduler, cluster: Cluster) -> None:
    kid = "cancel-00000001"
    app_id = sched.submit(request_for(sched, cluster, kid))
    wait_for(lambda: len(cluster.pods(kid)) == 2, "2 pods")
    sched.cancel(app_id)

    def gone() -> bool:
        jobs = cluster.batch.list_namespaced_job(
            cluster.ns, label_selector=f"distspec.io/app-id={kid}"
        ).items
        svcs = cluster.core.list_namespaced_service(
            cluster.ns, label_selector=f"distspec.io/app-id={kid}"
        ).items
        return not jobs and not svcs and not cluster.pods(kid)

    wait_for(gone, "the Job, its pods and its Service to be garbage-collected")
    status = sched.describe(app_id)
    assert status is not None and status.state is AppState.CANCELLED
    sched.cancel(app_id)  # nothing left: a no-op


def test_list(
    sched: KubernetesScheduler, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", cluster.kubeconfig)
    app_id = sched.submit(request_for(sched, cluster, "list-00000001"))
    found = {s.app_id: s for s in sched.list()}
    assert app_id in found
    assert found[app_id].name == "ddp"


# ----------------------------------------------------------------------------- Volcano


def pruned(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Paths of ``sent`` that the server dropped (a structural CRD schema prunes
    unknown fields silently instead of rejecting them)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        out = []
        for key, value in sent.items():
            if key not in stored:
                out.append(f"{path}.{key}")
            else:
                out += pruned(value, stored[key], f"{path}.{key}")
        return out
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path]
        return [p for i, v in enumerate(sent) for p in pruned(v, stored[i], f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("min_nodes", [None, 2, 1], ids=["fixed", "elastic-2-4", "elastic-1-4"])
def test_volcano_job_against_its_crd(
    sched: KubernetesScheduler, cluster: Cluster, min_nodes: int | None
) -> None:
    """The Volcano Job (fixed and elastic) passes the API server's validation against
    Volcano's own CRD schema (tests/data/k8s-crds) and nothing in it is pruned; the
    elastic one keeps replica 0 (the rendezvous host) a task of its own."""
    import yaml

    install_crd(cluster, "batch.volcano.sh_jobs.yaml")
    role = dataclasses.replace(
        app(4).roles[0],
        args=("--nnodes", "x", "--rdzv-endpoint", "${rank0_host}:29500"),
        min_replicas=min_nodes,
    )
    options = sched.parse_options(
        {"namespace": cluster.ns, "kubeconfig": cluster.kubeconfig, "flavor": "volcano"}
    )
    kid = f"vc{min_nodes or 0}-00000001"
    request = sched.compile(AppDef(name="ddp", roles=(role,)), options, app_id=kid)
    (sent,) = [d for d in yaml.safe_load_all(request.render()) if d]
    (stored,) = sched.server_dry_run(request)
    assert stored["metadata"]["uid"]
    assert pruned(sent, stored) == []
    tasks = stored["spec"]["tasks"]
    if min_nodes is None:
        assert [(t["name"], t["replicas"], t["minAvailable"]) for t in tasks] == [("trainer", 4, 4)]
    else:
        assert [(t["name"], t["replicas"], t["minAvailable"]) for t in tasks] == [
            ("trainer", 1, 1),
            ("trainer-rest", 3, min_nodes - 1),
        ]
        assert stored["spec"]["minAvailable"] == min_nodes
    # The CRD's schema is really applied: a negative minAvailable is refused.
    bad_text = request.render().replace(
        f"minAvailable: {tasks[-1]['minAvailable']}", "minAvailable: -1"
    )
    bad = dataclasses.replace(request, files=FrozenDict({request.main_file: bad_text}))
    with pytest.raises(CompileError, match="422"):
        sched.server_dry_run(bad)


def volcano_pods(cluster: Cluster, job: dict[str, Any]) -> list[str]:
    """Create the pods Volcano's job controller would for ``job``: one per task index,
    named ``<job>-<task>-<index>``, from the task's template, with the controller's
    ``volcano.sh/task-index`` annotation. A stand-in: no Volcano controller runs here."""
    names = []
    for task in job["spec"]["tasks"]:
        for index in range(task["replicas"]):
            template = task["template"]
            name = f"{job['metadata']['name']}-{task['name']}-{index}"
            annotations = {
                **template["metadata"]["annotations"],
                "volcano.sh/task-index": str(index),
            }
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "labels": template["metadata"]["labels"],
                    "annotations": annotations,
                },
                "spec": {
                    **template["spec"],
                    "hostname": name,
                    "subdomain": job["metadata"]["name"],
                },
            }
            cluster.core.create_namespaced_pod(cluster.ns, pod)
            names.append(name)
    return names


def test_elastic_volcano_replicas_are_numbered_across_both_tasks(
    sched: KubernetesScheduler, cluster: Cluster
) -> None:
    """Replica 0 is the first task's pod (the rendezvous host); the second task's pods
    (task index 0..) are replicas 1..; describe and the failure report say so."""
    install_crd(cluster, "batch.volcano.sh_jobs.yaml")
    role = dataclasses.replace(
        app(4).roles[0], args=("--rdzv-endpoint", "${rank0_host}:29500"), min_replicas=2
    )
    options = sched.parse_options(
        {"namespace": cluster.ns, "kubeconfig": cluster.kubeconfig, "flavor": "volcano"}
    )
    kid = "vcel-00000001"
    app_id = sched.submit(sched.compile(AppDef(name="ddp", roles=(role,)), options, app_id=kid))
    stored = kubernetes.client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", cluster.ns, "jobs", kid
    )
    names = volcano_pods(cluster, stored)
    assert names[0] == f"{kid}-trainer-0"
    endpoint = stored["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["args"][1]
    assert endpoint.startswith(f"{names[0]}.{kid}:")
    status = sched.describe(app_id)
    assert status is not None
    replicas = status.roles[0].replicas
    assert [(r.id, r.log.split()[0]) for r in replicas] == [
        (0, f"pod/{kid}-trainer-0"),
        (1, f"pod/{kid}-trainer-rest-0"),
        (2, f"pod/{kid}-trainer-rest-1"),
        (3, f"pod/{kid}-trainer-rest-2"),
    ]
    sched.cancel(app_id)


def test_jobset_against_its_crd(sched: KubernetesScheduler, cluster: Cluster) -> None:
    """The JobSet passes the API server's validation against JobSet's CRD schema and
    nothing in it is pruned."""
    import yaml

    install_crd(cluster, "jobset.x-k8s.io_jobsets.yaml")
    request = request_for(sched, cluster, "js-00000001", flavor="jobset")
    (sent,) = [d for d in yaml.safe_load_all(request.render()) if d]
    (stored,) = sched.server_dry_run(request)
    assert stored["metadata"]["uid"]
    assert pruned(sent, stored) == []
    bad_text = request.render().replace(
        "enableDNSHostnames: true", "enableDNSHostnames: yes-please"
    )
    assert bad_text != request.render()
    bad = dataclasses.replace(request, files=FrozenDict({request.main_file: bad_text}))
    with pytest.raises(CompileError, match="422"):
        sched.server_dry_run(bad)
