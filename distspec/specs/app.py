"""The IR: AppDef, Role, Resource and RetryPolicy.

Frozen and validated at construction: an invalid AppDef cannot exist.
Derive a changed one with :func:`dataclasses.replace` (or
:func:`distspec.frozen.replace`, which does not import ``dataclasses``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from distspec.errors import SpecError
from distspec.frozen import FrozenDict, field, fields, frozen, frozendict
from distspec.specs.topology import MAX_NODES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.specs.mounts import Mount

__all__ = [
    "NAME_CHARS",
    "SCRIPT_METADATA",
    "AppDef",
    "Resource",
    "RetryPolicy",
    "Role",
    "is_env_name",
    "is_name",
]

#: Role metadata key under which components record the user's script path, so a backend
#: whose replicas share the submitter's files can check it exists before submitting.
SCRIPT_METADATA = "distspec.script"

#: The characters of an app or role name; the first must be a letter or digit.
NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
_ENV_CHARS = NAME_CHARS[:-2]  # letters, digits, '_'


# Character-class checks are written with str.strip instead of regexes: every
# regex compiled on the dry-run path costs ~0.1 ms of start-up.
def is_name(text: str) -> bool:
    """``text`` is ``[A-Za-z0-9][A-Za-z0-9_.-]*``."""
    return bool(text) and text[0] not in "_.-" and not text.strip(NAME_CHARS)


#: The longest app or role name: a local run directory is ``NAME-XXXXXXXX`` under
#: a file system's 255-byte limit, and Slurm, PBS and Kubernetes shorten or refuse
#: longer ones (Kubernetes further limits what it derives, see kubernetes.py).
MAX_NAME = 128
_INT32_MAX = 2**31 - 1


def _check_name(what: str, name: str) -> None:
    if len(name) > MAX_NAME:
        raise SpecError(
            f"{what} {name[:40]!r}... is {len(name)} characters; at most {MAX_NAME} are allowed"
        )
    if not is_name(name):
        raise SpecError(
            f"{what} {name[:80]!r} must start with a letter or digit and use only "
            "letters, digits, '_', '.', '-'"
        )


def is_env_name(text: str) -> bool:
    """``text`` is ``[A-Za-z_][A-Za-z0-9_]*``."""
    return bool(text) and not text[0].isdigit() and not text.strip(_ENV_CHARS)


class RetryPolicy(str, enum.Enum):
    """What restarts when a replica fails and retries are left."""

    REPLICA = "replica"  # only the failed replica
    ROLE = "role"  # every replica of its role
    APPLICATION = "application"  # the whole app


@frozen
class Resource:
    """What one replica needs. ``mem_mb`` is in MiB.

    ``cpu`` and ``mem_mb`` are None when not specified: a backend then requests
    none and the cluster's own default applies (Slurm's DefCpuPerGPU/DefMemPer*,
    a PBS server's default chunk, a Kubernetes LimitRange). JSON keeps None as
    null. ``gpu`` is always a count (0: none).
    """

    cpu: int | None = None
    gpu: int = 0
    mem_mb: int | None = None
    capabilities: FrozenDict[str, str] = field(default_factory=FrozenDict)
    devices: FrozenDict[str, int] = field(default_factory=FrozenDict)

    def __post_init__(self) -> None:
        for name in ("cpu", "gpu", "mem_mb"):
            value = getattr(self, name)
            if value is None and name != "gpu":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"resource {name} must be a non-negative integer, got {value!r}")
            if value > _INT32_MAX:
                # Slurm reads counts as 32-bit; no host has more than this of anything.
                raise SpecError(f"resource {name} must be at most {_INT32_MAX}, got {value}")
        object.__setattr__(self, "capabilities", frozendict(self.capabilities))
        object.__setattr__(self, "devices", frozendict(self.devices))

    def to_dict(self) -> dict[str, Any]:
        """This resource as plain JSON-ready values (the mappings as dicts)."""
        return {
            "cpu": self.cpu,
            "gpu": self.gpu,
            "mem_mb": self.mem_mb,
            "capabilities": dict(self.capabilities),
            "devices": dict(self.devices),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resource:
        """The resource :meth:`to_dict` wrote."""
        return cls(**data)


@frozen
class Role:
    """A set of identical replicas running one command.

    ``args`` and ``env`` may contain macros (:mod:`distspec.specs.macros`).
    ``min_replicas`` set below ``num_replicas`` makes the role elastic.
    """

    name: str
    entrypoint: str
    args: tuple[str, ...] = ()
    image: str = ""
    env: FrozenDict[str, str] = field(default_factory=FrozenDict)
    num_replicas: int = 1
    min_replicas: int | None = None
    resource: Resource = field(default_factory=Resource)
    port_map: FrozenDict[str, int] = field(default_factory=FrozenDict)
    max_retries: int = 0
    retry_policy: RetryPolicy = RetryPolicy.APPLICATION
    mounts: tuple[Mount, ...] = ()
    metadata: FrozenDict[str, str] = field(default_factory=FrozenDict)

    def __post_init__(self) -> None:
        _check_name("role name", self.name)
        if not self.entrypoint:
            raise SpecError(f"role {self.name!r} has an empty entrypoint")
        if self.num_replicas < 1:
            raise SpecError(f"role {self.name!r}: num_replicas must be >= 1")
        if self.num_replicas > MAX_NODES:
            # The same ceiling as -j's node count: every backend builds one entry
            # per replica, so an absurd count would spin rather than fail.
            raise SpecError(f"role {self.name!r}: num_replicas must be at most {MAX_NODES}")
        if self.min_replicas is not None and not 1 <= self.min_replicas <= self.num_replicas:
            raise SpecError(f"role {self.name!r}: min_replicas must be in 1..num_replicas")
        if not 0 <= self.max_retries <= _INT32_MAX:
            # The tightest backend bound: a Kubernetes backoffLimit is an int32.
            raise SpecError(f"role {self.name!r}: max_retries must be in 0..{_INT32_MAX}")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "mounts", tuple(self.mounts))
        object.__setattr__(self, "retry_policy", RetryPolicy(self.retry_policy))
        for name in ("env", "port_map", "metadata"):
            object.__setattr__(self, name, frozendict(getattr(self, name)))
        for key, value in self.env.items():
            if not isinstance(value, str) or not is_env_name(key):
                # The value is never shown: it may be a secret.
                problem = (
                    f"{key!r} is not a variable name"
                    if not is_env_name(key)
                    else f"the value of {key} is a {type(value).__name__}, not a string"
                )
                raise SpecError(f"role {self.name!r}: bad env entry: {problem}")
        if any(not isinstance(a, str) for a in self.args):
            raise SpecError(f"role {self.name!r}: every arg must be a string")

    @property
    def elastic(self) -> bool:
        """True when the replica count may shrink to ``min_replicas``."""
        return self.min_replicas is not None and self.min_replicas != self.num_replicas

    def to_dict(self) -> dict[str, Any]:
        """This role as JSON-ready values (tuples as lists; mounts and resource as dicts)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, FrozenDict):
                value = dict(value)
            elif f.name == "args":
                value = list(value)
            elif f.name == "mounts":
                from distspec.specs.mounts import mount_to_dict

                value = [mount_to_dict(m) for m in value]
            elif isinstance(value, Resource):
                value = value.to_dict()
            elif isinstance(value, RetryPolicy):
                value = value.value
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Role:
        """The role :meth:`to_dict` wrote."""
        kwargs = dict(data)
        kwargs["args"] = tuple(kwargs.get("args", ()))
        kwargs["resource"] = Resource.from_dict(kwargs.get("resource", {}))
        from distspec.specs.mounts import mount_from_dict

        kwargs["mounts"] = tuple(mount_from_dict(m) for m in kwargs.get("mounts", ()))
        return cls(**kwargs)


@frozen
class AppDef:
    """A named application made of one or more roles."""

    name: str
    roles: tuple[Role, ...]
    metadata: FrozenDict[str, str] = field(default_factory=FrozenDict)

    def __post_init__(self) -> None:
        _check_name("app name", self.name)
        object.__setattr__(self, "roles", tuple(self.roles))
        object.__setattr__(self, "metadata", frozendict(self.metadata))
        if not self.roles:
            raise SpecError(f"app {self.name!r} has no roles")
        names = [r.name for r in self.roles]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SpecError(f"app {self.name!r} has duplicate role names: {', '.join(dupes)}")

    def role(self, name: str) -> Role:
        """The role called ``name``."""
        for role in self.roles:
            if role.name == name:
                return role
        raise SpecError(f"app {self.name!r} has no role {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; :meth:`from_dict` gives back an equal AppDef."""
        return {
            "name": self.name,
            "roles": [r.to_dict() for r in self.roles],
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AppDef:
        """The app :meth:`to_dict` wrote."""
        return cls(
            name=data["name"],
            roles=tuple(Role.from_dict(r) for r in data["roles"]),
            metadata=data.get("metadata", {}),
        )
