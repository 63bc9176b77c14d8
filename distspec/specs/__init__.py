"""The IR: immutable values with no I/O and no scheduler code."""

from __future__ import annotations

from distspec.specs.app import AppDef, Resource, RetryPolicy, Role
from distspec.specs.frozen import FrozenDict, frozendict
from distspec.specs.handles import AppHandle
from distspec.specs.macros import Macro
from distspec.specs.mounts import BindMount, DeviceMount, Mount, VolumeMount
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus
from distspec.specs.topology import Topology

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
