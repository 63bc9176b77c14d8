"""How a replica's command ended, in words: ``exit code N`` or ``killed by SIGNAME``.

Exit codes, signal names and torchrun's failure report themselves are read by
:mod:`distspec.torchrun_output` (standard library only, as the supervisor needs).
"""

from __future__ import annotations

from distspec.torchrun_output import signal_name

__all__ = ["describe_rc"]


def describe_rc(rc: int) -> str:
    """``exit code 3``, or ``killed by SIGKILL`` for a return code of -9."""
    return f"killed by {signal_name(-rc)}" if rc < 0 else f"exit code {rc}"
