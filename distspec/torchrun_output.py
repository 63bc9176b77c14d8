"""What torchrun and its workers print, read in one place.

torchrun's output is an external format: its ``--tee`` prefixes on worker lines
(``[rank3]:``, ``[trainer1]:``), the prefix torch's exception hook puts on a worker's
traceback (``[rank3]: ``), the ChildFailedError report whose "Root Cause (first
observed failure)" entry names the failed worker, its host and its exit code (minus
the signal for a signal), and the C++ runtime's ``terminate`` message of a process
that aborts as it exits. Everything that reads them uses this module: the local
supervisor, the Slurm, PBS and Kubernetes backends (the code a replica exited with),
``distspec log --rank`` and ``run --wait`` (who failed and what it said), Python
callables (which rank died first) and the in-job ``distspec launch``.

It imports only the standard library, and nothing at all until a function needs it,
so that code started without ``site`` (the local supervisor), the in-job runtime and
the CLI's compile path can all import it for free. Every function is pure: log lines
in (without newlines), values out.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

__all__ = [
    "RANK_PREFIX_ENV",
    "RANK_PREFIX_TEMPLATE",
    "TERMINATE_AT_EXIT",
    "WORKER_EXEC_ENV",
    "RootCause",
    "aborted_at_exit",
    "exit_code_of",
    "failure_excerpt",
    "line_of_rank",
    "rank_lines",
    "root_cause",
    "signal_name",
    "split_rank",
    "torchrun_root_cause",
    "worker_exec_line",
]

#: The variable torchrun reads the template of its ``--tee`` line prefix from.
RANK_PREFIX_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"

#: torchrun's ``--tee`` prefixes each worker line with ``[<role><local rank>]:``; with
#: this template (in :data:`RANK_PREFIX_ENV`) it writes the worker's *global* rank
#: instead, in the form torch's own exception hook uses (``[rank3]: ``), so one parser
#: (:func:`split_rank`) recovers the rank of a line.
RANK_PREFIX_TEMPLATE = "[rank${rank}]:"

#: The variable a submitted job finds distspec's worker Python in
#: (``distspec/runtime/worker-python``, set by the submitting process): torchrun's
#: ``PYTHON_EXEC`` is pointed at it, so each worker's stderr joins its stdout and one
#: rank's lines keep their order (see :func:`worker_exec_line`).
WORKER_EXEC_ENV = "DISTSPEC_WORKER_EXEC"

#: What the C++ runtime prints when a process ends while a ``std::thread`` is still
#: joinable: torch's process-group threads, when a script returns without
#: ``destroy_process_group()``, now and then (then SIGABRT, exit code 134).
TERMINATE_AT_EXIT = "terminate called without an active exception"

_ROOT_CAUSE = "Root Cause"
_TRACEBACK = "Traceback ("


# -- exit codes and signals ----------------------------------------------------------


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal N`` for a number that names no signal."""
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_code_of(returncode: int) -> int:
    """A shell-style exit code: a death by signal N (a return code of -N, as
    ``subprocess`` and torchrun's report give it) is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


# -- rank prefixes ---------------------------------------------------------------------


def split_rank(text: str, role: str = "") -> tuple[int | None, str]:
    """``(global rank, text)`` of a replica's log line, without torchrun's prefixes.

    Recognised, in this order and each at most once: torchrun's tee prefix as
    :data:`RANK_PREFIX_TEMPLATE` makes it (``[rank3]:``) or torchrun's default
    (``[<role><local rank>]:``, giving no global rank), then the prefix torch's
    exception hook puts on a traceback after ``init_process_group`` (``[rank3]: ``).
    A line with none of them (torchrun's own messages, a plain program) has rank None.

    A line that ends with its own tee prefix again (``[rank3]:step 7[rank3]:``) was cut
    by torchrun's tailer: ``print()`` writes a line's text and its newline separately
    (torchrun runs Python unbuffered), and the tailer, reading in between, printed the
    text and then the newline, each with the prefix. The second prefix is dropped.
    """
    rank: int | None = None
    rest = text
    if rest.startswith("[rank"):
        end = rest.find("]:", 5)
        if end > 5 and rest[5:end].isdigit():
            prefix = rest[: end + 2]
            rank, rest = int(rest[5:end]), rest[end + 2 :]
            if rest.endswith(prefix):
                rest = rest[: -len(prefix)]
    elif role and rest.startswith("[" + role):
        end = rest.find("]:", len(role) + 1)
        if end > len(role) + 1 and rest[len(role) + 1 : end].isdigit():
            rest = rest[end + 2 :]
    if rest.startswith("[rank"):
        end = rest.find("]: ", 5)
        if end > 5 and rest[5:end].isdigit() and (rank is None or int(rest[5:end]) == rank):
            rank, rest = int(rest[5:end]), rest[end + 3 :]
    return rank, rest


def rank_lines(lines: Iterable[str], role: str = "") -> Iterator[tuple[int | None, str]]:
    """``(global rank, text)`` of each line one torchrun agent printed with ``--tee``,
    with the lines its tailer cut rejoined.

    torchrun copies each worker's log to its own output with one thread per worker
    and stream; a thread that reads a worker's file between ``print()``'s two writes
    (the text, then the newline: torchrun runs Python unbuffered) prints the text
    without a newline, and whatever the next thread prints lands on the same line:
    ``[rank1]:seq 292[rank0]:seq 7`` then, later, ``[rank1]:``. Here a tee prefix
    (``[rankN]:``, or torchrun's default ``[<role>N]:`` given the ``role``) after
    text on a line starts a new piece; every piece but a line's
    last is a rank's unfinished line, held until that rank's next piece completes
    it. What is still held when ``lines`` end is given out as it is. A prefix right
    after another (torch's exception hook's ``[rank3]: ``) is part of the text.

    A rank's stdout and stderr are two threads: a piece cut from one can be completed
    by a line of the other (rare; the text is then joined, nothing is lost). Text
    that itself contains ``[rankN]:`` after other text is read as a cut too.
    """
    held: dict[str, str] = {}
    for line in lines:
        pieces = _tee_pieces(line, role)
        last = len(pieces) - 1
        for i, (prefix, text) in enumerate(pieces):
            if prefix in held:
                text = held.pop(prefix) + text
            if i < last and prefix:
                held[prefix] = text
            else:
                yield split_rank(prefix + text, role)
    for prefix, text in held.items():
        yield split_rank(prefix + text, role)


def _tee_pieces(line: str, role: str = "") -> list[tuple[str, str]]:
    """``line`` cut before each tee prefix that follows text (``[rankN]:``, or with
    ``role`` torchrun's default ``[<role>N]:``): ``(prefix, text)`` pairs, the prefix
    ``""`` for a first piece without one."""
    pieces: list[tuple[str, str]] = []
    prefix = ""
    start = 0
    at = line.find("[")
    while at != -1:
        end = line.find("]:", at + 1)
        if end == -1:
            break
        label = line[at + 1 : end]
        name = "rank" if label.startswith("rank") else role
        if name and label.startswith(name) and label[len(name) :].isdigit():
            if at == start:  # a prefix at the start of a piece, or right after one
                if not prefix and at == 0:
                    prefix, start = line[: end + 2], end + 2
            else:
                pieces.append((prefix, line[start:at]))
                prefix, start = line[at : end + 2], end + 2
            at = line.find("[", end + 2)
        else:
            at = line.find("[", at + 1)
    pieces.append((prefix, line[start:]))
    return pieces


def line_of_rank(text: str, role: str, rank: int, local_rank: int) -> bool:
    """Whether a torchrun ``--tee`` line belongs to ``rank``: torchrun prefixes each
    worker line with ``[rank<global rank>]:`` (``[<role><local rank>]:`` in older
    versions); lines without such a prefix (torchrun's own) belong to every rank."""
    if not text.startswith("["):
        return True
    label, sep, _ = text[1:].partition("]:")
    if not sep:
        return True
    for name, number in (("rank", rank), (role, local_rank)):
        if label.startswith(name) and label[len(name) :].isdigit():
            return int(label[len(name) :]) == number
    return True


# -- the ChildFailedError report ---------------------------------------------------------


class RootCause:
    """The first failure torchrun observed, from its ChildFailedError report.

    Attributes:
        rank: the failed worker's global rank.
        local_rank: its rank on its node.
        host: the node it ran on, as torchrun names it (``socket.getfqdn()``).
        exitcode: torchrun's number for it: the exit code, or minus the signal.
        pid: its process id.
    """

    # A frozen record without dataclasses (whose import the supervisor and the
    # compile path do not pay for).
    __slots__ = ("exitcode", "host", "local_rank", "pid", "rank")
    _FIELDS = ("rank", "local_rank", "host", "exitcode", "pid")

    rank: int | None
    local_rank: int | None
    host: str | None
    exitcode: int | None
    pid: int | None

    def __init__(
        self,
        *,
        rank: int | None = None,
        local_rank: int | None = None,
        host: str | None = None,
        exitcode: int | None = None,
        pid: int | None = None,
    ) -> None:
        for name, value in zip(self._FIELDS, (rank, local_rank, host, exitcode, pid), strict=True):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"RootCause is frozen: cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RootCause):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={v!r}" for n, v in zip(self._FIELDS, self._values(), strict=True))
        return f"RootCause({fields})"


def _report_start(lines: Sequence[str], *, first: bool = False) -> int | None:
    """The index of the last (or ``first``) line starting "Root Cause", or None."""
    starts = [i for i, text in enumerate(lines) if text.startswith(_ROOT_CAUSE)]
    if not starts:
        return None
    return starts[0] if first else starts[-1]


def root_cause(lines: Sequence[str], *, first: bool = False) -> RootCause | None:
    """The failure to blame in the last (with ``first``, the first) ChildFailedError
    report in ``lines`` (torchrun's stderr, without newlines), or None without one.

    The report reads (torch 2.x)::

        Failures:
        [1]:
          time      : 2026-11-26_09:15:07
          host      : n1
          rank      : 2 (local_rank: 0)
          exitcode  : -6 (pid: 29854)  (SIGABRT)
          ...
        ------------------------------------------------------------
        Root Cause (first observed failure):
        [0]:
          time      : 2026-11-26_09:15:07
          host      : n1
          rank      : 3 (local_rank: 1)
          exitcode  : 7 (pid: 29855)
          error_file: <N/A>
          traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
        ============================================================

    The "Root Cause" entry is torchrun's earliest failure, but its clock counts whole
    seconds and a tie goes to the lowest local rank. So when that entry was ended by
    SIGABRT or SIGTERM (how gloo and NCCL abort a rank whose peer died, and how a
    rank is stopped) and another worker in the same second exited by itself (a code,
    or another signal), that worker is the one returned: one rank raising makes its
    peers abort within the same poll, and torchrun cannot tell which came first.
    """
    start = _report_start(lines, first=first)
    if start is None:
        return None
    found = _entry(lines[start + 1 : start + 12])
    if found[1].exitcode in _BYSTANDER_SIGNALS:
        # The "Failures:" section just above the Root Cause: entries "[k]:".
        top = start
        while top > 0 and not lines[top - 1].startswith(("Failures:", "=")) and start - top < 400:
            top -= 1
        entries = [i for i in range(top, start) if _is_entry(lines[i])]
        others = [_entry(lines[i + 1 : i + 12]) for i in entries]
        own = [
            other
            for time, other in others
            if time == found[0] and other.exitcode not in (None, 0, *_BYSTANDER_SIGNALS)
        ]
        if own:
            return own[0]
    return None if found[1] == RootCause() else found[1]


# Minus the signal, as torchrun writes it: SIGABRT and SIGTERM.
_BYSTANDER_SIGNALS = (-6, -15)


def _is_entry(text: str) -> bool:
    """Whether ``text`` opens an entry of the report: ``[k]:``."""
    return text.startswith("[") and text.endswith("]:") and text[1:-2].isdigit()


def _entry(lines: Sequence[str]) -> tuple[str | None, RootCause]:
    """``(time, failure)`` of one entry of a ChildFailedError report: the lines after
    its ``[k]:`` (which may lead them), up to the next entry or section line."""
    fields: dict[str, str] = {}
    for i, text in enumerate(lines):
        if text.startswith(("=", "-")) or (i and _is_entry(text)):
            break
        key, _, value = text.partition(":")
        fields.setdefault(key.strip(), value.strip())

    def number(text: str | None, pattern: str = "") -> int | None:
        if text is None:
            return None
        if pattern:
            rest = text.partition(pattern)[2]
            if not rest:
                return None
            text = rest
        word = text.strip().split(" ")[0].rstrip(")")
        try:
            return int(word)
        except ValueError:
            return None

    return fields.get("time"), RootCause(
        rank=number(fields.get("rank")),
        local_rank=number(fields.get("rank"), "local_rank:"),
        host=fields.get("host") or None,
        exitcode=number(fields.get("exitcode")),
        pid=number(fields.get("exitcode"), "pid:"),
    )


def torchrun_root_cause(lines: Sequence[str], role: str = "") -> tuple[int, str] | None:
    """``(exit code, reason)`` of the first failed worker from torchrun's last
    ChildFailedError report (:func:`root_cause`), or None when there is none or it
    gives no exit code. Every backend reads a worker's own code this way.

    torchrun itself exits 1 whenever a worker fails; the worker's own code (a
    negative number for a signal) is only in this report. ``lines`` is the replica's
    output without newlines, in order: stdout and stderr merged (Slurm, PBS) or
    stderr alone (local_cwd). The exit code is shell-style (:func:`exit_code_of`).
    The reason names the rank, how it ended and what it printed last: the exception
    line of its last traceback if it printed one, else its last non-empty line (a
    trailing warning does not hide the error).
    """
    lines = list(lines)
    start = _report_start(lines)
    found = root_cause(lines[start:]) if start is not None else None
    if found is None or found.exitcode is None:
        return None
    value = found.exitcode
    ranked = found.rank is not None and found.local_rank is not None
    who = f"rank {found.rank} (local_rank {found.local_rank})" if ranked else "a worker"
    how = f"was killed by {signal_name(-value)}" if value < 0 else f"exited with {value}"
    reason = f"torchrun: {who} {how}"
    if found.pid is not None:
        reason += f", pid {found.pid}"
    if ranked:
        # With --tee torchrun prefixes each worker line: [rank<global rank>]: under the
        # RANK_PREFIX_TEMPLATE distspec sets, else [<role><local rank>]:.
        tee = f"[rank{found.rank}]:"
        prefixes = [tee] + ([f"[{role}{found.local_rank}]:"] if role else [])
        said = [ln[len(p) :] for ln in lines[:start] for p in prefixes if ln.startswith(p)]
        said = [ln[len(tee) + 1 :] if ln.startswith("[rank") else ln for ln in said]
        last = _last_said(said)
        if last:
            reason += f"; its last line: {last[:200]}"
    return exit_code_of(value), reason


def _last_said(said: Sequence[str]) -> str:
    """What a rank printed last that tells why it failed: the exception line of its
    last traceback, else its last non-empty line (a warning torch prints at exit,
    after the traceback, is not it)."""
    starts = [i for i, text in enumerate(said) if text.startswith(_TRACEBACK)]
    if starts:
        # The exception line is the first line after the frames that is not indented.
        for text in said[starts[-1] + 1 :]:
            if text.strip() and not text[0].isspace():
                return text.strip()
    for text in reversed(said):
        if text.strip():
            return text.strip()
    return ""


def worker_exec_line() -> str:
    """The shell line a job runs before a torchrun command: ``PYTHON_EXEC`` (the
    program torchrun starts each worker with, ``sys.executable`` by default) becomes
    distspec's worker Python when the job names one in :data:`WORKER_EXEC_ENV` and
    this node can run it, unless the job sets ``PYTHON_EXEC`` itself. That program
    joins the worker's stderr to its stdout: torchrun's ``--tee`` copies a worker's
    two files from two threads, which loses the order between a rank's prints and its
    traceback; one stream keeps it. A node that does not see distspec's installation
    keeps torchrun's default. No single quote: the line may go into a single-quoted
    ``bash -c`` word."""
    return (
        f'[ -x "${{{WORKER_EXEC_ENV}:-}}" ] && '
        f'export PYTHON_EXEC="${{PYTHON_EXEC:-${WORKER_EXEC_ENV}}}"'
    )


# -- what a failed rank said ---------------------------------------------------------------


def aborted_at_exit(excerpt: Sequence[str]) -> bool:
    """Whether a failed rank's last lines (:func:`failure_excerpt`) show an abort as
    its process exited: the C++ ``terminate`` message among its last lines and no
    Python traceback, i.e. the script had returned when the process died."""
    tail = [text for text in excerpt if text.strip()][-3:]
    return any(TERMINATE_AT_EXIT in text for text in tail) and not any(
        text.startswith(_TRACEBACK) for text in excerpt
    )


def failure_excerpt(
    lines: Sequence[tuple[int | None, str]], *, limit: int = 40
) -> tuple[int | None, list[str]]:
    """``(rank, excerpt)``: who failed in a failed replica's log and what it said.

    ``lines`` are ``(rank, text)`` pairs as :func:`split_rank` gives them. The rank is
    the first failure torchrun reports (:func:`root_cause`), else the rank of the last
    traceback, else the one rank all ranked lines carry (a log of one rank), else None.
    The excerpt is that rank's last traceback (from
    ``Traceback (most recent call last):`` to its last line), else its last lines;
    for a plain program (no ranks) the last traceback or last lines of the log. At
    most ``limit`` lines, the end kept.
    """
    found = root_cause([text for line_rank, text in lines if line_rank is None])
    rank = found.rank if found is not None else None
    if rank is None:
        traced = [r for r, text in lines if r is not None and text.startswith(_TRACEBACK)]
        rank = traced[-1] if traced else None
    if rank is None:
        # One rank's own log (a direct launch, workers=direct): every ranked line is its.
        ranks = {r for r, _ in lines if r is not None}
        rank = ranks.pop() if len(ranks) == 1 else None
    if rank is not None:
        own = [text for r, text in lines if r == rank]
    else:
        own = [text for _, text in lines if not text.startswith("distspec: ")]
    starts = [i for i, text in enumerate(own) if text.startswith(_TRACEBACK)]
    excerpt = own[starts[-1] :] if starts else own[-20:]
    if rank is None and starts:
        # A plain program's traceback ends at its exception line; what follows is
        # other output (or a wrapper's messages).
        end = next(
            (i for i, text in enumerate(excerpt) if i and text and not text[0].isspace()),
            len(excerpt) - 1,
        )
        excerpt = excerpt[: end + 1]
    return rank, excerpt[-limit:]
