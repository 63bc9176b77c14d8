"""Kubernetes backend, the pure half: manifests, names, macros, options, validation."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from distspec.errors import CompileError, OptionError
from distspec.schedulers.api import JobPaths, Request
from distspec.schedulers.kubernetes import KubernetesScheduler
from distspec.schedulers.kubernetes.expansion import k8s_escape
from distspec.schedulers.kubernetes.names import k8s_id, k8s_role
from distspec.schedulers.kubernetes.options import Flavor
from distspec.specs.app import AppDef, Resource, Role
from distspec.specs.mounts import BindMount, DeviceMount, VolumeMount
from tests.k8s_validate import check_semantics, validate_builtin, validate_crd

APP_ID = "ddp-1a2b3c4d"
FLAVORS = [f.value for f in Flavor]


def ddp(
    nodes: int = 2,
    gpus: int = 8,
    *,
    min_nodes: int | None = None,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    roles: int = 1,
    **role_kw: Any,
) -> AppDef:
    """What dist.ddp makes, written out so that these goldens do not move with the component."""
    nnodes = f"{min_nodes}:{nodes}" if min_nodes else str(nodes)
    return AppDef(
        name="ddp",
        roles=tuple(
            Role(
                name="trainer" if i == 0 else f"worker{i}",
                entrypoint="torchrun",
                image="ghcr.io/example/train:1.0",
                args=(
                    "--nnodes", nnodes,
                    "--nproc-per-node", str(gpus),
                    # c10d numbers nodes itself: torchrun_args passes no --node_rank
                    # to an elastic job (distspec/torchrun.py).
                    *(() if min_nodes else ("--node-rank", "${replica_id}")),
                    "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "${rank0_host}:29500",
                    "--rdzv-id", "${app_id}",
                    "train.py", *args,
                ),
                env=env or {"LOGLEVEL": "INFO"},
                num_replicas=nodes,
                min_replicas=min_nodes,
                resource=Resource(cpu=32, gpu=gpus, mem_mb=256 * 1024),
                max_retries=2,
                **role_kw,
            )
            for i in range(roles)
        ),
    )  # fmt: skip


@pytest.fixture(scope="module")
def sched() -> KubernetesScheduler:
    return KubernetesScheduler("test")


def compile_(sched: KubernetesScheduler, app: AppDef, **opts: Any) -> Request:
    return sched.compile(app, sched.parse_options(opts), app_id=APP_ID)


def docs_of(request: Request) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(request.render()) if d]


def validate_all(docs: list[dict[str, Any]]) -> None:
    """Schemas (built-in kinds strict at 1.29 and newest; CRDs via jsonschema) and semantics."""
    for doc in docs:
        if doc["apiVersion"] in ("v1", "batch/v1"):
            validate_builtin(doc)
        else:
            validate_crd(doc)
    assert check_semantics(docs) == []


# ----------------------------------------------------------------------------- goldens

CASES: dict[str, tuple[Callable[[], AppDef], dict[str, Any]]] = {
    "job-2x8": (lambda: ddp(2, 8), {}),
    "job-1x8": (lambda: ddp(1, 8), {}),
    "jobset-2x8": (lambda: ddp(2, 8), {"flavor": "jobset"}),
    "volcano-2x8": (lambda: ddp(2, 8), {"flavor": "volcano"}),
    "volcano-elastic-2-4x8": (lambda: ddp(4, 8, min_nodes=2), {"flavor": "volcano"}),
    "job-options": (
        lambda: ddp(
            2,
            4,
            mounts=(
                BindMount(src_path="/datasets", dst_path="/data", read_only=True),
                VolumeMount(src="ckpt-pvc", dst_path="/ckpt"),
                VolumeMount(src="emptyDir:50Gi", dst_path="/scratch"),
            ),
        ),
        {
            "namespace": "ml",
            "queue": "team-a",
            "service_account": "trainer",
            "image_pull_secrets": "regcred;other",
            "image_pull_policy": "IfNotPresent",
            "node_selector": "cloud.google.com/gke-accelerator=nvidia-h100;pool=gpu",
            "tolerations": "nvidia.com/gpu:NoSchedule;dedicated=ml:NoExecute",
            "priority_class": "high",
            "labels": "team=a",
            "annotations": "owner=me@example.com",
            "gpu_resource": "amd.com/gpu",
            "shm_size": "64Gi",
            "secret_env": "HF_TOKEN=hf-secret:token;WANDB_API_KEY=wandb:key",
        },
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str, sched: KubernetesScheduler, golden: Callable[[str, str], None]) -> None:
    make, opts = CASES[case]
    request = compile_(sched, make(), **opts)
    golden(f"kubernetes/{case}.yaml", request.render())


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_manifest_is_valid(case: str, sched: KubernetesScheduler) -> None:
    make, opts = CASES[case]
    validate_all(docs_of(compile_(sched, make(), **opts)))


@pytest.mark.parametrize("flavor", FLAVORS)
def test_two_roles_are_valid(flavor: str, sched: KubernetesScheduler) -> None:
    docs = docs_of(compile_(sched, ddp(2, 8, roles=2), flavor=flavor))
    validate_all(docs)
    if flavor == "job":
        assert [d["kind"] for d in docs] == ["Service", "Job", "Job"]
        # Every role's pods are under the one Service; rank 0 is the first role's.
        for job in docs[1:]:
            assert job["spec"]["template"]["spec"]["subdomain"] == docs[0]["metadata"]["name"]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_size_is_constant_in_the_node_count(flavor: str, sched: KubernetesScheduler) -> None:
    small = compile_(sched, ddp(2, 8), flavor=flavor).render()
    large = compile_(sched, ddp(1024, 8), flavor=flavor).render()
    # Only the digits of the node count differ: "2" -> "1024" a few times.
    assert len(large) - len(small) == 3 * large.count("1024")
    assert len(large) < 4096


def test_default_flavour_shape(sched: KubernetesScheduler) -> None:
    service, job = docs_of(compile_(sched, ddp(2, 8)))
    spec = job["spec"]
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2
    assert spec["backoffLimit"] == 2
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == service["metadata"]["name"] == APP_ID
    args = container["args"]
    assert args[args.index("--node-rank") + 1] == "$(JOB_COMPLETION_INDEX)"
    host = f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert args[args.index("--rdzv-endpoint") + 1] == f"{host}:29500"
    assert args[args.index("--rdzv-id") + 1] == APP_ID
    res = container["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "8"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[1]["onExitCodes"]["values"] == [2, 126, 127]


def _container_of(request: Request) -> dict[str, Any]:
    job = next(d for d in docs_of(request) if d["kind"] == "Job")
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def test_unspecified_cpu_and_memory_are_not_requested(sched: KubernetesScheduler) -> None:
    role = dataclasses.replace(ddp(1, 8).roles[0], resource=Resource(gpu=8))
    res = _container_of(compile_(sched, AppDef(name="ddp", roles=(role,))))["resources"]
    assert res == {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}
    role = dataclasses.replace(role, resource=Resource(cpu=4, mem_mb=2048))
    res = _container_of(compile_(sched, AppDef(name="ddp", roles=(role,))))["resources"]
    assert res == {"requests": {"cpu": "4", "memory": "2048Mi"}, "limits": {"memory": "2048Mi"}}


def test_unbuffered_by_default_unless_turned_off_or_set_by_the_role(
    sched: KubernetesScheduler,
) -> None:
    def env(app: AppDef, **opts: Any) -> dict[str, str]:
        return {
            e["name"]: e.get("value") for e in _container_of(compile_(sched, app, **opts))["env"]
        }

    assert env(ddp(1, 8))["PYTHONUNBUFFERED"] == "1"
    assert "PYTHONUNBUFFERED" not in env(ddp(1, 8), unbuffered="false")
    assert env(ddp(1, 8, env={"PYTHONUNBUFFERED": ""}))["PYTHONUNBUFFERED"] == ""


def test_rank0_host_per_flavour(sched: KubernetesScheduler) -> None:
    def endpoint(flavor: str) -> str:
        text = compile_(sched, ddp(2, 8), flavor=flavor).render()
        return next(line for line in text.splitlines() if ":29500" in line).strip("- ")

    # Indexed Job: <job>-<index>.<service>; JobSet: <jobset>-<rjob>-<job idx>-<pod idx>.<jobset>;
    # Volcano: <job>-<task>-<index>.<job> (svc plugin).
    assert endpoint("job") == f"{APP_ID}-trainer-0.{APP_ID}:29500"
    assert endpoint("jobset") == f"{APP_ID}-trainer-0-0.{APP_ID}:29500"
    assert endpoint("volcano") == f"{APP_ID}-trainer-0.{APP_ID}:29500"


def test_volcano_uses_its_task_index(sched: KubernetesScheduler) -> None:
    (job,) = docs_of(compile_(sched, ddp(2, 8), flavor="volcano"))
    task = job["spec"]["tasks"][0]
    args = task["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--node-rank") + 1] == "$(VK_TASK_INDEX)"
    assert job["spec"]["plugins"]["env"] == []
    assert "svc" in job["spec"]["plugins"]
    assert job["spec"]["minAvailable"] == task["minAvailable"] == task["replicas"] == 2


def test_volcano_elastic_gang_schedules_the_minimum_with_the_rendezvous_host(
    sched: KubernetesScheduler,
) -> None:
    """Replica 0 (the rendezvous host) is a task of its own with minAvailable 1, the
    rest an elastic task; the job's minAvailable equals the sum of the tasks', the
    condition under which Volcano's gang check enforces each task's minimum."""
    (job,) = docs_of(compile_(sched, ddp(4, 8, min_nodes=2), flavor="volcano"))
    first, rest = job["spec"]["tasks"]
    assert (first["name"], first["replicas"], first["minAvailable"]) == ("trainer", 1, 1)
    assert (rest["name"], rest["replicas"], rest["minAvailable"]) == ("trainer-rest", 3, 1)
    assert job["spec"]["minAvailable"] == 2 == first["minAvailable"] + rest["minAvailable"]
    # Volcano names pods <job>-<task>-<index>: the rendezvous host is the first task's pod.
    args = first["template"]["spec"]["containers"][0]["args"]
    endpoint = args[args.index("--rdzv-endpoint") + 1]
    assert endpoint == f"{APP_ID}-trainer-0.{APP_ID}:29500"
    assert rest["template"]["metadata"]["annotations"]["distspec.io/replica-offset"] == "1"
    assert "distspec.io/replica-offset" not in first["template"]["metadata"]["annotations"]
    assert first["template"]["spec"] == rest["template"]["spec"]


def test_volcano_elastic_from_one_node(sched: KubernetesScheduler) -> None:
    (job,) = docs_of(compile_(sched, ddp(3, 8, min_nodes=1), flavor="volcano"))
    assert [(t["replicas"], t["minAvailable"]) for t in job["spec"]["tasks"]] == [(1, 1), (2, 0)]
    assert job["spec"]["minAvailable"] == 1
    validate_all([job])


def test_volcano_elastic_refuses_replica_id(sched: KubernetesScheduler) -> None:
    app = ddp(4, 8, min_nodes=2, args=("--out", "/ckpt/${replica_id}"))
    with pytest.raises(CompileError, match=r"replica_id.*elastic role with flavor=volcano"):
        compile_(sched, app, flavor="volcano")


def test_volcano_elastic_task_name_clash(sched: KubernetesScheduler) -> None:
    app = ddp(4, 8, min_nodes=2, roles=2)
    clash = dataclasses.replace(app.roles[1], name="trainer-rest", min_replicas=None)
    app = dataclasses.replace(app, roles=(app.roles[0], clash))
    with pytest.raises(CompileError, match=r"task 'trainer-rest', the name of another role"):
        compile_(sched, app, flavor="volcano")


@pytest.mark.parametrize("flavor", ["job", "jobset"])
def test_elastic_is_a_compile_error_where_the_flavour_cannot(
    flavor: str, sched: KubernetesScheduler
) -> None:
    with pytest.raises(CompileError, match=r"elastic \(2:4\).*flavor=volcano"):
        compile_(sched, ddp(4, 8, min_nodes=2), flavor=flavor)


# ----------------------------------------------------------------------------- macros


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("plain", "plain"),
        ("$(HOME)", "$$(HOME)"),
        ("$$(HOME)", "$$$$(HOME)"),
        ("$HOME", "$HOME"),
        ("a$", "a$$"),
        ("$$", "$$$$"),
        ("cost: 5$ (net)", "cost: 5$ (net)"),
    ],
)
def test_escape(literal: str, expected: str) -> None:
    assert k8s_escape(literal) == expected


def _kubelet_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion (k8s.io/kubernetes/third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    out.append(env.get(name, text[i : end + 1]))
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def test_user_text_survives_kubernetes_expansion(sched: KubernetesScheduler) -> None:
    tricky = ("$(HOME)", "$$(X)", "a$", "$", "${not_a_macro}", "$(JOB_COMPLETION_INDEX)", "`$x`")
    _, job = docs_of(compile_(sched, ddp(2, 8, args=tricky)))
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    env = {"HOME": "/root", "X": "x", "JOB_COMPLETION_INDEX": "7"}
    expanded = [_kubelet_expand(a, env) for a in args]
    assert expanded[-len(tricky) :] == list(tricky)
    assert expanded[expanded.index("--node-rank") + 1] == "7"


def test_replica_id_in_env_is_defined_before_use(sched: KubernetesScheduler) -> None:
    _, job = docs_of(compile_(sched, ddp(2, 8, env={"RANK_DIR": "/out/${replica_id}"})))
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["name"] == "JOB_COMPLETION_INDEX"
    assert "job-completion-index" in env[0]["valueFrom"]["fieldRef"]["fieldPath"]
    assert env[1] == {"name": "RANK_DIR", "value": "/out/$(JOB_COMPLETION_INDEX)"}
    with pytest.raises(CompileError, match="env value"):
        compile_(sched, ddp(2, 8, env={"R": "${replica_id}"}), flavor="volcano")


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "app_id",
    [
        "ddp-1a2b3c4d",
        "My_Train.Job-0123abcd",
        "9lives-0123abcd",
        "a" * 120 + "-0123abcd",
        "x.y_z" * 20 + "-deadbeef",
    ],
)
def test_names_are_dns_safe_deterministic_and_idempotent(
    app_id: str, sched: KubernetesScheduler
) -> None:
    kid = k8s_id(app_id)
    assert kid == k8s_id(app_id) == k8s_id(kid)
    assert len(kid) <= 32 and kid[0].isalpha()
    if len(app_id) > 32:
        assert kid.endswith(app_id[-8:])
    for flavor in FLAVORS:
        request = sched.compile(
            ddp(9999, 8, roles=2), sched.parse_options({"flavor": flavor}), app_id=app_id
        )
        assert request.app_id == kid
        assert check_semantics(docs_of(request)) == []


def test_role_names_that_collide_are_rejected(sched: KubernetesScheduler) -> None:
    app = ddp(2, 8, roles=2)
    app = dataclasses.replace(
        app,
        roles=(
            dataclasses.replace(app.roles[0], name="Train_er"),
            dataclasses.replace(app.roles[1], name="train.er"),
        ),
    )
    assert k8s_role("Train_er") == k8s_role("train.er")
    with pytest.raises(CompileError, match="same Kubernetes name"):
        compile_(sched, app)


def test_labels_carry_app_id_role_and_replica_source(sched: KubernetesScheduler) -> None:
    service, job = docs_of(compile_(sched, ddp(2, 8)))
    for meta in (service["metadata"], job["metadata"], job["spec"]["template"]["metadata"]):
        assert meta["labels"]["distspec.io/app-id"] == APP_ID
    assert job["spec"]["template"]["metadata"]["labels"]["distspec.io/role"] == "trainer"
    # The replica index is the controller's: batch.kubernetes.io/job-completion-index.
    assert job["spec"]["completionMode"] == "Indexed"


# ----------------------------------------------------------------------------- options


def test_options(sched: KubernetesScheduler) -> None:
    make, opts = CASES["job-options"]
    service, job = docs_of(compile_(sched, make(), **opts))
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert job["metadata"]["namespace"] == service["metadata"]["namespace"] == "ml"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert pod["serviceAccountName"] == "trainer"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100", "pool": "gpu"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
    ]
    assert pod["priorityClassName"] == "high"
    assert container["resources"]["limits"]["amd.com/gpu"] == "4"
    assert "nvidia.com/gpu" not in json.dumps(container)
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod["volumes"]
    assert {"name": "mount-0", "hostPath": {"path": "/datasets"}} in pod["volumes"]
    assert {"name": "mount-1", "persistentVolumeClaim": {"claimName": "ckpt-pvc"}} in pod["volumes"]
    assert {"name": "mount-2", "emptyDir": {"sizeLimit": "50Gi"}} in pod["volumes"]
    assert {"name": "mount-0", "mountPath": "/data", "readOnly": True} in container["volumeMounts"]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-secret", "key": "token"}},
    } in container["env"]
    assert job["metadata"]["labels"]["team"] == "a"
    assert pod is not None and job["metadata"]["annotations"]["owner"] == "me@example.com"


def test_volcano_queue_and_kueue_label(sched: KubernetesScheduler) -> None:
    (vc,) = docs_of(compile_(sched, ddp(2, 8), flavor="volcano", queue="research"))
    assert vc["spec"]["queue"] == "research"
    assert "kueue.x-k8s.io/queue-name" not in vc["metadata"]["labels"]
    (js,) = docs_of(compile_(sched, ddp(2, 8), flavor="jobset", queue="research"))
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "research"


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"tolerations": "key:Sometimes"}, "toleration"),
        ({"secret_env": "TOKEN=justasecret"}, "SECRET:KEY"),
        ({"secret_env": "1BAD=s:k"}, "environment variable"),
        ({"rdzv_port": "70000"}, "port"),
        ({"shm_size": "lots"}, "quantity"),
    ],
)
def test_bad_options_are_compile_errors(
    opts: dict[str, str], match: str, sched: KubernetesScheduler
) -> None:
    with pytest.raises(CompileError, match=match):
        compile_(sched, ddp(2, 8), **opts)


def test_unknown_flavour_is_an_option_error(sched: KubernetesScheduler) -> None:
    with pytest.raises(OptionError, match="job, jobset, volcano"):
        sched.parse_options({"flavor": "mpi"})


def test_device_mounts_are_refused(sched: KubernetesScheduler) -> None:
    app = ddp(2, 8, mounts=(DeviceMount(src_path="/dev/fuse", dst_path="/dev/fuse"),))
    with pytest.raises(CompileError, match="device"):
        compile_(sched, app)


def test_secret_values_never_appear(sched: KubernetesScheduler) -> None:
    text = compile_(sched, ddp(2, 8), secret_env="HF_TOKEN=hf:token").render()
    assert "secretKeyRef" in text and "value: hf" not in text


# ----------------------------------------------------------------------------- dry run


def test_dryrun_output_is_kubectl_ready(sched: KubernetesScheduler) -> None:
    text = compile_(sched, ddp(2, 8)).render()
    assert text.startswith("# distspec app ")
    assert "kubectl delete -n default job,service -l distspec.io/app-id=ddp-1a2b3c4d" in text
    docs = docs_of(compile_(sched, ddp(2, 8)))
    assert [d["kind"] for d in docs] == ["Service", "Job"]
    # No ownerReference: kubectl cannot know the Job's uid (submit adds it).
    assert all("ownerReferences" not in d["metadata"] for d in docs)


# ----------------------------------------------------------------------------- contract


@pytest.mark.parametrize("job_dir", ["s3://bucket/prefix", "s3://bucket/prefix/"])
def test_job_paths_of_a_request_with_a_job_dir(sched: KubernetesScheduler, job_dir: str) -> None:
    request = compile_(sched, ddp(2, 8), job_dir=job_dir)
    paths = sched.job_paths(f"default:{APP_ID}", request)
    assert paths == JobPaths(folder=f"s3://bucket/prefix/{APP_ID}", log_pattern=None)
    # The folder the pods see as $DISTSPEC_JOB_DIR.
    (job,) = [d for d in docs_of(request) if d["kind"] == "Job"]
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DISTSPEC_JOB_DIR", "value": paths.folder} in env


def test_job_paths_without_a_job_dir_is_none(sched: KubernetesScheduler) -> None:
    assert sched.job_paths(f"default:{APP_ID}", compile_(sched, ddp(2, 8))) is None
    # No request, and no state dir to keep a record in.
    assert sched.job_paths(f"default:{APP_ID}") is None


def test_capabilities_say_container_images_detached_jobs_nothing_to_prune() -> None:
    caps = KubernetesScheduler.capabilities
    assert (caps.image, caps.interactive, caps.prunable) == ("container", False, False)
    assert caps.needs_image and not caps.shared_files


def test_cli_dryrun_imports_no_kubernetes_client(state_dir: Any) -> None:
    code = (
        "import sys\n"
        "from distspec.cli.main import main\n"
        "sys.argv = ['distspec', 'run', '-s', 'kubernetes', '--dryrun', 'dist.ddp', '-j', '2x8',"
        " '--image', 'img:1', '--script', 'train.py']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "bad = sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.'))\n"
        "print('KUBERNETES_MODULES', bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "kind: Job" in out
    assert "KUBERNETES_MODULES []" in out


def test_compile_module_imports_no_yaml_at_import() -> None:
    code = (
        "import sys\nimport distspec.schedulers.kubernetes\n"
        "print(sorted(m for m in ('yaml', 'kubernetes') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.strip() == "[]"


@given(st.text(alphabet="aZ9_.-%$ é", max_size=80))
def test_name_sanitisers_agree_with_their_regex_definitions(text: str) -> None:
    from distspec.schedulers.kubernetes import names

    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    assert names.label_value(text) == re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", label)
    dns = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", text.lower())).strip("-")
    if dns and dns[0].isalpha() and len(dns) <= 40:
        assert names.dns_label(text, 40) == dns
    assert k8s_escape(text.replace("$", "")) == text.replace("$", "")
