"""``-j [MIN:]NxM`` — how many nodes, and how many processes on each."""

from __future__ import annotations

from distspec.errors import TopologyError
from distspec.specs.frozen import frozen

__all__ = ["MAX_NODES", "MAX_NPROC_PER_NODE", "Topology"]

#: Ceilings that catch a typo before it becomes a plan: more nodes than the largest
#: machines have (about 10,000 today), more processes per node than cores on any host.
MAX_NODES = 65536
MAX_NPROC_PER_NODE = 1024


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit()


@frozen
class Topology:
    """``nodes`` nodes (at least ``min_nodes`` for an elastic job), ``nproc_per_node`` each."""

    nodes: int
    nproc_per_node: int
    min_nodes: int | None = None

    def __post_init__(self) -> None:
        text = self.format()
        if self.nodes < 1:
            raise TopologyError(text, "the number of nodes must be at least 1")
        if self.nproc_per_node < 1:
            raise TopologyError(text, "the number of processes per node must be at least 1")
        if self.nodes > MAX_NODES:
            raise TopologyError(text, f"at most {MAX_NODES} nodes")
        if self.nproc_per_node > MAX_NPROC_PER_NODE:
            raise TopologyError(text, f"at most {MAX_NPROC_PER_NODE} processes per node")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= self.nodes:
            raise TopologyError(text, "MIN must be between 1 and the number of nodes")

    @property
    def elastic(self) -> bool:
        """True when the node count may shrink to ``min_nodes``."""
        return self.min_nodes is not None and self.min_nodes != self.nodes

    @property
    def nnodes_arg(self) -> str:
        """torchrun's ``--nnodes`` value: ``N`` or ``MIN:MAX``."""
        return f"{self.min_nodes}:{self.nodes}" if self.elastic else str(self.nodes)

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @classmethod
    def parse(cls, text: str, *, gpus_per_node: int | None = None) -> Topology:
        """Parse ``NxM``, ``MIN:MAXxM`` or ``M``.

        Args:
            text: the ``-j`` value.
            gpus_per_node: GPUs of the named host type, when one was given. Then a
                value without ``xM`` counts *nodes* and each runs one process per GPU;
                otherwise a bare ``M`` means one node with M processes.

        Raises:
            TopologyError: the value does not parse or describes an empty job.
        """
        # [MIN:]N[xM], taken apart with str methods: no regex to compile at start-up.
        lo_text, colon, rest = text.strip().rpartition(":")
        n_text, x, m_text = rest.partition("x")
        if (colon and not _number(lo_text)) or not _number(n_text) or (x and not _number(m_text)):
            if x and not m_text and (not colon or _number(lo_text)) and _number(n_text):
                raise TopologyError(text, "'x' must be followed by the processes per node")
            raise TopologyError(text, "not a topology")
        lo = lo_text if colon else None
        n, m = int(n_text), (m_text if x else None)
        if m is not None:
            nodes, nproc = n, int(m)
        elif gpus_per_node:
            nodes, nproc = n, gpus_per_node
        elif lo is not None:
            raise TopologyError(text, "an elastic MIN:MAX needs xM, the processes per node")
        else:
            nodes, nproc = 1, n
        min_nodes = int(lo) if lo is not None else None
        if min_nodes is not None and min_nodes > nodes:
            raise TopologyError(text, f"MIN ({min_nodes}) is larger than MAX ({nodes})")
        return cls(nodes=nodes, nproc_per_node=nproc, min_nodes=min_nodes)

    def format(self) -> str:
        """The canonical ``-j`` text; ``Topology.parse(t.format()) == t``."""
        prefix = f"{self.min_nodes}:" if self.min_nodes is not None else ""
        return f"{prefix}{self.nodes}x{self.nproc_per_node}"

    def __str__(self) -> str:
        return self.format()
