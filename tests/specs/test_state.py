"""AppStatus.first_failure: which failed replica a failed job is blamed on."""

from __future__ import annotations

import pytest

from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus


def _status(*codes: int | None) -> AppStatus:
    replicas = tuple(
        ReplicaStatus(
            role="train",
            id=i,
            state=AppState.FAILED if code != 0 else AppState.SUCCEEDED,
            exit_code=code,
        )
        for i, code in enumerate(codes)
    )
    return AppStatus(state=AppState.FAILED, roles=(RoleStatus(role="train", replicas=replicas),))


@pytest.mark.parametrize(
    ("codes", "blamed"),
    [
        # The others were stopped with SIGTERM (143, or torchrun's -15) after rank 3
        # failed on its own: rank 3 is blamed, whatever the order.
        ((0, None, 143, 7), 3),
        ((-15, 143, 1, 143), 2),
        # A replica killed by SIGKILL (137: the OOM killer) is a cause of its own.
        ((143, 137), 1),
        # SIGABRT (134, torchrun's -6) is how gloo and NCCL abort a rank whose peer
        # died: the rank that exited by itself beside it is blamed ...
        ((134, 7), 1),
        ((-6, 143, 1), 2),
        # ... but an abort still comes before the ranks SIGTERM stopped.
        ((143, 134, 143), 1),
        # Only SIGTERMs: the first of them.
        ((None, 143, 143), 1),
        # No code at all: the first failed replica.
        ((0, None, None), 1),
    ],
)
def test_first_failure_blames_the_replica_that_was_not_stopped(
    codes: tuple[int | None, ...], blamed: int
) -> None:
    failed = _status(*codes).first_failure()
    assert failed is not None and failed.id == blamed


def test_first_failure_of_a_job_without_failures_is_none() -> None:
    assert _status(0, 0).first_failure() is None
