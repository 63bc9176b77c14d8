"""``distspec rerun``: submit a run again, from the same snapshot, bit for bit.

The provenance record (:mod:`distspec.snapshot.provenance`) keeps the AppDef as the
component built it and the snapshot's tree; a rerun compiles that AppDef for the
backend asked for (the same one by default), rewrites it to run the same tree, and
records which run it repeats. The tree is copied into the other backend's store when
that backend keeps its snapshots elsewhere (a Slurm ``job_dir`` on another file
system). Values the record masked (a token in ``--env``) are taken from this
environment, or the rerun is refused.
"""

from __future__ import annotations

import os

from distspec.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from distspec.runner import Runner
    from distspec.schedulers.api import Request
    from distspec.specs.app import AppDef

__all__ = ["callable_payload", "rerun_record", "rerun_request", "submitter"]


def rerun_record(runner: Runner, handle: str) -> dict[str, Any]:
    """The provenance record of ``handle``, checked to be one that can be rerun.

    Raises:
        UsageError: the handle is unknown, has no record, ran without a snapshot, or its
            snapshot was pruned.
    """
    from distspec.specs.handles import AppHandle

    h = AppHandle.parse(handle)
    runner.status(h)  # AppNotFound (exit 2) for a handle the scheduler does not know
    record = runner.provenance(h)
    if record is None:
        raise UsageError(
            f"{h}: no provenance record in its job folder (submitted before distspec kept "
            "them, or the folder is gone); nothing to rerun"
        )
    snap = record.get("snapshot")
    if not isinstance(snap, dict):
        raise UsageError(
            f"{h} ran without a snapshot (snapshot=off), so the code it ran was not kept; "
            "submit it again with `distspec run` (add -cfg snapshot=on to keep the code next time)"
        )
    tree_id, store, tree = str(snap["id"]), str(snap["store"]), str(snap["path"])
    if not os.path.isdir(tree):
        raise UsageError(
            f"{h}: its snapshot {tree_id} is no longer in {store} (pruned); it cannot be "
            "rerun bit for bit"
        )
    return record


def rerun_request(
    runner: Runner,
    handle: str,
    record: Mapping[str, Any],
    *,
    scheduler: str | None = None,
    cfg: Mapping[str, Any] | None = None,
    script_args: Sequence[str] | None = None,
) -> Request:
    """The Request that runs ``handle`` (whose :func:`rerun_record` is ``record``) again.

    Call it from the directory the run was submitted from (``record["cwd"]``): the job's
    relative paths are taken from where this process runs, as for ``distspec run``.
    ``scheduler`` defaults to the run's own; ``cfg`` is added to the run options the
    original run was given with ``-cfg`` (on the same backend; on another, only
    ``cfg``); ``script_args`` replace the arguments after the script (or module).

    Raises:
        UsageError: a masked value is not in this environment; the new options are bad.
    """
    from distspec.config import MASK
    from distspec.specs.app import AppDef
    from distspec.specs.handles import AppHandle

    h = AppHandle.parse(handle)
    snap = record["snapshot"]
    app = AppDef.from_dict(record["app"])
    app = _unmasked(app, MASK, str(h))
    if script_args is not None:
        if callable_payload(runner, handle) is not None:
            raise UsageError(
                f"{h} ran a Python callable, whose arguments were pickled with it; it "
                "reruns with the same ones (leave out the words after --)"
            )
        app = _with_script_args(app, list(script_args))
    target = scheduler or h.scheduler
    options: dict[str, Any] = {}
    if target == h.scheduler:
        for key, item in (record.get("options") or {}).items():
            if isinstance(item, dict) and item.get("source") == "-cfg" and item["value"] != MASK:
                options[key] = item["value"]
    options.update(cfg or {})
    options.pop("snapshot", None)  # a rerun runs the snapshot, whatever the options say
    snapshot = _reused(runner, target, options, snap, record)
    return runner.dryrun(app, target, options, snapshot=snapshot, rerun_of=h.format())


def _reused(
    runner: Runner,
    scheduler: str,
    options: Mapping[str, Any],
    snap: Mapping[str, Any],
    record: Mapping[str, Any],
) -> Any:
    """The recorded snapshot as ``scheduler`` will run it: in its own store (copied
    there at submit when that store is another folder)."""
    from distspec.snapshot.policy import Snapshot

    sched = runner.scheduler(scheduler)
    opts = runner.options(scheduler, options)
    root = sched.snapshot_root(opts)
    tree_id = str(snap["id"])
    source = str(snap["store"])
    same = os.path.realpath(root) == os.path.realpath(source)
    tree = str(snap["path"]) if same else os.path.join(root, "trees", tree_id)
    paths = _tree_paths(str(snap["path"]))
    return Snapshot(
        tree_id=tree_id,
        root=root,
        tree=tree,
        job_path=sched.snapshot_job_path(tree, tree_id, opts),
        base=str(snap["base"]),
        workdir=str(record.get("cwd") or os.getcwd()),
        git=bool(snap.get("git")),
        files=int(snap.get("files") or 0),
        bytes=int(snap.get("bytes") or 0),
        untracked=tuple(snap.get("untracked") or ()),
        submodules=tuple((snap.get("submodules") or {}).items()),
        dirty="allow",
        paths=frozenset(paths),
        source=None if same else source,
        recorded_git=record.get("git"),
    )


def _tree_paths(tree: str) -> list[str]:
    """Every file and link in ``tree``, relative to it."""
    found = []
    for folder, dirs, files in os.walk(tree):
        rel = os.path.relpath(folder, tree)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            found.append(name if rel == "." else f"{rel}/{name}")
    return found


def _unmasked(app: AppDef, mask: str, handle: str) -> AppDef:
    """``app`` with each masked environment value taken from this environment."""
    from distspec.frozen import frozendict, replace

    roles = []
    for role in app.roles:
        env = dict(role.env)
        for name, value in env.items():
            if value == mask:
                if name not in os.environ:
                    raise UsageError(
                        f"{handle}: the value of {name} was a secret and is not recorded; set "
                        f"{name} in this environment to rerun it"
                    )
                env[name] = os.environ[name]
        roles.append(replace(role, env=frozendict(env)))
    return replace(app, roles=tuple(roles))


def _with_script_args(app: AppDef, new: list[str]) -> AppDef:
    """``app`` with the arguments after each role's script (or ``-m MODULE``) replaced."""
    from distspec.frozen import replace
    from distspec.specs.app import SCRIPT_METADATA

    roles = []
    for role in app.roles:
        args = list(role.args)
        script = role.metadata.get(SCRIPT_METADATA)
        if script and script in args:
            cut = args.index(script) + 1
        elif "-m" in args and args.index("-m") + 1 < len(args):
            cut = args.index("-m") + 2
        else:
            raise UsageError(f"role {role.name!r} has no script or module to give new arguments to")
        roles.append(replace(role, args=(*args[:cut], *new)))
    return replace(app, roles=tuple(roles))


def callable_payload(runner: Runner, handle: str) -> bytes | None:
    """The pickled function and arguments (``call.pkl``) of a run ``distspec.submit``
    started, from its job folder; None for any other run."""
    from distspec.runtime.call_protocol import CALL_FILE, join

    h = _parse(handle)
    paths = runner.scheduler(h.scheduler).job_paths(h.app_id)
    if paths is None:
        return None
    path = join(paths.folder, CALL_FILE)
    try:
        if "://" in path:
            import fsspec

            with fsspec.open(path, "rb") as f:
                data: bytes = f.read()
                return data
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except Exception as e:
        raise UsageError(f"{h}: cannot read its pickled function ({path}): {e}") from None


def submitter(runner: Runner, handle: str, request: Request) -> Any:
    """What submits the rerun ``request`` of ``handle``: ``runner.submit``, or, for a run
    of a Python callable, the callables' submit, which puts the first run's pickled
    function and arguments into the new job's folder (the workers wait for it)."""
    payload = callable_payload(runner, handle)
    if payload is None:
        return runner.submit
    from distspec.callables import CompiledCall, submit_compiled

    role = request.app.roles[0]
    nodes = role.num_replicas
    nproc = _nproc(role)

    def submit(req: Request) -> Any:
        from distspec.specs.handles import AppHandle

        call = CompiledCall(
            request=req,
            payload=payload,
            runner=runner,
            nodes=nodes,
            nproc_per_node=nproc,
            role=role.name,
        )
        return AppHandle.parse(submit_compiled(call).handle)

    return submit


def _nproc(role: Any) -> int:
    """Processes per node of a torchrun role (its ``--nproc_per_node``), else 1."""
    args = list(role.args)
    for flag in ("--nproc_per_node", "--nproc-per-node"):
        if flag in args and args.index(flag) + 1 < len(args):
            try:
                return int(args[args.index(flag) + 1])
            except ValueError:
                break
    return 1


def _parse(handle: str) -> Any:
    from distspec.specs.handles import AppHandle

    return AppHandle.parse(handle)
