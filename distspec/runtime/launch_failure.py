"""``distspec launch``'s account of a failed worker under torchrun.

torchrun exits 1 whenever a worker fails, and prints a Python traceback of its own
ending in a ChildFailedError table; the worker's own exit code, rank and host are
only in that table, and its traceback is somewhere above it among every other
rank's output. ``distspec launch`` reads torchrun's stderr through
:class:`TorchrunStderr`, which passes every line on except torchrun's own
traceback, and then :func:`failure_report` says what ``distspec run --wait`` says
of a failed job: the failing rank, its host, how it ended, and its traceback; the
exit code is the worker's (128 + N for a signal N).

The reading of torchrun's table and of the workers' lines is
:func:`distspec.torchrun_output.root_cause`, :func:`~distspec.torchrun_output.split_rank`
and :func:`~distspec.torchrun_output.failure_excerpt`, the functions ``run --wait`` uses.
A worker's traceback carries its rank when torch wrote it (after
``init_process_group``, torch's exception hook prefixes ``[rankN]: ``); one written
before that has no rank, and the last such traceback is taken as the failed
worker's.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from distspec.torchrun_output import (
    exit_code_of,
    failure_excerpt,
    root_cause,
    signal_name,
    split_rank,
)

__all__ = ["Failure", "TorchrunStderr", "failure_report"]

_TRACEBACK = "Traceback (most recent call last):"
# The first frame of torchrun's own traceback: its console script, or torch's
# launcher modules when run as `python -m torch.distributed.run`.
_TORCHRUN_FRAME = re.compile(
    r'^\s*File ".*(/torchrun|torch/distributed/(run\.py|launcher/|elastic/))'
)
# torch's log lines (glog style): "E1126 09:15:07.397000 29728 torch/...py:1002] ..."
_TORCH_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]")


class TorchrunStderr:
    """The lines of torchrun's stderr, with torchrun's own traceback held back.

    :meth:`feed` takes each line and returns what to write now. A line
    ``Traceback (most recent call last):`` is held until the next one tells whose it
    is; when that is a frame of torchrun itself, the lines up to the ``=====`` that
    ends the table's "Root Cause" entry are not written (a rank-prefixed line in
    between still is), nor those of another traceback of torchrun's, up to its
    exception line. Without a failure to report, ``run_plan`` writes them after
    all (``hidden``). :meth:`unwritten` gives back what is still held when the
    stream ends; :attr:`written` and :attr:`hidden` keep the last ``limit`` lines
    of each, for :func:`failure_report`.
    """

    def __init__(self, limit: int = 2000) -> None:
        self.written: deque[str] = deque(maxlen=limit)
        self.hidden: deque[str] = deque(maxlen=limit)
        self._held: list[tuple[bytes, str]] = []
        self._hiding = False
        self._root = False
        self._table = False

    def feed(self, line: bytes) -> list[bytes]:
        """What to write now of ``line`` (and of lines held before it)."""
        text = line.decode(errors="replace").rstrip("\r\n")
        if self._hiding:
            if split_rank(text)[0] is not None:
                return self._write(line, text)
            self._held.append((line, text))
            self._table = self._table or "ChildFailedError" in text
            self._root = self._root or text.startswith("Root Cause")
            if (self._root and text.startswith("=====")) or (
                # Another exception of torchrun's (srun stopping the other nodes'
                # torchrun: SignalException) ends at its unindented exception line.
                not self._table and text and not text[0].isspace()
            ):
                self.hidden.extend(t for _, t in self._held)
                self._held, self._hiding, self._root, self._table = [], False, False, False
            return []
        if self._held:  # the line after a traceback's first
            if _TORCHRUN_FRAME.match(text):
                self._held.append((line, text))
                self._hiding = True
                return []
            out = self._release()
            return out + self.feed(line)
        if text == _TRACEBACK:
            self._held.append((line, text))
            return []
        return self._write(line, text)

    def unwritten(self) -> list[bytes]:
        """The held lines, once the stream has ended (a table that never ended)."""
        self._hiding = self._root = self._table = False
        return self._release()

    def _write(self, line: bytes, text: str) -> list[bytes]:
        self.written.append(text)
        return [line]

    def _release(self) -> list[bytes]:
        held, self._held = self._held, []
        for _, text in held:
            self.written.append(text)
        return [line for line, _ in held]


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """A failed worker, as torchrun reported it.

    Attributes:
        exit_code: its exit code, shell-style (128 + N for a signal N).
        lines: what to print: one line naming it, then its traceback (if any).
    """

    exit_code: int
    lines: tuple[str, ...]


def failure_report(written: Sequence[str], hidden: Sequence[str] = ()) -> Failure | None:
    """The first failed worker torchrun reported, or None without a report.

    Args:
        written: torchrun's stderr as it was passed on (the workers' lines).
        hidden: torchrun's own traceback(s) with their ChildFailedError tables; with
            several (one torchrun per node), the first table is the first failure.
            Without any, the table is looked for in ``written``.
    """
    found = root_cause(list(hidden) or list(written), first=True)
    if found is None or found.exitcode is None:
        return None
    value = found.exitcode
    code = exit_code_of(value)
    if value < 0:
        how = f"was killed by {signal_name(-value)} (exit code {code})"
    else:
        how = f"exited with {value}"
    who = f"rank {found.rank}" if found.rank is not None else "a worker"
    if found.local_rank is not None:
        who += f" (local rank {found.local_rank})"
    where = f" on {found.host}" if found.host else ""
    lines = [f"distspec launch: failed: {who}{where} {how}"]

    pairs = [_split(text) for text in written]
    own = [(r, text) for r, text in pairs if r is not None and r == found.rank]
    if own:
        _, excerpt = failure_excerpt(own)
    else:
        plain = [(None, text) for r, text in pairs if r is None and not _TORCH_LOG.match(text)]
        _, excerpt = failure_excerpt(plain)
        if not excerpt or not excerpt[0].startswith("Traceback ("):
            excerpt = []  # other ranks' output, not this one's
    if excerpt:
        what = f"rank {found.rank}" if found.rank is not None else "its"
        count = f"last {len(excerpt)} lines" if len(excerpt) != 1 else "last line"
        lines += [f"--- {what}: {count} ---", *excerpt, "---"]
    else:
        lines.append("  (it printed no traceback)")
    return Failure(exit_code=code, lines=tuple(lines))


def _split(text: str) -> tuple[int | None, str]:
    """:func:`split_rank` of a line torchrun passed on untouched (launch runs it
    without ``--tee``): a ``[rankN]:`` prefix there is torch's exception hook's,
    which is followed by a space."""
    rank, rest = split_rank(text)
    if rank is not None and rest.startswith(" "):
        rest = rest[1:]
    return rank, rest
