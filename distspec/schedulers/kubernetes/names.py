"""Every name the Kubernetes backend derives or sets: the DNS-safe forms of app ids
and role names (deterministic, within the API's length limits), the names of an
app's objects and of its rank-0 host, and the labels and annotations distspec puts
on what it creates."""

from __future__ import annotations

from distspec.frozen import frozen
from distspec.schedulers.kubernetes.options import Flavor
from distspec.specs.app import NAME_CHARS

__all__ = [
    "APP_ID_LABEL",
    "APP_NAME_LABEL",
    "COMPLETION_INDEX_ANNOTATION",
    "KUEUE_LABEL",
    "MANAGED_BY_LABEL",
    "MAX_NODES",
    "NAME",
    "REPLICA_OFFSET_ANNOTATION",
    "ROLE_ANNOTATION",
    "ROLE_LABEL",
    "Names",
    "dns_label",
    "k8s_id",
    "k8s_role",
    "label_value",
    "point_id",
    "rest_task",
    "split_app_id",
    "split_point_id",
]

#: The backend's name (the registry's key, the ``scheduler`` of its errors).
NAME = "kubernetes"

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
MAX_NODES = 9_999_999

_DNS_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-"


def dns_label(text: str, limit: int) -> str:
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
    return dns_label(app_id, _ID_MAX)


def k8s_role(role: str) -> str:
    """The DNS-safe form of a role name (container, replicatedJob and task name)."""
    return dns_label(role, _ROLE_MAX)


def rest_task(role: str) -> str:
    """The Volcano task of an elastic role's replicas 1.. (replica 0 is task ``k8s_role``)."""
    return f"{k8s_role(role)}-rest"


def split_app_id(app_id: str) -> tuple[str | None, str]:
    """``namespace:id`` -> (namespace, k8s id); a bare id has no namespace."""
    ns, sep, rest = app_id.partition(":")
    if not sep:
        return None, k8s_id(app_id)
    return (ns or None), k8s_id(rest)


def point_id(ns: str, kid: str, index: int) -> str:
    """``<namespace>:<id>:<index>``: the app id of index ``index`` (a sweep point) of the
    Indexed Job of the sweep array ``<namespace>:<id>``."""
    return f"{ns}:{kid}:{index}"


def split_point_id(app_id: str) -> tuple[str | None, str, int | None]:
    """(namespace, k8s id, index) of a sweep point's id (:func:`point_id`); the index is
    None for any other app id (``namespace:id`` or a bare id)."""
    ns, sep, rest = app_id.partition(":")
    kid, sep2, index = rest.rpartition(":")
    if sep and sep2 and index.isdigit() and index.isascii():
        return (ns or None), k8s_id(kid), int(index)
    found_ns, found_id = split_app_id(app_id)
    return found_ns, found_id, None


@frozen(kw_only=False)
class Names:
    """Every name derived from an app id: deterministic, DNS-1123, within length limits."""

    app_id: str  # the k8s-safe id

    @property
    def service(self) -> str:
        """The headless Service that gives the pods their DNS names: the app id itself."""
        return self.app_id

    @property
    def points(self) -> str:
        """The ConfigMap that holds a sweep array's points file."""
        return f"{self.app_id}-points"

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


def label_value(text: str) -> str:
    """``text`` as a label value: runs of characters a value cannot hold become '-', at
    most 63 characters, starting and ending with an alphanumeric (or empty)."""
    value = "".join(c if c in NAME_CHARS else "\0" for c in text)
    while "\0\0" in value:
        value = value.replace("\0\0", "\0")
    return value.replace("\0", "-")[:63].strip("_.-")
