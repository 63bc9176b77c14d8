"""What a scheduler says about a submitted app."""

from __future__ import annotations

import enum

from distspec.frozen import field, frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["AppState", "AppStatus", "ReplicaStatus", "RoleStatus"]


class AppState(str, enum.Enum):
    """Lifecycle of an app (and of each replica)."""

    UNSUBMITTED = "UNSUBMITTED"
    SUBMITTED = "SUBMITTED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_terminal(self) -> bool:
        """True for a state that does not change again: SUCCEEDED, FAILED or CANCELLED."""
        return self in _TERMINAL

    def __str__(self) -> str:
        return self.value


_TERMINAL = frozenset({AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED})


@frozen
class ReplicaStatus:
    """One replica: where it ran, how it ended."""

    role: str
    id: int
    state: AppState
    hostname: str = ""
    exit_code: int | None = None
    reason: str = ""
    restarts: int = 0
    #: Where its log is (a path, or the scheduler's name for it); "" if unknown.
    log: str = ""
    #: POSIX times its current attempt started and ended, where the scheduler says.
    started: float | None = None
    ended: float | None = None

    def summary(self) -> str:
        """``role/id: STATE host=... exit=... restarts=... reason=...`` (the known parts)."""
        bits = [f"{self.role}/{self.id}: {self.state.value}"]
        if self.hostname:
            bits.append(f"host={self.hostname}")
        if self.exit_code is not None:
            bits.append(f"exit={self.exit_code}")
        if self.restarts:
            bits.append(f"restarts={self.restarts}")
        if self.reason:
            bits.append(f"reason={self.reason}")
        return " ".join(bits)

    def to_dict(self) -> dict[str, Any]:
        """This replica's status as JSON-ready values."""
        return {
            "role": self.role,
            "id": self.id,
            "state": self.state.value,
            "hostname": self.hostname,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "restarts": self.restarts,
            "log": self.log,
            "started": self.started,
            "ended": self.ended,
        }


@frozen
class RoleStatus:
    """The replicas of one role."""

    role: str
    replicas: tuple[ReplicaStatus, ...] = ()
    #: The command the role runs (shell-quoted), where the scheduler recorded it.
    command: str = ""

    def count(self, state: AppState) -> int:
        """How many of the role's replicas are in ``state``."""
        return sum(1 for r in self.replicas if r.state is state)

    def to_dict(self) -> dict[str, Any]:
        """This role's status as JSON-ready values."""
        return {
            "role": self.role,
            "command": self.command,
            "replicas": [r.to_dict() for r in self.replicas],
        }


@frozen
class AppStatus:
    """The app's state and, where the scheduler knows them, its replicas."""

    state: AppState
    msg: str = ""
    num_restarts: int = 0
    roles: tuple[RoleStatus, ...] = field(default=())
    ui_url: str = ""
    #: POSIX times: submitted, first replica started, ended; None where unknown.
    submitted: float | None = None
    started: float | None = None
    ended: float | None = None
    #: Where the run's files are: local run directory, Slurm/PBS job folder; "" if none.
    location: str = ""
    #: The scheduler's own id for the app (Slurm/PBS job id, Kubernetes job name).
    native_id: str = ""

    @property
    def duration(self) -> float | None:
        """Seconds from start (or submission) to end, or to now while it runs."""
        begin = self.started if self.started is not None else self.submitted
        if begin is None:
            return None
        if self.ended is not None:
            return max(0.0, self.ended - begin)
        import time

        return max(0.0, time.time() - begin)

    @property
    def is_terminal(self) -> bool:
        """True when the app's state does not change again."""
        return self.state.is_terminal

    def first_failure(self) -> ReplicaStatus | None:
        """The failed replica to blame, lowest role/replica order within each tier.

        1. a non-zero exit code other than SIGTERM's or SIGABRT's;
        2. SIGABRT (134, or -6 as torchrun writes it): how gloo and NCCL's watchdog
           abort a rank whose peer died, so a rank that exited by itself beside it
           is the likelier cause;
        3. SIGTERM (143, or -15): how launchers and schedulers stop the other
           replicas once one failed, most often a bystander;
        4. any failed replica.
        """
        failed = [r for role in self.roles for r in role.replicas if r.state is AppState.FAILED]
        with_code = [r for r in failed if r.exit_code not in (None, 0)]
        aborted = [r for r in with_code if r.exit_code in (134, -6)]
        stopped = [r for r in with_code if r.exit_code in (143, -15)]
        own = [r for r in with_code if r.exit_code not in (134, -6, 143, -15)]
        pool = own or aborted or stopped or failed
        return pool[0] if pool else None

    def to_dict(self) -> dict[str, Any]:
        """This status as JSON-ready values (``distspec status --json`` prints it)."""
        return {
            "state": self.state.value,
            "msg": self.msg,
            "num_restarts": self.num_restarts,
            "roles": [r.to_dict() for r in self.roles],
            "ui_url": self.ui_url,
            "submitted": self.submitted,
            "started": self.started,
            "ended": self.ended,
            "duration": self.duration,
            "location": self.location,
            "native_id": self.native_id,
        }

    def format(self) -> str:
        """Human-readable, several lines."""
        lines = [f"state: {self.state.value}" + (f" ({self.msg})" if self.msg else "")]
        if self.num_restarts:
            lines.append(f"restarts: {self.num_restarts}")
        for role in self.roles:
            lines.append(f"role {role.role}:")
            lines.extend(f"  {r.summary()}" for r in role.replicas)
        return "\n".join(lines)
