"""``-j [MIN:]NxM`` — how many nodes, and how many processes on each.

Every ``-j`` is parsed here: :meth:`Topology.parse` reads ``[MIN:]NxM`` and ``M``;
its dialects call it: :func:`parse_component_j` (what a bare ``-j N`` means to
``dist.ddp``, ``dist.spmd``, ``dist.torchrun`` and ``dist.fn``, :class:`BareJ`) and
:func:`parse_launch_j` (``distspec launch``'s ``[N]xM``, where ``xM`` is every host).
The Python API's ``j=`` is :meth:`Topology.parse` itself.
"""

from __future__ import annotations

import enum

from distspec.errors import ComponentError, TopologyError
from distspec.frozen import frozen

__all__ = [
    "MAX_NODES",
    "MAX_NPROC_PER_NODE",
    "BareJ",
    "Topology",
    "parse_component_j",
    "parse_launch_j",
]

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
        """The number of processes: nodes times processes per node."""
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


class BareJ(enum.Enum):
    """What a bare ``-j N`` (no ``x``) means to a component."""

    PROCESSES = "N processes on one node"  # TorchX's dist.ddp
    NODES = "N nodes, one process per GPU"  # TorchX's dist.spmd
    NODES_WITH_H = "N nodes with -h, else N processes on one node"  # TorchX's dist.torchrun


def parse_component_j(j: str, bare_j: BareJ, *, gpus: int, h: str | None) -> Topology:
    """Parse ``-j`` as a component means it (see :class:`BareJ`), for nodes of
    ``gpus`` GPUs each, named ``-h h`` when it was given.

    Raises:
        ComponentError: a bare ``MIN:MAX``, or nodes counted by GPUs that have none.
        TopologyError: as :meth:`Topology.parse`.
    """
    bare = "x" not in j
    if bare_j is BareJ.PROCESSES or (bare_j is BareJ.NODES_WITH_H and not h):
        if bare and ":" in j:
            raise ComponentError(
                f"-j {j}: an elastic MIN:MAX needs xM, the processes per node (-j {j}x1)"
            )
        return Topology.parse(j)
    if bare_j is BareJ.NODES and not gpus:
        on = f"-h {h} has" if h else "the nodes have"
        raise ComponentError(
            f"dist.spmd runs one process per GPU, but {on} no GPU (TorchX's dist.spmd "
            "defaults to -h gpu.small); give -h NAME or --gpu N, or run CPU processes "
            f"with dist.ddp -j {j if not bare else j + 'xM'}"
        )
    if bare and not gpus:
        on = f"-h {h} has" if h else "the nodes have"
        raise ComponentError(
            f"-j {j} counts nodes of one process per GPU, but {on} no GPU; "
            f"give -j {j}xM (M processes per node), or GPUs with -h or --gpu"
        )
    return Topology.parse(j, gpus_per_node=gpus or None)


def parse_launch_j(text: str) -> tuple[int | None, int]:
    """``-j`` for ``distspec launch``: ``NxM``, ``xM`` (every host, M each) or ``M``
    (one host).

    Returns:
        (hosts or None for every host, processes per host).

    Raises:
        TopologyError: not one of these forms, or an elastic ``MIN:MAX``.
    """
    stripped = text.strip()
    if stripped.startswith("x"):
        try:
            topology = Topology.parse("1" + stripped)
        except TopologyError as e:
            raise TopologyError(text, e.reason) from None
        return None, topology.nproc_per_node
    topology = Topology.parse(stripped)
    if topology.min_nodes is not None:
        raise TopologyError(text, "launch runs inside a fixed allocation; MIN:MAX is not used")
    return topology.nodes, topology.nproc_per_node
