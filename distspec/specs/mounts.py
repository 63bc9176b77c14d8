"""Mounts a role asks for: host paths, named volumes and devices."""

from __future__ import annotations

from distspec.errors import SpecError
from distspec.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["BindMount", "DeviceMount", "Mount", "VolumeMount", "mount_from_dict", "parse_mounts"]


@frozen
class BindMount:
    """A host path made visible at ``dst_path``."""

    src_path: str
    dst_path: str
    read_only: bool = False

    def __post_init__(self) -> None:
        _require_abs("bind", self.dst_path)


@frozen
class VolumeMount:
    """A named volume (a Kubernetes PVC, for example) at ``dst_path``."""

    src: str
    dst_path: str
    read_only: bool = False

    def __post_init__(self) -> None:
        if not self.src:
            raise SpecError("volume mount needs src=VOLUME_NAME")
        _require_abs("volume", self.dst_path)


@frozen
class DeviceMount:
    """A host device (``/dev/fuse``) with ``permissions`` from ``rwm``."""

    src_path: str
    dst_path: str
    permissions: str = "rwm"

    def __post_init__(self) -> None:
        _require_abs("device", self.dst_path)
        if not self.permissions or set(self.permissions) - set("rwm"):
            raise SpecError(
                f"device permissions must be letters of 'rwm', got {self.permissions!r}"
            )


Mount = BindMount | VolumeMount | DeviceMount

_KINDS: dict[str, type[BindMount] | type[VolumeMount] | type[DeviceMount]] = {
    "bind": BindMount,
    "volume": VolumeMount,
    "device": DeviceMount,
}


def _require_abs(kind: str, path: str) -> None:
    from distspec._text import quote

    if not path.startswith("/"):
        raise SpecError(f"{kind} mount destination must be an absolute path, got {quote(path)}")
    if ".." in path.split("/"):
        # Kubernetes refuses '..' in a hostPath, container runtimes in a mount
        # point; nowhere is it what was meant.
        raise SpecError(f"{kind} mount destination {quote(path)} must not contain '..'")


def mount_to_dict(mount: Mount) -> dict[str, Any]:
    """JSON form, tagged with its kind."""
    kind = next(k for k, v in _KINDS.items() if isinstance(mount, v))
    out: dict[str, Any] = {"type": kind}
    for name in mount.__dataclass_fields__:
        out[name] = getattr(mount, name)
    return out


def mount_from_dict(data: dict[str, Any]) -> Mount:
    """Inverse of :func:`mount_to_dict`."""
    fields = dict(data)
    kind = fields.pop("type", None)
    if kind not in _KINDS:
        raise SpecError(f"unknown mount type {kind!r}; use one of {', '.join(_KINDS)}")
    return _KINDS[kind](**fields)


#: The words ``readonly=`` accepts, and what they mean; anything else is refused
#: (``readonly=maybe`` must not mount read-write).
_READONLY = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def parse_mounts(specs: list[str]) -> tuple[Mount, ...]:
    """Parse ``type=bind,src=/data,dst=/data[,readonly]`` strings.

    Keys: ``type`` (bind, volume, device), ``src``, ``dst`` (defaults to src for
    bind and device), ``readonly`` (bind and volume: alone, or ``=true``/``=false``,
    also ``yes``/``no``/``1``/``0``) and, for devices, ``perm`` (letters of ``rwm``).
    A key given twice, a flag with any other value, or a key that does not apply
    to the mount's type is refused.
    """
    from distspec._text import quote

    mounts: list[Mount] = []
    for spec in specs:
        opts: dict[str, str | None] = {}
        for part in spec.split(","):
            key, sep, value = part.partition("=")
            key = key.strip()
            if key in opts:
                raise SpecError(f"mount {quote(spec)}: {key}= is given twice")
            opts[key] = value.strip() if sep else None
        kind = opts.pop("type", None) or "bind"
        src = opts.pop("src", None) or ""
        dst = opts.pop("dst", src)
        has_flag, has_perm = "readonly" in opts, "perm" in opts
        flag = opts.pop("readonly", "false")
        readonly = True if flag is None else _READONLY.get(flag.lower())
        if readonly is None:
            raise SpecError(
                f"mount {quote(spec)}: readonly={quote(flag)} is not one of "
                "true, false, yes, no, 1, 0 (or readonly alone)"
            )
        perm = opts.pop("perm", "rwm")
        if opts:
            raise SpecError(f"unknown mount key(s) {', '.join(sorted(opts))} in {quote(spec)}")
        if kind not in _KINDS:
            raise SpecError(
                f"unknown mount type {quote(kind)} in {quote(spec)}; use bind, volume or device"
            )
        if not src:
            raise SpecError(f"mount {quote(spec)} needs src=")
        if kind == "volume" and dst == src and not src.startswith("/"):
            # dst defaults to src only for bind and device mounts: a volume's src is
            # its name (a PVC), never a path in the container.
            raise SpecError(
                f"volume mount {quote(spec)} needs dst=/PATH (where the volume appears)"
            )
        if not dst:
            raise SpecError(f"mount {quote(spec)}: dst= may not be empty")
        if kind == "device" and has_flag:
            raise SpecError(f"mount {quote(spec)}: a device mount takes perm=, not readonly")
        if kind != "device" and has_perm:
            raise SpecError(f"mount {quote(spec)}: perm= is for device mounts only")
        if kind == "bind":
            mounts.append(BindMount(src_path=src, dst_path=dst, read_only=readonly))
        elif kind == "volume":
            mounts.append(VolumeMount(src=src, dst_path=dst, read_only=readonly))
        else:
            mounts.append(DeviceMount(src_path=src, dst_path=dst, permissions=perm or ""))
    return tuple(mounts)
