"""The Kubernetes backend: Indexed Job + headless Service, or JobSet, or Volcano.

``compile`` is pure (see :mod:`distspec.schedulers.kubernetes.manifest`) and
imports neither yaml at module import nor the kubernetes client at all. The
effectful half talks to the API server through the official ``kubernetes``
client (``pip install 'distspec[kubernetes]'``, pinned ``>=30,<38``), imported
on first use. Responses are read as raw JSON (``_preload_content=False``), not
as the client's generated models, which changed in 37.x.

App ids the scheduler hands back are ``<namespace>:<k8s id>``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping

from distspec.errors import AppNotFound, CompileError, ConfigError, SchedulerError, UsageError
from distspec.schedulers._common import check_capabilities, signal_name, torchrun_root_cause
from distspec.schedulers.api import (
    AppSummary,
    Capabilities,
    CommandRunner,
    Request,
    Scheduler,
    run_command,
)
from distspec.schedulers.kubernetes.manifest import (
    APP_ID_LABEL,
    APP_NAME_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    MANAGED_BY_LABEL,
    REPLICA_OFFSET_ANNOTATION,
    ROLE_ANNOTATION,
    ROLE_LABEL,
    Flavor,
    KubernetesOptions,
    build_manifests,
    k8s_id,
    k8s_role,
)
from distspec.specs.frozen import FrozenDict, frozen, replace
from distspec.specs.macros import Macro
from distspec.specs.state import AppState, AppStatus, ReplicaStatus, RoleStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from pathlib import Path
    from typing import Any, ClassVar

    from distspec.specs.app import AppDef

__all__ = ["Flavor", "KubernetesOptions", "KubernetesScheduler", "render_yaml"]

NAME = "kubernetes"

# (group, version, plural) of each object kind the backend creates.
_JOBS = ("batch", "v1", "jobs")
_JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
_VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")
_GVR = {Flavor.JOB: _JOBS, Flavor.JOBSET: _JOBSETS, Flavor.VOLCANO: _VOLCANO}

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

# Attempts for idempotent reads when the server answers 5xx or drops the connection.
_READ_ATTEMPTS = 3


def render_yaml(docs: list[dict[str, Any]], *, header: str = "") -> str:
    """Multi-document YAML in the documents' own key order (``kubectl apply -f -`` reads it)."""
    from distspec._yaml import dump_all

    return header + dump_all(docs)


def split_app_id(app_id: str) -> tuple[str | None, str]:
    """``namespace:id`` -> (namespace, k8s id); a bare id has no namespace."""
    ns, sep, rest = app_id.partition(":")
    if not sep:
        return None, k8s_id(app_id)
    return (ns or None), k8s_id(rest)


#: How often a followed log looks for a replica's (next) pod.
FOLLOW_POLL = 1.0


@frozen(kw_only=False)
class _Conn:
    kubeconfig: str | None = None
    context: str | None = None


class KubernetesScheduler(Scheduler[KubernetesOptions]):
    """Runs each replica as a pod; see docs/schedulers/kubernetes.md."""

    name: ClassVar[str] = NAME
    Options: ClassVar[type[Any]] = KubernetesOptions
    capabilities: ClassVar[Capabilities] = Capabilities(
        macros=frozenset(Macro),
        # Only flavor=volcano can (gang-schedule minAvailable of N pods); compile
        # says so for the other flavours.
        elastic=False,
        multi_role=True,
        mount_kinds=frozenset({"bind", "volume"}),
        needs_image=True,
    )
    max_poll_interval: ClassVar[float] = 2.0

    def __init__(
        self,
        session: str = "distspec",
        *,
        run_cmd: CommandRunner = run_command,
        state_dir: str | os.PathLike[str] | None = None,
        api_client_factory: Callable[[str | None, str | None], Any] | None = None,
    ) -> None:
        super().__init__(session, run_cmd=run_cmd, state_dir=state_dir)
        self._factory = api_client_factory
        self._clients: dict[_Conn, Any] = {}

    # -- the pure half ---------------------------------------------------------

    def compile(self, app: AppDef, opts: KubernetesOptions, *, app_id: str) -> Request:
        # Elastic roles are judged per flavour by build_manifests, with a better message.
        check_capabilities(app, replace(self.capabilities, elastic=True), self.name)
        docs = build_manifests(app, opts, app_id=app_id)
        kid = k8s_id(app_id)
        ns = opts.namespace
        if opts.flavor is Flavor.JOB:
            # kubectl cannot know the Job's uid before creating it, so this file has
            # no ownerReference; submit adds one to the Service (one cascading delete).
            delete = f"kubectl delete -n {ns} job,service -l {APP_ID_LABEL}={kid}"
        else:
            kind = "jobset" if opts.flavor is Flavor.JOBSET else "jobs.batch.volcano.sh"
            delete = f"kubectl delete -n {ns} {kind} {kid}"
        header = f"# distspec app {kid} ({opts.flavor.value}); delete with: {delete}\n"
        fname = f"{kid}.yaml"
        return Request(
            scheduler=self.name,
            app=app,
            app_id=kid,
            options=opts,
            files=FrozenDict({fname: render_yaml(docs, header=header)}),
            argv=("kubectl", "apply", "-f", fname),
            main_file=fname,
        )

    # -- connection ------------------------------------------------------------

    def _client(self, conn: _Conn) -> _Kube:
        client = self._clients.get(conn)
        if client is None:
            if self._factory is not None:
                client = self._factory(conn.kubeconfig, conn.context)
            else:
                client = _load_client(conn)
            self._clients[conn] = client
        return _Kube(client)

    def _record_path(self, ns: str, kid: str) -> Path | None:
        if self._state_dir is None:
            return None
        from pathlib import Path

        return Path(self._state_dir) / "kubernetes" / f"{ns}_{kid}.json"

    def _record(self, ns: str, kid: str) -> dict[str, Any]:
        path = self._record_path(ns, kid)
        if path is None or not path.is_file():
            return {}
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data

    def _save_record(self, ns: str, kid: str, data: Mapping[str, Any]) -> None:
        path = self._record_path(ns, kid)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(data), sort_keys=True))

    def _locate(self, app_id: str) -> tuple[str, str, dict[str, Any], _Kube]:
        ns, kid = split_app_id(app_id)
        if ns is None:
            ns = "default"
        record = self._record(ns, kid)
        conn = _Conn(record.get("kubeconfig"), record.get("context"))
        return ns, kid, record, self._client(conn)

    # -- submit ----------------------------------------------------------------

    def submit(self, request: Request) -> str:
        """Create the objects of ``request``; returns ``<namespace>:<id>``."""
        self._create(request, dry_run=False)
        opts: KubernetesOptions = request.options
        self._save_record(
            opts.namespace,
            request.app_id,
            {"kubeconfig": opts.kubeconfig, "context": opts.context, "flavor": opts.flavor.value},
        )
        return f"{opts.namespace}:{request.app_id}"

    def server_dry_run(self, request: Request) -> list[dict[str, Any]]:
        """Let the API server validate and default the objects without persisting them."""
        return self._create(request, dry_run=True)

    def _create(self, request: Request, *, dry_run: bool) -> list[dict[str, Any]]:
        import yaml

        opts: KubernetesOptions = request.options
        docs = [d for d in yaml.safe_load_all(request.render()) if d]
        kube = self._client(_Conn(opts.kubeconfig, opts.context))
        ns = opts.namespace
        what = f"app {request.app_id} in namespace {ns}"
        if opts.flavor is not Flavor.JOB:
            (doc,) = docs
            return [kube.create(_GVR[opts.flavor], ns, doc, dry_run=dry_run, what=what)]
        created: list[dict[str, Any]] = []
        try:
            jobs = [d for d in docs if d["kind"] == "Job"]
            for job in jobs:
                created.append(kube.create(_JOBS, ns, job, dry_run=dry_run, what=what))
            owner = created[0]["metadata"]
            for svc in (d for d in docs if d["kind"] == "Service"):
                svc = json.loads(json.dumps(svc))
                # The Service goes when the Job goes (garbage collector, one delete).
                svc["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": owner["name"],
                        "uid": owner.get("uid", ""),
                        "blockOwnerDeletion": True,
                    }
                ]
                created.append(kube.create_service(ns, svc, dry_run=dry_run, what=what))
        except BaseException:
            # Nothing half-written: take back the Jobs already created.
            if not dry_run:
                for obj in created:
                    if obj.get("kind") == "Job":
                        kube.delete(_JOBS, ns, obj["metadata"]["name"], missing_ok=True)
            raise
        return created

    # -- describe --------------------------------------------------------------

    def describe(self, app_id: str) -> AppStatus | None:
        ns, kid, record, kube = self._locate(app_id)
        selector = f"{APP_ID_LABEL}={kid}"
        flavor = Flavor(record["flavor"]) if record.get("flavor") else None
        owner: dict[str, Any] | None = None
        if flavor in (Flavor.JOBSET, Flavor.VOLCANO):
            owner = kube.get(_GVR[flavor], ns, kid)
        jobs = kube.list_objects(_JOBS, ns, selector)
        if flavor is None and not jobs:
            for candidate in (Flavor.JOBSET, Flavor.VOLCANO):
                owner = kube.get(_GVR[candidate], ns, kid, quiet=True)
                if owner is not None:
                    flavor = candidate
                    break
        pods = kube.pods(ns, selector)
        if owner is None and not jobs and not pods:
            if record.get("cancelled"):
                return AppStatus(state=AppState.CANCELLED, msg="deleted by cancel")
            return None
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
        created = [_parse_time(_created(o)) for o in ([owner] if owner else jobs) if _created(o)]
        return AppStatus(
            state=state,
            msg=msg,
            num_restarts=restarts,
            roles=tuple(roles),
            submitted=min(created) if created else None,
            native_id=f"{ns}/{kid}",
        )

    # -- logs ------------------------------------------------------------------

    def log_iter(
        self,
        app_id: str,
        role: str,
        replica: int,
        *,
        since: float | None = None,
        follow: bool = False,
    ) -> Iterator[str]:
        """Lines of the replica's pod (its newest attempt). With ``follow``: waits for a
        pod that does not exist yet, and when a pod's stream ends because it *failed*
        while the app goes on, follows the retry pod the Job controller creates for
        the same index (restartPolicy Never: a retry is a new pod), until the app ends."""
        ns, kid, _, kube = self._locate(app_id)
        selector = f"{APP_ID_LABEL}={kid},{ROLE_LABEL}={k8s_role(role)}"

        def attempts() -> list[dict[str, Any]]:
            # Numbered as describe numbers them (pods without an index too).
            return _by_replica(kube.pods(ns, selector)).get(replica, [])

        pods = attempts()
        if not pods and not follow:
            raise AppNotFound(f"{NAME}://{app_id} {role}/{replica}")
        seen: set[str] = set()
        # Without follow (or at the start of one): the newest attempt only.
        current = pods[-1] if pods else None
        while True:
            if current is None:
                status = self.describe(app_id)
                if status is None or status.is_terminal:
                    return
                time.sleep(FOLLOW_POLL)
                pods = [p for p in attempts() if p["metadata"]["name"] not in seen]
                current = pods[0] if pods else None
                continue
            name = current["metadata"]["name"]
            seen.add(name)
            yield from self._pod_lines(kube, ns, name, k8s_role(role), since, follow)
            if not follow:
                return
            pod = next((p for p in attempts() if p["metadata"]["name"] == name), None)
            phase = (pod or {}).get("status", {}).get("phase")
            if phase != "Failed":
                return  # succeeded, or ended without a retry to wait for
            current = None  # a failed attempt: the retry (if the app goes on) is next

    def _pod_lines(
        self,
        kube: _Kube,
        ns: str,
        name: str,
        container: str,
        since: float | None,
        follow: bool,
    ) -> Iterator[str]:
        """One pod's lines; with ``follow`` until its container ends, riding out
        dropped streams (the server repeats lines since a time: skipped by timestamp)."""
        last_ts = ""
        drops = 0
        while True:
            since_seconds = None
            if since is not None:
                since_seconds = max(1, math.ceil(time.time() - since))
            if last_ts:
                since_seconds = max(1, math.ceil(time.time() - _parse_time(last_ts)) + 1)
            try:
                for ts, line in kube.log_lines(ns, name, container, follow, since_seconds):
                    # After a reconnect the server repeats what it sent since
                    # `since_seconds`: skip lines we already gave out.
                    if last_ts and ts and _ts_key(ts) <= _ts_key(last_ts):
                        continue
                    last_ts = ts or last_ts
                    yield line
                return
            except _StreamDropped as e:
                drops += 1
                if not follow or drops >= 5:
                    raise SchedulerError(
                        f"log stream of pod {name} dropped: {e}", scheduler=NAME
                    ) from None

    # -- cancel, list ----------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        """Delete the app's objects with Foreground propagation (pods go first)."""
        ns, kid, record, kube = self._locate(app_id)
        selector = f"{APP_ID_LABEL}={kid}"
        found = False
        for gvr in (_JOBSETS, _VOLCANO):
            if kube.get(gvr, ns, kid, quiet=True) is not None:
                kube.delete(gvr, ns, kid, missing_ok=True)
                found = True
        for job in kube.list_objects(_JOBS, ns, selector):
            if not job["metadata"].get("ownerReferences"):
                kube.delete(_JOBS, ns, job["metadata"]["name"], missing_ok=True)
                found = True
        # The Service goes with its owner Job; one applied by hand has no owner.
        kube.delete_service(ns, kid, missing_ok=True)
        if found or record:
            self._save_record(ns, kid, {**record, "cancelled": True})

    def list(self) -> list[AppSummary]:
        kube = self._client(_Conn())
        selector = f"{MANAGED_BY_LABEL}=distspec"
        apps: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        for gvr in (_JOBS, _JOBSETS, _VOLCANO):
            for obj in kube.list_objects(gvr, None, selector, quiet=gvr is not _JOBS):
                meta = obj["metadata"]
                labels = meta.get("labels") or {}
                kid = labels.get(APP_ID_LABEL)
                if not kid:
                    continue
                key = f"{meta.get('namespace', 'default')}:{kid}"
                apps.setdefault(key, (labels.get(APP_NAME_LABEL, ""), []))[1].append(obj)
        out = []
        for key, (name, objs) in apps.items():
            state, msg = _summary_state(objs)
            created = min(o["metadata"].get("creationTimestamp") or "" for o in objs)
            out.append(
                AppSummary(
                    app_id=key,
                    name=name,
                    state=state,
                    detail=msg,
                    extra=FrozenDict({"created": created}),
                )
            )
        out.sort(key=lambda s: s.extra.get("created", ""), reverse=True)
        return out

    # -- wait ------------------------------------------------------------------

    def wait(
        self,
        app_id: str,
        *,
        timeout: float | None = None,
        on_status: Callable[[AppStatus], None] | None = None,
    ) -> AppStatus | None:
        """Describe, then sleep on a watch of the app's pods until something changes.

        A watch that expires (410 Gone) or drops is simply re-established from
        a fresh describe; nothing is missed because the state is re-read.
        """
        ns, kid, record, kube = self._locate(app_id)
        # A Job's status changes with each of its pods (active/failed counts) and
        # with its conditions; JobSet/Volcano pods are watched directly.
        gvr = _JOBS if record.get("flavor", "job") == "job" else ("", "v1", "pods")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.describe(app_id)
            if on_status is not None and status is not None:
                on_status(status)
            if status is None or status.is_terminal:
                return status
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return status
            window = int(min(left if left is not None else 10.0, 10.0)) + 1
            kube.wait_for_event(gvr, ns, f"{APP_ID_LABEL}={kid}", window)


# ------------------------------------------------------------------- state helpers


def _created(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("creationTimestamp") or "")


def _parse_time(ts: str) -> float:
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
            for index, attempts in sorted(_by_replica(group).items())
        ]
        roles.append(RoleStatus(role=role, replicas=tuple(replicas)))
    roles.sort(key=lambda r: r.role)
    return roles


def _by_replica(pods: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
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
        started=_parse_time(status["startTime"]) if status.get("startTime") else None,
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


def _summary_state(objs: list[dict[str, Any]]) -> tuple[AppState, str]:
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


# ------------------------------------------------------------------- the client


class _StreamDropped(Exception):
    """The server closed a streaming response before its end."""


def _load_client(conn: _Conn) -> Any:
    try:
        from kubernetes import client
        from kubernetes import config as _config
    except ImportError as e:
        raise SchedulerError(
            "the kubernetes client is not installed: pip install 'distspec[kubernetes]'",
            scheduler=NAME,
        ) from e
    config: Any = _config
    import os

    # The client reads $KUBECONFIG once, when it is imported; read it per call.
    path = conn.kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        return config.new_client_from_config(config_file=path, context=conn.context)
    except (config.ConfigException, OSError, TypeError) as e:
        # The user's to fix, like any config value: exit 2, nothing submitted.
        if conn.kubeconfig and not os.path.exists(conn.kubeconfig):
            raise ConfigError(f"kubeconfig {conn.kubeconfig!r} does not exist", source=NAME) from e
        if conn.kubeconfig or conn.context:
            detail = " ".join(str(e).split())
            raise ConfigError(f"cannot load kubeconfig: {detail}", source=NAME) from e
        try:
            config.load_incluster_config()
        except config.ConfigException:
            raise ConfigError(
                "no Kubernetes configuration: set KUBECONFIG, create ~/.kube/config, "
                "or run inside a cluster",
                source=NAME,
            ) from e
        return client.ApiClient()


def _api_error(e: Any, what: str) -> Exception:
    """Turn a client ApiException into a distspec error with the server's own words."""
    status = int(getattr(e, "status", 0) or 0)
    message = str(getattr(e, "reason", "") or "")
    causes: list[str] = []
    try:
        body = json.loads(getattr(e, "body", "") or "{}")
    except ValueError:
        body = {}
    if isinstance(body, dict):
        message = body.get("message") or message
        for cause in (body.get("details") or {}).get("causes") or []:
            causes.append(f"{cause.get('field', '')}: {cause.get('message', '')}".strip(": "))
    if status == 401:
        return SchedulerError(
            "the API server rejected our credentials (401 Unauthorized); check the "
            "kubeconfig's user or token",
            scheduler=NAME,
            returncode=401,
        )
    if status == 403:
        return SchedulerError(
            f"forbidden (403) for {what}: {message}; ask for RBAC rights on "
            "jobs/services/pods (or the JobSet/Volcano resource) in that namespace",
            scheduler=NAME,
            returncode=403,
        )
    if status == 404:
        return SchedulerError(
            f"not found (404) for {what}: {message}; is the namespace right and, for "
            "flavor=jobset/volcano, is the operator's CRD installed?",
            scheduler=NAME,
            returncode=404,
        )
    if status == 409:
        return UsageError(f"{NAME}: {what} already exists (409): {message}; cancel it first")
    if status == 400:
        # The body did not decode: a value of the wrong form (a quantity, a type).
        return CompileError(NAME, f"the API server could not read {what} (400): {message}")
    if status == 422:
        listed = "; ".join(causes) or message
        return CompileError(NAME, f"the API server rejected {what} (422 Invalid): {listed}")
    return SchedulerError(
        f"API call for {what} failed ({status or 'no answer'}): {message}",
        scheduler=NAME,
        returncode=status or None,
    )


class _Kube:
    """The few API calls the backend makes, as raw JSON; errors become distspec errors."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        # Typed as Any: the generated signatures differ between client versions
        # and we read raw responses (_preload_content=False) anyway.
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)

    def _call(self, fn: Callable[[], Any], what: str, *, read: bool) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        attempts = _READ_ATTEMPTS if read else 1
        for attempt in range(attempts):
            try:
                resp = fn()
                data = resp.data
                return json.loads(data) if data else {}
            except ApiException as e:
                if read and e.status is not None and e.status >= 500 and attempt + 1 < attempts:
                    time.sleep(0.1 * (attempt + 1))
                    continue
                raise _api_error(e, what) from None
            except HTTPError as e:
                if read and attempt + 1 < attempts:
                    time.sleep(0.1 * (attempt + 1))
                    continue
                raise SchedulerError(f"{what}: {e}", scheduler=NAME) from None
        raise AssertionError("unreachable")

    def create(
        self, gvr: tuple[str, str, str], ns: str, body: dict[str, Any], *, dry_run: bool, what: str
    ) -> dict[str, Any]:
        group, version, plural = gvr
        result: dict[str, Any] = self._call(
            lambda: self.custom.create_namespaced_custom_object(
                group,
                version,
                ns,
                plural,
                body,
                dry_run="All" if dry_run else None,
                _preload_content=False,
            ),
            f"{body['kind']} {body['metadata']['name']} ({what})",
            read=False,
        )
        return result

    def create_service(
        self, ns: str, body: dict[str, Any], *, dry_run: bool, what: str
    ) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            lambda: self.core.create_namespaced_service(
                ns, body, dry_run="All" if dry_run else None, _preload_content=False
            ),
            f"Service {body['metadata']['name']} ({what})",
            read=False,
        )
        return result

    def get(
        self, gvr: tuple[str, str, str], ns: str, name: str, *, quiet: bool = False
    ) -> dict[str, Any] | None:
        group, version, plural = gvr
        try:
            result: dict[str, Any] = self._call(
                lambda: self.custom.get_namespaced_custom_object(
                    group, version, ns, plural, name, _preload_content=False
                ),
                f"{plural}.{group} {ns}/{name}",
                read=True,
            )
        except SchedulerError as e:
            if e.returncode == 404 or (quiet and e.returncode == 403):
                return None
            raise
        return result

    def list_objects(
        self, gvr: tuple[str, str, str], ns: str | None, selector: str, *, quiet: bool = False
    ) -> list[dict[str, Any]]:
        group, version, plural = gvr
        what = f"{plural}.{group} ({selector})"
        try:
            if ns is None:
                data = self._call(
                    lambda: self.custom.list_cluster_custom_object(
                        group, version, plural, label_selector=selector, _preload_content=False
                    ),
                    what,
                    read=True,
                )
            else:
                data = self._call(
                    lambda: self.custom.list_namespaced_custom_object(
                        group, version, ns, plural, label_selector=selector, _preload_content=False
                    ),
                    what,
                    read=True,
                )
        except SchedulerError as e:
            # An operator that is not installed has no such resource: nothing to list.
            if quiet and e.returncode in (403, 404):
                return []
            raise
        return [_with_kind(item, data) for item in data.get("items") or []]

    def pods(self, ns: str, selector: str) -> list[dict[str, Any]]:
        data = self._call(
            lambda: self.core.list_namespaced_pod(
                ns, label_selector=selector, _preload_content=False
            ),
            f"pods ({selector})",
            read=True,
        )
        return list(data.get("items") or [])

    def delete(self, gvr: tuple[str, str, str], ns: str, name: str, *, missing_ok: bool) -> None:
        group, version, plural = gvr
        try:
            self._call(
                lambda: self.custom.delete_namespaced_custom_object(
                    group,
                    version,
                    ns,
                    plural,
                    name,
                    propagation_policy="Foreground",
                    _preload_content=False,
                ),
                f"{plural}.{group} {ns}/{name}",
                read=False,
            )
        except SchedulerError as e:
            if not (missing_ok and e.returncode == 404):
                raise

    def delete_service(self, ns: str, name: str, *, missing_ok: bool) -> None:
        try:
            self._call(
                lambda: self.core.delete_namespaced_service(
                    name, ns, propagation_policy="Foreground", _preload_content=False
                ),
                f"Service {ns}/{name}",
                read=False,
            )
        except SchedulerError as e:
            if not (missing_ok and e.returncode == 404):
                raise

    def log_lines(
        self, ns: str, pod: str, container: str, follow: bool, since_seconds: int | None
    ) -> Iterator[tuple[str, str]]:
        """(RFC 3339 timestamp, line) pairs of a pod's log; raises _StreamDropped mid-stream."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = self.core.read_namespaced_pod_log(
                pod,
                ns,
                container=container,
                follow=follow,
                timestamps=True,
                since_seconds=since_seconds,
                _preload_content=False,
            )
        except ApiException as e:
            raise _api_error(e, f"log of pod {ns}/{pod}") from None
        except HTTPError as e:
            raise _StreamDropped(str(e)) from None
        buffer = b""
        try:
            for chunk in resp.stream(8192, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    yield _split_timestamp(raw.decode("utf-8", errors="replace"))
        except HTTPError as e:
            raise _StreamDropped(str(e)) from None
        finally:
            resp.release_conn()
        if buffer:
            yield _split_timestamp(buffer.decode("utf-8", errors="replace"))

    def wait_for_event(
        self, gvr: tuple[str, str, str], ns: str, selector: str, timeout_s: int
    ) -> None:
        """Return after the first change to the app's objects of ``gvr``, or after ``timeout_s``.

        Any failure of the watch itself (410 Gone, a dropped stream, a 5xx)
        also just returns: the caller re-reads the state.
        """
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        group, version, plural = gvr

        def call(**kw: Any) -> Any:
            if group == "":
                return self.core.list_namespaced_pod(
                    ns, label_selector=selector, _preload_content=False, **kw
                )
            return self.custom.list_namespaced_custom_object(
                group, version, ns, plural, label_selector=selector, _preload_content=False, **kw
            )

        try:
            listing = self._call(call, f"{plural} ({selector})", read=True)
            resp = call(
                watch=True,
                resource_version=(listing.get("metadata") or {}).get("resourceVersion"),
                timeout_seconds=timeout_s,
                _request_timeout=timeout_s + 5,
            )
        except (ApiException, HTTPError, SchedulerError):
            time.sleep(0.2)
            return
        try:
            buffer = b""
            for chunk in resp.stream(8192):
                buffer += chunk
                if b"\n" in buffer:
                    event = json.loads(buffer.split(b"\n", 1)[0] or b"{}")
                    if event.get("type") == "ERROR":
                        time.sleep(0.2)  # e.g. 410 Gone: too old a resourceVersion
                    return
        except (HTTPError, ValueError):
            time.sleep(0.2)
        finally:
            resp.release_conn()


def _with_kind(item: dict[str, Any], listing: Mapping[str, Any]) -> dict[str, Any]:
    # Items of a list carry no kind/apiVersion; the list's kind is "<Kind>List".
    kind = str(listing.get("kind") or "")
    if kind.endswith("List") and "kind" not in item:
        item = {"kind": kind[: -len("List")], "apiVersion": listing.get("apiVersion"), **item}
    return item


def _ts_key(ts: str) -> str:
    """RFC 3339 with nanoseconds trimmed by the server, made comparable as text."""
    body = ts.rstrip("Z")
    head, _, frac = body.partition(".")
    return f"{head}.{frac.ljust(9, '0')}"


def _split_timestamp(line: str) -> tuple[str, str]:
    ts, sep, rest = line.partition(" ")
    if sep and ts[:4].isdigit() and "T" in ts:
        return ts, rest
    return "", line
