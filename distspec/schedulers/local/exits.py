"""How a replica's command ended, in words: shell-style exit codes, signal names, and
the worker's own code from torchrun's failure report.

Standard library only: the supervisor's keepers use it.
"""

from __future__ import annotations

import signal

__all__ = ["describe_rc", "exit_code_of", "signal_name", "torchrun_root_cause"]


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def exit_code_of(returncode: int) -> int:
    """A shell-style exit code: a death by signal N is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_rc(rc: int) -> str:
    return f"killed by {signal_name(-rc)}" if rc < 0 else f"exit code {rc}"


def torchrun_root_cause(stderr_tail: list[str], role: str = "") -> tuple[int, str] | None:
    """(exit code, reason) of the first failed worker from torchrun's ChildFailedError
    report ("Root Cause (first observed failure)"), or None when there is none.

    torchrun itself exits 1 whenever a worker fails; the worker's own code is only in
    this report. The one reader of it: the batch backends (Slurm, PBS) use it too,
    through :func:`distspec.schedulers._common.torchrun_root_cause` (this file imports
    only the standard library, so the code lives here). ``stderr_tail`` may hold
    stdout and stderr merged.
    """
    import re

    try:
        start = max(i for i, line in enumerate(stderr_tail) if line.startswith("Root Cause"))
    except ValueError:
        return None
    block = "\n".join(stderr_tail[start : start + 12])
    code = re.search(r"exitcode\s*:\s*(-?\d+)(?: \(pid: (\d+)\))?", block)
    if code is None:
        return None
    value = int(code.group(1))
    rank = re.search(r"rank\s*:\s*(\d+) \(local_rank: (\d+)\)", block)
    who = f"rank {rank.group(1)} (local_rank {rank.group(2)})" if rank else "a worker"
    how = f"was killed by {signal_name(-value)}" if value < 0 else f"exited with {value}"
    reason = f"torchrun: {who} {how}"
    if code.group(2):
        reason += f", pid {code.group(2)}"
    if rank:
        # With --tee torchrun prefixes each worker line: [rank<global rank>]: under the
        # TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE local_cwd sets, else [<role><local rank>]:.
        prefixes = [f"[rank{rank.group(1)}]:"] + ([f"[{role}{rank.group(2)}]:"] if role else [])
        said = [ln[len(p) :] for ln in stderr_tail[:start] for p in prefixes if ln.startswith(p)]
        said = [
            ln[len(f"[rank{rank.group(1)}]: ") :] if ln.startswith("[rank") else ln for ln in said
        ]
        last = _last_said(said)
        if last:
            reason += f"; its last line: {last[:200]}"
    return exit_code_of(value), reason


def _last_said(said: list[str]) -> str:
    """What a rank printed last that tells why it failed: the exception line of its
    last traceback, else its last non-empty line (a warning torch prints at exit,
    after the traceback, is not it)."""
    starts = [i for i, text in enumerate(said) if text.startswith("Traceback (")]
    if starts:
        # The exception line is the first line after the frames that is not indented.
        for text in said[starts[-1] + 1 :]:
            if text.strip() and not text[0].isspace():
                return text.strip()
    for text in reversed(said):
        if text.strip():
            return text.strip()
    return ""
