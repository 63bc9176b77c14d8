"""The Kubernetes backend: Indexed Job + headless Service, or JobSet, or Volcano.

Each replica is a pod.

The pure half, AppDef + options -> manifests:

- :mod:`.options`: :class:`KubernetesOptions` (``-cfg``) and the :class:`Flavor`;
- :mod:`.names`: the names, labels and annotations derived from an app id;
- :mod:`.checks`: what the API server or a flavour would refuse, refused at compile time;
- :mod:`.expansion`: macros as literals or ``$(VAR)`` references;
- :mod:`.manifest`: the pod template and the Job / JobSet / Volcano Job, as YAML;
- :mod:`.array`: a sweep of one-pod points as one Indexed Job and the ConfigMap of its
  points.

The effectful half:

- :mod:`.client`: the API calls, through the ``kubernetes`` client (imported on first use);
- :mod:`.status`: an app's status from its pods and Jobs (pure);
- :mod:`.scheduler`: :class:`KubernetesScheduler`.

The names below are imported on first use (PEP 562), so importing the package costs
nothing; ``distspec.schedulers.kubernetes:KubernetesScheduler`` is the registry's
string.
"""

from __future__ import annotations

from distspec._lazy import lazy_getattr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.schedulers.kubernetes.manifest import render_yaml
    from distspec.schedulers.kubernetes.options import Flavor, KubernetesOptions
    from distspec.schedulers.kubernetes.scheduler import KubernetesScheduler

__all__ = ["Flavor", "KubernetesOptions", "KubernetesScheduler", "render_yaml"]

__getattr__ = lazy_getattr(
    __name__,
    {
        "Flavor": "options",
        "KubernetesOptions": "options",
        "KubernetesScheduler": "scheduler",
        "render_yaml": "manifest",
    },
)
