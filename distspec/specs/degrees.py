"""Parallel degrees: ``pp * dp * cp * tp`` = the world size.

Declared on the command line (``dist.ddp --tp 2 --pp 2``), checked at compile time
against the topology, carried to the job in one environment variable,
:data:`DEGREES_ENV` (``DISTSPEC_DEGREES=pp=2,dp=2,cp=1,tp=2``), and turned into a
torch ``DeviceMesh`` by :func:`distspec.runtime.init`, which checks them again
against the real world size.

The mesh's dimensions go outermost first, :data:`DIMS` = pp, dp, cp, tp: ranks
next to each other differ in tp, so a tensor-parallel group stays inside a node
when tp divides the processes per node. Data parallel is derived when not given.
"""

from __future__ import annotations

from distspec.errors import SpecError
from distspec.frozen import frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from distspec.specs.topology import Topology

__all__ = ["DEGREES_ENV", "DIMS", "Degrees"]

#: The variable that carries the degrees into the job.
DEGREES_ENV = "DISTSPEC_DEGREES"

#: Mesh dimensions, outermost first.
DIMS = ("pp", "dp", "cp", "tp")


@frozen
class Degrees:
    """Pipeline, data, context and tensor parallel degrees; ``dp=None`` means "the rest"."""

    pp: int = 1
    dp: int | None = None
    cp: int = 1
    tp: int = 1

    def __post_init__(self) -> None:
        for dim in DIMS:
            value = getattr(self, dim)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise SpecError(f"{dim}={value} must be a whole number of at least 1")

    @property
    def model_parallel(self) -> int:
        """pp * cp * tp: the ranks one data-parallel replica spans."""
        return self.pp * self.cp * self.tp

    @property
    def trivial(self) -> bool:
        """True when nothing but data parallel is declared (no mesh is needed)."""
        return self.model_parallel == 1 and self.dp is None

    def resolve(self, world_size: int) -> Degrees:
        """These degrees with ``dp`` filled in for ``world_size`` processes.

        Raises:
            SpecError: the degrees do not fit the world size; the message has the numbers.
        """
        mp = self.model_parallel
        if self.dp is None:
            if world_size % mp:
                raise SpecError(f"{self._describe_mp()} does not divide {world_size} processes")
            return Degrees(pp=self.pp, dp=world_size // mp, cp=self.cp, tp=self.tp)
        if self.dp * mp != world_size:
            raise SpecError(
                f"{self.format()} makes {self.dp * mp} processes, not the {world_size} of the job"
            )
        return self

    def check(self, topology: Topology) -> None:
        """Check the degrees against every world size ``topology`` allows (elastic included).

        Raises:
            SpecError: naming the node count and the numbers that do not fit.
        """
        lo = topology.min_nodes or topology.nodes
        if self.dp is not None and lo != topology.nodes:
            raise SpecError(
                f"dp={self.dp} is fixed but -j {topology} lets the world size change; "
                "leave dp out (it is derived) for an elastic job"
            )
        for nodes in range(lo, topology.nodes + 1):
            world = nodes * topology.nproc_per_node
            try:
                self.resolve(world)
            except SpecError as e:
                where = f" with {nodes} node(s)" if lo != topology.nodes else ""
                raise SpecError(f"{e}{where} (-j {topology})") from None

    def format(self) -> str:
        """``pp=2,dp=4,cp=1,tp=2``; dp is left out while it is derived."""
        return ",".join(f"{d}={getattr(self, d)}" for d in DIMS if getattr(self, d) is not None)

    @classmethod
    def parse(cls, text: str) -> Degrees:
        """The inverse of :meth:`format`: ``"tp=2,pp=2"`` (any order, any subset).

        Raises:
            SpecError: an unknown dimension, a repeated one, or a value that is not a number.
        """
        values: dict[str, int] = {}
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or key not in DIMS:
                raise SpecError(
                    f"{DEGREES_ENV}: {item[:40]!r} is not DIM=N with DIM one of {', '.join(DIMS)}"
                )
            if key in values:
                raise SpecError(f"{DEGREES_ENV}: {key} is given twice in {text[:80]!r}")
            value = value.strip()
            # ASCII digits only (int() also takes "1_0", "+3" and other scripts' digits),
            # and few of them: a degree above a million is a typo, not a mesh.
            if not (value.isascii() and value.isdigit() and len(value) <= 7):
                raise SpecError(
                    f"{DEGREES_ENV}: {key}={value[:40]!r} is not a whole number of at most 7 digits"
                )
            values[key] = int(value)
        return cls.from_mapping(values)

    @classmethod
    def from_mapping(cls, values: Mapping[str, int | None]) -> Degrees:
        """``{"tp": 2, "pp": 2}`` → Degrees; unknown keys are an error."""
        unknown = sorted(set(values) - set(DIMS))
        if unknown:
            raise SpecError(
                f"unknown parallel dimension(s) {', '.join(unknown)}; use {', '.join(DIMS)}"
            )

        def get(dim: str) -> int:
            value = values.get(dim)
            return 1 if value is None else value

        return cls(pp=get("pp"), dp=values.get("dp"), cp=get("cp"), tp=get("tp"))

    def _describe_mp(self) -> str:
        parts = [f"{d}={getattr(self, d)}" for d in ("pp", "cp", "tp") if getattr(self, d) != 1]
        if len(parts) == 1:
            return parts[0]
        return " x ".join(parts) + f" = {self.model_parallel}"
