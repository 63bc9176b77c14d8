"""The pure compile step of the Kubernetes backend: AppDef + options -> manifests (plain
dicts), and their YAML.

Three flavours, one rule for names and labels:

* ``job`` (default, vanilla Kubernetes >= 1.24, no operator): a headless Service
  plus one Indexed batch/v1 Job per role. Pods get the hostname ``<job>-<index>``
  and, through ``subdomain``, the DNS name ``<job>-<index>.<service>``.
* ``jobset`` (JobSet v1alpha2): one JobSet, one replicatedJob per role; JobSet
  creates the headless Service itself (named after the JobSet).
* ``volcano`` (batch.volcano.sh/v1alpha1): one Volcano Job, one task per role,
  gang-scheduled through ``minAvailable``; the ``svc`` plugin creates the
  headless Service (named after the job) and the ``env`` plugin sets
  ``VK_TASK_INDEX``.

Every pod template is written once, whatever the node count: the node rank is a
runtime value (``$(JOB_COMPLETION_INDEX)``, ``$(VK_TASK_INDEX)``) that
Kubernetes expands in ``command``/``args`` from the container's environment, so
a 1024-node job's manifest is the size of a 2-node one.

Nothing here imports yaml or the kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping

from distspec.schedulers.kubernetes.checks import check_app, replaces_pods, toleration
from distspec.schedulers.kubernetes.expansion import Runtime, expand, macro_values
from distspec.schedulers.kubernetes.names import (
    APP_ID_LABEL,
    APP_NAME_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    KUEUE_LABEL,
    MANAGED_BY_LABEL,
    REPLICA_OFFSET_ANNOTATION,
    ROLE_ANNOTATION,
    ROLE_LABEL,
    Names,
    dns_label,
    k8s_id,
    k8s_role,
    label_value,
    rest_task,
)
from distspec.schedulers.kubernetes.options import Flavor, KubernetesOptions
from distspec.specs import macros
from distspec.specs.macros import Macro
from distspec.specs.mounts import BindMount, VolumeMount

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.specs.app import AppDef, Role

__all__ = [
    "FULL_NAME_ANNOTATION",
    "POINTS_FILE",
    "POINTS_FILE_ENV",
    "POINTS_KEY",
    "SHARED_STORE_OFF",
    "build_manifests",
    "render_yaml",
    "sweep_manifests",
]

# Exit codes that mean "the command itself is wrong" (usage error, not
# executable, not found): retrying cannot help, so the job fails at once.
_FATAL_EXIT_CODES = (2, 126, 127)

#: torch's opt-out of sharing the rendezvous TCPStore with the workers.
SHARED_STORE_OFF = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"

#: The node label named host types carry as a capability (distspec.specs.resources).
_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
#: A ``--name`` the job name had to shorten (components.dist.FULL_NAME_METADATA),
#: and the pod annotation that carries it.
_FULL_NAME_METADATA = "distspec.full_name"
FULL_NAME_ANNOTATION = "distspec.io/full-name"

#: A sweep's points file: the key of its ConfigMap, where each pod sees it, and the
#: variable that says where (:func:`sweep_manifests`).
POINTS_KEY = "points"
POINTS_FILE = "/etc/distspec-sweep/points"
POINTS_FILE_ENV = "DISTSPEC_SWEEP_FILE"
_POINTS_VOLUME = "sweep-points"


def render_yaml(docs: list[dict[str, Any]], *, header: str = "") -> str:
    """Multi-document YAML in the documents' own key order (``kubectl apply -f -`` reads it)."""
    from distspec._yaml import dump_all

    return header + dump_all(docs)


def build_manifests(app: AppDef, opts: KubernetesOptions, *, app_id: str) -> list[dict[str, Any]]:
    """The objects to create, in order: for flavour ``job`` the Service, then one Job per role.

    Raises:
        CompileError: the app asks for something the flavour cannot do.
    """
    check_app(app, opts)
    names = Names(k8s_id(app_id))
    labels = _labels(names, app, opts)
    if opts.flavor is Flavor.JOB:
        return _job_flavor(app, opts, names, labels)
    if opts.flavor is Flavor.JOBSET:
        return [_jobset(app, opts, names, labels)]
    return [_volcano(app, opts, names, labels)]


def sweep_manifests(
    app: AppDef,
    opts: KubernetesOptions,
    *,
    app_id: str,
    values: Mapping[Macro, str | Runtime],
    points: str,
    completions: int,
    parallelism: int,
) -> list[dict[str, Any]]:
    """A sweep of one-pod points (:mod:`.array`): the ConfigMap that holds the points
    file ``points`` (line ``k + 1`` for point ``k`` of ``completions``), then the Indexed Job whose index ``k`` runs
    point ``k`` as one pod, with the macro ``values`` the caller gives. The file is
    mounted in each pod at :data:`POINTS_FILE` (``$DISTSPEC_SWEEP_FILE``).

    A point retries on its own (``backoffLimitPerIndex``: the role's ``max_retries``)
    and a command error fails its index alone (``FailIndex``), so the other points run
    on; the Job ends Failed when any index failed. No Service: a one-pod point is its
    own rank 0. At most ``parallelism`` points run at once.

    Raises:
        CompileError: the app asks for something the flavour cannot do.
    """
    check_app(app, opts)
    (role,) = app.roles
    names = Names(k8s_id(app_id))
    labels = _labels(names, app, opts)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(names.points, opts, labels),
        "data": {POINTS_KEY: points},
    }
    job_labels = {**labels, ROLE_LABEL: k8s_role(role.name)}
    if opts.queue:
        job_labels[KUEUE_LABEL] = opts.queue
    pod = _pod_template(role, app, names, opts, values, labels, subdomain=None)
    (container,) = pod["spec"]["containers"]
    container.setdefault("env", []).append({"name": POINTS_FILE_ENV, "value": POINTS_FILE})
    container["volumeMounts"].append(
        {"name": _POINTS_VOLUME, "mountPath": POINTS_FILE.rsplit("/", 1)[0], "readOnly": True}
    )
    pod["spec"]["volumes"].append({"name": _POINTS_VOLUME, "configMap": {"name": names.points}})
    spec = {
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": parallelism,
        # Kubernetes >= 1.29 (beta, on by default). No backoffLimit: with a per-index
        # limit it defaults to no limit on the Job as a whole.
        "backoffLimitPerIndex": role.max_retries,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": _pod_failure_policy(role, fatal="FailIndex"),
        "template": pod,
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(names.job(role.name), opts, job_labels),
        "spec": spec,
    }
    return [config_map, job]


def _job_flavor(
    app: AppDef, opts: KubernetesOptions, names: Names, labels: dict[str, str]
) -> list[dict[str, Any]]:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(names.service, opts, labels),
        "spec": {
            "clusterIP": "None",
            # Rendezvous starts before any pod is Ready: publish DNS records at once.
            "publishNotReadyAddresses": True,
            "selector": {APP_ID_LABEL: names.app_id},
            "ports": [
                {
                    "name": "rdzv",
                    "port": opts.rdzv_port,
                    "targetPort": opts.rdzv_port,
                    "protocol": "TCP",
                }
            ],
        },
    }
    docs: list[dict[str, Any]] = [service]
    for role in app.roles:
        job_labels = {**labels, ROLE_LABEL: k8s_role(role.name)}
        if opts.queue:
            job_labels[KUEUE_LABEL] = opts.queue
        pod = _pod_template(
            role,
            app,
            names,
            opts,
            macro_values(app, role, names, opts),
            labels,
            subdomain=names.service,
        )
        docs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": _meta(names.job(role.name), opts, job_labels),
                "spec": _job_spec(role, pod, backoff_limit=role.max_retries),
            }
        )
    return docs


def _jobset(
    app: AppDef, opts: KubernetesOptions, names: Names, labels: dict[str, str]
) -> dict[str, Any]:
    meta_labels = dict(labels)
    if opts.queue:
        meta_labels[KUEUE_LABEL] = opts.queue
    replicated = []
    for role in app.roles:
        pod = _pod_template(
            role, app, names, opts, macro_values(app, role, names, opts), labels, subdomain=None
        )
        replicated.append(
            {
                "name": k8s_role(role.name),
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {**labels, ROLE_LABEL: k8s_role(role.name)}},
                    # A failed child Job restarts the whole JobSet (failurePolicy),
                    # so the Job itself does not retry.
                    "spec": _job_spec(role, pod, backoff_limit=0),
                },
            }
        )
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _meta(names.app_id, opts, meta_labels),
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": max(r.max_retries for r in app.roles)},
            "replicatedJobs": replicated,
        },
    }


def _volcano(
    app: AppDef, opts: KubernetesOptions, names: Names, labels: dict[str, str]
) -> dict[str, Any]:
    tasks = []

    def policies() -> list[dict[str, Any]]:
        return [{"exitCode": code, "action": "AbortJob"} for code in _FATAL_EXIT_CODES]

    for role in app.roles:
        pod = _pod_template(
            role, app, names, opts, macro_values(app, role, names, opts), labels, subdomain=None
        )
        if not role.elastic:
            tasks.append(
                {
                    "name": k8s_role(role.name),
                    "replicas": role.num_replicas,
                    "minAvailable": role.num_replicas,
                    "policies": policies(),
                    "template": pod,
                }
            )
            continue
        # Elastic: a task's minAvailable admits *any* MIN of its pods, so pod 0 (the
        # rendezvous host, <id>-<role>-0) could be left out when capacity is short.
        # Replica 0 is therefore a task of its own with minAvailable 1, and the other
        # replicas an elastic task (pods <id>-<role>-rest-<i>, replicas 1..). Volcano's
        # gang check enforces every task's minAvailable when the job's minAvailable is
        # at least their sum (it is equal here), so no gang starts without pod 0.
        rest = _pod_template(
            role, app, names, opts, macro_values(app, role, names, opts), labels, subdomain=None
        )
        rest["metadata"]["annotations"][REPLICA_OFFSET_ANNOTATION] = "1"
        tasks.append(
            {
                "name": k8s_role(role.name),
                "replicas": 1,
                "minAvailable": 1,
                "policies": policies(),
                "template": pod,
            }
        )
        tasks.append(
            {
                "name": rest_task(role.name),
                "replicas": role.num_replicas - 1,
                "minAvailable": (role.min_replicas or role.num_replicas) - 1,
                "policies": policies(),
                "template": rest,
            }
        )
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        # Gang scheduling: no pod starts until this many can.
        "minAvailable": sum(t["minAvailable"] for t in tasks),
        "maxRetry": max(r.max_retries for r in app.roles),
        "plugins": {"svc": ["--publish-not-ready-addresses=true"], "env": []},
        "policies": [
            {"event": "PodEvicted", "action": "RestartJob"},
            {"event": "PodFailed", "action": "RestartJob"},
        ],
        "tasks": tasks,
    }
    if opts.queue:
        spec["queue"] = opts.queue
    if opts.priority_class:
        spec["priorityClassName"] = opts.priority_class
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": _meta(names.app_id, opts, labels),
        "spec": spec,
    }


def _labels(names: Names, app: AppDef, opts: KubernetesOptions) -> dict[str, str]:
    labels = dict(opts.labels)
    labels.update(
        {
            MANAGED_BY_LABEL: "distspec",
            APP_ID_LABEL: names.app_id,
            APP_NAME_LABEL: label_value(app.name),
        }
    )
    return labels


def _meta(name: str, opts: KubernetesOptions, labels: Mapping[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": opts.namespace, "labels": dict(labels)}
    if opts.annotations:
        meta["annotations"] = dict(opts.annotations)
    return meta


def _pod_template(
    role: Role,
    app: AppDef,
    names: Names,
    opts: KubernetesOptions,
    values: Mapping[Macro, str | Runtime],
    labels: Mapping[str, str],
    *,
    subdomain: str | None,
) -> dict[str, Any]:
    container, volumes = _container(role, app, names, opts, values)
    pod_labels = {**labels, ROLE_LABEL: k8s_role(role.name)}
    annotations = {**opts.annotations, ROLE_ANNOTATION: role.name}
    # --name EXPERIMENT/RUN (TorchX's form): the job is named RUN; the pods keep the whole name.
    full_name = app.metadata.get(_FULL_NAME_METADATA)
    if full_name is not None:
        annotations[FULL_NAME_ANNOTATION] = full_name
    spec: dict[str, Any] = {"restartPolicy": "Never"}
    if subdomain:
        spec["subdomain"] = subdomain
    if opts.flavor is Flavor.VOLCANO:
        spec["schedulerName"] = "volcano"
    if opts.service_account:
        spec["serviceAccountName"] = opts.service_account
    if opts.priority_class:
        spec["priorityClassName"] = opts.priority_class
    # A named host type's instance type (-h aws_p4d.24xlarge) selects its nodes, as
    # TorchX's Kubernetes scheduler does; -cfg node_selector adds to it and wins.
    selector = {k: v for k, v in role.resource.capabilities.items() if k == _INSTANCE_TYPE}
    selector.update(opts.node_selector)
    if selector:
        spec["nodeSelector"] = selector
    if opts.tolerations:
        spec["tolerations"] = [toleration(t) for t in opts.tolerations]
    if opts.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in opts.image_pull_secrets]
    spec["containers"] = [container]
    spec["volumes"] = volumes
    return {"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": spec}


def _pod_failure_policy(role: Role, *, fatal: str = "FailJob") -> dict[str, Any]:
    """Disruptions are not failures; an exit code that says the command itself is wrong
    ends the Job (``fatal="FailJob"``) or, in a sweep, the point's index (``FailIndex``)."""
    return {
        "rules": [
            # Preemption, eviction, node drain: not the program's fault, and
            # not counted against backoffLimit.
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {
                "action": fatal,
                "onExitCodes": {
                    "containerName": k8s_role(role.name),
                    "operator": "In",
                    "values": list(_FATAL_EXIT_CODES),
                },
            },
        ]
    }


def _job_spec(role: Role, pod: dict[str, Any], *, backoff_limit: int) -> dict[str, Any]:
    return {
        "completionMode": "Indexed",
        "completions": role.num_replicas,
        "parallelism": role.num_replicas,
        "backoffLimit": backoff_limit,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": _pod_failure_policy(role),
        "template": pod,
    }


def _container(
    role: Role,
    app: AppDef,
    names: Names,
    opts: KubernetesOptions,
    values: Mapping[Macro, str | Runtime],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    env: list[dict[str, Any]] = []
    if opts.flavor is not Flavor.VOLCANO and any(
        Macro.REPLICA_ID in macros.find(v) for v in role.env.values()
    ):
        # The job controller appends JOB_COMPLETION_INDEX after our env, but an
        # env value sees only variables defined before it: define it first, as
        # the controller does (it keeps a variable that is already there).
        env.append(
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
                    }
                },
            }
        )
    env += [{"name": k, "value": expand(v, values)} for k, v in role.env.items()]
    if opts.unbuffered and "PYTHONUNBUFFERED" not in role.env:
        env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    if replaces_pods(role, opts) and SHARED_STORE_OFF not in role.env:
        # A plain Job replaces a failed pod alone, and the new pod joins the pods that
        # kept running in a new c10d round. torch (2.13) shares the rendezvous store
        # with the workers by default, and then a node that was rank 0 before does not
        # publish the workers' store address again for the new round: the new pod
        # waits for it until the rendezvous times out. Without sharing, rank 0
        # publishes it every round (tests/schedulers/test_kubernetes_replacement.py).
        env.append({"name": SHARED_STORE_OFF, "value": "1"})
    if opts.job_dir:
        job_dir = opts.job_dir.rstrip("/") + "/" + Macro.APP_ID.token
        env.append({"name": "DISTSPEC_JOB_DIR", "value": expand(job_dir, values)})
    for name, ref in opts.secret_env.items():
        secret, _, key = ref.partition(":")
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})

    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    res = role.resource
    if res.cpu:
        requests["cpu"] = str(res.cpu)
    if res.mem_mb:
        requests["memory"] = limits["memory"] = f"{res.mem_mb}Mi"
    # Extended resources cannot be overcommitted: the API server wants the
    # limit equal to the request.
    if res.gpu:
        requests[opts.gpu_resource] = limits[opts.gpu_resource] = str(res.gpu)
    for device, count in res.devices.items():
        requests[device] = limits[device] = str(count)

    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": _shm(opts)}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for i, mount in enumerate(role.mounts):
        vol_name = f"mount-{i}"
        if isinstance(mount, BindMount):
            volumes.append({"name": vol_name, "hostPath": {"path": mount.src_path}})
        elif isinstance(mount, VolumeMount):
            volumes.append({"name": vol_name, **_volume_source(mount.src)})
        else:  # rejected by check_app
            continue
        vm: dict[str, Any] = {"name": vol_name, "mountPath": mount.dst_path}
        if mount.read_only:
            vm["readOnly"] = True
        mounts.append(vm)

    container: dict[str, Any] = {
        "name": k8s_role(role.name),
        "image": role.image,
        "command": [expand(role.entrypoint, values)],
    }
    if role.args:
        container["args"] = [expand(a, values) for a in role.args]
    if opts.image_pull_policy:
        container["imagePullPolicy"] = opts.image_pull_policy
    # A failed container's last log lines (80 lines / 2 KiB) go into its status, where
    # describe finds torchrun's root-cause report (the failed worker's exit code and
    # rank) even when the log itself can no longer be read (the node is gone).
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    if env:
        container["env"] = env
    ports = [{"name": "rdzv", "containerPort": opts.rdzv_port, "protocol": "TCP"}]
    ports += [
        {"name": _port_name(n), "containerPort": p, "protocol": "TCP"}
        for n, p in role.port_map.items()
        if p != opts.rdzv_port
    ]
    container["ports"] = ports
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    if resources:
        container["resources"] = resources
    container["volumeMounts"] = mounts
    return container, volumes


def _port_name(name: str) -> str:
    # IANA_SVC_NAME: <= 15 chars, lowercase alphanumerics and '-', one letter at least.
    return dns_label(name, 15)


def _shm(opts: KubernetesOptions) -> dict[str, Any]:
    out: dict[str, Any] = {"medium": "Memory"}
    if opts.shm_size:
        out["sizeLimit"] = opts.shm_size
    return out


def _volume_source(src: str) -> dict[str, Any]:
    """``emptyDir`` or ``emptyDir:<size>`` -> an emptyDir; anything else names a PVC."""
    kind, _, size = src.partition(":")
    if kind == "emptyDir":
        return {"emptyDir": {"sizeLimit": size} if size else {}}
    return {"persistentVolumeClaim": {"claimName": src}}
