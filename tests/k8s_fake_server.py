"""A small loopback Kubernetes API server for tests of the client path (a helper, not a test).

It speaks the subset the Kubernetes backend calls, the way the real server does:
create (409 on a duplicate, ``dryRun=All`` persists nothing), get, list with
label selectors (``k=v``, ``k!=v``, ``k``), delete with cascading garbage
collection of owned objects, pod logs as text/plain (``timestamps``,
``follow`` streamed chunk by chunk, ``sinceSeconds``), pod watches (chunked
JSON events), and errors as ``Status`` bodies. A tiny job controller turns an
Indexed Job into pods named ``<job>-<index>-<suffix>`` with hostname
``<job>-<index>`` and the completion-index annotation and label.

Faults: :meth:`FakeApiServer.fail` answers the next matching request with an
error status; ``watch_gone`` makes a watch answer a 410 ERROR event;
:meth:`FakeApiServer.drop_log` closes a pod's log stream mid-chunk.

Stdlib only; what the real 1.20 server checks is tested against it
(tests/k8s_apiserver.py), what it cannot do (logs, Indexed Jobs, faults) here.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

__all__ = ["FakeApiServer"]

_COLLECTION = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>log|status))?$"
)

_KINDS = {
    ("", "v1", "pods"): "Pod",
    ("", "v1", "services"): "Service",
    ("batch", "v1", "jobs"): "Job",
    ("jobset.x-k8s.io", "v1alpha2", "jobsets"): "JobSet",
    ("batch.volcano.sh", "v1alpha1", "jobs"): "Job",
}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _rfc3339_nano(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e9):09d}Z"


def matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Label selector semantics for ``k=v``, ``k==v``, ``k!=v``, ``k`` and ``!k``, comma-joined."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = re.split(r"==?", term, maxsplit=1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class _Log:
    lines: list[tuple[float, str]] = field(default_factory=list)
    closed: bool = False
    drop_after: int | None = None  # drop the stream after sending this many lines


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    times: int


class FakeApiServer:
    """``with FakeApiServer() as api: api.url`` -- a fake API server on 127.0.0.1."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], _Log] = {}
        self.requests: list[tuple[str, str]] = []
        self.watch_gone = 0  # the next N watches answer 410 Gone
        self.job_controller = True
        self._faults: list[_Fault] = []
        self._version = itertools.count(1)
        self._uid = itertools.count(1)
        self._cond = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle -------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            for log in self.logs.values():
                log.closed = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig (JSON is YAML) pointing at this server."""
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    def api_client(self) -> Any:
        """A real ``kubernetes.client.ApiClient`` talking to this server."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    # -- test controls ---------------------------------------------------------

    def fail(self, method: str, path_regex: str, status: int, *, times: int = 1) -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path_regex`` with ``status``."""
        self._faults.append(_Fault(method, re.compile(path_regex), status, times))

    def pods(self, ns: str = "default") -> list[dict[str, Any]]:
        with self._cond:
            return [
                copy.deepcopy(o)
                for (g, v, n, plural, _), o in sorted(self.objects.items())
                if (g, plural, n) == ("", "pods", ns)
            ]

    def get(
        self, group: str, version: str, ns: str, plural: str, name: str
    ) -> dict[str, Any] | None:
        with self._cond:
            obj = self.objects.get((group, version, ns, plural, name))
            return copy.deepcopy(obj) if obj else None

    def put(self, obj: dict[str, Any], group: str, version: str, plural: str) -> None:
        with self._cond:
            meta = obj["metadata"]
            meta.setdefault("uid", f"uid-{next(self._uid)}")
            meta.setdefault("creationTimestamp", _now())
            meta["resourceVersion"] = str(next(self._version))
            self.objects[
                (group, version, meta.get("namespace", "default"), plural, meta["name"])
            ] = obj
            self._cond.notify_all()

    def patch_pod(self, ns: str, name: str, status: Mapping[str, Any], **spec: Any) -> None:
        """Replace a pod's status (as a kubelet would) and merge ``spec`` fields."""
        with self._cond:
            pod = self.objects[("", "v1", ns, "pods", name)]
            pod["status"] = dict(status)
            pod["spec"].update(spec)
            pod["metadata"]["resourceVersion"] = str(next(self._version))
            self._cond.notify_all()

    def set_condition(
        self, group: str, version: str, ns: str, plural: str, name: str, kind: str, **extra: str
    ) -> None:
        with self._cond:
            obj = self.objects[(group, version, ns, plural, name)]
            conds = obj.setdefault("status", {}).setdefault("conditions", [])
            conds.append({"type": kind, "status": "True", **extra})
            obj["metadata"]["resourceVersion"] = str(next(self._version))
            self._cond.notify_all()

    def log(self, ns: str, pod: str, *lines: str, at: float | None = None) -> None:
        """Append lines to a pod's log (timestamped ``at``, default now)."""
        with self._cond:
            log = self.logs.setdefault((ns, pod), _Log())
            base = at if at is not None else time.time()
            for i, line in enumerate(lines):
                # Distinct timestamps, as a real container's lines have.
                log.lines.append((base + i * 1e-6, line))
            self._cond.notify_all()

    def close_log(self, ns: str, pod: str) -> None:
        """The container ended: a follower's stream ends."""
        with self._cond:
            self.logs.setdefault((ns, pod), _Log()).closed = True
            self._cond.notify_all()

    def drop_log(self, ns: str, pod: str, after_lines: int) -> None:
        """The next log stream of ``pod`` breaks off after ``after_lines`` lines."""
        with self._cond:
            self.logs.setdefault((ns, pod), _Log()).drop_after = after_lines

    # -- the API ---------------------------------------------------------------

    def _fault(self, method: str, path: str) -> int | None:
        for fault in self._faults:
            if fault.method == method and fault.pattern.search(path):
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault.status
        return None

    def _create(
        self, key: tuple[str, str, str, str], body: dict[str, Any], dry_run: bool
    ) -> tuple[int, dict[str, Any]]:
        group, version, ns, plural = key
        meta = body.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            return 422, _status(422, "Invalid", "metadata.name: Required value")
        meta["namespace"] = ns
        with self._cond:
            if (group, version, ns, plural, name) in self.objects:
                return 409, _status(
                    409, "AlreadyExists", f'{plural}.{group or "core"} "{name}" already exists'
                )
            if dry_run:
                body = copy.deepcopy(body)
                meta = body["metadata"]
                meta["uid"] = f"uid-dry-{next(self._uid)}"
                meta["creationTimestamp"] = _now()
                return 201, body
            self.put(body, group, version, plural)
            if self.job_controller and (group, plural) == ("batch", "jobs"):
                self._start_job(body)
            return 201, copy.deepcopy(body)

    def _start_job(self, job: dict[str, Any]) -> None:
        spec = job["spec"]
        tmpl = spec["template"]
        meta = job["metadata"]
        for index in range(int(spec.get("completions") or 1)):
            pod_labels = dict(tmpl["metadata"].get("labels") or {})
            annotations = dict(tmpl["metadata"].get("annotations") or {})
            pod_spec = copy.deepcopy(tmpl["spec"])
            if spec.get("completionMode") == "Indexed":
                annotations["batch.kubernetes.io/job-completion-index"] = str(index)
                pod_labels["batch.kubernetes.io/job-completion-index"] = str(index)
                pod_spec["hostname"] = f"{meta['name']}-{index}"
            pod_labels["job-name"] = meta["name"]
            self.put(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{meta['name']}-{index}-{next(self._uid):05d}",
                        "namespace": meta["namespace"],
                        "labels": pod_labels,
                        "annotations": annotations,
                        "ownerReferences": [
                            {
                                "apiVersion": "batch/v1",
                                "kind": "Job",
                                "name": meta["name"],
                                "uid": meta["uid"],
                            }
                        ],
                    },
                    "spec": pod_spec,
                    "status": {"phase": "Pending"},
                },
                "",
                "v1",
                "pods",
            )

    def _delete(self, key: tuple[str, str, str, str, str]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            obj = self.objects.pop(key, None)
            if obj is None:
                return 404, _status(404, "NotFound", f'{key[3]} "{key[4]}" not found')
            self._collect(obj["metadata"]["uid"])
            self._cond.notify_all()
        return 200, _status(200, "", "", status="Success")

    def _collect(self, uid: str) -> None:
        # The garbage collector: everything owned by ``uid``, transitively.
        for key, obj in list(self.objects.items()):
            owners = obj["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                self.objects.pop(key, None)
                self._collect(obj["metadata"]["uid"])

    def _list(
        self, group: str, version: str, ns: str | None, plural: str, selector: str
    ) -> dict[str, Any]:
        with self._cond:
            items = [
                copy.deepcopy(o)
                for (g, v, n, p, _), o in sorted(self.objects.items())
                if (g, v, p) == (group, version, plural)
                and (ns is None or n == ns)
                and matches(selector, o["metadata"].get("labels") or {})
            ]
            version_now = str(next(self._version))
        for item in items:  # list items carry no kind/apiVersion
            item.pop("kind", None)
            item.pop("apiVersion", None)
        kind = _KINDS.get((group, version, plural), "Object")
        return {
            "kind": f"{kind}List",
            "apiVersion": f"{group}/{version}" if group else version,
            "metadata": {"resourceVersion": version_now},
            "items": items,
        }

    def _watch(
        self, group: str, plural: str, ns: str, selector: str, since: int, timeout: float
    ) -> Iterator[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        seen: dict[str, str] = {}
        with self._cond:
            while time.monotonic() < deadline:
                for (g, _, n, p, name), obj in self.objects.items():
                    rv = obj["metadata"]["resourceVersion"]
                    if (g, p, n) != (group, plural, ns) or int(rv) <= since or seen.get(name) == rv:
                        continue
                    if matches(selector, obj["metadata"].get("labels") or {}):
                        seen[name] = rv
                        yield {"type": "MODIFIED", "object": copy.deepcopy(obj)}
                self._cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))

    def _log_stream(
        self, ns: str, pod: str, *, follow: bool, timestamps: bool, since_seconds: int | None
    ) -> Iterator[bytes | None]:
        """Chunks of the log; ``None`` means: drop the connection now."""
        sent = 0
        cutoff = time.time() - since_seconds if since_seconds else None
        index = 0
        with self._cond:
            log = self.logs.setdefault((ns, pod), _Log())
            drop_after, log.drop_after = log.drop_after, None
            while True:
                while index < len(log.lines):
                    t, line = log.lines[index]
                    index += 1
                    if cutoff is not None and t < cutoff:
                        continue
                    if drop_after is not None and sent >= drop_after:
                        yield None
                        return
                    text = f"{_rfc3339_nano(t)} {line}\n" if timestamps else f"{line}\n"
                    sent += 1
                    yield text.encode()
                if not follow or log.closed:
                    return
                self._cond.wait(0.2)


def _status(code: int, reason: str, message: str, *, status: str = "Failure") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": status,
        "message": message,
        "reason": reason,
        "code": code,
    }


def _handler(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, chunks: Iterator[bytes | None], content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for chunk in chunks:
                    if chunk is None:  # a dropped stream: no terminating chunk
                        self.wfile.write(b"5\r\npart")  # a truncated chunk
                        self.wfile.flush()
                        self.close_connection = True
                        return
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            server.requests.append((method, self.path))
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            fault = server._fault(method, url.path)
            if fault is not None:
                self._send(
                    fault,
                    _status(
                        fault, "InternalError" if fault >= 500 else "Fault", f"injected {fault}"
                    ),
                )
                return
            m = _COLLECTION.match(url.path)
            if m is None:
                self._send(404, _status(404, "NotFound", f"the server could not find {url.path}"))
                return
            group = m["group"] or ""
            version = m["core"] or m["version"]
            ns, plural, name, sub = m["ns"], m["plural"], m["name"], m["sub"]
            if (group, version, plural) not in _KINDS:
                self._send(
                    404,
                    _status(
                        404,
                        "NotFound",
                        f"the server could not find the requested resource ({plural}.{group})",
                    ),
                )
                return
            selector = query.get("labelSelector", "")
            if method == "POST" and name is None and ns:
                code, body = server._create(
                    (group, version, ns, plural), json.loads(raw), query.get("dryRun") == "All"
                )
                self._send(code, body)
            elif method == "GET" and name is None and query.get("watch") in ("true", "1") and ns:
                if server.watch_gone:
                    server.watch_gone -= 1
                    gone = {
                        "type": "ERROR",
                        "object": _status(410, "Expired", "too old resource version"),
                    }
                    self._stream(iter([json.dumps(gone).encode() + b"\n"]), "application/json")
                    return
                events = server._watch(
                    group,
                    plural,
                    ns,
                    selector,
                    int(query.get("resourceVersion") or 0),
                    float(query.get("timeoutSeconds") or 5),
                )
                self._stream((json.dumps(e).encode() + b"\n" for e in events), "application/json")
            elif method == "GET" and name is None:
                self._send(200, server._list(group, version, ns, plural, selector))
            elif method == "GET" and sub == "log" and ns:
                if ("", "v1", ns, "pods", name) not in server.objects:
                    self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
                    return
                since = query.get("sinceSeconds")
                chunks = server._log_stream(
                    ns,
                    name,
                    follow=query.get("follow") == "true",
                    timestamps=query.get("timestamps") == "true",
                    since_seconds=int(since) if since else None,
                )
                self._stream(chunks, "text/plain")
            elif method == "GET" and ns:
                obj = server.get(group, version, ns, plural, name)
                if obj is None:
                    self._send(
                        404,
                        _status(404, "NotFound", f'{plural}.{group or "core"} "{name}" not found'),
                    )
                else:
                    self._send(200, obj)
            elif method == "DELETE" and ns:
                code, body = server._delete((group, version, ns, plural, name))
                self._send(code, body)
            else:
                self._send(405, _status(405, "MethodNotAllowed", f"{method} {url.path}"))

        def do_GET(self) -> None:
            self._route("GET")

        def do_POST(self) -> None:
            self._route("POST")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler
