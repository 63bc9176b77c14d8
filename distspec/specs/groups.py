"""Process subgroups as ``dist.fn --groups`` and ``distspec.submit(groups=...)`` give
them: ranks separated by commas, groups by semicolons (``0,2;1,3``).

The text travels to the job on the worker's command line (:func:`format_groups`),
where :mod:`distspec.runtime.call` reads it back (:func:`parse_groups`) for
:func:`distspec.runtime.init`; :func:`groups_problem` refuses at compile time what
``init`` would refuse when the job runs.
"""

from __future__ import annotations

from distspec.errors import ComponentError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from distspec.specs.topology import Topology

__all__ = ["format_groups", "groups_problem", "parse_groups"]


def parse_groups(text: str) -> list[list[int]]:
    """``"0,2;1,3"`` → ``[[0, 2], [1, 3]]``; ComponentError for anything else."""
    groups: list[list[int]] = []
    for part in text.split(";"):
        try:
            ranks = [int(r) for r in part.split(",")]
        except ValueError:
            raise ComponentError(
                f"--groups {text!r}: give ranks separated by commas, groups by semicolons (0,2;1,3)"
            ) from None
        if any(r < 0 for r in ranks):
            raise ComponentError(f"--groups {text!r}: ranks cannot be negative")
        groups.append(ranks)
    return groups


def format_groups(
    groups: list[list[int]] | tuple[tuple[int, ...], ...] | list[tuple[int, ...]],
) -> str:
    """The inverse of :func:`parse_groups`."""
    return ";".join(",".join(str(int(r)) for r in g) for g in groups)


def groups_problem(groups: Sequence[Sequence[int]], topology: Topology) -> str | None:
    """Why ``groups`` cannot be the subgroups of a ``topology`` job, or None: as
    :func:`distspec.runtime.init` would refuse them (an empty group, a rank outside
    the world, a rank in two groups, a rank in none), before the job runs. An elastic
    job's world is only known when it runs: its ranks are checked against the largest."""
    from distspec._arguments import show

    if not groups:
        return None  # no subgroups: the world group only
    world = topology.nodes * topology.nproc_per_node
    seen: dict[int, int] = {}
    for i, ranks in enumerate(groups):
        if not ranks:
            return f"group {i} is empty"
        for rank in ranks:
            if not 0 <= rank < world:
                return f"rank {show(rank)} is not in 0..{world - 1} (-j {topology.format()})"
            if rank in seen:
                where = (
                    f"twice in group {i}" if seen[rank] == i else f"in groups {seen[rank]} and {i}"
                )
                return f"rank {rank} is {where}: a rank belongs to one group"
            seen[rank] = i
    if not topology.elastic and len(seen) < world:
        missing = next(r for r in range(world) if r not in seen)
        return f"rank {missing} is in no group: the groups must cover all {world} ranks"
    return None
