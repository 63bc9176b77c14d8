"""Code snapshots on Kubernetes: one archive in the job directory, unpacked in the pod.

The pods do not see the submitter's files, so a snapshot (``-cfg snapshot=on``) travels
through ``job_dir``, the fsspec URL the pods and the submitting machine both reach:

- submit uploads the tree as one deterministic archive to
  ``<job_dir>/snapshots/<tree id>.tar.gz`` (:func:`upload`) before any object is
  created; the name is the content hash, so an archive already there is not uploaded
  again (a sweep of 1,000 jobs uploads it once);
- every container starts with ``python -m distspec.runtime.unpack URL DEST -- COMMAND``
  (:func:`wrap`), which unpacks it into ``/tmp/distspec-snapshot/<tree id>`` and execs the
  job's command; the snapshot's ``PYTHONPATH`` travels as
  ``DISTSPEC_SNAPSHOT_PYTHONPATH`` and goes in front of the image's own.

:func:`wrap` is pure (compile); :func:`upload` talks to the store (submit).
"""

from __future__ import annotations

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.schedulers.kubernetes.names import NAME, k8s_role

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.snapshot.policy import Snapshot
    from distspec.specs.app import AppDef

__all__ = ["POD_ROOT", "archive_url", "job_path", "require_job_dir", "upload", "wrap"]

#: Where pods unpack snapshots: pod-local (an emptyDir would be lost on a restart of
#: the container anyway; /tmp is writable in the usual images), one folder per tree.
POD_ROOT = "/tmp/distspec-snapshot"
#: The folder of ``job_dir`` that holds the archives, shared by the jobs under it.
ARCHIVES = "snapshots"
_UNPACK = ("python", "-m", "distspec.runtime.unpack")
# What policy.rewrite sets and the unpacker reads (distspec.runtime.unpack.PYTHONPATH_ENV).
_PYTHONPATH_ENV = "DISTSPEC_SNAPSHOT_PYTHONPATH"
_SNAPSHOT_METADATA = "distspec.snapshot"  # distspec.snapshot.policy.SNAPSHOT_METADATA


def require_job_dir(job_dir: str | None) -> str:
    """``job_dir`` without a trailing slash; CompileError (exit 2) when it is unset."""
    if not job_dir:
        raise CompileError(
            NAME,
            "-cfg snapshot=on needs -cfg job_dir=URL (s3://..., gs://..., file://... on a "
            "shared volume) that the pods and this machine both reach",
        )
    return str(job_dir).rstrip("/")


def job_path(tree_id: str) -> str:
    """The folder a pod sees the snapshot ``tree_id`` in."""
    return f"{POD_ROOT}/{tree_id}"


def archive_url(job_dir: str, tree_id: str) -> str:
    """Where the snapshot ``tree_id``'s archive is kept under ``job_dir``."""
    return f"{job_dir.rstrip('/')}/{ARCHIVES}/{tree_id}.tar.gz"


def wrap(docs: list[dict[str, Any]], app: AppDef, job_dir: str | None) -> None:
    """Prefix the command of every container whose role runs from a snapshot with the
    unpack step, and move its ``PYTHONPATH`` to ``DISTSPEC_SNAPSHOT_PYTHONPATH`` (so the
    image's own stays behind it). Changes ``docs`` in place; pure otherwise."""
    trees = {
        k8s_role(r.name): r.metadata[_SNAPSHOT_METADATA]
        for r in app.roles
        if r.metadata.get(_SNAPSHOT_METADATA)
    }
    if not trees:
        return
    root = require_job_dir(job_dir)
    for container in _containers(docs):
        tree_id = trees.get(container.get("name", ""))
        if tree_id is None:
            continue
        container["command"] = [
            *_UNPACK,
            archive_url(root, tree_id),
            job_path(tree_id),
            "--",
            *container["command"],
        ]
        for var in container.get("env", ()):
            if var.get("name") == "PYTHONPATH" and "value" in var:
                var["name"] = _PYTHONPATH_ENV


def _containers(node: Any) -> list[dict[str, Any]]:
    """Every container of every pod template under ``node``."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "containers" and isinstance(value, list):
                found.extend(c for c in value if isinstance(c, dict))
            else:
                found.extend(_containers(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_containers(item))
    return found


def upload(snapshot: Snapshot, job_dir: str) -> str:
    """Put the snapshot's archive at :func:`archive_url` unless it is there already;
    returns its URL.

    Raises:
        UsageError: the URL's filesystem library is not installed (``s3fs``, ``gcsfs``).
        SchedulerError: the archive could not be made or uploaded (nothing was created).
    """
    import os

    from distspec.snapshot.store import Store

    url = archive_url(require_job_dir(job_dir), snapshot.tree_id)
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url)
    except ImportError as e:
        raise UsageError(f"{NAME}: cannot reach job_dir {job_dir}: {e}") from None
    except Exception as e:
        raise SchedulerError(f"bad job_dir {job_dir!r}: {e}", scheduler=NAME) from e
    try:
        if fs.exists(path):
            return url
        local = Store(snapshot.root).archive(snapshot.tree_id)
        if _is_local(fs):
            # A plain file system shows a file while it is written: write a temporary
            # name and rename it, so a pod never reads half an archive.
            folder = os.path.dirname(path)
            os.makedirs(folder, exist_ok=True)
            tmp = f"{path}.tmp-{os.urandom(4).hex()}"
            try:
                fs.put_file(local, tmp)
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        else:  # an object store makes an object visible whole, or not at all
            fs.put_file(local, path)
    except UsageError:
        raise
    except Exception as e:
        raise SchedulerError(
            f"cannot upload the code snapshot to {url}: {type(e).__name__}: {e}; "
            "no job was created",
            scheduler=NAME,
        ) from e
    return url


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol
    protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
    return "file" in protocols or "local" in protocols
