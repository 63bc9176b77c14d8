"""Whether a run takes a snapshot, and the job as it runs from one.

A dry run *plans* the snapshot: it lists the files (:mod:`distspec.snapshot.files`),
hashes them through the store's stat cache and names the tree
(:meth:`distspec.snapshot.store.Store.plan`), copying nothing; then it rewrites the
AppDef so the job runs the tree's code (:func:`rewrite`). Submit *takes* it
(:func:`take`): the tree is materialized before the scheduler sees the job.

How the job runs the snapshot while the user's relative paths keep their meaning:

- the working directory stays where the user submitted (data and output paths are
  found as without a snapshot);
- the role's script, and any other argument that names a file in the snapshot (a
  config file), is replaced by the snapshot's copy;
- ``PYTHONPATH`` starts with the snapshot's copies of the submitter's import folders
  that lie in the snapshot (an editable install, ``PYTHONPATH=.``), so the user's
  packages come from it too; a role without a script (``-m module``, a callable) also
  gets the snapshot's copy of the working directory first and ``PYTHONSAFEPATH=1``, so
  the live working directory does not shadow it (Python 3.11+);
- ``DISTSPEC_SNAPSHOT`` names the tree, for the job's own use.
"""

from __future__ import annotations

import os
import sys

from distspec.frozen import field, frozen, frozendict, replace
from distspec.specs.app import SCRIPT_METADATA, AppDef, Role

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.schedulers.api import Scheduler

__all__ = ["SNAPSHOT_ENV", "SNAPSHOT_METADATA", "Snapshot", "plan", "rewrite", "take", "wanted"]

#: The job's environment variable naming the snapshot folder, as the job sees it.
SNAPSHOT_ENV = "DISTSPEC_SNAPSHOT"
#: Role metadata key holding the snapshot's tree id.
SNAPSHOT_METADATA = "distspec.snapshot"


@frozen
class Snapshot:
    """A planned (or reused) snapshot: which tree, where it is kept and seen."""

    tree_id: str
    #: The content store (a folder on this machine).
    root: str
    #: The tree's folder on this machine (exists once taken).
    tree: str
    #: Where the job sees the tree (``tree`` itself where the nodes share this machine's files).
    job_path: str
    #: The folder the snapshot copies (a repository's top level, or a plain folder).
    base: str
    #: The directory ``distspec run`` ran in.
    workdir: str
    #: Whether ``base`` is a git repository.
    git: bool = False
    files: int = 0
    bytes: int = 0
    #: Files taken that git does not track (not ignored either).
    untracked: tuple[str, ...] = ()
    #: ``(path, commit)`` of each submodule (or nested repository) taken.
    submodules: tuple[tuple[str, str], ...] = ()
    #: What to do with uncommitted changes (:class:`~distspec.snapshot.options.DirtyPolicy`).
    dirty: str = "warn"
    #: The relative paths in the tree (files and links), for :func:`rewrite`.
    paths: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    #: The store's plan, for :func:`take`; None when the tree exists already (a rerun).
    plan: Any = field(default=None, compare=False, repr=False)
    #: A rerun's: the store the tree is copied from when it is not in ``root`` yet.
    source: str | None = None
    #: A rerun's: the git section of the record of the run that took the snapshot.
    recorded_git: Any = field(default=None, compare=False, repr=False)


def wanted(opts: Any, default: bool) -> bool:
    """Whether ``opts.snapshot`` asks for a snapshot; ``auto`` gives ``default``
    (the backend's :attr:`~distspec.schedulers.api.Capabilities.snapshot_default`)."""
    mode = str(getattr(opts.snapshot, "value", opts.snapshot))
    return mode == "on" or (mode == "auto" and default)


def plan(
    app: AppDef, sched: Scheduler[Any], opts: Any, *, keep_out: tuple[str, ...] = ()
) -> Snapshot | None:
    """The snapshot ``app`` would run from on ``sched`` with ``opts``, or None when
    its options say not to take one. Lists and hashes the files; copies and writes
    nothing. ``keep_out``: folders never taken (the state directory), as are the store
    and a ``job_dir`` when they lie inside the snapshotted folder.

    Raises:
        SnapshotError: the tree is over the size cap or has a file that cannot be read.
    """
    if not wanted(opts, sched.capabilities.snapshot_default):
        return None
    if opts.snapshot_max_mb < 1:
        from distspec.errors import UsageError

        raise UsageError(
            f"snapshot_max_mb={opts.snapshot_max_mb}: give the largest snapshot in MB (>= 1), "
            "or -cfg snapshot=off to take none"
        )
    from distspec.snapshot.files import collect, find_base
    from distspec.snapshot.store import Store

    workdir = os.getcwd()
    start = sched.working_dir(app.roles[0], opts)
    script = app.roles[0].metadata.get(SCRIPT_METADATA)
    if script:
        path = os.path.join(start, script)
        if os.path.exists(path):
            start = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(start):  # a directory image that is not here: nothing to take
        return None
    base, is_git = find_base(start)
    root = sched.snapshot_root(opts)
    job_dir = getattr(opts, "job_dir", None)
    inside = _inside(base, (root, *keep_out, *([job_dir] if job_dir else [])))
    listing = collect(
        base,
        exclude=(*opts.snapshot_exclude, *inside),
        max_bytes=int(opts.snapshot_max_mb) << 20,
    )
    paths = frozenset(e.path for e in listing.entries)
    for role in app.roles:
        _check_script_taken(role, sched.working_dir(role, opts), base, paths)
    store = Store(root)
    planned = store.plan(listing, save=False)
    tree = store.tree_path(planned.tree_id)
    return Snapshot(
        tree_id=planned.tree_id,
        root=store.root,
        tree=tree,
        job_path=sched.snapshot_job_path(tree, planned.tree_id, opts),
        base=base,
        workdir=workdir,
        git=is_git,
        files=planned.files,
        bytes=planned.bytes,
        untracked=tuple(planned.untracked),
        submodules=tuple(planned.submodules),
        dirty=str(getattr(opts.snapshot_dirty, "value", opts.snapshot_dirty)),
        paths=paths,
        plan=planned,
    )


def _inside(base: str, folders: tuple[str, ...]) -> tuple[str, ...]:
    """Exclude globs for each of ``folders`` (local paths) that lies inside ``base``:
    distspec's own files (the store, runs, job folders) are never part of the code."""
    globs = []
    for folder in folders:
        if "://" in folder:
            continue
        rel = os.path.relpath(os.path.realpath(folder), os.path.realpath(base))
        if rel == "." or rel.startswith(".."):
            continue
        quoted = "".join(f"[{c}]" if c in "*?[" else c for c in rel)
        globs += [quoted, f"{quoted}/*"]
    return tuple(globs)


def _check_script_taken(role: Role, workdir: str, base: str, paths: frozenset[str]) -> None:
    """Refuse a role whose script lies in the snapshot's folder but is not taken (git
    ignores it, or ``snapshot_exclude`` leaves it out): the job would run the file on
    disk, not the code submitted."""
    script = role.metadata.get(SCRIPT_METADATA)
    if not script:
        return
    path = os.path.normpath(os.path.join(workdir, script))
    rel = os.path.relpath(path, base)
    if rel.startswith("..") or rel in paths or not os.path.exists(path):
        return
    from distspec.errors import SnapshotError

    raise SnapshotError(
        f"role {role.name!r}: its script {script} is not in the snapshot of {base} (git "
        "ignores it, or snapshot_exclude leaves it out), so the job would run the file on "
        "disk; track it (git add), stop excluding it, or -cfg snapshot=off"
    )


def take(snapshot: Snapshot) -> str:
    """Materialize the planned tree (at once if it exists); returns its folder.

    Raises:
        SnapshotError: it could not be written (a full disk...); nothing is left half-written.
    """
    from distspec.snapshot.store import Store

    if snapshot.plan is not None:
        store = Store(snapshot.root)
        tree = store.materialize(snapshot.plan)
        store.remember(snapshot.plan)  # the stat cache, which the dry run did not write
        return tree
    if snapshot.source is not None and not os.path.isdir(snapshot.tree):
        return Store(snapshot.root).copy_tree_from(Store(snapshot.source), snapshot.tree_id)
    return snapshot.tree


def rewrite(app: AppDef, snapshot: Snapshot, sched: Scheduler[Any], opts: Any) -> AppDef:
    """``app`` as it runs from ``snapshot`` on ``sched`` (see the module's docstring)."""
    roles = tuple(
        _role(role, snapshot, sched.working_dir(role, opts), sched.capabilities.shared_files)
        for role in app.roles
    )
    return replace(app, roles=roles)


def _role(role: Role, snap: Snapshot, workdir: str, shared: bool) -> Role:
    script = role.metadata.get(SCRIPT_METADATA)

    def mapped(word: str) -> str:
        """The job's path of the snapshot's copy of ``word``, or ``word`` unchanged."""
        if not word or "${" in word or word.startswith("-"):
            return word
        path = os.path.normpath(os.path.join(workdir, word))
        rel = os.path.relpath(path, snap.base)
        if rel.startswith("..") or rel not in snap.paths:
            return word
        return f"{snap.job_path}/{rel}"

    args = []
    for word in role.args:
        flag, eq, value = word.partition("=")
        if eq and flag.startswith("--") and value:
            args.append(f"{flag}={mapped(value)}")
        else:
            args.append(mapped(word))
    env = dict(role.env)
    env[SNAPSHOT_ENV] = snap.job_path
    path = _pythonpath(role, snap, workdir, shared, module=not script)
    if path:
        env["PYTHONPATH"] = path
    if not script:
        env["PYTHONSAFEPATH"] = "1"
    metadata = dict(role.metadata)
    metadata[SNAPSHOT_METADATA] = snap.tree_id
    if script:  # preflight checks the copy the job runs, not the working tree's
        metadata[SCRIPT_METADATA] = mapped(script)
    return replace(
        role,
        entrypoint=mapped(role.entrypoint) if "/" in role.entrypoint else role.entrypoint,
        args=tuple(args),
        env=frozendict(env),
        metadata=frozendict(metadata),
    )


def _pythonpath(role: Role, snap: Snapshot, workdir: str, shared: bool, *, module: bool) -> str:
    """The job's ``PYTHONPATH``: the snapshot's copies of the import folders that lie in
    it, then the rest as it was (the submitter's, where the job inherits its
    environment; the role's own otherwise)."""

    def mirror(entry: str) -> str | None:
        rel = os.path.relpath(os.path.normpath(os.path.join(workdir, entry)), snap.base)
        if rel.startswith(".."):
            return None
        if rel == "." or any(p.startswith(rel + "/") for p in snap.paths):
            return snap.job_path if rel == "." else f"{snap.job_path}/{rel}"
        return None

    given = role.env.get("PYTHONPATH")
    if given is None and shared:
        given = os.environ.get("PYTHONPATH")
    entries: list[str] = []
    if module:
        entries.append(mirror(workdir) or "")
    for entry in (given or "").split(os.pathsep):
        if entry:
            entries.append(mirror(entry) or entry)
    for entry in sys.path[1:]:  # [0] is the program's own folder (distspec's, or a script's)
        if entry and os.path.isabs(entry):
            copy = mirror(entry)
            if copy:
                entries.append(copy)
    seen: set[str] = set()
    unique = [e for e in entries if e and not (e in seen or seen.add(e))]  # type: ignore[func-returns-value]
    if not unique and given is None:
        return ""
    return os.pathsep.join(unique)
