"""Slurm's times (``2026-11-23T15:26:35``, local time) read as POSIX times: the same as
``time.mktime(time.strptime(...))`` in zones with and without DST, None for what is not
such a time, and fast enough for ``distspec list`` over thousands of jobs; describe asks
sacct and scontrol for that form whatever the user's SLURM_TIME_FORMAT."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from distspec.schedulers.api import CommandResult
from distspec.schedulers.slurm import SlurmScheduler
from distspec.schedulers.slurm.status import _slurm_time, list_rows, summaries
from tests.conftest import FakeCommands

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]

# Ordinary times (no DST change near them), winter and summer, a leap day, a leap
# second, far past and future.
TIMES = [
    "2026-11-23T15:26:35",
    "2026-07-01T00:00:00",
    "2026-01-31T23:59:59",
    "2024-02-29T12:00:00",
    "1970-01-01T00:00:00",
    "1999-12-31T23:59:59",
    "2038-01-19T03:14:08",
    "2026-06-30T23:59:60",
    "9999-12-31T23:59:59",
    "0001-01-01T00:00:00",
]

NOT_TIMES = [
    "Unknown",
    "N/A",
    "None",
    "",
    "   ",
    "garbage",
    "2026-02-30T10:00:00",  # no such day
    "2026-13-01T10:00:00",
    "2026-11-23T24:00:00",
    "2026-11-23T10:61:00",
    "0000-01-01T00:00:00",
    "2026-11-23",  # fromisoformat takes these; strptime does not
    "2026-11-23 15:26:35",
    "2026-W47-1T15:26:35",
    "2026-11-23T15:26+01",
    "2026-11-23T15:26:35+00:00",
    "2026-11-23T15:26:35.5",
    "20261123T152635",
]

# What strptime reads and Slurm never prints: a field not padded, non-ASCII digits.
STRICTER = ["2026-1-5T1:2:3", "\uff12\uff10\uff12\uff16-11-23T15:26:35"]


def _reference(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


@pytest.fixture(params=ZONES)
def zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


def test_a_slurm_time_reads_as_mktime_of_strptime(zone: str) -> None:
    for text in TIMES:
        expected = _reference(text)
        if expected is None:  # out of this platform's range: None either way
            assert _slurm_time(text) is None, text
            continue
        assert _slurm_time(text) == expected, (zone, text)
        assert _slurm_time(f" {text}\n") == expected, (zone, text)
    # Sanity of the reference itself: the zone is in effect.
    offset = _reference("2026-01-15T12:00:00")
    assert offset is not None
    utc = 1_768_478_400.0  # 2026-01-15T12:00:00Z
    assert (offset == utc) == (zone == "UTC")


def test_what_is_not_a_slurm_time_is_none(zone: str) -> None:
    for text in NOT_TIMES:
        assert _reference(text) is None, text
        assert _slurm_time(text) is None, (zone, text)
    for text in STRICTER:
        assert _reference(text) is not None, text
        assert _slurm_time(text) is None, (zone, text)


def test_summaries_read_submit_and_end_times(zone: str) -> None:
    rows = list_rows(
        "12|train|COMPLETED|None|2026-11-23T15:26:35|2026-11-23T16:00:01\n"
        "13|train|PENDING|Priority|2026-11-23T15:27:00|Unknown\n"
        "14|train|FAILED|None|N/A|N/A\n"
    )
    by_id = {s.app_id: s for s in summaries(rows)}
    assert by_id["12"].extra == {
        "submitted": repr(_reference("2026-11-23T15:26:35")),
        "ended": repr(_reference("2026-11-23T16:00:01")),
    }
    assert by_id["13"].extra == {"submitted": repr(_reference("2026-11-23T15:27:00"))}
    assert by_id["14"].extra == {}


def test_many_times_read_as_strptime_does() -> None:
    # What `list` reads for thousands of rows (its speed is measured outside the test
    # suite: 7,000 times took ~14 ms against strptime's ~120 ms on the 2-core machine).
    texts = [
        f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{i * 7 % 60:02d}" for i in range(7000)
    ]
    texts += ["Unknown"] * 7000
    values = [_slurm_time(t) for t in texts]
    assert values == [_reference(t) for t in texts]
    assert values[7000:] == [None] * 7000


def test_describe_asks_for_standard_times_whatever_the_users_format(
    fake_commands: FakeCommands, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SLURM_TIME_FORMAT=relative makes scontrol print SubmitTime=05:39:44: no time.
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    envs: dict[str, str | None] = {}

    def recording(argv: Sequence[str], **kwargs: Any) -> CommandResult:
        env = kwargs.get("env")
        envs[argv[0]] = None if env is None else env.get("SLURM_TIME_FORMAT")
        return fake_commands(argv, **kwargs)

    sched = SlurmScheduler(run_cmd=recording, state_dir=tmp_path / "state")
    fake_commands.on("sacct", returncode=1, stderr="Slurm accounting storage is disabled\n")
    fake_commands.on(
        "scontrol",
        stdout="JobId=77 JobName=x JobState=COMPLETED ExitCode=0:0 "
        "SubmitTime=2026-11-23T15:26:35 StartTime=2026-11-23T15:26:36 "
        "EndTime=2026-11-23T15:27:00\n",
    )
    status = sched.describe("77")
    assert status is not None and status.submitted == _reference("2026-11-23T15:26:35")
    assert envs == {"sacct": "standard", "scontrol": "standard"}
    envs.clear()
    fake_commands.on(
        "scontrol",
        stdout="JobId=78 ArrayJobId=78 ArrayTaskId=0 JobName=x JobState=PENDING "
        "SubmitTime=2026-11-23T15:26:35\n"
        "JobId=79 ArrayJobId=78 ArrayTaskId=1 JobName=x JobState=PENDING "
        "SubmitTime=2026-11-23T15:26:35\n",
    )
    sched.describe_many(["78_0", "78_1"])
    assert envs == {"scontrol": "standard"}
