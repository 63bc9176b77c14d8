"""A run's timeline put together from its status and job folder (distspec.timeline):
the order of events, each node's launcher from its ``.host`` file, the process group
from the runtime's line, the last attempt's first metric; describe's lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus
from distspec.timeline import TIMELINE_FILE, job_timeline, timeline_text

T0 = 1_800_000_000.0


def _folder(tmp_path: Path) -> Path:
    for i, (host, delay) in enumerate([("n0", 180.0), ("n1", 181.5)]):
        path = tmp_path / f"main-{i}.host"
        path.write_text(host + "\n")
        os.utime(path, (T0 + delay, T0 + delay))
    events = [
        {"event": "process_group", "time": T0 + 200, "attempt": 0, "world_size": 4,
         "backend": "gloo", "seconds": 1.25},
        "not json",
        {"event": "something else", "time": T0 + 201},
    ]  # fmt: skip
    (tmp_path / TIMELINE_FILE).write_text(
        "\n".join(e if isinstance(e, str) else json.dumps(e) for e in events) + "\n"
    )
    (tmp_path / "metrics.jsonl").write_text(
        f'{{"step": 1, "time": {T0 + 205:f}, "attempt": 0, "loss": 1.0}}\n'
        f'{{"step": 2, "time": {T0 + 206:f}, "attempt": 0, "loss": 0.5}}\n'
    )
    return tmp_path


def test_the_events_come_from_the_status_and_the_folder_in_time_order(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    status = AppStatus(state=AppState.SUCCEEDED, submitted=T0, started=T0 + 179, ended=T0 + 400)
    events = job_timeline(status, str(folder))
    assert [(e.name, e.time) for e in events] == [
        ("submitted", T0),
        ("started", T0 + 179),
        ("launchers up", T0 + 181.5),  # the last node's
        ("process group up", T0 + 200),
        ("first metric", T0 + 205),
        ("ended", T0 + 400),
    ]
    assert events[2].detail == "2 node(s): n0 +0.0s, n1 +1.5s"
    assert events[3].detail == "4 ranks, gloo, init_process_group took 1.25s"
    assert events[4].detail == "step 1"
    lines = timeline_text(events)
    assert lines[1].split()[1:] == ["started", "+2m59s", "waiting", "to", "start"]
    assert "+18.5s  starting the workers and meeting: 4 ranks" in lines[3]
    assert lines[5].split()[1:4] == ["ended", "+3m15s", "running:"]


def test_without_a_folder_only_the_status_is_used(tmp_path: Path) -> None:
    status = AppStatus(state=AppState.RUNNING, submitted=T0, started=T0 + 2)
    assert [e.name for e in job_timeline(status, None)] == ["submitted", "started"]
    assert [e.name for e in job_timeline(status, "s3://bucket/job")] == ["submitted", "started"]
    assert [e.name for e in job_timeline(status, str(tmp_path / "gone"))] == [
        "submitted",
        "started",
    ]


def test_replicas_start_times_stand_in_for_host_files(tmp_path: Path) -> None:
    replicas = tuple(
        ReplicaStatus(role="w", id=i, state=AppState.RUNNING, hostname=h, started=T0 + d)
        for i, (h, d) in enumerate([("a", 3.0), ("b", 1.0)])
    )
    status = AppStatus(
        state=AppState.RUNNING,
        submitted=T0,
        started=T0 + 1,
        roles=(RoleStatus(role="w", replicas=replicas),),
    )
    events = job_timeline(status, str(tmp_path))
    assert [e.name for e in events] == ["submitted", "started", "launchers up"]
    assert events[-1].time == T0 + 3
    assert events[-1].detail == "2 replicas: b +0.0s, a +2.0s"


def test_the_first_metric_is_the_last_attempts(tmp_path: Path) -> None:
    lines = [
        {"step": s, "time": T0 + s, "attempt": 0 if s < 50 else 1, "loss": 1.0}
        for s in range(1, 100)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    status = AppStatus(state=AppState.RUNNING, submitted=T0)
    first = [e for e in job_timeline(status, str(tmp_path)) if e.name == "first metric"]
    assert [(e.time, e.detail) for e in first] == [(T0 + 50, "step 50, attempt 1")]
