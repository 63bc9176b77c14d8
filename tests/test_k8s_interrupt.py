"""Ctrl-C during ``run --wait`` on Kubernetes, end to end against a real API server
(1.20.2, scripts/k8s-apiserver): a real ``distspec`` process gets a real SIGINT.

As on Slurm and PBS (tests/cli/test_interrupt.py), the first Ctrl-C detaches and
says how to follow or cancel, the job stays; a second one (or
``--cancel-on-interrupt``) cancels it, and then nothing distspec created is left
on the API server: no Job, JobSet or Volcano Job, no Service, no pod.

What runs: the API server, the job and garbage-collector controllers (real). What
does not: a kubelet (pods stay Pending, which is all a job waiting to be
followed needs) and the JobSet/Volcano operators — for those flavours only their
CRDs are installed (tests/data/k8s-crds), so the objects are stored, followed and
deleted for real but no pods are made from them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.schedulers.test_kubernetes_apiserver import Cluster, cluster, install_crd, wait_for

pytestmark = pytest.mark.k8s_apiserver

kubernetes = pytest.importorskip("kubernetes", reason="pip install 'kubernetes>=30,<38'")
__all__ = ["cluster"]  # the fixture, used by name

BIN = Path(sys.executable).parent
Waiters = list[tuple[subprocess.Popen[str], list[str]]]
CRD = {"volcano": "batch.volcano.sh_jobs.yaml", "jobset": "jobset.x-k8s.io_jobsets.yaml"}
OPERATOR = {
    "volcano": ("batch.volcano.sh", "v1alpha1", "jobs"),
    "jobset": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
}


@pytest.fixture
def waiters() -> Iterator[Waiters]:
    """Started ``run --wait`` processes, killed at the end if still running (what they
    submitted goes with the module's namespace)."""
    started: Waiters = []
    yield started
    for proc, _ in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start(
    cluster: Cluster, tmp_path: Path, waiters: Waiters, flavor: str, *extra: str
) -> tuple[subprocess.Popen[str], list[str], str]:
    """``distspec run --wait`` of a 2-replica job, read until it follows the job."""
    if flavor in CRD:
        install_crd(cluster, CRD[flavor])
    proc = subprocess.Popen(
        [
            str(BIN / "distspec"),
            "run",
            "-s",
            "kubernetes",
            "-cfg",
            f"namespace={cluster.ns},kubeconfig={cluster.kubeconfig},flavor={flavor}",
            "--wait",
            "--log",
            *extra,
            "utils.sh",
            "--num_replicas",
            "2",
            "--image",
            "example.invalid/sleep:1",
            "--",
            "echo started; exec sleep 300",
        ],
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    waiters.append((proc, seen))
    read_until(proc, seen, "PENDING")  # submitted, and the wait loop has described it
    handle = re.search(r"kubernetes://\S+", "".join(seen))
    assert handle, seen
    return proc, seen, handle.group(0)


def read_until(proc: subprocess.Popen[str], seen: list[str], text: str) -> None:
    assert proc.stdout is not None
    while text not in "".join(seen):
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"ended before {text!r}:\n{''.join(seen)}")
        seen.append(line)


def finish(proc: subprocess.Popen[str], seen: list[str]) -> tuple[int, str]:
    assert proc.stdout is not None
    seen.append(proc.stdout.read())
    return proc.wait(timeout=120), "".join(seen)


def left_behind(cluster: Cluster, kid: str, flavor: str) -> list[str]:
    """Every object labelled with the app's id that is still on the API server:
    Jobs, JobSets/Volcano Jobs, Services, pods, ConfigMaps, Secrets."""
    selector = f"distspec.io/app-id={kid}"
    batch = kubernetes.client.BatchV1Api(cluster.api)
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    core = cluster.core
    found: list[Any] = []
    found += [f"job/{j.metadata.name}" for j in batch.list_namespaced_job(
        cluster.ns, label_selector=selector).items]  # fmt: skip
    for kind, lister in (
        ("service", core.list_namespaced_service),
        ("pod", core.list_namespaced_pod),
        ("configmap", core.list_namespaced_config_map),
        ("secret", core.list_namespaced_secret),
    ):
        found += [
            f"{kind}/{o.metadata.name}" for o in lister(cluster.ns, label_selector=selector).items
        ]
    if flavor in OPERATOR:
        group, version, plural = OPERATOR[flavor]
        items = custom.list_namespaced_custom_object(
            group, version, cluster.ns, plural, label_selector=selector
        )["items"]
        found += [f"{plural}.{group}/{o['metadata']['name']}" for o in items]
    return found


def state(handle: str, cwd: Path) -> str:
    proc = subprocess.run(
        [str(BIN / "distspec"), "status", handle],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.stdout.split(":")[0].strip()


def test_first_ctrl_c_detaches(
    cluster: Cluster, state_dir: Path, tmp_path: Path, waiters: Waiters
) -> None:
    proc, seen, handle = start(cluster, tmp_path, waiters, "job")
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc, seen)
    assert code == 130, out
    assert f"stopped following {handle}; the job goes on" in out
    assert f"distspec log -f {handle}" in out and f"distspec cancel {handle}" in out
    assert "cancelling" not in out
    kid = handle.rpartition(":")[2]
    assert any(o.startswith("job/") for o in left_behind(cluster, kid, "job"))
    assert state(handle, tmp_path) == "PENDING"  # no kubelet: its pods never start


@pytest.mark.parametrize("flavor", ["job", "volcano", "jobset"])
def test_second_ctrl_c_cancels_and_leaves_nothing(
    cluster: Cluster, state_dir: Path, tmp_path: Path, waiters: Waiters, flavor: str
) -> None:
    proc, seen, handle = start(cluster, tmp_path, waiters, flavor)
    kid = handle.rpartition(":")[2]
    assert left_behind(cluster, kid, flavor)
    if flavor in OPERATOR:
        made = operator_objects(cluster, kid, flavor)
    proc.send_signal(signal.SIGINT)
    read_until(proc, seen, "press Ctrl-C again")
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc, seen)
    assert code == 130, out
    assert f"cancelling {handle}" in out
    # Foreground deletion: the garbage collector removes pods and the owned Service
    # first, then the owner itself.
    wait_for(
        lambda: not left_behind(cluster, kid, flavor),
        f"every object of {kid} to be deleted",
        timeout=120,
    )
    assert state(handle, tmp_path) == "CANCELLED"
    if flavor in OPERATOR:
        wait_for(
            lambda: not any(exists() for exists in made),
            "the operator's Service and ConfigMap to be garbage-collected",
            timeout=120,
        )


def operator_objects(cluster: Cluster, kid: str, flavor: str) -> list[Any]:
    """What the operator would make for the app beside its pods — JobSet: a headless
    Service named after the JobSet; Volcano's svc plugin: a Service and a ConfigMap of
    host names — each owned by the JobSet/Volcano Job, as the operators make them (a
    stand-in: no operator runs here). Returns a probe per object: does it still exist?"""
    group, version, plural = OPERATOR[flavor]
    owner = kubernetes.client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        group, version, cluster.ns, plural, kid
    )
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": kid,
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    meta = {"name": kid, "ownerReferences": [ref]}
    core = cluster.core
    core.create_namespaced_service(
        cluster.ns, {"metadata": meta, "spec": {"clusterIP": "None", "selector": {"x": kid}}}
    )
    probes = [lambda: bool(core.list_namespaced_service(
        cluster.ns, field_selector=f"metadata.name={kid}").items)]  # fmt: skip
    if flavor == "volcano":
        core.create_namespaced_config_map(
            cluster.ns, {"metadata": {**meta, "name": f"{kid}-svc"}, "data": {"hosts": ""}}
        )
        probes.append(lambda: bool(core.list_namespaced_config_map(
            cluster.ns, field_selector=f"metadata.name={kid}-svc").items))  # fmt: skip
    assert all(probe() for probe in probes)
    return probes


def test_cancel_on_interrupt_cancels_at_once(
    cluster: Cluster, state_dir: Path, tmp_path: Path, waiters: Waiters
) -> None:
    proc, seen, handle = start(cluster, tmp_path, waiters, "job", "--cancel-on-interrupt")
    kid = handle.rpartition(":")[2]
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc, seen)
    assert code == 130, out
    assert f"cancelling {handle}" in out and "stopped following" not in out
    wait_for(
        lambda: not left_behind(cluster, kid, "job"),
        f"every object of {kid} to be deleted",
        timeout=120,
    )
