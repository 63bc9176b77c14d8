"""Hosts of an allocation and the launchers' numbers, read once for detection (:mod:`.env`) and launch.

Everything here reads what a launcher, a scheduler or a user put in the
environment, so everything here is strict and bounded: a number is ASCII digits
only (:func:`parse_count`), a file named by a variable must be a regular file of
at most :data:`MAX_FILE_BYTES` and is opened without blocking
(:func:`read_regular_file`), and no list grows past :data:`MAX_HOSTS` hosts or
:data:`MAX_RANKS` slots. Anything else is a :class:`~distspec.errors.RuntimeEnvError`
that names the variable and (shortened, escaped) its value.

Slurm writes its node list and tasks per node in compressed forms
(``gpu[01-04,07]``, ``2(x3),1``); the node list is read with python-hostlist, the
library Slurm sites themselves use for this. PBS lists one line per slot in
``$PBS_NODEFILE`` (a host appears once per MPI process it was given). Cray PALS
describes a job's layout in the binary file ``$PALS_APINFO`` (:func:`read_apinfo`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from distspec.errors import RuntimeEnvError
from distspec.torchrun import DEFAULT_RDZV_PORT, RDZV_PORT_SPAN

__all__ = [
    "DEFAULT_MASTER_PORT",
    "MAX_FILE_BYTES",
    "MAX_HOSTS",
    "MAX_RANKS",
    "PORT_SPAN",
    "ApInfo",
    "check_host",
    "clip",
    "default_port",
    "expand_nodelist",
    "parse_count",
    "read_apinfo",
    "read_nodefile",
    "read_regular_file",
    "tasks_per_node",
    "unique_hosts",
]

#: torch's own default rendezvous port; the port when there is no job id.
DEFAULT_MASTER_PORT = DEFAULT_RDZV_PORT

#: Ports derived from a job id fall in ``[DEFAULT_MASTER_PORT, DEFAULT_MASTER_PORT + PORT_SPAN)``:
#: the same span as the generated scripts' ports, below Linux's ephemeral ones (32768 up).
PORT_SPAN = RDZV_PORT_SPAN

#: The largest rank count, world size or slot count read from anywhere (16,777,216).
MAX_RANKS = 2**24
#: The most hosts a node list, nodefile or apinfo file may name (262,144).
MAX_HOSTS = 2**18
#: The largest file a variable may name (a nodefile, hostfile or apinfo file): 16 MiB.
MAX_FILE_BYTES = 16 * 2**20

_DIGITS = re.compile(
    r"[0-9]+"
)  # ASCII only: int() also takes "1_0", " 3", "+3", fullwidth and Arabic-Indic digits
_MAX_DIGITS = 12
# A host name or address as launchers write them: DNS names, IPv4, IPv6 (with a zone).
_HOST = re.compile(r"[A-Za-z0-9_.:%\[\]-]{1,253}")


def clip(value: str, limit: int = 60) -> str:
    """``value`` shortened for a message (the message escapes it with ``repr``)."""
    return value if len(value) <= limit else f"{value[:limit]}...({len(value)} characters)"


def parse_count(value: str, *, name: str, least: int = 0, most: int = MAX_RANKS) -> int:
    """``value`` as a whole number in ``least..most``: ASCII digits only, nothing else.

    Args:
        value: the text (an environment variable's value, a field of a file).
        name: what to call it in the error (the variable's name).
        least: the smallest value accepted.
        most: the largest value accepted.

    Raises:
        RuntimeEnvError: not digits, too many digits, or out of range; naming
            ``name`` and the (shortened) value.
    """
    shown = {name: clip(value)}
    if not _DIGITS.fullmatch(value):
        raise RuntimeEnvError(
            f"{name} is not a whole number (ASCII digits 0-9 only)", variables=shown
        )
    if len(value) > _MAX_DIGITS or int(value) > most:
        raise RuntimeEnvError(f"{name} is larger than {most}", variables=shown)
    number = int(value)
    if number < least:
        raise RuntimeEnvError(f"{name} is {number}; it must be at least {least}", variables=shown)
    return number


def check_host(host: str, *, name: str, where: str = "") -> str:
    """``host`` if it looks like a host name or address (ASCII, no spaces or control characters).

    Raises:
        RuntimeEnvError: naming ``name`` (and ``where`` it was read).
    """
    if not _HOST.fullmatch(host):
        raise RuntimeEnvError(
            f"{name}{where} names {clip(host)!r}, which is not a host name or address"
        )
    return host


def expand_nodelist(nodelist: str, *, name: str = "") -> list[str]:
    """``"gpu[01-02,07],login"`` → ``["gpu01", "gpu02", "gpu07", "login"]``, in Slurm's order.

    Args:
        nodelist: Slurm's compressed form.
        name: the variable it came from, for the error.

    Raises:
        RuntimeEnvError: the list does not parse, names no host, or names more than
            :data:`MAX_HOSTS` hosts.
    """
    import hostlist

    where = f" in {name}" if name else ""
    shown = {name: clip(nodelist)} if name else None
    if len(nodelist) > MAX_FILE_BYTES:
        raise RuntimeEnvError(f"the Slurm node list{where} is too long", variables=shown)
    hosts: list[str] = []
    try:
        # hostlist bounds each part (100000 hosts) but not their sum: count as we go.
        for part in _top_level_parts(nodelist):
            hosts += hostlist.expand_part(part)
            if len(hosts) > MAX_HOSTS:
                raise RuntimeEnvError(
                    f"the Slurm node list{where} names more than {MAX_HOSTS} hosts",
                    variables=shown,
                )
    except (hostlist.BadHostlist, ValueError, RecursionError) as e:
        raise RuntimeEnvError(
            f"cannot read the Slurm node list{where} {clip(nodelist)!r}: {e}"
        ) from None
    hosts = unique_hosts(hosts)
    if not hosts:
        raise RuntimeEnvError(f"the Slurm node list{where} names no host", variables=shown)
    for host in hosts:
        check_host(host, name=name or "the Slurm node list")
    return hosts


def _top_level_parts(nodelist: str) -> list[str]:
    """Split on the commas outside brackets (what hostlist.expand_hostlist does first)."""
    import hostlist

    parts, depth, start = [], 0, 0
    for i, c in enumerate(nodelist):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        if depth > 1:
            raise hostlist.BadHostlist("nested brackets")
        if depth < 0:
            raise hostlist.BadHostlist("unbalanced brackets")
        if c == "," and depth == 0:
            parts.append(nodelist[start:i])
            start = i + 1
    if depth:
        raise hostlist.BadHostlist("unbalanced brackets")
    parts.append(nodelist[start:])
    return [p for p in parts if p]


_TASKS_ITEM = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")


def tasks_per_node(spec: str, *, name: str = "") -> list[int]:
    """Slurm's ``SLURM_TASKS_PER_NODE`` form ``"2(x3),1"`` → ``[2, 2, 2, 1]``.

    Each count is at least 1 and at most :data:`MAX_RANKS`; the list has at most
    :data:`MAX_HOSTS` entries. (Parsed here rather than with hostlist's
    ``parse_slurm_tasks_per_node``, which bounds one repetition but not their sum,
    and whose ``$`` lets a trailing newline through.)

    Raises:
        RuntimeEnvError: the value does not parse or is out of bounds; naming ``name``.
    """
    label = name or "Slurm's tasks per node"
    shown = {name: clip(spec)} if name else None
    counts: list[int] = []
    for item in spec.split(","):
        m = _TASKS_ITEM.fullmatch(item)
        if m is None:
            raise RuntimeEnvError(
                f"cannot read {label}: {clip(item)!r} is not N or N(xK) with N, K digits",
                variables=shown,
            )
        if len(m[1]) > 9 or not 1 <= int(m[1]) <= MAX_RANKS:
            raise RuntimeEnvError(
                f"{label}: {clip(m[1])} tasks on a node is not in 1..{MAX_RANKS}", variables=shown
            )
        times = 1 if m[2] is None else int(m[2]) if len(m[2]) <= 9 else MAX_HOSTS + 1
        if times < 1:
            raise RuntimeEnvError(
                f"{label}: {clip(item)!r} repeats a count 0 times", variables=shown
            )
        if len(counts) + times > MAX_HOSTS:
            raise RuntimeEnvError(f"{label} lists more than {MAX_HOSTS} nodes", variables=shown)
        counts += [int(m[1])] * times
    return counts


def unique_hosts(hosts: Iterable[str]) -> list[str]:
    """The hosts in first-seen order, each once."""
    return list(dict.fromkeys(h for h in hosts if h))


def read_regular_file(
    path: str | os.PathLike[str], *, what: str, limit: int = MAX_FILE_BYTES
) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes.

    A FIFO, a device (``/dev/zero``), a socket or a directory is refused before it is
    opened, and the file is opened with ``O_NONBLOCK`` and checked again with
    ``fstat`` (it could have been swapped in between), so nothing here blocks.
    Symbolic links are followed; a dangling one or a loop is an error.

    Args:
        path: the file.
        what: how to name the file in the error (``"PBS_NODEFILE"``, ``"the hostfile"``).
        limit: the largest size accepted, in bytes.

    Raises:
        FileNotFoundError: nothing is at ``path`` (callers decide whether that is an error).
        RuntimeEnvError: anything else that makes the file unreadable or unfit.
    """
    shown = clip(os.fspath(path), 200)

    def refuse(reason: str) -> RuntimeEnvError:
        return RuntimeEnvError(f"cannot read {what} {shown!r}: {reason}")

    def kind(mode: int) -> str | None:
        if stat.S_ISREG(mode):
            return None
        for test, name in (
            (stat.S_ISDIR, "a directory"),
            (stat.S_ISFIFO, "a FIFO (named pipe)"),
            (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"),
            (stat.S_ISSOCK, "a socket"),
        ):
            if test(mode):
                return name
        return "not a regular file"

    try:
        found = kind(os.stat(path).st_mode)
        if found:
            raise refuse(f"it is {found}, not a regular file")
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        fd = os.open(path, flags)
    except FileNotFoundError:
        if os.path.islink(path):
            raise refuse("it is a symbolic link to nothing") from None
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise refuse("symbolic links loop") from None
        raise refuse(e.strerror or str(e)) from None
    except ValueError as e:  # an embedded NUL in the path
        raise refuse(str(e)) from None
    try:
        info = os.fstat(fd)
        found = kind(info.st_mode)
        if found:
            raise refuse(f"it is {found}, not a regular file")
        if info.st_size > limit:
            raise refuse(f"it has {info.st_size} bytes, more than the {limit} allowed")
        chunks, size = [], 0
        while size <= limit:  # st_size can lie (files in /proc say 0): read at most limit + 1
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise refuse(f"it has more than the {limit} bytes allowed")
        return b"".join(chunks)
    except OSError as e:
        raise refuse(e.strerror or str(e)) from None
    finally:
        os.close(fd)


def read_nodefile(path: str | os.PathLike[str], *, name: str = "") -> list[str]:
    """The lines of a PBS nodefile (or any hostfile): one host per slot, blank lines skipped.

    A host given K slots appears K times; :func:`unique_hosts` makes it a host list.
    An MPICH-style ``host:K`` line counts as K slots; ``#`` starts a comment; words
    after the host (Open MPI's ``slots=N``) are ignored.

    Args:
        path: the nodefile.
        name: the variable or option that named the file, for the error
            (``"PBS_NODEFILE"``, ``"--hostfile"``); default "the host file".

    Raises:
        RuntimeEnvError: the file is missing, not a regular file, larger than
            :data:`MAX_FILE_BYTES`, not text, lists no host, lists something that is
            not a host name, or more than :data:`MAX_HOSTS` hosts or
            :data:`MAX_RANKS` slots.
    """
    label = name or "the host file"
    shown = clip(os.fspath(path), 200)
    try:
        data = read_regular_file(path, what=label)
    except FileNotFoundError:
        raise RuntimeEnvError(f"cannot read {label} {shown!r}: no such file") from None
    if b"\0" in data:
        raise RuntimeEnvError(f"{label} {shown!r} is binary, not a list of hosts")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise RuntimeEnvError(f"{label} {shown!r} is not UTF-8 text") from None
    entries: list[tuple[str, int]] = []
    total = 0
    hosts: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word = line.split()[0]
        host, colon, count = word.partition(":")
        if colon and not _DIGITS.fullmatch(count):
            host, count = word, ""  # an IPv6 address, not host:K
        where = f" {shown!r} line {number}"
        check_host(host, name=label, where=where)
        k = parse_count(count, name=f"{label}{where}", least=1) if count else 1
        total += k
        if total > MAX_RANKS:  # counted before any list is built
            raise RuntimeEnvError(f"{label} {shown!r} lists more than {MAX_RANKS} slots")
        hosts.add(host)
        if len(hosts) > MAX_HOSTS:
            raise RuntimeEnvError(f"{label} {shown!r} lists more than {MAX_HOSTS} hosts")
        entries.append((host, k))
    slots = [host for host, k in entries for _ in range(k)]
    if not slots:
        raise RuntimeEnvError(f"{label} {shown!r} lists no host")
    return slots


def default_port(job_id: str | None) -> int:
    """The rendezvous port every rank of a job agrees on without talking.

    ``29500 + crc32(job_id) % 2000`` (so concurrent jobs sharing a first host
    rarely collide), or 29500 without a job id. ``MASTER_PORT`` overrides it.
    """
    if not job_id:
        return DEFAULT_MASTER_PORT
    return DEFAULT_MASTER_PORT + zlib.crc32(job_id.encode(errors="replace")) % PORT_SPAN


# ---------------------------------------------------------------------------
# PALS apinfo


@dataclass(frozen=True, slots=True)
class ApInfo:
    """The layout in a PALS apinfo file: per rank (local index, command, node index)."""

    pes: tuple[tuple[int, int, int], ...]
    nodes: tuple[str, ...]


# The header: version, then (size, offset, count) for comm profiles, commands,
# ranks ("pes"), nodes and NICs; every field takes 8 bytes (ints are padded).
_HEADER = struct.Struct("<i4xQQQi4xQQi4xQQi4xQQi4xQQi4x")
_PE = struct.Struct("<iii")
_NODE_MIN = 4 + 1  # int nid, then char hostname[] (64 bytes in Slurm's writer)


def read_apinfo(path: str | os.PathLike[str], *, name: str = "PALS_APINFO") -> ApInfo | None:
    """Read a PALS apinfo file (format version 1, as Slurm's cray_shasta writes it).

    Returns None when no file is at ``path`` or it has another version (the caller
    then falls back to the PALS variables).

    Raises:
        RuntimeEnvError: the file is not a regular file, is too large, or is not a
            consistent version-1 apinfo file (truncated, counts or offsets out of
            range, a rank on a node that is not listed, local ranks that do not
            number 0..k-1 on each node).
    """
    shown = clip(os.fspath(path), 200)
    try:
        data = read_regular_file(path, what=name)
    except FileNotFoundError:
        return None

    def bad(reason: str) -> RuntimeEnvError:
        return RuntimeEnvError(f"{name} {shown!r} is not a valid PALS apinfo file: {reason}")

    if len(data) < _HEADER.size:
        if len(data) >= 4 and struct.unpack_from("<i", data)[0] != 1:
            return None
        raise bad(f"{len(data)} bytes, shorter than its header")
    fields = _HEADER.unpack_from(data, 0)
    if fields[0] != 1:
        return None
    pe_size, pe_off, npes = fields[8:11]
    node_size, node_off, nnodes = fields[11:14]
    for what, size, off, count, least, most in (
        ("ranks", pe_size, pe_off, npes, _PE.size, MAX_RANKS),
        ("nodes", node_size, node_off, nnodes, _NODE_MIN, MAX_HOSTS),
    ):
        if not 1 <= count <= most:
            raise bad(f"{count} {what} (1..{most} expected)")
        if size < least or off + size * count > len(data):
            raise bad(f"the {what} table does not fit in the file's {len(data)} bytes")
    pes = tuple(_PE.unpack_from(data, pe_off + i * pe_size) for i in range(npes))
    nodes = []
    for i in range(nnodes):
        raw = data[node_off + i * node_size + 4 : node_off + (i + 1) * node_size]
        try:
            host = raw.split(b"\0", 1)[0].decode("ascii")
        except UnicodeDecodeError:
            raise bad(f"node {i}'s name is not ASCII") from None
        nodes.append(check_host(host, name=name, where=f" {shown!r} node {i}"))
    per_node: dict[int, list[int]] = {}
    for rank, (local, _cmd, node) in enumerate(pes):
        if not 0 <= node < nnodes:
            raise bad(f"rank {rank} is on node {node}, not one of the {nnodes} listed")
        per_node.setdefault(node, []).append(local)
    for node, locals_ in per_node.items():
        if sorted(locals_) != list(range(len(locals_))):
            raise bad(f"the local ranks on node {node} are not 0..{len(locals_) - 1}")
    return ApInfo(pes=pes, nodes=tuple(nodes))
