"""The few Kubernetes API calls the backend makes, through the official ``kubernetes``
client (``pip install 'distspec[kubernetes]'``, pinned ``>=30,<38``), imported on
first use. Responses are read as raw JSON (``_preload_content=False``), not as the
client's generated models, which changed in 37.x; the server's errors become
distspec errors in the server's own words."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping

from distspec.errors import CompileError, ConfigError, SchedulerError, UsageError
from distspec.frozen import frozen
from distspec.schedulers.kubernetes.names import NAME
from distspec.schedulers.kubernetes.options import Flavor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "GVR",
    "JOBS",
    "JOBSETS",
    "PODS",
    "VOLCANO",
    "Conn",
    "Kube",
    "StreamDropped",
    "load_client",
    "ts_key",
]

# (group, version, plural) of each object kind the backend creates.
JOBS = ("batch", "v1", "jobs")
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")
PODS = ("", "v1", "pods")
GVR = {Flavor.JOB: JOBS, Flavor.JOBSET: JOBSETS, Flavor.VOLCANO: VOLCANO}

# Attempts for idempotent reads when the server answers 5xx or drops the connection.
_READ_ATTEMPTS = 3


@frozen(kw_only=False)
class Conn:
    """Which cluster to talk to: a kubeconfig file (default: ``$KUBECONFIG`` or the client's own)
    and a context in it."""

    kubeconfig: str | None = None
    context: str | None = None


class StreamDropped(Exception):
    """The server closed a streaming response before its end."""


def load_client(conn: Conn) -> Any:
    """An API client for ``conn``; a missing kubernetes package or a bad kubeconfig is a distspec
    error."""
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
    refused = {
        401: (
            "the API server rejected our credentials (401 Unauthorized); check the "
            "kubeconfig's user or token"
        ),
        403: (
            f"forbidden (403) for {what}: {message}; ask for RBAC rights on "
            "jobs/services/pods (or the JobSet/Volcano resource) in that namespace"
        ),
        404: (
            f"not found (404) for {what}: {message}; is the namespace right and, for "
            "flavor=jobset/volcano, is the operator's CRD installed?"
        ),
    }.get(status)
    if refused is not None:
        return SchedulerError(refused, scheduler=NAME, returncode=status)
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


class Kube:
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
        """Create the custom object ``body`` of ``gvr`` in namespace ``ns`` (with ``dry_run``
        the server checks it and stores nothing); the object as created."""
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
        """Create the Service ``body`` in namespace ``ns`` (with ``dry_run`` the server checks
        it and stores nothing); the object as created."""
        result: dict[str, Any] = self._call(
            lambda: self.core.create_namespaced_service(
                ns, body, dry_run="All" if dry_run else None, _preload_content=False
            ),
            f"Service {body['metadata']['name']} ({what})",
            read=False,
        )
        return result

    def create_config_map(
        self, ns: str, body: dict[str, Any], *, dry_run: bool, what: str
    ) -> dict[str, Any]:
        """Create the ConfigMap ``body`` in namespace ``ns`` (with ``dry_run`` the server
        checks it and stores nothing); the object as created."""
        result: dict[str, Any] = self._call(
            lambda: self.core.create_namespaced_config_map(
                ns, body, dry_run="All" if dry_run else None, _preload_content=False
            ),
            f"ConfigMap {body['metadata']['name']} ({what})",
            read=False,
        )
        return result

    def config_map(self, ns: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap ``ns/name``, or None when it does not exist."""
        try:
            result: dict[str, Any] = self._call(
                lambda: self.core.read_namespaced_config_map(name, ns, _preload_content=False),
                f"ConfigMap {ns}/{name}",
                read=True,
            )
        except SchedulerError as e:
            if e.returncode == 404:
                return None
            raise
        return result

    def replace_config_map(self, ns: str, body: dict[str, Any]) -> bool:
        """Write ``body`` over its ConfigMap in ``ns``; False when the server's copy changed
        since ``body`` was read (its ``resourceVersion``: 409 Conflict), to read again."""
        name = body["metadata"]["name"]
        try:
            self._call(
                lambda: self.core.replace_namespaced_config_map(
                    name, ns, body, _preload_content=False
                ),
                f"ConfigMap {ns}/{name}",
                read=False,
            )
        except UsageError:  # _api_error's 409
            return False
        return True

    def delete_config_map(self, ns: str, name: str, *, missing_ok: bool) -> None:
        """Delete the ConfigMap ``ns/name``; with ``missing_ok`` a missing one is no error."""
        try:
            self._call(
                lambda: self.core.delete_namespaced_config_map(name, ns, _preload_content=False),
                f"ConfigMap {ns}/{name}",
                read=False,
            )
        except SchedulerError as e:
            if not (missing_ok and e.returncode == 404):
                raise

    def delete_pod(self, ns: str, name: str, *, missing_ok: bool) -> None:
        """Delete the pod ``ns/name`` (its containers get their grace period); with
        ``missing_ok`` a missing one is no error."""
        try:
            self._call(
                lambda: self.core.delete_namespaced_pod(name, ns, _preload_content=False),
                f"pod {ns}/{name}",
                read=False,
            )
        except SchedulerError as e:
            if not (missing_ok and e.returncode == 404):
                raise

    def get(
        self, gvr: tuple[str, str, str], ns: str, name: str, *, quiet: bool = False
    ) -> dict[str, Any] | None:
        """The custom object ``ns/name`` of ``gvr``, or None when it does not exist (or, with
        ``quiet``, is forbidden)."""
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
        """The objects of ``gvr`` that match label ``selector``, in ``ns`` or (None) every
        namespace; with ``quiet`` none when the resource is forbidden or not installed."""
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
        """The pods of namespace ``ns`` that match label ``selector``."""
        data = self._call(
            lambda: self.core.list_namespaced_pod(
                ns, label_selector=selector, _preload_content=False
            ),
            f"pods ({selector})",
            read=True,
        )
        return list(data.get("items") or [])

    def delete(self, gvr: tuple[str, str, str], ns: str, name: str, *, missing_ok: bool) -> None:
        """Delete the custom object ``ns/name`` of ``gvr`` and what it owns (foreground); with
        ``missing_ok`` a missing one is no error."""
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
        """Delete the Service ``ns/name`` (foreground); with ``missing_ok`` a missing one is no
        error."""
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
        """(RFC 3339 timestamp, line) pairs of a pod's log; raises StreamDropped mid-stream."""
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
            raise StreamDropped(str(e)) from None
        buffer = b""
        try:
            for chunk in resp.stream(8192, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    yield _split_timestamp(raw.decode("utf-8", errors="replace"))
        except HTTPError as e:
            raise StreamDropped(str(e)) from None
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


def ts_key(ts: str) -> str:
    """RFC 3339 with nanoseconds trimmed by the server, made comparable as text."""
    body = ts.rstrip("Z")
    head, _, frac = body.partition(".")
    return f"{head}.{frac.ljust(9, '0')}"


def _split_timestamp(line: str) -> tuple[str, str]:
    ts, sep, rest = line.partition(" ")
    if sep and ts[:4].isdigit() and "T" in ts:
        return ts, rest
    return "", line
