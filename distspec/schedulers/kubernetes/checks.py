"""What the Kubernetes backend refuses at compile time, so that a dry run never prints
a manifest the API server would reject or a flavour cannot run: names and values
against the API server's validation rules, mounts, Secret references, quantities and
tolerations, and what each flavour can do with elastic roles, retries and
``${replica_id}``."""

from __future__ import annotations

import re

from distspec.errors import CompileError
from distspec.schedulers.kubernetes.names import MAX_NODES, NAME, k8s_role, rest_task
from distspec.schedulers.kubernetes.options import Flavor, KubernetesOptions
from distspec.specs import macros
from distspec.specs.faults import launcher
from distspec.specs.macros import Macro
from distspec.specs.mounts import BindMount, DeviceMount, VolumeMount

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.specs.app import AppDef, Role

__all__ = ["check_app", "replaces_pods", "toleration"]

# k8s.io/apimachinery resource.Quantity: a number and a binary/decimal SI suffix or exponent.
_QUANTITY = r"[+-]?(\d+\.?\d*|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?"

_TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def check_app(app: AppDef, opts: KubernetesOptions) -> None:
    """Raise :class:`CompileError` for anything in ``app`` or ``opts`` that the API server
    would reject or that the flavour cannot run."""
    fail = _fail
    seen: dict[str, str] = {}
    for role in app.roles:
        r = k8s_role(role.name)
        if r in seen:
            fail(f"roles {seen[r]!r} and {role.name!r} map to the same Kubernetes name {r!r}")
        seen[r] = role.name
        if role.num_replicas > MAX_NODES:
            fail(f"role {role.name!r}: at most {MAX_NODES} replicas")
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
        if replaces_pods(role, opts) and _static_rendezvous(role):
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
        toleration(spec)
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
    raise CompileError(NAME, message)


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


def toleration(spec: str) -> dict[str, Any]:
    """``key[=value][:Effect]`` as a pod's toleration; a malformed one is a CompileError."""
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


def replaces_pods(role: Role, opts: KubernetesOptions) -> bool:
    """Whether a failed pod of ``role`` is replaced alone while the others run on: a
    multi-node torchrun role with retries under a plain Job (JobSet and Volcano
    restart the whole job instead)."""
    return (
        opts.flavor is Flavor.JOB
        and role.max_retries > 0
        and role.num_replicas > 1
        and launcher(role) == "torchrun"
    )


def _static_rendezvous(role: Role) -> bool:
    """Whether the role's torchrun line asks for the static rendezvous."""
    args = list(role.args)
    return any(
        a == "--rdzv_backend" and args[i + 1 : i + 2] == ["static"] for i, a in enumerate(args)
    )
