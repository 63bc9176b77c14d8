"""The environment a submitted job inherits from the submitting process."""

from __future__ import annotations

from collections.abc import Mapping

from distspec.torchrun_output import RANK_PREFIX_ENV, RANK_PREFIX_TEMPLATE, WORKER_EXEC_ENV

__all__ = ["submit_env", "worker_exec"]


def worker_exec() -> str:
    """The path of ``distspec/runtime/worker-python``: a shell script that joins a
    torchrun worker's stderr to its stdout and then runs the Python torchrun would
    have run, so one rank's lines keep their order across the two streams (torchrun's
    ``--tee`` copies the two files from two threads). A path only: nothing of the
    runtime is imported."""
    import os

    import distspec

    return os.path.join(os.path.dirname(distspec.__file__), "runtime", "worker-python")


def submit_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` (the submitter's environment) with the running Python's bin directory
    appended to ``PATH``, so a job that inherits it finds the ``torchrun`` of distspec's
    virtual environment even when that environment is not activated; a ``torchrun``
    earlier on ``PATH`` still wins. ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` is set to
    :data:`RANK_PREFIX_TEMPLATE` unless ``base`` sets it, so the job's logs say which
    global rank wrote each line. :data:`WORKER_EXEC_ENV` names :func:`worker_exec`
    (unless ``base`` sets it), for the job's torchrun commands to start their workers
    with."""
    import os
    import sys

    env = dict(base)
    env.setdefault(RANK_PREFIX_ENV, RANK_PREFIX_TEMPLATE)
    env.setdefault(WORKER_EXEC_ENV, worker_exec())
    bin_dir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        env["PATH"] = f"{path}{os.pathsep}{bin_dir}" if path else bin_dir
    return env
