"""``distspec status HANDLE`` (one line) and ``distspec describe HANDLE`` (every replica).

Exit codes: 0 when the app could be described; 2 when the handle is malformed or the
scheduler does not know the app. With ``--exit-status`` the code tells the app's
state instead, for shell scripts: see :data:`STATE_EXIT_CODES`.
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.hangs import Hang
    from distspec.specs.state import AppStatus

#: ``--exit-status``: the exit code for each state (2 stays "no such app / usage").
STATE_EXIT_CODES = {
    "SUCCEEDED": 0,
    "FAILED": 1,
    "CANCELLED": 3,
    "UNSUBMITTED": 4,
    "SUBMITTED": 4,
    "PENDING": 4,
    "RUNNING": 4,
    "UNKNOWN": 5,
}

EPILOG = """\
exit codes: 0 described; 2 malformed handle or unknown app. With --exit-status:
0 SUCCEEDED, 1 FAILED, 124 FAILED because the hang watchdog ended it (-cfg watchdog),
3 CANCELLED, 4 not ended yet (SUBMITTED, PENDING, RUNNING), 5 UNKNOWN, 2 unknown
app, e.g.

  distspec status --exit-status "$H" >/dev/null || echo "job $H did not succeed"
"""


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec status`` or ``describe`` (``verb``) to ``parser``."""
    from distspec.cli._shared import add_handle

    parser.epilog = EPILOG
    add_handle(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--exit-status",
        action="store_true",
        help="exit with a code for the app's state (0 succeeded, 1 failed, 3 cancelled, "
        "4 not ended, 5 unknown)",
    )
    if verb == "describe":
        parser.add_argument(
            "--sort",
            metavar="METRIC",
            help="a sweep's points by the last value of METRIC, lowest first (--sort=-METRIC: "
            "highest first); the table shows it. Default: point order, showing the main "
            "metric (loss)",
        )


def main(args: argparse.Namespace) -> int:
    """Run ``distspec status`` or ``describe`` with the parsed ``args``; returns the exit code."""
    from distspec.cli._shared import make_runner, print_json

    runner = make_runner()
    sweep = runner.sweep(args.handle)
    if sweep is not None and args.verb == "describe":
        return _describe_sweep(runner, sweep, args)
    if getattr(args, "sort", None):
        from distspec.errors import UsageError

        raise UsageError(f"--sort orders a sweep's points; {args.handle} is not a sweep")
    status = runner.status(args.handle)
    record = runner.provenance(args.handle) if args.verb == "describe" else None
    hang = hang_of(status)
    if args.json:
        extra: dict[str, object] = {"hung": hang.headline() if hang is not None else None}
        if args.verb == "describe":
            extra["runtime"] = runtime_info(status.location)
            extra["provenance"] = record
        print_json({"handle": args.handle, **status.to_dict(), **extra})
    elif args.verb == "status":
        msg = f"hung: {hang.headline()}" if hang is not None else status.msg
        print(status.state.value + (f": {msg}" if msg else ""))
    else:
        print(describe_text(args.handle, status))
        if record is not None:
            print(provenance_text(record))
    if not args.exit_status:
        return 0
    if hang is not None:
        from distspec.hangs import HUNG_EXIT

        return HUNG_EXIT
    return STATE_EXIT_CODES.get(status.state.value, 5)


def _describe_sweep(runner: Any, sweep: Any, args: argparse.Namespace) -> int:
    """``describe`` of a sweep: its state, then one line per point."""
    from distspec.cli._shared import print_json
    from distspec.cli.sweep import last_metrics, metric_column, points_table, sorted_rows
    from distspec.errors import UsageError
    from distspec.metrics import encode_value
    from distspec.sweep.record import sweep_status

    states = sweep.states(runner)
    status = sweep_status(states)
    lasts = last_metrics(runner, sweep)
    sort = args.sort or ""
    descending = sort.startswith("-")
    wanted = sort[1:] if descending else sort
    column = metric_column(lasts, wanted or None)
    rows = None
    if wanted:
        if column is None:
            seen = sorted({n for last in lasts for n in last})
            raise UsageError(
                f"no point of {args.handle} recorded a metric {wanted!r}"
                + (f"; they recorded: {', '.join(seen)}" if seen else " (none recorded metrics)")
            )
        rows = sorted_rows(column, descending)
    if args.json:
        points = [
            {
                "index": i,
                "values": sweep.sweep.values(i),
                "handle": sweep.handles[i],
                "status": states[i].to_dict() if states[i] is not None else None,
                "metrics": {k: encode_value(v) for k, v in lasts[i].items()},
            }
            for i in (rows if rows is not None else range(len(states)))
        ]
        print_json({"handle": args.handle, **status.to_dict(), "points": points})
    else:
        arrays = sweep.data.get("arrays") or []
        how = (
            f"{len(arrays)} array(s): " + ", ".join(str(a["app_id"]) for a in arrays)
            if arrays
            else "one job per point"
        )
        print(f"{args.handle}: {status.state.value} ({status.msg}); {how}")
        print("\n".join(points_table(sweep, states, rows, column)))
    return STATE_EXIT_CODES.get(status.state.value, 5) if args.exit_status else 0


def _time(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def duration_text(seconds: float | None) -> str:
    """``12.3s``, ``4m05s``, ``2h03m07s``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def runtime_info(location: str) -> dict[str, object] | None:
    """What rank 0's ``distspec.runtime.init()`` recorded in the job directory, if anything.

    The file is informational: unreadable or malformed means "nothing recorded".
    """
    import json
    import os

    if not location or "://" in location:
        return None
    try:
        with open(os.path.join(location, "runtime.json"), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def runtime_text(info: dict[str, object]) -> str:
    """``launcher=torchrun world=4 nodes=1 backend=gloo device=cpu degrees=pp=1,dp=2,...``."""
    keys = ("launcher", "world_size", "num_nodes", "backend", "device")
    names = {"world_size": "world", "num_nodes": "nodes"}
    parts = [f"{names.get(k, k)}={info[k]}" for k in keys if info.get(k) is not None]
    degrees = info.get("degrees")
    if isinstance(degrees, dict):
        parts.append("degrees=" + ",".join(f"{k}={v}" for k, v in degrees.items()))
    return " ".join(parts)


def describe_text(handle: str, status: AppStatus) -> str:
    """What ``describe`` prints: the app, then each role's command and replicas."""
    lines = [f"handle:     {handle}"]
    lines.append(f"state:      {status.state.value}" + (f" ({status.msg})" if status.msg else ""))
    if status.native_id:
        label = "supervisor" if handle.startswith("local_cwd://") else "job id"
        lines.append(f"{label + ':':<11} {status.native_id}")
    if status.submitted is not None or status.started is not None:
        lines.append(f"submitted:  {_time(status.submitted)}")
        lines.append(f"started:    {_time(status.started)}")
        lines.append(f"ended:      {_time(status.ended)}")
        running = "" if status.ended is not None or status.started is None else " (so far)"
        lines.append(f"duration:   {duration_text(status.duration)}{running}")
    if status.location:
        lines.append(f"run dir:    {status.location}")
        lines += _hang_lines(status)
    info = runtime_info(status.location)
    if info:
        lines.append(f"runtime:    {runtime_text(info)}")
    from distspec.timeline import job_timeline, timeline_text

    events = job_timeline(status, status.location or None)
    if len(events) > 1:
        lines.append("timeline:")
        lines.extend(timeline_text(events))
    if status.num_restarts:
        lines.append(f"restarts:   {status.num_restarts}")
    if status.ui_url:
        lines.append(f"ui:         {status.ui_url}")
    for role in status.roles:
        lines.append(f"role {role.role}:")
        if role.command:
            lines.append(f"  command: {role.command}")
        for r in role.replicas:
            lines.append(f"  {r.summary()}")
            if r.log:
                lines.append(f"    log: {r.log}")
    return "\n".join(lines)


def hang_of(status: AppStatus) -> Hang | None:
    """The hang watchdog's record for a job it ended (a replica exited with 124 and the
    job folder has ``hang/hung``), else None."""
    from distspec.hangs import HUNG_EXIT, read_hang

    if not status.location or status.state.value != "FAILED":
        return None
    if not any(r.exit_code == HUNG_EXIT for role in status.roles for r in role.replicas):
        return None
    try:
        return read_hang(status.location)
    except Exception:  # status and describe stand without it
        return None


def _hang_lines(status: AppStatus) -> list[str]:
    """For a job the hang watchdog ended: what it saw and where each rank was."""
    from distspec.hangs import HANG_DIR, summary_lines

    hang = hang_of(status)
    if hang is None:
        return []
    lines = [f"hung:       {hang.headline()}"]
    lines += [f"  {line}" for line in summary_lines(hang)]
    lines.append(f"  stacks: {status.location.rstrip('/')}/{HANG_DIR}/stacks/")
    return lines


def _size(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return f"{count} B"


def provenance_text(record: dict[str, object]) -> str:
    """What ``describe`` prints of a run's provenance record: its code (snapshot, git
    commit, dirty files, patch), who submitted it from where, how, and with what."""
    lines = ["provenance:"]
    snap = record.get("snapshot")
    git = record.get("git")
    if isinstance(snap, dict):
        lines.append(
            f"  snapshot:  {snap.get('id')} of {snap.get('base')} ({snap.get('files')} files, "
            f"{_size(int(snap.get('bytes') or 0))}); the job ran {snap.get('job_path')}"
        )
        untracked = snap.get("untracked") or []
        if untracked:
            shown = ", ".join(str(u) for u in untracked[:5]) + (
                ", ..." if len(untracked) > 5 else ""
            )
            lines.append(f"  untracked: {len(untracked)} taken: {shown}")
    else:
        lines.append(
            "  snapshot:  none (the job ran the files on disk; -cfg snapshot=on keeps them)"
        )
    if isinstance(git, dict):
        commit = str(git.get("commit") or "no commit yet")
        where = f" on {git['branch']}" if git.get("branch") else " (detached)"
        remote = f" ({git['remote']})" if git.get("remote") else ""
        lines.append(f"  git:       {commit}{where}{remote}")
        if git.get("dirty"):
            changed = git.get("changed") or []
            files = "1 file differs" if len(changed) == 1 else f"{len(changed)} files differ"
            lines.append(
                f"  dirty:     {files} from HEAD; their diff: {git.get('patch')} in the job folder"
            )
        else:
            lines.append("  dirty:     no")
    lines.append(
        f"  by:        {record.get('user')}@{record.get('host')} at {record.get('submitted')}, "
        f"in {record.get('cwd')}"
    )
    argv = record.get("argv")
    if isinstance(argv, list) and argv:
        import shlex

        lines.append(f"  command:   {shlex.join(str(a) for a in argv)}")
    versions = record.get("versions")
    if isinstance(versions, dict):
        lines.append("  versions:  " + ", ".join(f"{k} {v or '-'}" for k, v in versions.items()))
    options = record.get("options")
    if isinstance(options, dict):
        chosen = [
            f"{k}={v.get('value')} ({v.get('source')})"
            for k, v in options.items()
            if isinstance(v, dict) and v.get("source") != "default"
        ]
        lines.append("  options:   " + (", ".join(chosen) if chosen else "all defaults"))
    if record.get("rerun_of"):
        lines.append(f"  rerun of:  {record['rerun_of']}")
    return "\n".join(lines)
