"""The snapshot's run options, which every backend's options class inherits.

``-cfg snapshot=on``, ``snapshot_dirty=refuse`` ... work on every backend, in config
files and ``DISTSPEC_<SCHED>_SNAPSHOT`` like any run option, and ``distspec runopts``
lists them with each backend's own.
"""

from __future__ import annotations

import enum

from distspec.frozen import frozen
from distspec.specs.options import option

__all__ = ["DirtyPolicy", "SnapshotMode", "SnapshotOptions"]


class SnapshotMode(str, enum.Enum):
    """Whether ``distspec run`` copies the job's code before submitting it."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class DirtyPolicy(str, enum.Enum):
    """What a snapshot of a tree with changes git has not committed does."""

    ALLOW = "allow"
    WARN = "warn"
    REFUSE = "refuse"


@frozen
class SnapshotOptions:
    """The snapshot options (see docs/snapshots.md); a base of every backend's options."""

    snapshot: SnapshotMode = option(
        SnapshotMode.AUTO,
        "Copy the job's code at submit and run that copy: on, off, or auto (on for "
        "queued backends: slurm, pbs; off for local_cwd and kubernetes).",
    )
    snapshot_dirty: DirtyPolicy = option(
        DirtyPolicy.WARN,
        "When the snapshot's git tree has uncommitted changes: allow, warn (one line), "
        "or refuse to submit.",
    )
    snapshot_max_mb: int = option(
        500, "Largest snapshot in MB; a bigger tree is refused with its largest paths."
    )
    snapshot_exclude: tuple[str, ...] = option(
        (), "Extra paths to leave out of the snapshot: globs such as data/*;*.ckpt."
    )
