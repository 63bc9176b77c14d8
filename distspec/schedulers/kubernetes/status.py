"""A Kubernetes app's status, read from its objects as the API server returns them
(raw JSON): each pod gives a replica's state, exit code and reason (torchrun's
root-cause report, from the container's termination message), and the Jobs, the
JobSet or the Volcano Job give the app's state. Pure: no client, no I/O."""

from __future__ import annotations

from collections.abc import Mapping

from distspec.schedulers.kubernetes.array import CANCELLED_MESSAGE
from distspec.schedulers.kubernetes.names import (
    COMPLETION_INDEX_ANNOTATION,
    REPLICA_OFFSET_ANNOTATION,
    ROLE_ANNOTATION,
    ROLE_LABEL,
)
from distspec.schedulers.kubernetes.options import Flavor
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus
from distspec.torchrun_output import signal_name, torchrun_root_cause

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["app_status", "by_replica", "in_indexes", "parse_time", "point_status", "summary_state"]

_POD_PHASE = {
    "Pending": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Succeeded": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
}
# Volcano job phases (status.state.phase).
_VOLCANO_PHASE = {
    "Pending": AppState.PENDING,
    "Inqueue": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Restarting": AppState.RUNNING,
    "Completing": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Aborting": AppState.CANCELLED,
    "Aborted": AppState.CANCELLED,
    "Terminating": AppState.FAILED,
    "Terminated": AppState.FAILED,
}


def app_status(
    flavor: Flavor | None,
    owner: dict[str, Any] | None,
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    *,
    native_id: str,
) -> AppStatus:
    """The app's status from its JobSet or Volcano Job (``owner``, for those flavours),
    its batch/v1 Jobs and its pods."""
    roles = _replicas(pods)
    if flavor is Flavor.VOLCANO and owner is not None:
        state, msg = _volcano_state(owner)
    elif flavor is Flavor.JOBSET and owner is not None:
        state, msg = _jobset_state(owner, roles)
    else:
        state, msg = _jobs_state(jobs, roles)
    if (owner is not None and owner["metadata"].get("deletionTimestamp")) or (
        any(j["metadata"].get("deletionTimestamp") for j in jobs) and not state.is_terminal
    ):
        state, msg = AppState.CANCELLED, "being deleted"
    restarts = sum(r.restarts for rs in roles for r in rs.replicas)
    created = [parse_time(_created(o)) for o in ([owner] if owner else jobs) if _created(o)]
    return AppStatus(
        state=state,
        msg=msg,
        num_restarts=restarts,
        roles=tuple(roles),
        submitted=min(created) if created else None,
        native_id=native_id,
    )


def point_status(
    job: dict[str, Any] | None,
    attempts: list[dict[str, Any]],
    index: int,
    *,
    cancelled: bool,
    native_id: str,
) -> AppStatus | None:
    """The status of index ``index`` of a sweep array's Indexed Job (:mod:`.array`):
    ``job`` is the Job (None once deleted), ``attempts`` the index's pods, oldest
    first. The Job's ``completedIndexes`` and ``failedIndexes`` say how the point ended;
    a point that ``cancelled`` says was cancelled here, or whose pod says it found its
    line marked cancelled, is CANCELLED unless it had succeeded. None when neither the
    Job nor a pod is left, or the Job has no such index."""
    spec = (job or {}).get("spec") or {}
    completions = spec.get("completions")
    if (job is None and not attempts) or (isinstance(completions, int) and index >= completions):
        return None
    template = spec.get("template") or {}
    role = ((template.get("metadata") or {}).get("annotations") or {}).get(ROLE_ANNOTATION)
    if attempts:
        meta = attempts[-1]["metadata"]
        role = (meta.get("annotations") or {}).get(ROLE_ANNOTATION) or role
    role = role or "?"
    if attempts:
        replica = _replica_status(role, 0, attempts)
    else:
        replica = ReplicaStatus(role=role, id=0, state=AppState.PENDING)
    status = (job or {}).get("status") or {}
    marked = replica.exit_code == 2 and f"sweep point {index} {CANCELLED_MESSAGE}" in replica.reason
    if in_indexes(status.get("completedIndexes"), index):
        state, msg = AppState.SUCCEEDED, ""
    elif cancelled or marked:
        state, msg = AppState.CANCELLED, "cancelled"
    elif in_indexes(status.get("failedIndexes"), index):
        state, msg = AppState.FAILED, replica.reason
    elif job is None or job["metadata"].get("deletionTimestamp"):
        state, msg = AppState.CANCELLED, "being deleted"
    elif (failed := _condition(job, "Failed")) is not None:
        state, msg = AppState.FAILED, _cond_msg(failed)
    elif _condition(job, "Complete") is not None or replica.state is AppState.SUCCEEDED:
        state, msg = AppState.SUCCEEDED, ""
    elif replica.state is AppState.FAILED:
        # The job controller replaces a failed pod while the index has retries left.
        state, msg = AppState.PENDING, f"retrying: {replica.reason}" if replica.reason else ""
    elif replica.state is AppState.RUNNING:
        state, msg = AppState.RUNNING, ""
    else:
        state, msg = AppState.PENDING, replica.reason
    created = _created(job) if job is not None else ""
    return AppStatus(
        state=state,
        msg=msg,
        num_restarts=replica.restarts,
        roles=(RoleStatus(role=role, replicas=(replica,)),),
        submitted=parse_time(created) if created else None,
        native_id=native_id,
    )


def in_indexes(text: str | None, index: int) -> bool:
    """Whether ``index`` is in a Job's ``completedIndexes`` or ``failedIndexes``, written
    as ranges: ``1,3-5,7``."""
    for part in (text or "").split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and int(low) <= index <= int(high if high.isdigit() else low):
            return True
    return False


def summary_state(objs: list[dict[str, Any]]) -> tuple[AppState, str]:
    """An app's state and message from its top-level objects alone (a Volcano Job, a JobSet or its
    Jobs), as ``distspec list`` shows it."""
    for obj in objs:
        if obj.get("apiVersion", "").startswith("batch.volcano.sh"):
            return _volcano_state(obj)
        if obj.get("kind") == "JobSet":
            return _jobset_state(obj, [])
    jobs = [o for o in objs if o.get("kind") == "Job"]
    state, msg = _jobs_state(jobs, [])
    if state is AppState.PENDING and any((j.get("status") or {}).get("active") for j in jobs):
        return AppState.RUNNING, ""
    return state, msg


def _created(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("creationTimestamp") or "")


def parse_time(ts: str) -> float:
    """An RFC 3339 UTC timestamp from the API server (``2024-01-02T03:04:05Z``, fractions kept to
    microseconds) as a POSIX time."""
    from datetime import datetime

    text = ts.rstrip("Z")
    if "." in text:
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(text + "+00:00").timestamp()


def _replica_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's replica id: its completion or task index, plus the offset of an
    elastic Volcano role's second task (whose task index 0 is replica 1)."""
    meta = pod["metadata"]
    offset = (meta.get("annotations") or {}).get(REPLICA_OFFSET_ANNOTATION)
    shift = int(offset) if offset is not None and str(offset).isdigit() else 0
    for source in (meta.get("labels") or {}, meta.get("annotations") or {}):
        for key in (COMPLETION_INDEX_ANNOTATION, "volcano.sh/task-index"):
            value = source.get(key)
            if value is not None and str(value).isdigit():
                return int(value) + shift
    hostname = (pod.get("spec") or {}).get("hostname") or ""
    tail = hostname.rsplit("-", 1)[-1]
    return int(tail) + shift if tail.isdigit() else None


def _replicas(pods: list[dict[str, Any]]) -> list[RoleStatus]:
    """Per role (AppDef name), per replica index: the newest pod of each index."""
    by_role: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        meta = pod["metadata"]
        role = (meta.get("annotations") or {}).get(ROLE_ANNOTATION) or (
            meta.get("labels") or {}
        ).get(ROLE_LABEL, "?")
        by_role.setdefault(role, []).append(pod)
    roles = []
    for role, group in by_role.items():
        replicas = [
            _replica_status(role, index, attempts)
            for index, attempts in sorted(by_replica(group).items())
        ]
        roles.append(RoleStatus(role=role, replicas=tuple(replicas)))
    roles.sort(key=lambda r: r.role)
    return roles


def by_replica(pods: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """One role's pods by replica id, each replica's attempts oldest first."""
    group = sorted(pods, key=lambda p: (_created(p), p["metadata"]["name"]))
    by_index: dict[int, list[dict[str, Any]]] = {}
    unindexed = [p for p in group if _replica_index(p) is None]
    for pod in group:
        index = _replica_index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    # A Kubernetes 1.20 server drops completionMode: pods have no index,
    # so number them in creation order.
    next_free = 0
    for pod in unindexed:
        while next_free in by_index:
            next_free += 1
        by_index[next_free] = [pod]
    return by_index


def _replica_status(role: str, index: int, attempts: list[dict[str, Any]]) -> ReplicaStatus:
    pod = attempts[-1]
    status = pod.get("status") or {}
    state = _POD_PHASE.get(status.get("phase", ""), AppState.UNKNOWN)
    exit_code: int | None = None
    reason = status.get("reason") or ""  # e.g. Evicted
    restarts = len(attempts) - 1
    meta = pod["metadata"]
    statuses = list(status.get("containerStatuses") or [])
    for cs in statuses:
        restarts += int(cs.get("restartCount") or 0)
    # The role's own container (an injected sidecar is not the program).
    mine = (meta.get("labels") or {}).get(ROLE_LABEL)
    ours = [cs for cs in statuses if cs.get("name") == mine] or statuses[:1]
    for cs in ours:
        cstate = cs.get("state") or {}
        waiting = (cstate.get("waiting") or {}).get("reason") or ""  # ImagePullBackOff
        term = cstate.get("terminated")
        if term is None and "waiting" in cstate:
            # A container restarted in place keeps how its last run ended in
            # lastState while it waits to start again (CrashLoopBackOff).
            term = (cs.get("lastState") or {}).get("terminated")
        why = ""
        if term is not None:
            exit_code, why = _container_exit(term, role)
        if waiting and why:
            why = f"{waiting}; last run: {why}"
        reason = reason or why or waiting
    return ReplicaStatus(
        role=role,
        id=index,
        state=state,
        hostname=(pod.get("spec") or {}).get("nodeName") or "",
        exit_code=exit_code,
        reason=reason,
        restarts=restarts,
        # The log of a pod is the API's: what `kubectl logs` names.
        log=f"pod/{meta['name']} (namespace {meta.get('namespace', 'default')})",
        started=parse_time(status["startTime"]) if status.get("startTime") else None,
    )


def _container_exit(term: Mapping[str, Any], role: str) -> tuple[int | None, str]:
    """``(exit code, reason)`` of a terminated container, as the batch backends give
    them: torchrun's root-cause report, found in the termination message (with
    ``terminationMessagePolicy: FallbackToLogsOnError`` the kubelet keeps the last
    lines of a failed container's log there, at most 80 lines / 2 KiB), gives the
    failed worker's own code (a signal N as 128+N), rank and last line; else a code
    above 128 is named as a signal. The kubelet's reason (``OOMKilled``,
    ``DeadlineExceeded``, ...) comes first; its ``Error``/``Completed`` say nothing.
    Reason "" for a container that exited 0. ``role``: the AppDef role name (torchrun's
    ``--role``, which prefixes the worker lines under ``--tee``)."""
    code = term.get("exitCode")
    if not isinstance(code, int):
        return None, ""
    kubelet = str(term.get("reason") or "")
    kubelet = "" if kubelet in ("Error", "Completed") else kubelet
    if code == 0:
        return code, kubelet
    lines = str(term.get("message") or "").splitlines()
    found = torchrun_root_cause(lines, role)
    if found is not None:
        worker, why = found
        why = f"{why}; torchrun exited with {code}"
        code = worker
    elif 128 < code < 128 + 65:
        why = f"killed by {signal_name(code - 128)}"
    else:
        why = f"exited with {code}"
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
        if last:
            why += f"; its last line: {last[:200]}"
    return code, f"{kubelet}: {why}" if kubelet else why


def _condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _cond_msg(cond: Mapping[str, Any]) -> str:
    return ": ".join(x for x in (cond.get("reason"), cond.get("message")) if x)


def _live_state(roles: list[RoleStatus]) -> tuple[AppState, str]:
    replicas = [r for rs in roles for r in rs.replicas]
    if any(r.state is AppState.RUNNING for r in replicas):
        return AppState.RUNNING, ""
    waiting = sorted({r.reason for r in replicas if r.reason})
    return AppState.PENDING, ", ".join(waiting)


def _jobs_state(jobs: list[dict[str, Any]], roles: list[RoleStatus]) -> tuple[AppState, str]:
    for job in jobs:
        failed = _condition(job, "Failed")
        if failed is not None:
            return AppState.FAILED, f"{job['metadata']['name']}: {_cond_msg(failed)}"
    if jobs and all(_condition(j, "Complete") for j in jobs):
        # A sweep array's Job (a per-index backoff limit) completes with failed indexes.
        failed_indexes = [
            f"{j['metadata']['name']}: indexes {fi} failed"
            for j in jobs
            if (fi := (j.get("status") or {}).get("failedIndexes"))
        ]
        if failed_indexes:
            return AppState.FAILED, "; ".join(failed_indexes)
        return AppState.SUCCEEDED, ""
    if any(_condition(j, "Suspended") for j in jobs):
        return AppState.PENDING, "suspended (waiting for admission, e.g. by Kueue)"
    return _live_state(roles)


def _jobset_state(jobset: dict[str, Any], roles: list[RoleStatus]) -> tuple[AppState, str]:
    failed = _condition(jobset, "Failed")
    if failed is not None:
        return AppState.FAILED, _cond_msg(failed)
    if _condition(jobset, "Completed"):
        return AppState.SUCCEEDED, ""
    if _condition(jobset, "Suspended"):
        return AppState.PENDING, "suspended"
    return _live_state(roles)


def _volcano_state(job: dict[str, Any]) -> tuple[AppState, str]:
    state = (job.get("status") or {}).get("state") or {}
    phase = state.get("phase", "Pending")
    msg = ": ".join(x for x in (phase, state.get("reason"), state.get("message")) if x)
    return _VOLCANO_PHASE.get(phase, AppState.UNKNOWN), msg
