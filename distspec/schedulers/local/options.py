"""``local_cwd``'s options (``-cfg``) and where its runs are kept by default."""

from __future__ import annotations

import os

from distspec.frozen import frozen
from distspec.specs.faults import FaultOptions
from distspec.specs.options import option

__all__ = ["LocalOptions", "default_state_dir"]


@frozen
class LocalOptions(FaultOptions):
    """Run options of the ``local_cwd`` backend (``-cfg k=v``)."""

    cwd: str | None = option(
        None,
        "Working directory of every replica (default: the role's image if it is set, "
        "else the directory `distspec run` is started in).",
    )
    prepend_cwd: bool = option(False, "Put the working directory first on the replicas' PATH.")
    grace_period: float = option(
        10.0,
        "Seconds between SIGTERM and SIGKILL when a job is cancelled or a failed "
        "replica's siblings are stopped.",
    )
    auto_set_cuda_visible_devices: bool = option(
        False,
        "Give each replica its own GPUs: CUDA_VISIBLE_DEVICES counts up across "
        "replicas by each role's resource.gpu.",
    )
    unbuffered: bool = option(
        True,
        "Set PYTHONUNBUFFERED=1 (unless the role sets it) so Python output reaches "
        "the logs, and `distspec log -f`, as it is written.",
    )


def default_state_dir() -> str:
    """``$DISTSPEC_STATE_DIR``, else ``$XDG_STATE_HOME/distspec``, else
    ``~/.local/state/distspec``."""
    explicit = os.environ.get("DISTSPEC_STATE_DIR")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.environ.get("HOME") or os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "distspec")
