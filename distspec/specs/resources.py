"""Named host types for ``-h NAME``: TorchX's names and sizes, plus plugins.

The built-in names are TorchX's, with TorchX's numbers, so ``-h gpu.large`` asks
for the same machine in both tools (checked against ``torchx`` nightly
2026.10.26, ``torchx.specs.named_resources_generic`` and
``named_resources_aws``):

- ``gpu.small`` ... ``gpu.xlarge`` and ``cpu.nano`` ... ``cpu.xlarge``: generic
  sizes, no devices, no capabilities.
- ``aws_<instance type>``: an EC2 instance type, its memory reduced to 96 % per
  GiB as TorchX does (983 MiB a GiB, so AWS Batch can place the job), with the
  capability ``node.kubernetes.io/instance-type: <type>`` (a node selector on
  Kubernetes) and the EFA / Neuron devices of the type.

distspec's earlier sizes (``gpu.large`` with 8 GPUs, ``cpu.small`` with 2 CPUs)
are gone: the same name meaning two machines is what this module exists to
prevent.

Plugins register a zero-argument callable returning a :class:`Resource` under
the entry-point group ``distspec.named_resources``. Entry points are read only
when a name is not a built-in; a plugin cannot hide a built-in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from distspec.errors import SpecError
from distspec.frozen import frozendict
from distspec.specs.app import Resource

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "BUILTIN_RESOURCES",
    "EFA_DEVICE",
    "ENTRY_POINT_GROUP",
    "K8S_INSTANCE_TYPE",
    "NEURON_DEVICE",
    "NamedResources",
    "ResourceInfo",
]

#: The Kubernetes node label an ``aws_*`` host type selects on (as a capability).
K8S_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
#: AWS Elastic Fabric Adapter interfaces, a Kubernetes extended resource.
EFA_DEVICE = "vpc.amazonaws.com/efa"
#: AWS Trainium / Inferentia devices, a Kubernetes extended resource.
NEURON_DEVICE = "aws.amazon.com/neurondevice"

ENTRY_POINT_GROUP = "distspec.named_resources"

_GIB = 1024
# TorchX's AWS sizes: N GiB of the instance is N * int(1024 * 0.96) MiB.
_AWS_GIB = int(1024 * 0.96)

# name: (cpu, gpu, memory in MiB)
_GENERIC: Mapping[str, tuple[int, int, int]] = {
    "gpu.small": (8, 1, 32 * _GIB),
    "gpu.medium": (16, 2, 64 * _GIB),
    "gpu.large": (32, 4, 128 * _GIB),
    "gpu.xlarge": (64, 8, 256 * _GIB),
    "cpu.nano": (1, 0, 512),
    "cpu.micro": (1, 0, 1 * _GIB),
    "cpu.small": (1, 0, 2 * _GIB),
    "cpu.medium": (2, 0, 4 * _GIB),
    "cpu.large": (2, 0, 8 * _GIB),
    "cpu.xlarge": (8, 0, 32 * _GIB),
}

# instance type: (cpu, gpu, GiB as TorchX counts them, EFA devices, Neuron devices)
_AWS: Mapping[str, tuple[int, int, int, int, int]] = {
    "t3.medium": (2, 0, 4, 0, 0),
    "m5.large": (2, 0, 8, 0, 0),
    "m5.xlarge": (4, 0, 16, 0, 0),
    "m5.2xlarge": (8, 0, 32, 0, 0),
    "m5.4xlarge": (16, 0, 64, 0, 0),
    "m5.8xlarge": (32, 0, 128, 0, 0),
    "m5.12xlarge": (48, 0, 192, 0, 0),
    "m5.16xlarge": (64, 0, 256, 0, 0),
    "m5.24xlarge": (96, 0, 384, 0, 0),
    "m5.metal": (96, 0, 384, 0, 0),
    "m5d.large": (2, 0, 8, 0, 0),
    "m5d.xlarge": (4, 0, 16, 0, 0),
    "m5d.2xlarge": (8, 0, 32, 0, 0),
    "m5d.4xlarge": (16, 0, 64, 0, 0),
    "m5d.8xlarge": (32, 0, 128, 0, 0),
    "m5d.12xlarge": (48, 0, 192, 0, 0),
    "m5d.16xlarge": (64, 0, 256, 0, 0),
    "m5d.24xlarge": (96, 0, 384, 0, 0),
    "m5d.metal": (96, 0, 384, 0, 0),
    "c5.18xlarge": (72, 0, 142, 0, 0),
    "p3.2xlarge": (8, 1, 61, 0, 0),
    "p3.8xlarge": (32, 4, 244, 0, 0),
    "p3.16xlarge": (64, 8, 488, 0, 0),
    "p3dn.24xlarge": (96, 8, 768, 1, 0),
    "p4d.24xlarge": (96, 8, 1152, 4, 0),
    "p4de.24xlarge": (96, 8, 1152, 4, 0),
    "p5.48xlarge": (192, 8, 2048, 32, 0),
    "p5e.48xlarge": (192, 8, 2048, 32, 0),
    "p5en.48xlarge": (192, 8, 2048, 16, 0),
    "p6-b200.48xlarge": (192, 8, 2048, 8, 0),
    "p6-b300.48xlarge": (192, 8, 4096, 16, 0),
    "p6e-gb200.36xlarge": (144, 4, 960, 16, 0),
    "g4dn.xlarge": (4, 1, 16, 0, 0),
    "g4dn.2xlarge": (8, 1, 32, 0, 0),
    "g4dn.4xlarge": (16, 1, 64, 0, 0),
    "g4dn.8xlarge": (32, 1, 128, 1, 0),
    "g4dn.12xlarge": (48, 4, 192, 1, 0),
    "g4dn.16xlarge": (64, 1, 256, 1, 0),
    "g4dn.metal": (96, 8, 384, 1, 0),
    "g5.xlarge": (4, 1, 16, 0, 0),
    "g5.2xlarge": (8, 1, 32, 0, 0),
    "g5.4xlarge": (16, 1, 64, 0, 0),
    "g5.8xlarge": (32, 1, 128, 1, 0),
    "g5.12xlarge": (48, 4, 192, 1, 0),
    "g5.16xlarge": (64, 1, 256, 1, 0),
    "g5.24xlarge": (96, 4, 384, 1, 0),
    "g5.48xlarge": (192, 8, 768, 1, 0),
    "g6e.xlarge": (4, 1, 32, 0, 0),
    "g6e.2xlarge": (8, 1, 64, 0, 0),
    "g6e.4xlarge": (16, 1, 128, 0, 0),
    "g6e.8xlarge": (32, 1, 256, 0, 0),
    "g6e.12xlarge": (48, 4, 384, 0, 0),
    "g6e.16xlarge": (64, 1, 512, 0, 0),
    "g6e.24xlarge": (96, 4, 768, 2, 0),
    "g6e.48xlarge": (192, 8, 1536, 4, 0),
    "trn1.2xlarge": (8, 0, 32, 0, 1),
    "trn1.32xlarge": (128, 0, 512, 8, 16),
    "inf2.xlarge": (4, 0, 16, 0, 1),
    "inf2.8xlarge": (32, 0, 128, 0, 1),
    "inf2.24xlarge": (96, 0, 384, 0, 6),
    "inf2.48xlarge": (192, 0, 768, 0, 12),
}


def _aws(itype: str, cpu: int, gpu: int, gib: int, efa: int, neuron: int) -> Resource:
    devices = {EFA_DEVICE: efa} if efa else {}
    if neuron:
        devices[NEURON_DEVICE] = neuron
    return Resource(
        cpu=cpu,
        gpu=gpu,
        mem_mb=gib * _AWS_GIB,
        capabilities=frozendict({K8S_INSTANCE_TYPE: itype}),
        devices=frozendict(devices),
    )


class _Builtins(Mapping[str, Resource]):
    """The built-in table, each Resource made when first asked for (start-up: a
    dry run with ``-h`` builds one, not 71)."""

    def __init__(self) -> None:
        self._made: dict[str, Resource] = {}

    def __getitem__(self, name: str) -> Resource:
        made = self._made.get(name)
        if made is not None:
            return made
        if name in _GENERIC:
            cpu, gpu, mem = _GENERIC[name]
            made = Resource(cpu=cpu, gpu=gpu, mem_mb=mem)
        elif name.startswith("aws_") and name[4:] in _AWS:
            made = _aws(name[4:], *_AWS[name[4:]])
        else:
            raise KeyError(name)
        self._made[name] = made
        return made

    def __contains__(self, name: object) -> bool:
        return name in _GENERIC or (
            isinstance(name, str) and name.startswith("aws_") and name[4:] in _AWS
        )

    def __iter__(self) -> Iterator[str]:
        yield from _GENERIC
        yield from (f"aws_{itype}" for itype in _AWS)

    def __len__(self) -> int:
        return len(_GENERIC) + len(_AWS)


#: Every built-in host type by name (TorchX's generic and AWS names), built lazily.
BUILTIN_RESOURCES: Mapping[str, Resource] = _Builtins()


class ResourceInfo:
    """One row of ``distspec resources``: a name, where it comes from, and its sizes."""

    __slots__ = ("name", "origin", "resource")

    def __init__(self, name: str, origin: str, resource: Resource) -> None:
        self.name = name
        self.origin = origin
        self.resource = resource

    def to_dict(self) -> dict[str, object]:
        """This row as JSON-ready values: name, origin and the resource's fields."""
        return {"name": self.name, "origin": self.origin, **self.resource.to_dict()}


class NamedResources:
    """Look up a named host type; built-ins are never hidden by plugins."""

    def __init__(
        self,
        builtins: Mapping[str, Resource] = BUILTIN_RESOURCES,
        extra: Mapping[str, Callable[[], Resource]] | None = None,
    ) -> None:
        self._builtins = builtins
        self._extra = dict(extra or {})

    def names(self) -> list[str]:
        """Every name, built in, given or from a plugin, sorted."""
        return sorted({*self._builtins, *self._extra, *self._plugin_names()})

    def get(self, name: str) -> Resource:
        """The resource called ``name``, or the one name equal to it ignoring case.

        Raises:
            SpecError: an unknown name (with suggestions that have the GPU count the
                name implies, see :meth:`suggest`), or a plugin that returned
                something other than a Resource.
        """
        if name in self._builtins:
            return self._builtins[name]
        if name in self._extra:
            return self._extra[name]()
        eps = self._entry_points()
        for ep in eps:
            if ep.name == name:
                return self._load(ep)
        # As in TorchX, a name that matches exactly one known name ignoring case is
        # that name (-h GPU.Small is gpu.small); several such names are an error.
        known = {*self._builtins, *self._extra, *(e.name for e in eps)}
        same = sorted(n for n in known if n.lower() == name.lower())
        if len(same) == 1:
            return self.get(same[0])
        if same:
            raise SpecError(
                f"named resource {name!r} matches {', '.join(same)} ignoring case; "
                "write one of them exactly"
            )
        raise SpecError(f"unknown named resource {name!r}{self.suggest(name)}")

    def items(self) -> Iterator[ResourceInfo]:
        """Every host type, built-ins first, then ``extra`` and plugins, each sorted."""
        for name in sorted(self._builtins, key=_sort_key):
            yield ResourceInfo(name, "builtin", self._builtins[name])
        for name in sorted(self._extra):
            if name not in self._builtins:
                yield ResourceInfo(name, "extra", self._extra[name]())
        for ep in sorted(self._entry_points(), key=lambda e: e.name):
            if ep.name not in self._builtins and ep.name not in self._extra:
                yield ResourceInfo(ep.name, f"plugin {ep.value}", self._load(ep))

    def suggest(self, name: str) -> str:
        """``"; did you mean 'x' (4 GPUs)?"`` or ``"; see distspec resources"``.

        Close spellings are offered only when they have as many GPUs as ``name``
        implies: ``gpu.*`` names have GPUs, ``cpu.*`` names none, and an
        ``aws_FAMILY.SIZE`` name has its family's GPUs per vCPU times the vCPUs
        of SIZE (``8xlarge`` is 32), so ``aws_p3.8xlarge`` (4 GPUs) is never
        answered with an 8-GPU host such as ``aws_p3.16xlarge``.
        """
        import difflib

        table = {n: self._builtins[n] for n in self._builtins}
        table.update({n: f() for n, f in self._extra.items()})
        known = [*table, *(n for n in self._plugin_names() if n not in table)]
        close = difflib.get_close_matches(name, known, n=8, cutoff=0.6)
        hint = _gpu_hint(name, table)
        if hint is not None:
            close = [c for c in close if c in table and hint[0](table[c].gpu)]
        if not close:
            similar = f" with {hint[1]}" if hint is not None else ""
            return f"; no similar host type{similar} (`distspec resources` lists them all)"
        shown = " or ".join(f"{c!r}{_gpus(table.get(c))}" for c in close[:3])
        return f"; did you mean {shown}? (`distspec resources` lists them all)"

    @staticmethod
    def _entry_points() -> list[Any]:
        from importlib.metadata import entry_points

        return list(entry_points(group=ENTRY_POINT_GROUP))

    def _plugin_names(self) -> list[str]:
        return [ep.name for ep in self._entry_points()]

    @staticmethod
    def _load(ep: Any) -> Resource:
        resource = ep.load()()
        if not isinstance(resource, Resource):
            raise SpecError(f"named resource {ep.name!r} ({ep.value}) did not return a Resource")
        return resource


def _sort_key(name: str) -> tuple[bool, str, int, str]:
    """Generic names first in TorchX's order (``gpu.small`` .. ``cpu.xlarge``), then AWS
    by family and size (``xlarge`` < ``2xlarge`` < ``metal``)."""
    if name in _GENERIC:
        return (False, "", list(_GENERIC).index(name), name)
    family, _, size = name.rpartition(".")
    vcpus = _vcpus(size)
    return (True, family, vcpus if vcpus is not None else 10**6, size)


def _vcpus(size: str, *, lenient: bool = False) -> int | None:
    """vCPUs of an EC2 size: ``large`` 2, ``xlarge`` 4, ``8xlarge`` 32; None if unknown.

    ``lenient`` reads a misspelt size by its count alone (``8xlarg``, ``8xl``: 32).
    """
    if size in ("medium", "large"):
        return 2
    if size == "xlarge":
        return 4
    if size.endswith("xlarge") and size[:-6].isdigit():
        return 4 * int(size[:-6])
    if lenient:
        digits = size[: len(size) - len(size.lstrip("0123456789"))]
        rest = size[len(digits) :]
        if rest.startswith("x") and rest != "x":
            return 4 * int(digits) if digits else 4
    return None


def _gpu_hint(name: str, table: Mapping[str, Resource]) -> tuple[Callable[[int], bool], str] | None:
    """A test on a candidate's GPU count that ``name`` implies and its wording, or None."""
    family, dot, size = name.rpartition(".")
    if not dot:
        return None
    if family == "gpu":
        return (lambda gpus: gpus > 0), "GPUs"
    if family == "cpu":
        return (lambda gpus: gpus == 0), "no GPU"
    vcpus = _vcpus(size, lenient=True)
    members = [(r.cpu, r.gpu) for n, r in table.items() if n.rpartition(".")[0] == family and r.cpu]
    if vcpus is None or not members:
        return None
    cpus, gpus = min(members, key=lambda m: abs(m[0] - vcpus))
    estimate = round(gpus * vcpus / cpus)
    return (lambda gpus: gpus == estimate), f"{estimate} GPU{'s' if estimate != 1 else ''}"


def _gpus(resource: Resource | None) -> str:
    if resource is None:
        return ""
    return f" ({resource.gpu} GPU{'s' if resource.gpu != 1 else ''})"
