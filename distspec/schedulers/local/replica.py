"""One replica as the supervisor sees it: its state, its current attempt, the output
its log never got, and its entry in ``state.json``. Standard library only.
"""

from __future__ import annotations

from distspec.schedulers.local.keeper import size_text

# The idiom mypy understands without importing typing (~4 ms of the supervisor's start).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["RECORD_KEYS", "Replica"]

#: The keys of a replica's entry in ``state.json``, in order (``ReplicaRecord`` in
#: :mod:`.records` declares their types).
RECORD_KEYS = (
    "id",
    "state",
    "pid",
    "pgid",
    "exit_code",
    "reason",
    "restarts",
    "attempt",
    "started",
    "ended",
)


class Replica:
    """One replica of the plan and where it stands; :meth:`to_dict` is its entry in
    ``state.json``."""

    state = "PENDING"
    #: The keeper of its current attempt (the attempt's process group), and the pid of
    #: the command that keeper started.
    keeper: int | None = None
    pid: int | None = None
    exit_code: int | None = None
    reason = ""
    restarts = 0
    attempt = 0
    started: float | None = None
    ended: float | None = None
    #: The keeper's exit message, once it came.
    result: dict[str, Any] | None = None
    #: Bytes of output its log never got, over every attempt, and why.
    lost = 0
    lost_error = ""

    def __init__(self, role: str, spec: dict[str, Any]) -> None:
        self.role = role
        self.spec = spec
        self.id: int = spec["id"]

    @property
    def pgid(self) -> int | None:
        """The process group of its current attempt: its keeper's."""
        return self.keeper

    @property
    def lost_note(self) -> str:
        """What a message says about output its log never got, or "" when none was lost."""
        if not self.lost:
            return ""
        return f"logs truncated: {size_text(self.lost)} of output not written ({self.lost_error})"

    @property
    def live(self) -> bool:
        """True while an attempt's keeper runs."""
        return self.keeper is not None

    def to_dict(self) -> dict[str, Any]:
        """Its entry in ``state.json``."""
        return {key: getattr(self, key) for key in RECORD_KEYS}
