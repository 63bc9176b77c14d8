"""The Kubernetes backend's scheduler: Indexed Job + headless Service, or JobSet, or
Volcano.

``compile`` is pure (the manifests come from :mod:`.manifest`) and imports neither
yaml at module import nor the kubernetes client at all; the effectful half talks to
the API server through :mod:`.client` and reads status with :mod:`.status`.

App ids the scheduler hands back are ``<namespace>:<k8s id>``; point ``k`` of a sweep
array (:mod:`.array`) is ``<namespace>:<k8s id>:<k>``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from distspec.errors import AppNotFound, CompileError, SchedulerError
from distspec.frozen import FrozenDict, replace
from distspec.schedulers.api import (
    AppSummary,
    Capabilities,
    CommandRunner,
    Dependency,
    JobPaths,
    Points,
    Request,
    Scheduler,
    check_capabilities,
    run_command,
)
from distspec.schedulers.kubernetes.array import MAX_POINTS, build_array, cancel_line
from distspec.schedulers.kubernetes.client import (
    GVR,
    JOBS,
    JOBSETS,
    PODS,
    VOLCANO,
    Conn,
    Kube,
    StreamDropped,
    load_client,
    ts_key,
)
from distspec.schedulers.kubernetes.manifest import POINTS_KEY, build_manifests, render_yaml
from distspec.schedulers.kubernetes.names import (
    APP_ID_LABEL,
    APP_NAME_LABEL,
    MANAGED_BY_LABEL,
    NAME,
    ROLE_LABEL,
    Names,
    k8s_id,
    k8s_role,
    point_id,
    split_app_id,
    split_point_id,
)
from distspec.schedulers.kubernetes.options import Flavor, KubernetesOptions
from distspec.schedulers.kubernetes.snapshot import job_path, require_job_dir, upload, wrap
from distspec.schedulers.kubernetes.status import (
    app_status,
    by_replica,
    in_indexes,
    parse_time,
    point_status,
    summary_state,
)
from distspec.specs.macros import Macro
from distspec.specs.state import AppState, AppStatus

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from pathlib import Path
    from typing import Any, ClassVar

    from distspec.specs.app import AppDef

__all__ = ["FOLLOW_POLL", "KubernetesScheduler"]

#: How often a followed log looks for a replica's (next) pod.
FOLLOW_POLL = 1.0


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
        # An image is a container image the kubelet pulls; a job runs detached (run
        # --wait leaves it running on Ctrl-C) and keeps nothing under the state dir
        # that prune could remove (its objects and logs live in the cluster).
        image="container",
        interactive=False,
        prunable=False,
        # A sweep of one-pod points is one Indexed Job (compile_array refuses others).
        arrays=True,
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
        self._clients: dict[Conn, Any] = {}

    # -- the pure half ---------------------------------------------------------

    def compile(
        self,
        app: AppDef,
        opts: KubernetesOptions,
        *,
        app_id: str,
        after: Sequence[Dependency] = (),
    ) -> Request:
        """The app's manifests for the flavour in ``opts``: one YAML file and the
        ``kubectl apply`` that would create them (submit creates them through the API).
        Kubernetes has no dependencies between Jobs: ``after`` is refused."""
        self._refuse_after(after)
        # Elastic roles are judged per flavour by build_manifests, with a better message.
        check_capabilities(app, replace(self.capabilities, elastic=True), self.name)
        docs = build_manifests(app, opts, app_id=app_id)
        wrap(docs, app, opts.job_dir)  # roles that run from a snapshot unpack it first
        return self._request(app, opts, app_id, docs)

    def compile_array(
        self,
        app: AppDef,
        opts: KubernetesOptions,
        *,
        app_id: str,
        points: Points,
        after: Sequence[Dependency] = (),
    ) -> Request:
        """A sweep whose every point is one pod, as one ConfigMap (the points file) and
        one Indexed Job: index ``k`` runs point ``points.first + k``, at most
        ``points.max_parallel`` at once, each ``{{name}}`` read from
        ``$DISTSPEC_SWEEP_<name>`` (see :mod:`.array`). Its points' ids are
        :meth:`point_id`.

        Raises:
            CompileError: flavour jobset/volcano, several roles or several pods per
                point (a sweep of multi-pod points runs as one Job per point), more than
                :meth:`max_array_size` points, a points file too big for a ConfigMap
                (1 MB), or ``after`` (Kubernetes has no dependencies).
        """
        self._refuse_after(after)
        check_capabilities(app, replace(self.capabilities, elastic=True), self.name)
        docs = build_array(app, opts, app_id=app_id, points=points)
        wrap(docs, app, opts.job_dir)
        return self._request(app, opts, app_id, docs, points=points)

    def point_id(self, array_id: str, request: Request, index: int) -> str:
        """``<namespace>:<id>:<k>``, point ``index`` (sweep-wide) of the array
        ``array_id``: index ``k = index - points.first`` of its Indexed Job. describe,
        log (replica 0), cancel and job_paths take it."""
        points = request.points
        if points is None or not 0 <= index - points.first < len(points.values):
            raise ValueError(f"point {index} is not in the array request {request.app_id}")
        ns, kid = split_app_id(array_id)
        return point_id(ns or request.options.namespace, kid, index - points.first)

    def max_array_size(self, opts: KubernetesOptions) -> int | None:
        """100,000: the most indexes the API server allows a Job with a per-index
        backoff limit (a points file over 1 MB is refused by compile_array first)."""
        return MAX_POINTS

    def _refuse_after(self, after: Sequence[Dependency]) -> None:
        if after:
            raise CompileError(
                self.name,
                "Kubernetes cannot hold a Job until another has ended (--after); "
                "submit it once the other has ended",
            )

    def _request(
        self,
        app: AppDef,
        opts: KubernetesOptions,
        app_id: str,
        docs: list[dict[str, Any]],
        *,
        points: Points | None = None,
    ) -> Request:
        """One YAML file of ``docs`` and the kubectl command that creates them."""
        kid = k8s_id(app_id)
        ns = opts.namespace
        create = "apply"
        if points is not None:
            # kubectl apply keeps a copy of each object in an annotation (256 KiB at
            # most), too small for a big points file; create keeps none.
            create = "create"
            delete = f"kubectl delete -n {ns} job,configmap -l {APP_ID_LABEL}={kid}"
        elif opts.flavor is Flavor.JOB:
            # kubectl cannot know the Job's uid before creating it, so this file has
            # no ownerReference; submit adds one to the Service (one cascading delete).
            delete = f"kubectl delete -n {ns} job,service -l {APP_ID_LABEL}={kid}"
        else:
            kind = "jobset" if opts.flavor is Flavor.JOBSET else "jobs.batch.volcano.sh"
            delete = f"kubectl delete -n {ns} {kind} {kid}"
        what = f"sweep array of {len(points.values)} points" if points else opts.flavor.value
        header = f"# distspec app {kid} ({what}); delete with: {delete}\n"
        fname = f"{kid}.yaml"
        return Request(
            scheduler=self.name,
            app=app,
            app_id=kid,
            options=opts,
            files=FrozenDict({fname: render_yaml(docs, header=header)}),
            argv=("kubectl", create, "-f", fname),
            main_file=fname,
            points=points,
        )

    # -- where a job's files are -----------------------------------------------

    def job_paths(self, app_id: str, request: Request | None = None) -> JobPaths | None:
        """``<job_dir>/<k8s id>``, an fsspec URL the pods and this machine both reach, when
        the app's options set ``job_dir`` (from ``request`` when given, else from the
        record submit keeps in the state dir); None without one. A sweep point's folder
        is ``<job_dir>/<k8s id>-<k>`` (``request``: its array's). The folder holds what
        the job writes there (a callable's payload and results): a pod's log is the
        API server's (``distspec log``), not a file in it."""
        ns, kid, index = split_point_id(app_id)
        if request is not None:
            job_dir, kid = request.options.job_dir, request.app_id
        else:
            job_dir = self._record(ns or "default", kid).get("job_dir")
        if not job_dir:
            return None
        # A sweep point's ${app_id} is <id>-<k> (.array): its own folder.
        name = kid if index is None else f"{kid}-{index}"
        return JobPaths(folder=f"{str(job_dir).rstrip('/')}/{name}", log_pattern=None)

    # -- the code snapshot -----------------------------------------------------

    def snapshot_root(self, opts: KubernetesOptions) -> str:
        """The local store, as on every backend; first, a snapshot needs ``job_dir``
        (the archive travels through it): CompileError (exit 2) without one."""
        require_job_dir(opts.job_dir)
        return super().snapshot_root(opts)

    def snapshot_job_path(self, tree: str, tree_id: str, opts: KubernetesOptions) -> str:
        """``/tmp/distspec-snapshot/<tree id>``: the pod-local folder the container's
        first step unpacks the archive into (:mod:`.snapshot`)."""
        return job_path(tree_id)

    # -- connection ------------------------------------------------------------

    def _client(self, conn: Conn) -> Kube:
        client = self._clients.get(conn)
        if client is None:
            if self._factory is not None:
                client = self._factory(conn.kubeconfig, conn.context)
            else:
                client = load_client(conn)
            self._clients[conn] = client
        return Kube(client)

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

    def _locate(self, app_id: str) -> tuple[str, str, dict[str, Any], Kube]:
        """(namespace, k8s id, record, client) of an app, or of a sweep point's array."""
        found, kid, _ = split_point_id(app_id)
        ns = found or "default"
        record = self._record(ns, kid)
        conn = Conn(record.get("kubeconfig"), record.get("context"))
        return ns, kid, record, self._client(conn)

    # -- submit ----------------------------------------------------------------

    def stage_snapshot(self, request: Request) -> str | None:
        """Upload the snapshot's archive to ``job_dir`` (once per tree: an archive of the
        same content already there is kept); the URL it is at."""
        if request.snapshot is None:
            return None
        url = upload(request.snapshot, require_job_dir(request.options.job_dir))
        return f"uploaded to {url}"

    def submit(self, request: Request) -> str:
        """Create the objects of ``request``; returns ``<namespace>:<id>``. A request
        that runs from a snapshot has its archive uploaded to ``job_dir`` first (once
        per tree); when that fails, nothing is created."""
        opts: KubernetesOptions = request.options
        self.stage_snapshot(request)
        self._create(request, dry_run=False)
        self._save_record(
            opts.namespace,
            request.app_id,
            {
                "kubeconfig": opts.kubeconfig,
                "context": opts.context,
                "flavor": opts.flavor.value,
                "job_dir": opts.job_dir,
            },
        )
        return f"{opts.namespace}:{request.app_id}"

    def server_dry_run(self, request: Request) -> list[dict[str, Any]]:
        """Let the API server validate and default the objects without persisting them."""
        return self._create(request, dry_run=True)

    def _create(self, request: Request, *, dry_run: bool) -> list[dict[str, Any]]:
        import yaml

        opts: KubernetesOptions = request.options
        docs = [d for d in yaml.safe_load_all(request.render()) if d]
        kube = self._client(Conn(opts.kubeconfig, opts.context))
        ns = opts.namespace
        what = f"app {request.app_id} in namespace {ns}"
        if opts.flavor is not Flavor.JOB:
            (doc,) = docs
            return [kube.create(GVR[opts.flavor], ns, doc, dry_run=dry_run, what=what)]
        created: list[dict[str, Any]] = []
        try:
            jobs = [d for d in docs if d["kind"] == "Job"]
            for job in jobs:
                created.append(kube.create(JOBS, ns, job, dry_run=dry_run, what=what))
            owner = created[0]["metadata"]
            for svc in (d for d in docs if d["kind"] in ("Service", "ConfigMap")):
                svc = json.loads(json.dumps(svc))
                # The Service (a sweep's ConfigMap) goes when the Job goes (garbage
                # collector, one delete). A pod that starts before its ConfigMap exists
                # waits for it (the kubelet retries the mount).
                svc["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": owner["name"],
                        "uid": owner.get("uid", ""),
                        "blockOwnerDeletion": True,
                    }
                ]
                create = kube.create_service if svc["kind"] == "Service" else kube.create_config_map
                created.append(create(ns, svc, dry_run=dry_run, what=what))
        except BaseException:
            # Nothing half-written: take back the Jobs already created.
            if not dry_run:
                for obj in created:
                    if obj.get("kind") == "Job":
                        kube.delete(JOBS, ns, obj["metadata"]["name"], missing_ok=True)
            raise
        return created

    # -- describe --------------------------------------------------------------

    def describe(self, app_id: str) -> AppStatus | None:
        """The app's status from its JobSet or Volcano Job, its Jobs and its pods; None when none of
        them exists (CANCELLED when this machine cancelled it). A sweep point's status is
        its index's (:meth:`describe_many`); a sweep array's is its whole Job's."""
        if split_point_id(app_id)[2] is not None:
            return self.describe_many([app_id])[app_id]
        ns, kid, record, kube = self._locate(app_id)
        selector = f"{APP_ID_LABEL}={kid}"
        flavor = Flavor(record["flavor"]) if record.get("flavor") else None
        owner: dict[str, Any] | None = None
        if flavor in (Flavor.JOBSET, Flavor.VOLCANO):
            owner = kube.get(GVR[flavor], ns, kid)
        jobs = kube.list_objects(JOBS, ns, selector)
        if flavor is None and not jobs:
            for candidate in (Flavor.JOBSET, Flavor.VOLCANO):
                owner = kube.get(GVR[candidate], ns, kid, quiet=True)
                if owner is not None:
                    flavor = candidate
                    break
        pods = kube.pods(ns, selector)
        if owner is None and not jobs and not pods:
            if record.get("cancelled"):
                return AppStatus(state=AppState.CANCELLED, msg="deleted by cancel")
            return None
        return app_status(flavor, owner, jobs, pods, native_id=f"{ns}/{kid}")

    def describe_many(self, app_ids: Sequence[str]) -> dict[str, AppStatus | None]:
        """:meth:`describe` of each id; the points of one sweep array are read together
        (its Job and its pods: two requests, however many points)."""
        out: dict[str, AppStatus | None] = {}
        arrays: dict[str, list[tuple[str, int]]] = {}
        for app_id in app_ids:
            index = split_point_id(app_id)[2]
            if index is None:
                out[app_id] = self.describe(app_id)
            else:
                arrays.setdefault(app_id.rpartition(":")[0], []).append((app_id, index))
        for array_id, members in arrays.items():
            ns, kid, record, kube = self._locate(array_id)
            selector = f"{APP_ID_LABEL}={kid}"
            jobs = kube.list_objects(JOBS, ns, selector)
            job = jobs[0] if jobs else None
            pods = by_replica(kube.pods(ns, selector))
            cancelled = set(record.get("cancelled_points") or ())
            name = job["metadata"]["name"] if job else kid
            for app_id, index in members:
                status = point_status(
                    job,
                    pods.get(index, []),
                    index,
                    cancelled=bool(record.get("cancelled")) or index in cancelled,
                    native_id=f"{ns}/{name} index {index}",
                )
                if status is None and (record.get("cancelled") or index in cancelled):
                    status = AppStatus(state=AppState.CANCELLED, msg="deleted by cancel")
                out[app_id] = status
        return {app_id: out[app_id] for app_id in app_ids}

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
        the same index (restartPolicy Never: a retry is a new pod), until the app ends.
        A sweep point has replica 0 alone: its index's pods; a sweep array's replica
        ``k`` is its point ``k``."""
        whole = app_id  # what has to end for a follow to stop waiting for a pod
        index = split_point_id(app_id)[2]
        if index is not None:
            if replica != 0:
                raise AppNotFound(
                    f"{NAME}://{app_id} {role}/{replica}: a sweep point has replica 0"
                )
            replica = index
        ns, kid, _, kube = self._locate(app_id)
        selector = f"{APP_ID_LABEL}={kid},{ROLE_LABEL}={k8s_role(role)}"

        def attempts() -> list[dict[str, Any]]:
            # Numbered as describe numbers them (pods without an index too).
            return by_replica(kube.pods(ns, selector)).get(replica, [])

        pods = attempts()
        if not pods and not follow:
            raise AppNotFound(f"{NAME}://{app_id} {role}/{replica}")
        seen: set[str] = set()
        # Without follow (or at the start of one): the newest attempt only.
        current = pods[-1] if pods else None
        while True:
            if current is None:
                status = self.describe(whole)
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
        kube: Kube,
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
                since_seconds = max(1, math.ceil(time.time() - parse_time(last_ts)) + 1)
            try:
                for ts, line in kube.log_lines(ns, name, container, follow, since_seconds):
                    # After a reconnect the server repeats what it sent since
                    # `since_seconds`: skip lines we already gave out.
                    if last_ts and ts and ts_key(ts) <= ts_key(last_ts):
                        continue
                    last_ts = ts or last_ts
                    yield line
                return
            except StreamDropped as e:
                drops += 1
                if not follow or drops >= 5:
                    raise SchedulerError(
                        f"log stream of pod {name} dropped: {e}", scheduler=NAME
                    ) from None

    # -- cancel, list ----------------------------------------------------------

    def cancel(self, app_id: str) -> None:
        """Delete the app's objects with Foreground propagation (pods go first); a sweep
        array's ConfigMap goes with its Job. A sweep point: see :meth:`_cancel_point`."""
        index = split_point_id(app_id)[2]
        if index is not None:
            self._cancel_point(app_id, index)
            return
        ns, kid, record, kube = self._locate(app_id)
        selector = f"{APP_ID_LABEL}={kid}"
        found = False
        for gvr in (JOBSETS, VOLCANO):
            if kube.get(gvr, ns, kid, quiet=True) is not None:
                kube.delete(gvr, ns, kid, missing_ok=True)
                found = True
        points = Names(kid).points
        for job in kube.list_objects(JOBS, ns, selector):
            if not job["metadata"].get("ownerReferences"):
                kube.delete(JOBS, ns, job["metadata"]["name"], missing_ok=True)
                found = True
            pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
            volumes = pod.get("volumes") or []
            if any((v.get("configMap") or {}).get("name") == points for v in volumes):
                # Owned by the Job when submit created it, not when created by hand.
                kube.delete_config_map(ns, points, missing_ok=True)
        # The Service goes with its owner Job; one applied by hand has no owner.
        kube.delete_service(ns, kid, missing_ok=True)
        if found or record:
            self._save_record(ns, kid, {**record, "cancelled": True})

    def _cancel_point(self, app_id: str, index: int) -> None:
        """Stop one point of a sweep array and leave the others running.

        Kubernetes cannot stop one index of a Job, so its line in the points file is
        marked cancelled (the ConfigMap, written back only if no one changed it since
        it was read) and its pods that have not ended are deleted (after their grace
        period). The job controller counts a deleted pod as a failed attempt: the
        index fails there when it has no retries left, else the pod that replaces it
        reads the mark and exits 2 at once, which fails the index without retries
        (``FailIndex``). A point that has not started yet does the same when its turn
        comes. describe says CANCELLED from then on; a point that had already ended is
        left as it is. Needs the rights to update ConfigMaps and delete pods.
        """
        ns, kid, record, kube = self._locate(app_id)
        selector = f"{APP_ID_LABEL}={kid}"
        name = Names(kid).points
        for _ in range(5):
            jobs = kube.list_objects(JOBS, ns, selector)
            if not jobs or index >= int((jobs[0].get("spec") or {}).get("completions") or 0):
                return  # the whole array is gone, or it has no such point
            status = jobs[0].get("status") or {}
            if any(in_indexes(status.get(k), index) for k in ("completedIndexes", "failedIndexes")):
                return  # ended
            config_map = kube.config_map(ns, name)
            if config_map is None:
                raise SchedulerError(
                    f"{app_id}: the points of sweep array {kid} (ConfigMap {ns}/{name}) are gone",
                    scheduler=NAME,
                )
            text = cancel_line((config_map.get("data") or {}).get(POINTS_KEY, ""), index)
            if text is None:
                break  # marked already
            config_map["data"][POINTS_KEY] = text
            if kube.replace_config_map(ns, config_map):
                break
        else:
            raise SchedulerError(
                f"{app_id}: ConfigMap {ns}/{name} kept changing while being marked; try again",
                scheduler=NAME,
            )
        for pod in by_replica(kube.pods(ns, selector)).get(index, []):
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                kube.delete_pod(ns, pod["metadata"]["name"], missing_ok=True)
        done = sorted({*(record.get("cancelled_points") or ()), index})
        self._save_record(ns, kid, {**record, "cancelled_points": done})

    def list(self) -> list[AppSummary]:
        """The apps distspec submitted, found by label across namespaces, newest first."""
        kube = self._client(Conn())
        selector = f"{MANAGED_BY_LABEL}=distspec"
        apps: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        for gvr in (JOBS, JOBSETS, VOLCANO):
            for obj in kube.list_objects(gvr, None, selector, quiet=gvr is not JOBS):
                meta = obj["metadata"]
                labels = meta.get("labels") or {}
                kid = labels.get(APP_ID_LABEL)
                if not kid:
                    continue
                key = f"{meta.get('namespace', 'default')}:{kid}"
                apps.setdefault(key, (labels.get(APP_NAME_LABEL, ""), []))[1].append(obj)
        out = []
        for key, (name, objs) in apps.items():
            state, msg = summary_state(objs)
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

    def _pauser(self, app_id: str) -> Callable[[float | None], None]:
        """Sleep on a watch of the app's objects until something changes (at most 10 s
        or the time left). A watch that expires (410 Gone) or drops simply ends the
        pause; nothing is missed because :meth:`wait` re-reads the state."""
        ns, kid, record, kube = self._locate(app_id)
        # A Job's status changes with each of its pods (active/failed counts) and
        # with its conditions; JobSet/Volcano pods are watched directly.
        gvr = JOBS if record.get("flavor", "job") == "job" else PODS

        def pause(left: float | None) -> None:
            window = int(min(left if left is not None else 10.0, 10.0)) + 1
            kube.wait_for_event(gvr, ns, f"{APP_ID_LABEL}={kid}", window)

        return pause
