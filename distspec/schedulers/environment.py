"""The environment a submitted job inherits from the submitting process."""

from __future__ import annotations

from collections.abc import Mapping

from distspec.torchrun_output import RANK_PREFIX_ENV, RANK_PREFIX_TEMPLATE

__all__ = ["submit_env"]


def submit_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` (the submitter's environment) with the running Python's bin directory
    appended to ``PATH``, so a job that inherits it finds the ``torchrun`` of distspec's
    virtual environment even when that environment is not activated; a ``torchrun``
    earlier on ``PATH`` still wins. ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` is set to
    :data:`RANK_PREFIX_TEMPLATE` unless ``base`` sets it, so the job's logs say which
    global rank wrote each line."""
    import os
    import sys

    env = dict(base)
    env.setdefault(RANK_PREFIX_ENV, RANK_PREFIX_TEMPLATE)
    bin_dir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        env["PATH"] = f"{path}{os.pathsep}{bin_dir}" if path else bin_dir
    return env
