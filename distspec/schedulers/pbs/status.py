"""What PBS says about jobs, read: state letters, exit statuses, ``qstat`` output.

Pure parsing of what qstat prints (the commands themselves run in
:mod:`distspec.schedulers.pbs.scheduler`), and the job's and replicas' status built
from it and from the job folder (:mod:`distspec.schedulers.batch.folder`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from distspec.frozen import FrozenDict, frozen
from distspec.schedulers.batch.folder import (
    exit_code,
    parse_int,
    replica_exit,
    replica_host,
    replica_state,
)
from distspec.specs.state import AppState, ReplicaStatus
from distspec.torchrun_output import signal_name

__all__ = [
    "FINISHED",
    "PBS_STATES",
    "STATE_WORDS",
    "JobInfo",
    "array_of",
    "finished",
    "is_job_id",
    "job_info",
    "job_infos",
    "job_number",
    "parse_max_array_size",
    "parse_qstat",
    "parse_qstat_full",
    "replica_status",
    "subjob_id",
]


#: Every PBS job state letter (PBS Pro, OpenPBS, Torque) to an AppState. C, F and X
#: are finished: the exit status (or the job folder) decides between SUCCEEDED,
#: FAILED and CANCELLED, so they map to SUCCEEDED here only as "ended".
PBS_STATES: Mapping[str, AppState] = FrozenDict(
    {
        "Q": AppState.PENDING,  # queued
        "H": AppState.PENDING,  # held
        "W": AppState.PENDING,  # waiting for its start time (-a) or for stage-in
        "T": AppState.PENDING,  # in transit to another server
        "M": AppState.PENDING,  # moved to another server (PBS Pro)
        "S": AppState.PENDING,  # suspended by the server
        "U": AppState.PENDING,  # suspended: the workstation is busy (PBS Pro)
        "R": AppState.RUNNING,
        "B": AppState.RUNNING,  # an array job with a subjob started (PBS Pro)
        "E": AppState.RUNNING,  # exiting after having run: not ended yet
        "C": AppState.SUCCEEDED,  # completed (Torque, Slurm's wrappers)
        "F": AppState.SUCCEEDED,  # finished (PBS Pro history, qstat -x)
        "X": AppState.SUCCEEDED,  # a finished subjob (PBS Pro)
    }
)
FINISHED = frozenset("CFX")
STATE_WORDS = {
    "Q": "queued",
    "H": "held",
    "W": "waiting",
    "T": "in transit",
    "M": "moved",
    "S": "suspended",
    "U": "suspended",
    "R": "running",
    "B": "running",
    "E": "exiting",
}

# PBS Pro's negative Exit_status values (JOB_EXEC_* in its job.h): the job did not
# run to its own end. Walltime is an external limit, so CANCELLED (as Slurm's TIMEOUT).
_EXEC_CODES: Mapping[int, tuple[AppState, str]] = FrozenDict(
    {
        -1: (AppState.FAILED, "PBS could not start the job"),
        -2: (AppState.FAILED, "PBS could not start the job (after staging files)"),
        -3: (AppState.FAILED, "PBS could not start the job; it was to be retried"),
        -4: (AppState.FAILED, "the job was aborted when MoM started"),
        -10: (AppState.FAILED, "the job's user or group is invalid on the execution host"),
        -11: (AppState.FAILED, "the job was rerun"),
        -27: (AppState.FAILED, "the job exceeded its mem limit"),
        -28: (AppState.FAILED, "the job exceeded its cput limit"),
        -29: (AppState.CANCELLED, "the job exceeded its walltime"),
    }
)

# Patterns are compiled on first use (re caches them): a dry run never needs them.
_JOB_ID = r"^\d+(\[\d*\])?(\.[A-Za-z0-9_.-]+)?$"
_SUBJOB = r"^(\d+)\[(\d+)\](.*)$"
_KEY_LINE = r"^\s+([A-Za-z_][A-Za-z0-9_.]*) = ?(.*)$"
_JOB_LINE = r"^Job Id:\s*(\S+)"


def is_job_id(text: str) -> bool:
    """Whether ``text`` has the form of a PBS job id: ``1234``, ``1234.server``,
    ``1234[].server`` (an array job), ``1234[7].server`` (its subjob 7)."""
    return re.compile(_JOB_ID).match(text) is not None


def array_of(job_id: str) -> tuple[str, int] | None:
    """``(array job id, index)`` of a subjob id: ``1234[7].server`` → ``("1234[].server",
    7)``; None for any other id."""
    match = re.compile(_SUBJOB).match(job_id)
    if match is None:
        return None
    number, index, rest = match.groups()
    return f"{number}[]{rest}", int(index)


def subjob_id(array_id: str, index: int) -> str:
    """The id of subjob ``index`` of the array job ``array_id``, as qsub printed it:
    PBS Pro and Torque print ``1234[].server`` (→ ``1234[7].server``); Slurm's PBS
    wrappers print the array's job number alone, ``1234`` (→ ``1234[7]``)."""
    if "[]" in array_id:
        return array_id.replace("[]", f"[{index}]", 1)
    digits = re.match(r"\d+", array_id)
    if digits is None or "[" in array_id:
        raise ValueError(f"{array_id!r} is not the id of a PBS array job")
    return f"{digits.group(0)}[{index}]{array_id[digits.end() :]}"


def parse_qstat_full(text: str) -> dict[str, dict[str, str]]:
    """``qstat -f`` output → ``{job id: {attribute: value}}``.

    Attributes are ``    name = value`` lines; PBS Pro and Torque wrap long values
    onto lines that start with a tab, which are joined back without a separator (the
    break can fall inside a word or a path).
    """
    jobs: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    key = ""
    for line in text.splitlines():
        head = re.compile(_JOB_LINE).match(line)
        if head:
            current = jobs.setdefault(head.group(1), {})
            key = ""
            continue
        if current is None or not line.strip():
            continue
        attr = re.compile(_KEY_LINE).match(line)
        if attr:
            key = attr.group(1)
            current[key] = attr.group(2).rstrip()
        elif key and line[:1] in "\t ":
            current[key] += line.strip()
    return jobs


def _exit_status(attrs: Mapping[str, str]) -> int | None:
    return parse_int(attrs.get("Exit_status", attrs.get("exit_status", "")).strip())


def _exec_hosts(text: str) -> list[str]:
    """``n0/0*8+n1/0*8`` (PBS Pro), ``n0/0-7+n1/0-7`` (Torque) → ``['n0', 'n1']``."""
    hosts: list[str] = []
    for part in text.split("+"):
        host = part.split("/")[0].strip()
        if host and host not in hosts:
            hosts.append(host)
    return hosts


@frozen(kw_only=False)
class JobInfo:
    """What ``qstat -f`` says about one job."""

    state: str
    name: str = ""
    exit_status: int | None = None
    hosts: tuple[str, ...] = ()
    comment: str = ""
    output_path: str = ""
    #: For a subjob that Slurm's PBS wrappers know by another id (its own job number,
    #: which the subjob's folder recorded): that id, for qdel. "" otherwise.
    alias: str = ""
    #: False for a subjob the server does not list (Slurm's PBS wrappers, before it
    #: started): its state is then its array job's, and qdel cannot name it.
    listed: bool = True
    #: How many times the server has started the job (PBS Pro's ``run_count``: more
    #: than 1 after a ``qrerun`` or a requeue); 0 where the server does not say.
    run_count: int = 0


def job_info(text: str, job_id: str) -> JobInfo | None:
    """What ``qstat -f`` (``text``) says about ``job_id``: its block, else the first
    one (a server may print the id in another form); None when it printed none."""
    jobs = parse_qstat_full(text)
    if not jobs:
        return None
    return _job_info(jobs.get(job_id) or next(iter(jobs.values())))


def job_infos(text: str) -> dict[str, JobInfo]:
    """Every job ``qstat -f`` (``text``) printed, by the id it printed (an array job's
    subjobs too, with ``-t``)."""
    return {job_id: _job_info(attrs) for job_id, attrs in parse_qstat_full(text).items()}


def _job_info(attrs: Mapping[str, str]) -> JobInfo:
    return JobInfo(
        state=attrs.get("job_state", "").strip(),
        name=attrs.get("Job_Name", ""),
        exit_status=_exit_status(attrs),
        hosts=tuple(_exec_hosts(attrs.get("exec_host", ""))),
        comment=attrs.get("comment", ""),
        output_path=attrs.get("Output_Path", ""),
        run_count=parse_int(attrs.get("run_count", "").strip()) or 0,
    )


def parse_qstat(text: str) -> list[tuple[str, str, str, str]]:
    """The job rows of plain ``qstat``'s table: ``(job id, name, owner, state letter)``."""
    rows = []
    for line in text.splitlines():
        cols = line.split()
        # Job id  Name  User  Time Use  S  Queue
        if len(cols) < 6 or not is_job_id(cols[0].rstrip("*")):
            continue
        rows.append((cols[0], cols[1], cols[2], cols[4]))
    return rows


def parse_max_array_size(text: str) -> int | None:
    """The array size limit in ``qstat -B -f``'s server attributes: ``max_array_size``
    (PBS Pro, OpenPBS) or ``max_job_array_size`` (Torque); None when neither is set."""
    for attrs in parse_qstat_full(text.replace("Server: ", "Job Id: ")).values():
        for key in ("max_array_size", "max_job_array_size"):
            value = parse_int(attrs.get(key, "").strip())
            if value is not None and value > 0:
                return value
    return None


def job_number(job_id: str) -> int:
    """The number a job id starts with (``1234.server``: 1234), to sort by."""
    digits = re.match(r"\d+", job_id)
    return int(digits.group(0)) if digits else 0


def finished(
    exit_status: int | None, files: Mapping[str, str], cancelled: bool
) -> tuple[AppState, str]:
    """The end state of a finished job: from PBS's exit status where it reports one,
    else from what the job folder recorded. A limit the server enforced (walltime,
    mem, cput) is said as such, although its SIGTERM also reached the script's trap."""
    if cancelled:
        return AppState.CANCELLED, "cancelled (qdel)"
    if exit_status is not None and exit_status < 0 and exit_status in _EXEC_CODES:
        state, why = _EXEC_CODES[exit_status]
        return state, f"{why} (Exit_status {exit_status})"
    if "signal" in files:
        return AppState.CANCELLED, "terminated by SIGTERM"
    if exit_status is not None:
        if exit_status == 0 and "exit" not in files and any(n.endswith(".host") for n in files):
            # The script's EXIT trap always writes `exit`; only SIGKILL (qsig -s KILL) or
            # a lost host skips it, and OpenPBS then still says 0 (a real server showed
            # it, #29).
            return AppState.FAILED, (
                "the job script was killed before it recorded its exit (SIGKILL, or its "
                "host was lost), although PBS says Exit_status 0"
            )
        if exit_status == 0:
            return AppState.SUCCEEDED, "finished"
        if exit_status < 0:
            state, why = _EXEC_CODES.get(
                exit_status, (AppState.FAILED, "PBS could not run the job")
            )
            return state, f"{why} (Exit_status {exit_status})"
        if exit_status >= 256:
            # PBS reports 256 + N when the script itself was killed by signal N.
            return AppState.CANCELLED, f"killed by {signal_name(exit_status - 256)}"
        return AppState.FAILED, f"exit status {exit_status}"
    code = parse_int(files.get("exit"))
    if code == 0:
        return AppState.SUCCEEDED, "finished"
    if code is not None:
        return AppState.FAILED, f"exit status {code} (recorded by the job)"
    if not any(name.endswith(".host") for name in files):
        return AppState.CANCELLED, "ended before any replica started"
    return AppState.FAILED, "ended without recording an exit code"


def replica_status(
    role: str,
    i: int,
    job_state: AppState,
    files: Mapping[str, str],
    hosts: Sequence[str],
    restarts: int,
    msg: str,
    folder: str | None = None,
) -> ReplicaStatus:
    """Replica ``i`` of ``role``: its state from the exit code it recorded in the job folder
    (``files``) and the job's state, its host, and why it ended."""
    recorded = exit_code(files, role, i)
    code, why = replica_exit(folder, files, role, i)
    state = replica_state(recorded, job_state)
    if recorded is not None and state is AppState.FAILED:
        reason = why
    elif state in (AppState.FAILED, AppState.CANCELLED):
        reason = msg  # the job's end decided it
    else:
        reason = ""
    return ReplicaStatus(
        role=role,
        id=i,
        state=state,
        hostname=replica_host(files, role, i, hosts),
        exit_code=code,
        reason=reason,
        restarts=restarts,
    )
