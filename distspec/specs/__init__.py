"""The IR: immutable values with no I/O and no scheduler code.

Names are imported on first use, so a dry run pays only for the modules it touches.
"""

from __future__ import annotations

from distspec._lazy import lazy_getattr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.frozen import FrozenDict, frozendict
    from distspec.specs.app import AppDef, Resource, RetryPolicy, Role
    from distspec.specs.handles import AppHandle
    from distspec.specs.macros import Macro
    from distspec.specs.mounts import BindMount, DeviceMount, Mount, VolumeMount
    from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus
    from distspec.specs.topology import Topology

_WHERE = {
    "AppDef": "app",
    "Resource": "app",
    "RetryPolicy": "app",
    "Role": "app",
    "FrozenDict": "distspec.frozen",
    "frozendict": "distspec.frozen",
    "AppHandle": "handles",
    "Macro": "macros",
    "BindMount": "mounts",
    "DeviceMount": "mounts",
    "Mount": "mounts",
    "VolumeMount": "mounts",
    "AppState": "state",
    "AppStatus": "state",
    "ReplicaStatus": "state",
    "RoleStatus": "state",
    "Topology": "topology",
}

__all__ = [
    "AppDef",
    "AppHandle",
    "AppState",
    "AppStatus",
    "BindMount",
    "DeviceMount",
    "FrozenDict",
    "Macro",
    "Mount",
    "ReplicaStatus",
    "Resource",
    "RetryPolicy",
    "Role",
    "RoleStatus",
    "Topology",
    "VolumeMount",
    "frozendict",
]


__getattr__ = lazy_getattr(__name__, _WHERE)
