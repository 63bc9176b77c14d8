"""The manifest checkers in tests/k8s_validate.py catch what they claim to catch."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.k8s_validate import (
    check_semantics,
    parse_quantity,
    validate_builtin,
    validate_crd,
)

pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
pytest.importorskip("jsonschema", reason="pip install jsonschema")

APP = "trainer-x7k2p"
GPU = "nvidia.com/gpu"


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": APP, "labels": {"distspec.io/app-id": APP}},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"distspec.io/app-id": APP},
            "ports": [{"name": "c10d", "port": 29500, "targetPort": 29500}],
        },
    }


def pod_spec(**extra: Any) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "ghcr.io/example/train:1.0",
                "command": ["torchrun"],
                "args": [
                    "--nnodes=2",
                    "--nproc-per-node=8",
                    "--node-rank=$(JOB_COMPLETION_INDEX)",
                    f"--rdzv-endpoint={APP}-0.{APP}:29500",
                    "train.py",
                ],
                "env": [
                    {
                        "name": "NODE_RANK",
                        "valueFrom": {
                            "fieldRef": {
                                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                            }
                        },
                    }
                ],
                "ports": [{"containerPort": 29500, "name": "c10d"}],
                "resources": {
                    # Strings: kubernetes 37.x rejects numbers here client-side.
                    "requests": {"cpu": "32", "memory": "256Gi", GPU: "8"},
                    "limits": {"cpu": "32", "memory": "256Gi", GPU: "8"},
                },
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            }
        ],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
        **extra,
    }


def job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": APP, "labels": {"distspec.io/app-id": APP}},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 0,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                    {
                        "action": "FailJob",
                        "onExitCodes": {"operator": "In", "values": [2, 126, 127]},
                    },
                ]
            },
            "template": {
                "metadata": {"labels": {"distspec.io/app-id": APP, "distspec.io/role": "trainer"}},
                "spec": pod_spec(subdomain=APP),
            },
        },
    }


def jobset() -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": APP, "labels": {"distspec.io/app-id": APP}},
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": "trainer",
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": {"distspec.io/role": "trainer"}},
                        "spec": {
                            "completionMode": "Indexed",
                            "completions": 2,
                            "parallelism": 2,
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {"labels": {"distspec.io/app-id": APP}},
                                "spec": pod_spec(),
                            },
                        },
                    },
                }
            ],
        },
    }


def volcano_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": APP},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 2,
            "queue": "default",
            "plugins": {"svc": [], "env": []},
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [
                {
                    "name": "trainer",
                    "replicas": 2,
                    "template": {
                        "metadata": {"labels": {"distspec.io/app-id": APP}},
                        "spec": pod_spec(),
                    },
                }
            ],
        },
    }


def container(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]["containers"][0]


# ------------------------------------------------------------------ good manifests


def test_good_service_and_indexed_job_pass_everything() -> None:
    docs = [job(), service()]
    for doc in docs:
        validate_builtin(doc)
    assert check_semantics(docs) == []


def test_good_jobset_passes() -> None:
    validate_crd(jobset())
    assert check_semantics([jobset()]) == []


def test_good_volcano_job_passes() -> None:
    validate_crd(volcano_job())
    assert check_semantics([volcano_job()]) == []


# ------------------------------------------------------------------ schemas


def test_builtin_rejects_unknown_field_in_every_version() -> None:
    bad = job()
    container(bad)["gpus"] = 8
    with pytest.raises(AssertionError) as e:
        validate_builtin(bad)
    msg = str(e.value)
    assert "1.29: spec/template/spec/containers/0" in msg
    assert "'gpus'" in msg
    assert msg.count("Additional properties are not allowed") == 2


def test_builtin_rejects_wrong_type_and_crds() -> None:
    bad = job()
    bad["spec"]["completions"] = "two"
    with pytest.raises(AssertionError, match="spec/completions: 'two' is not of type 'integer'"):
        validate_builtin(bad, versions=("1.33",))
    with pytest.raises(AssertionError, match="use validate_crd"):
        validate_builtin(jobset(), versions=("1.33",))


def test_crd_rejects_unknown_jobset_field() -> None:
    bad = jobset()
    bad["spec"]["replicatedJobs"][0]["replica"] = 2  # typo for `replicas`
    with pytest.raises(
        AssertionError, match=r"spec/replicatedJobs/0: Additional properties .*'replica'"
    ):
        validate_crd(bad)


def test_crd_rejects_unknown_field_deep_in_pod_template() -> None:
    bad = jobset()
    rj = bad["spec"]["replicatedJobs"][0]
    rj["template"]["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(AssertionError, match=r"containers/0: Additional properties .*'resource'"):
        validate_crd(bad)


def test_crd_rejects_wrong_types() -> None:
    bad = volcano_job()
    bad["spec"]["minAvailable"] = "two"
    bad["spec"]["policies"][0]["event"] = "PodExploded"
    with pytest.raises(AssertionError) as e:
        validate_crd(bad)
    assert "spec/minAvailable: 'two' is not of type 'integer'" in str(e.value)
    assert "spec/policies/0/event: 'PodExploded' is not one of" in str(e.value)


def test_crd_int_or_string_and_metadata() -> None:
    doc = jobset()
    doc["metadata"]["annotations"] = {"anything": "goes"}
    pod = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["resources"]["limits"]["cpu"] = 32  # int-or-string: an int
    validate_crd(doc)
    pod["containers"][0]["resources"]["limits"]["cpu"] = [32]
    with pytest.raises(AssertionError, match="limits/cpu"):
        validate_crd(doc)


def test_crd_checks_api_version_and_kind() -> None:
    doc = jobset()
    doc["apiVersion"] = "jobset.x-k8s.io/v1"
    with pytest.raises(AssertionError, match="not a known custom resource"):
        validate_crd(doc)


# ------------------------------------------------------------------ semantics


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("Service", "Trainer"),  # uppercase
        ("Service", "1trainer"),  # DNS-1035: must start with a letter
        ("Service", "trainer.x"),  # no dots in a label
        ("Service", "a" * 64),  # > 63
        ("Job", "trainer_x"),
        ("Job", "a" * 64),  # a subdomain, but the job-name label caps it at 63
    ],
)
def test_semantics_rejects_bad_names(kind: str, name: str) -> None:
    doc = service() if kind == "Service" else job()
    doc["metadata"]["name"] = name
    problems = check_semantics([doc])
    assert any("metadata.name" in p and repr(name) in p for p in problems), problems


def test_semantics_accepts_names_at_the_limits() -> None:
    svc = service()
    svc["metadata"]["name"] = "a" * 63
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a.b-c." + "d" * 200}}
    assert check_semantics([svc, cm]) == []


def test_semantics_rejects_indexed_hostname_over_63() -> None:
    doc = job()
    doc["metadata"]["name"] = "a" * 62
    assert any("hostname" in p for p in check_semantics([doc]))


@pytest.mark.parametrize(
    "labels",
    [
        {"distspec.io/app-id": "x" * 64},
        {"distspec.io/app-id": "-trainer"},
        {"Bad_Prefix.io/app": "x"},
        {"/app": "x"},
        {"app id": "x"},
    ],
)
def test_semantics_rejects_bad_labels(labels: dict[str, str]) -> None:
    doc = job()
    doc["metadata"]["labels"] = labels
    assert any("metadata.labels" in p for p in check_semantics([doc]))


@pytest.mark.parametrize("quantity", ["8Gb", "1.5.0", "ten", "64 Gi", "-1"])
def test_semantics_rejects_bad_quantities(quantity: str) -> None:
    doc = job()
    container(doc)["resources"]["requests"]["memory"] = quantity
    container(doc)["resources"]["limits"]["memory"] = quantity
    problems = check_semantics([doc])
    assert any("resources.requests['memory']" in p for p in problems), problems


def test_parse_quantity() -> None:
    assert parse_quantity("500m") == parse_quantity("0.5") == parse_quantity(0.5)
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1G") == parse_quantity("1e9") == 10**9
    assert parse_quantity(8) == parse_quantity("8")
    for bad in ("1gi", "Gi", "", True, None):
        with pytest.raises(ValueError):
            parse_quantity(bad)


def test_semantics_rejects_gpu_request_not_equal_limit() -> None:
    doc = job()
    container(doc)["resources"]["requests"][GPU] = 4
    problems = check_semantics([doc])
    assert any(f"{GPU} request 4 must equal its limit '8'" in p for p in problems), problems

    doc = job()
    del container(doc)["resources"]["limits"][GPU]
    assert any("must equal its limit '<unset>'" in p for p in check_semantics([doc]))

    doc = job()  # request omitted: it defaults to the limit, which is fine
    del container(doc)["resources"]["requests"][GPU]
    assert check_semantics([doc]) == []


def test_semantics_allows_cpu_overcommit_but_not_request_above_limit() -> None:
    doc = job()
    container(doc)["resources"]["requests"]["cpu"] = "16"
    assert check_semantics([doc]) == []
    container(doc)["resources"]["requests"]["cpu"] = "33"
    assert any("request cpu must be <= its limit" in p for p in check_semantics([doc]))


@pytest.mark.parametrize("policy", ["Always", None])
def test_semantics_rejects_job_restart_policy(policy: str | None) -> None:
    doc = job()
    doc["spec"]["template"]["spec"]["restartPolicy"] = policy
    assert any("restartPolicy" in p for p in check_semantics([doc]))
    js = jobset()
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = (
        policy
    )
    assert any("replicatedJobs[0]" in p and "restartPolicy" in p for p in check_semantics([js]))


def test_semantics_rejects_subdomain_mismatch() -> None:
    doc = job()
    doc["spec"]["template"]["spec"]["subdomain"] = "other"
    problems = check_semantics([doc, service()])
    assert any("'other' names no Service" in p for p in problems), problems

    del doc["spec"]["template"]["spec"]["subdomain"]
    assert any("subdomain: unset" in p for p in check_semantics([doc, service()]))


def test_semantics_rejects_service_not_headless_or_not_selecting() -> None:
    svc = service()
    del svc["spec"]["clusterIP"]
    assert any("must be 'None' (headless)" in p for p in check_semantics([job(), svc]))

    svc = service()
    svc["spec"]["selector"] = {"distspec.io/app-id": "someone-else"}
    assert any("not among the pod labels" in p for p in check_semantics([job(), svc]))

    svc = service()
    del svc["spec"]["selector"]
    assert any("selects no pods" in p for p in check_semantics([job(), svc]))


def test_semantics_pairs_by_namespace() -> None:
    svc = service()
    svc["metadata"]["namespace"] = "team-a"
    doc = job()
    doc["metadata"]["namespace"] = "team-b"
    assert any("names no Service in the same namespace" in p for p in check_semantics([doc, svc]))


def test_semantics_checks_crd_pod_templates() -> None:
    js = jobset()
    js["spec"]["replicatedJobs"][0]["name"] = "Trainer"
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["resources"]["requests"][GPU] = 7
    problems = check_semantics([js])
    assert any("replicatedJobs[0].name" in p for p in problems), problems
    assert any("nvidia.com/gpu request 7" in p for p in problems), problems

    vj = volcano_job()
    vj["spec"]["tasks"][0]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] = "64GB"
    assert any("sizeLimit: '64GB'" in p for p in check_semantics([vj]))


def test_inputs_are_not_mutated() -> None:
    docs = [job(), service(), jobset()]
    before = copy.deepcopy(docs)
    validate_builtin(docs[0], versions=("1.29",))
    validate_crd(docs[2])
    check_semantics(docs)
    assert docs == before
