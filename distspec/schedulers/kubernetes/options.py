"""The ``kubernetes`` backend's run options (``-cfg key=value,...``) and the
:class:`Flavor`, the API object that runs the pods."""

from __future__ import annotations

import enum

from distspec.frozen import FrozenDict, frozen
from distspec.specs.faults import FaultOptions
from distspec.specs.options import option

__all__ = ["Flavor", "KubernetesOptions"]


class Flavor(str, enum.Enum):
    """Which API object runs the pods."""

    JOB = "job"
    JOBSET = "jobset"
    VOLCANO = "volcano"


@frozen
class KubernetesOptions(FaultOptions):
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
        "Job directory, an fsspec URL the pods and this machine both reach (s3://bucket/prefix, "
        "gs://..., file:// on a shared volume): pods see <job_dir>/<app id> as "
        "$DISTSPEC_JOB_DIR (a callable's payload and results, the provenance record); "
        "snapshot=on needs it (the code travels as <job_dir>/snapshots/<tree id>.tar.gz).",
    )
    unbuffered: bool = option(
        True,
        "Live logs: PYTHONUNBUFFERED=1 in every container (unless the role sets it), so "
        "`distspec log -f` shows Python output as it is written; false leaves it buffered.",
    )
