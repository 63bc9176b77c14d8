"""The pure half of the Kubernetes backend: AppDef + options -> manifests (plain dicts).

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

import enum
import re
from collections.abc import Mapping

from distspec.errors import CompileError
from distspec.specs import macros
from distspec.specs.app import NAME_CHARS, AppDef, Role
from distspec.specs.frozen import FrozenDict, frozen
from distspec.specs.macros import Macro
from distspec.specs.mounts import BindMount, DeviceMount, VolumeMount
from distspec.specs.options import option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "APP_ID_LABEL",
    "MANAGED_BY_LABEL",
    "REPLICA_OFFSET_ANNOTATION",
    "ROLE_ANNOTATION",
    "ROLE_LABEL",
    "Flavor",
    "KubernetesOptions",
    "Names",
    "build_manifests",
    "k8s_escape",
    "k8s_id",
    "k8s_role",
    "rest_task",
]

SCHEDULER = "kubernetes"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
APP_ID_LABEL = "distspec.io/app-id"
APP_NAME_LABEL = "distspec.io/app-name"
ROLE_LABEL = "distspec.io/role"
#: The role's name as written in the AppDef (labels hold the DNS-safe form).
ROLE_ANNOTATION = "distspec.io/role-name"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Set by the job controller on every pod of an Indexed Job (1.21+).
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: On the pods of an elastic role's second Volcano task (see :func:`rest_task`): the
#: replica id is the task index plus this.
REPLICA_OFFSET_ANNOTATION = "distspec.io/replica-offset"

# Length budget so that every derived DNS label stays <= 63 characters, the
# longest being a Volcano pod of an elastic role's second task <id>-<role>-rest-<index>:
# 32 + 1 + 15 + 5 + 1 + 7 digits = 61 (a JobSet pod hostname
# <id>-<role>-<job index>-<pod index>: 58).
_ID_MAX = 32
_ROLE_MAX = 15
_MAX_NODES = 9_999_999

# Exit codes that mean "the command itself is wrong" (usage error, not
# executable, not found): retrying cannot help, so the job fails at once.
_FATAL_EXIT_CODES = (2, 126, 127)

# k8s.io/apimachinery resource.Quantity: a number and a binary/decimal SI suffix or exponent.
_QUANTITY = r"[+-]?(\d+\.?\d*|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?"

_TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class Flavor(str, enum.Enum):
    """Which API object runs the pods."""

    JOB = "job"
    JOBSET = "jobset"
    VOLCANO = "volcano"


@frozen
class KubernetesOptions:
    """Run options of the ``kubernetes`` backend (``-cfg key=value,...``)."""

    namespace: str = option("default", "Namespace to create the job in.")
    flavor: Flavor = option(
        Flavor.JOB,
        "job: Indexed Job + headless Service (vanilla Kubernetes >= 1.24); "
        "jobset: JobSet v1alpha2; volcano: Volcano Job (gang scheduling).",
    )
    queue: str | None = option(
        None,
        "Kueue LocalQueue (label kueue.x-k8s.io/queue-name) for job/jobset; "
        "the Volcano queue for volcano.",
    )
    service_account: str | None = option(None, "Service account the pods run as.")
    image_pull_secrets: tuple[str, ...] = option((), "Secrets for pulling the image (a;b).")
    image_pull_policy: str | None = option(None, "Always, IfNotPresent or Never.")
    node_selector: FrozenDict[str, str] = option(
        FrozenDict(), "Node labels the pods must match (k=v;k2=v2)."
    )
    tolerations: tuple[str, ...] = option(
        (), "Taints to tolerate: key[=value][:Effect];... (no value means operator Exists)."
    )
    priority_class: str | None = option(None, "PriorityClass of the pods.")
    labels: FrozenDict[str, str] = option(FrozenDict(), "Extra labels on every object and pod.")
    annotations: FrozenDict[str, str] = option(
        FrozenDict(), "Extra annotations on every object and pod."
    )
    gpu_resource: str = option(
        "nvidia.com/gpu",
        "Extended resource a GPU is counted in: nvidia.com/gpu, amd.com/gpu, gpu.intel.com/i915, ...",
    )
    shm_size: str | None = option(
        None, "Size limit of the memory-backed /dev/shm (a quantity, e.g. 16Gi); unset: no limit."
    )
    secret_env: FrozenDict[str, str] = option(
        FrozenDict(),
        "Env vars read from Secrets: NAME=secret:key;... (values never appear in the manifest).",
    )
    rdzv_port: int = option(29500, "Port of the rendezvous endpoint on the rank-0 pod.")
    kubeconfig: str | None = option(
        None, "Kubeconfig file for submit (default: $KUBECONFIG, ~/.kube/config, in-cluster)."
    )
    context: str | None = option(None, "Kubeconfig context for submit (default: current).")
    job_dir: str | None = option(
        None,
        "Job directory of Python callables, an fsspec URL (s3://bucket/prefix, gs://..., "
        "any protocol the image can read): pods see <job_dir>/<app id> as $DISTSPEC_JOB_DIR.",
    )
    unbuffered: bool = option(
        True,
        "Live logs: PYTHONUNBUFFERED=1 in every container (unless the role sets it), so "
        "`distspec log -f` shows Python output as it is written; false leaves it buffered.",
    )


# --------------------------------------------------------------------- names


_DNS_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-"


def _dns_label(text: str, limit: int) -> str:
    """A DNS-1035 label (lowercase alphanumerics and '-', starts with a letter) of <= limit chars.

    Idempotent: a valid label that fits comes back unchanged. Longer text keeps
    its head and its last 8 characters (the random part of an app id).
    """
    s = "".join(c if c in _DNS_CHARS else "-" for c in text.lower())
    while "--" in s:
        s = s.replace("--", "-")
    s = s.strip("-")
    if not s or not s[0].isalpha():
        s = f"x{s}" if s else "x"
    if len(s) > limit:
        tail = s[-8:].strip("-")
        head = s[: limit - len(tail) - 1].rstrip("-")
        s = f"{head}-{tail}"
    return s


def k8s_id(app_id: str) -> str:
    """The DNS-safe form of an app id, used as the JobSet/Volcano/Service name and label value."""
    return _dns_label(app_id, _ID_MAX)


def k8s_role(role: str) -> str:
    """The DNS-safe form of a role name (container, replicatedJob and task name)."""
    return _dns_label(role, _ROLE_MAX)


def rest_task(role: str) -> str:
    """The Volcano task of an elastic role's replicas 1.. (replica 0 is task ``k8s_role``)."""
    return f"{k8s_role(role)}-rest"


@frozen(kw_only=False)
class Names:
    """Every name derived from an app id: deterministic, DNS-1123, within length limits."""

    app_id: str  # the k8s-safe id

    @property
    def service(self) -> str:
        return self.app_id

    def job(self, role: str) -> str:
        """The batch/v1 Job of ``role`` (flavour job)."""
        return f"{self.app_id}-{k8s_role(role)}"

    def rank0_host(self, flavor: Flavor, role: str) -> str:
        """The DNS name of replica 0 of ``role``, as seen from a pod in the same namespace."""
        r = k8s_role(role)
        if flavor is Flavor.JOBSET:
            # <jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain = jobset>
            return f"{self.app_id}-{r}-0-0.{self.app_id}"
        # job: <job>-<completion index>.<service>; volcano: <job>-<task>-<index>.<job>
        return f"{self.app_id}-{r}-0.{self.app_id}"


# --------------------------------------------------------------------- macros

_NEEDS_ESCAPE = r"\$(?=[($]|\Z)"


def k8s_escape(literal: str) -> str:
    """``literal`` such that Kubernetes' ``$(VAR)`` expansion gives it back unchanged.

    Kubernetes turns ``$$`` into ``$`` and ``$(NAME)`` into a variable's value;
    any other ``$`` stays. So a ``$`` is doubled when a ``(`` or ``$`` follows it,
    or when it ends the piece (a runtime reference may follow it).
    """
    if "$" not in literal:
        return literal
    return re.compile(_NEEDS_ESCAPE).sub("$$", literal)


@frozen(kw_only=False)
class _Runtime:
    """A value Kubernetes fills in when the container starts: ``$(VAR)``."""

    var: str


def _expand(text: str, values: Mapping[Macro, str | _Runtime]) -> str:
    out = []
    for part in macros.split(text):
        value = values.get(part, part.token) if isinstance(part, Macro) else part
        out.append(f"$({value.var})" if isinstance(value, _Runtime) else k8s_escape(value))
    return "".join(out)


# --------------------------------------------------------------------- builder


def _index_var(flavor: Flavor) -> str:
    # JobSet runs Indexed Jobs, so the job controller sets JOB_COMPLETION_INDEX
    # there too; Volcano's env plugin sets VK_TASK_INDEX.
    return "VK_TASK_INDEX" if flavor is Flavor.VOLCANO else "JOB_COMPLETION_INDEX"


def _check(app: AppDef, opts: KubernetesOptions) -> None:
    fail = _fail
    seen: dict[str, str] = {}
    for role in app.roles:
        r = k8s_role(role.name)
        if r in seen:
            fail(f"roles {seen[r]!r} and {role.name!r} map to the same Kubernetes name {r!r}")
        seen[r] = role.name
        if role.num_replicas > _MAX_NODES:
            fail(f"role {role.name!r}: at most {_MAX_NODES} replicas")
        if role.elastic and opts.flavor is Flavor.VOLCANO:
            if rest_task(role.name) in {k8s_role(other.name) for other in app.roles}:
                fail(
                    f"role {role.name!r}: its elastic replicas run as Volcano task "
                    f"{rest_task(role.name)!r}, the name of another role"
                )
            if any(Macro.REPLICA_ID in macros.find(text) for text in (role.entrypoint, *role.args)):
                # Replica 0 is a task of its own, the rest a second task whose
                # VK_TASK_INDEX starts at 0 again: Kubernetes cannot add 1 to it.
                fail(
                    f"role {role.name!r}: ${{replica_id}} is not available to an elastic role "
                    "with flavor=volcano (replica 0 runs as a task of its own so that the "
                    "rendezvous host is always admitted); c10d numbers the nodes itself"
                )
        if role.elastic and opts.flavor is not Flavor.VOLCANO:
            fail(
                f"role {role.name!r} is elastic ({role.min_replicas}:{role.num_replicas}) but "
                f"flavor={opts.flavor.value} runs a fixed number of pods (completions = parallelism); "
                "use flavor=volcano (gang-schedules minAvailable pods) or a fixed -j NxM"
            )
        if _replaces_pods(role, opts) and _static_rendezvous(role):
            fail(
                f"role {role.name!r}: --max_retries with flavor=job replaces a failed pod "
                "alone, and the static rendezvous cannot take the new pod in; use "
                "--rdzv_backend c10d (auto does), or flavor=jobset or volcano (whole-job restarts)"
            )
        if opts.flavor is Flavor.VOLCANO and any(
            Macro.REPLICA_ID in macros.find(v) for v in role.env.values()
        ):
            # Volcano's env plugin appends VK_TASK_INDEX after the role's env,
            # and $(VAR) in an env value only sees variables defined before it.
            fail(
                f"role {role.name!r}: ${{replica_id}} in an env value is not supported with "
                "flavor=volcano; pass it in the arguments instead"
            )
        _check_mounts(role)
    for name in opts.secret_env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            fail(f"secret_env: {name[:40]!r} is not a valid environment variable name")
    for name, ref in opts.secret_env.items():
        secret, sep, key = ref.partition(":")
        # The value is never echoed: a user who pasted the token itself
        # (secret_env=HF_TOKEN=hf_...) must not see it in a terminal or CI log.
        if not sep or not secret or not key:
            fail(
                f"secret_env: the value for {name} must be SECRET:KEY (a Secret's name and "
                "key, not the secret itself; the value given is not shown)"
            )
        if not _is_subdomain(secret) or len(secret) > 253:
            fail(
                f"secret_env: the value for {name} must be SECRET:KEY, and SECRET a "
                "DNS-1123 subdomain (the value given is not shown)"
            )
        if not re.fullmatch(r"[-._a-zA-Z0-9]+", key) or len(key) > 253:
            fail(
                f"secret_env: the value for {name} must be SECRET:KEY, and KEY made of "
                "letters, digits, '-', '_', '.' (the value given is not shown)"
            )
        for role in app.roles:
            if name in role.env:
                fail(
                    f"{name} is set by both --env (role {role.name!r}) and secret_env; "
                    "keep one of them"
                )
    _check_api_names(app, opts)
    for spec in opts.tolerations:
        _toleration(spec)
    sizes = [("shm_size", opts.shm_size)] + [
        (f"mount {m.dst_path}", m.src.partition(":")[2])
        for role in app.roles
        for m in role.mounts
        if isinstance(m, VolumeMount) and m.src.startswith("emptyDir:")
    ]
    for what, size in sizes:
        if size and not re.compile(_QUANTITY).fullmatch(size):
            fail(f"{what}: {size!r} is not a Kubernetes quantity (e.g. 16Gi, 500M)")
        if size and size.startswith("-"):
            fail(f"{what}: {size!r} is negative; a size limit must be >= 0")
    if opts.rdzv_port < 1 or opts.rdzv_port > 65535:
        fail(f"rdzv_port {opts.rdzv_port} is not a port number")
    if opts.flavor is Flavor.VOLCANO and opts.queue is not None and not _is_subdomain(opts.queue):
        fail(f"queue {opts.queue!r} must be a DNS-1123 subdomain for Volcano")


def _fail(message: str) -> None:
    raise CompileError(SCHEDULER, message)


def _check_mounts(role: Role) -> None:
    """Mounts the API server or the kubelet would refuse, refused here: a device, a
    hostPath that is relative or has a '..' in it, two mounts at one path (or one at
    /dev/shm, where every pod gets its shared memory)."""
    import posixpath

    from distspec._text import quote

    seen = {"/dev/shm": "the pod's shared memory (shm_size)"}
    for mount in role.mounts:
        if isinstance(mount, DeviceMount):
            _fail(
                f"role {role.name!r}: device mounts ({quote(mount.src_path)}) need a device "
                "plugin on Kubernetes; request the device as a resource instead"
            )
            continue
        if isinstance(mount, BindMount) and (
            not mount.src_path.startswith("/") or ".." in mount.src_path.split("/")
        ):
            _fail(
                f"role {role.name!r}: bind mount src {quote(mount.src_path)} must be an "
                "absolute path on the node without '..' (a hostPath)"
            )
        dst = posixpath.normpath(mount.dst_path)
        dst = "/" + dst.lstrip("/")  # normpath keeps a leading '//'
        if dst in seen:
            _fail(
                f"role {role.name!r}: two mounts at {quote(dst)} ({seen[dst]} and "
                f"{quote(mount.src_path if isinstance(mount, BindMount) else mount.src)}); "
                "each mount needs its own dst"
            )
        seen[dst] = quote(mount.src_path if isinstance(mount, BindMount) else mount.src)


# The API server's validation rules (k8s.io/apimachinery/pkg/util/validation),
# checked here so that a dry run never prints a manifest it would reject.
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def _is_label(text: str) -> bool:
    """A DNS-1123 label: a namespace's form."""
    return len(text) <= 63 and bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", text))


def _key_problem(key: str) -> str | None:
    """Why ``key`` is not a qualified name ([prefix/]name), or None."""
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not _is_subdomain(prefix)):
        return "its prefix must be a DNS-1123 subdomain (lowercase, e.g. example.com/)"
    if not name or len(name) > 63 or not re.fullmatch(_LABEL_NAME, name):
        return (
            "its name must be 1-63 characters, alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def _value_problem(value: str) -> str | None:
    if value and (len(value) > 63 or not re.fullmatch(_LABEL_NAME, value)):
        return (
            "a label value must be at most 63 characters, alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric (or empty)"
        )
    return None


def _check_api_names(app: AppDef, opts: KubernetesOptions) -> None:
    fail = _fail
    if not _is_label(opts.namespace):
        fail(
            f"namespace {opts.namespace[:70]!r} must be a DNS-1123 label: at most 63 "
            "lowercase letters, digits and '-', starting and ending with a letter or digit"
        )
    for what, mapping, values in (
        ("labels", opts.labels, True),
        ("node_selector", opts.node_selector, True),
        ("annotations", opts.annotations, False),
    ):
        for key, value in mapping.items():
            problem = _key_problem(key)
            if problem:
                fail(f"{what}: key {key[:70]!r} is not a valid label key: {problem}")
            problem = _value_problem(value) if values else None
            if problem:
                fail(f"{what}: {key}={value[:70]!r}: {problem}")
    for what, name in (
        ("service_account", opts.service_account),
        ("priority_class", opts.priority_class),
        *(("image_pull_secrets", n) for n in opts.image_pull_secrets),
    ):
        if name is not None and (len(name) > 253 or not _is_subdomain(name)):
            fail(
                f"{what} {name[:70]!r} must be a DNS-1123 subdomain: lowercase letters, "
                "digits, '-' and '.', starting and ending with a letter or digit"
            )
    if opts.queue is not None and opts.flavor is not Flavor.VOLCANO:
        # Kueue's queue is a label value (kueue.x-k8s.io/queue-name).
        problem = _value_problem(opts.queue) or ("may not be empty" if not opts.queue else None)
        if problem:
            fail(f"queue {opts.queue[:70]!r} is a Kueue label value: {problem}")
    if opts.image_pull_policy is not None and opts.image_pull_policy not in _PULL_POLICIES:
        fail(
            f"image_pull_policy {opts.image_pull_policy[:40]!r} must be one of "
            + ", ".join(_PULL_POLICIES)
        )
    gpu = opts.gpu_resource
    problem = _key_problem(gpu)
    if problem or "/" not in gpu or gpu.rpartition("/")[0].endswith("kubernetes.io"):
        fail(
            f"gpu_resource {gpu[:70]!r} must be an extended resource name, DOMAIN/NAME "
            "outside kubernetes.io (e.g. nvidia.com/gpu, amd.com/gpu)"
            + (f": {problem}" if problem else "")
        )
    for spec in opts.tolerations:
        key = spec.partition(":")[0].partition("=")[0]
        problem = _key_problem(key)
        if problem:
            fail(f"toleration {spec[:70]!r}: key {key[:70]!r} is not a valid label key: {problem}")
    for role in app.roles:
        image = role.image
        if not image or any(c.isspace() for c in image) or image != image.strip():
            fail(
                f"role {role.name!r}: image {image[:70]!r} is not an image reference "
                "(it may not be empty or contain blanks)"
            )
        for mount in role.mounts:
            if (
                isinstance(mount, VolumeMount)
                and not mount.src.startswith("emptyDir:")
                and (len(mount.src) > 253 or not _is_subdomain(mount.src))
            ):
                fail(
                    f"role {role.name!r}: volume {mount.src[:70]!r} must name a "
                    "PersistentVolumeClaim, a DNS-1123 subdomain (lowercase letters, "
                    "digits, '-' and '.')"
                )


def _is_subdomain(text: str) -> bool:
    return bool(
        re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", text)
    )


def _toleration(spec: str) -> dict[str, Any]:
    body, _, effect = spec.partition(":")
    key, sep, value = body.partition("=")
    if not key or (effect and effect not in _TOLERATION_EFFECTS):
        _fail(
            f"toleration {spec!r}: expected key[=value][:Effect], Effect one of "
            + ", ".join(_TOLERATION_EFFECTS)
        )
    out: dict[str, Any] = {"key": key}
    if sep:
        out.update(operator="Equal", value=value)
    else:
        out["operator"] = "Exists"
    if effect:
        out["effect"] = effect
    return out


def _labels(names: Names, app: AppDef, opts: KubernetesOptions) -> dict[str, str]:
    labels = dict(opts.labels)
    labels.update(
        {
            MANAGED_BY_LABEL: "distspec",
            APP_ID_LABEL: names.app_id,
            APP_NAME_LABEL: _label_value(app.name),
        }
    )
    return labels


def _label_value(text: str) -> str:
    value = "".join(c if c in NAME_CHARS else "\0" for c in text)
    while "\0\0" in value:
        value = value.replace("\0\0", "\0")
    return value.replace("\0", "-")[:63].strip("_.-")


def _meta(name: str, opts: KubernetesOptions, labels: Mapping[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": opts.namespace, "labels": dict(labels)}
    if opts.annotations:
        meta["annotations"] = dict(opts.annotations)
    return meta


#: torch's opt-out of sharing the rendezvous TCPStore with the workers.
SHARED_STORE_OFF = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def _replaces_pods(role: Role, opts: KubernetesOptions) -> bool:
    """Whether a failed pod of ``role`` is replaced alone while the others run on: a
    multi-node torchrun role with retries under a plain Job (JobSet and Volcano
    restart the whole job instead)."""
    return (
        opts.flavor is Flavor.JOB
        and role.max_retries > 0
        and role.num_replicas > 1
        and role.entrypoint == "torchrun"
    )


def _static_rendezvous(role: Role) -> bool:
    """Whether the role's torchrun line asks for the static rendezvous."""
    args = list(role.args)
    return any(
        a == "--rdzv_backend" and args[i + 1 : i + 2] == ["static"] for i, a in enumerate(args)
    )


def _container(
    role: Role,
    app: AppDef,
    names: Names,
    opts: KubernetesOptions,
    values: Mapping[Macro, str | _Runtime],
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
    env += [{"name": k, "value": _expand(v, values)} for k, v in role.env.items()]
    if opts.unbuffered and "PYTHONUNBUFFERED" not in role.env:
        env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    if _replaces_pods(role, opts) and SHARED_STORE_OFF not in role.env:
        # A plain Job replaces a failed pod alone, and the new pod joins the pods that
        # kept running in a new c10d round. torch (2.13) shares the rendezvous store
        # with the workers by default, and then a node that was rank 0 before does not
        # publish the workers' store address again for the new round: the new pod
        # waits for it until the rendezvous times out. Without sharing, rank 0
        # publishes it every round (tests/schedulers/test_kubernetes_replacement.py).
        env.append({"name": SHARED_STORE_OFF, "value": "1"})
    if opts.job_dir:
        job_dir = opts.job_dir.rstrip("/") + "/" + Macro.APP_ID.token
        env.append({"name": "DISTSPEC_JOB_DIR", "value": _expand(job_dir, values)})
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
        else:  # rejected by _check
            continue
        vm: dict[str, Any] = {"name": vol_name, "mountPath": mount.dst_path}
        if mount.read_only:
            vm["readOnly"] = True
        mounts.append(vm)

    container: dict[str, Any] = {
        "name": k8s_role(role.name),
        "image": role.image,
        "command": [_expand(role.entrypoint, values)],
    }
    if role.args:
        container["args"] = [_expand(a, values) for a in role.args]
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
    return _dns_label(name, 15)


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


#: The node label named host types carry as a capability (distspec.specs.resources).
_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
#: A ``--name`` the job name had to shorten (components.dist.FULL_NAME_METADATA),
#: and the pod annotation that carries it.
_FULL_NAME_METADATA = "distspec.full_name"
FULL_NAME_ANNOTATION = "distspec.io/full-name"


def _pod_template(
    role: Role,
    app: AppDef,
    names: Names,
    opts: KubernetesOptions,
    values: Mapping[Macro, str | _Runtime],
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
        spec["tolerations"] = [_toleration(t) for t in opts.tolerations]
    if opts.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in opts.image_pull_secrets]
    spec["containers"] = [container]
    spec["volumes"] = volumes
    return {"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": spec}


def _pod_failure_policy(role: Role) -> dict[str, Any]:
    return {
        "rules": [
            # Preemption, eviction, node drain: not the program's fault, and
            # not counted against backoffLimit.
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {
                "action": "FailJob",
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


def macro_values(
    app: AppDef, role: Role, names: Names, opts: KubernetesOptions
) -> dict[Macro, str | _Runtime]:
    """What each macro becomes in ``role``'s container."""
    first = app.roles[0]
    return {
        Macro.APP_ID: names.app_id,
        Macro.REPLICA_ID: _Runtime(_index_var(opts.flavor)),
        Macro.NUM_REPLICAS: str(role.num_replicas),
        Macro.RANK0_HOST: names.rank0_host(opts.flavor, first.name),
        Macro.RDZV_PORT: str(opts.rdzv_port),  # each pod has its own address
        Macro.IMG_ROOT: "",
    }


def build_manifests(app: AppDef, opts: KubernetesOptions, *, app_id: str) -> list[dict[str, Any]]:
    """The objects to create, in order: for flavour ``job`` the Service, then one Job per role.

    Raises:
        CompileError: the app asks for something the flavour cannot do.
    """
    _check(app, opts)
    names = Names(k8s_id(app_id))
    labels = _labels(names, app, opts)
    if opts.flavor is Flavor.JOB:
        return _job_flavor(app, opts, names, labels)
    if opts.flavor is Flavor.JOBSET:
        return [_jobset(app, opts, names, labels)]
    return [_volcano(app, opts, names, labels)]


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
