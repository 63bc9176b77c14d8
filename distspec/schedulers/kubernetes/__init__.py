"""Kubernetes: each replica a pod of an Indexed Job (plus a headless Service), a
JobSet or a Volcano Job.

- :mod:`.manifest`: the options and the pure compile step, AppDef + options -> the
  manifests;
- :mod:`.scheduler`: :class:`KubernetesScheduler`, which talks to the API server
  through the ``kubernetes`` client.

The names below are imported on first use (PEP 562), so importing the package costs
nothing; ``distspec.schedulers.kubernetes:KubernetesScheduler`` is the registry's
string.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.schedulers.kubernetes.manifest import Flavor, KubernetesOptions
    from distspec.schedulers.kubernetes.scheduler import KubernetesScheduler, render_yaml

__all__ = ["Flavor", "KubernetesOptions", "KubernetesScheduler", "render_yaml"]

_WHERE = {
    "Flavor": "manifest",
    "KubernetesOptions": "manifest",
    "KubernetesScheduler": "scheduler",
    "render_yaml": "scheduler",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
