"""Hosts of an allocation, written once for detection (:mod:`.env`) and launch.

Slurm writes its node list and tasks per node in compressed forms
(``gpu[01-04,07]``, ``2(x3),1``); both are read with python-hostlist, the
library Slurm sites themselves use for this. PBS lists one line per slot in
``$PBS_NODEFILE`` (a host appears once per MPI process it was given).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from pathlib import Path

from distspec.errors import RuntimeEnvError
from distspec.torchrun import DEFAULT_RDZV_PORT, RDZV_PORT_SPAN

__all__ = [
    "DEFAULT_MASTER_PORT",
    "PORT_SPAN",
    "default_port",
    "expand_nodelist",
    "read_nodefile",
    "tasks_per_node",
    "unique_hosts",
]

#: torch's own default rendezvous port; the port when there is no job id.
DEFAULT_MASTER_PORT = DEFAULT_RDZV_PORT

#: Ports derived from a job id fall in ``[DEFAULT_MASTER_PORT, DEFAULT_MASTER_PORT + PORT_SPAN)``:
#: the same span as the generated scripts' ports, below Linux's ephemeral ones (32768 up).
PORT_SPAN = RDZV_PORT_SPAN


def expand_nodelist(nodelist: str) -> list[str]:
    """``"gpu[01-02,07],login"`` → ``["gpu01", "gpu02", "gpu07", "login"]``, in Slurm's order.

    Raises:
        RuntimeEnvError: the list does not parse.
    """
    import hostlist

    try:
        return list(hostlist.expand_hostlist(nodelist))
    except hostlist.BadHostlist as e:
        raise RuntimeEnvError(f"cannot read the Slurm node list {nodelist!r}: {e}") from e


def tasks_per_node(spec: str) -> list[int]:
    """Slurm's ``SLURM_TASKS_PER_NODE`` form ``"2(x3),1"`` → ``[2, 2, 2, 1]``.

    Raises:
        RuntimeEnvError: the value does not parse.
    """
    import hostlist

    try:
        counts = [int(n) for n in hostlist.parse_slurm_tasks_per_node(spec)]
    except (hostlist.BadHostlist, ValueError) as e:
        raise RuntimeEnvError(f"cannot read Slurm's tasks per node {spec!r}: {e}") from e
    if not counts or min(counts) < 0:
        raise RuntimeEnvError(f"cannot read Slurm's tasks per node {spec!r}")
    return counts


def unique_hosts(hosts: Iterable[str]) -> list[str]:
    """The hosts in first-seen order, each once."""
    return list(dict.fromkeys(h for h in hosts if h))


def read_nodefile(path: str | Path) -> list[str]:
    """The lines of a PBS nodefile (or any hostfile): one host per slot, blank lines skipped.

    A host given K slots appears K times; :func:`unique_hosts` makes it a host list.
    An MPICH-style ``host:K`` line counts as K slots.

    Raises:
        RuntimeEnvError: the file cannot be read or lists no host.
    """
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RuntimeEnvError(f"cannot read the host file {str(path)!r}: {e}") from e
    slots: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host, _, count = line.split()[0].partition(":")
        slots += [host] * (int(count) if count.isdigit() and int(count) > 0 else 1)
    if not slots:
        raise RuntimeEnvError(f"the host file {str(path)!r} lists no host")
    return slots


def default_port(job_id: str | None) -> int:
    """The rendezvous port every rank of a job agrees on without talking.

    ``29500 + crc32(job_id) % 2000`` (so concurrent jobs sharing a first host
    rarely collide), or 29500 without a job id. ``MASTER_PORT`` overrides it.
    """
    if not job_id:
        return DEFAULT_MASTER_PORT
    return DEFAULT_MASTER_PORT + zlib.crc32(job_id.encode()) % PORT_SPAN
