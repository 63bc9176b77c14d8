"""pyxis + enroot (``srun --container-image``) on the local Slurm cluster, for the
container tests (``scripts/pyxis-enroot``, docs/contributing/pyxis-enroot.md)::

    from tests.pyxis_enroot import require_pyxis

    @pytest.mark.slurm
    def test_something() -> None:
        sqsh = require_pyxis()   # enabled + the test image as squashfs, or skip
        subprocess.run(["srun", "-N2", f"--container-image={sqsh}", "/opt/venv/bin/python", ...])

The first call builds enroot and pyxis from the source archives in ``../shared/vendor``
(or ``DISTSPEC_ENROOT_SOURCE`` / ``DISTSPEC_PYXIS_SOURCE``) into ``~/.cache/distspec``
(about a minute on 2 cores), enables pyxis in Slurm's plugstack (every srun then has
``--container-*`` options; pyxis stays enabled for the rest of the session), and turns
the podman test image (tests/container_image.py) into a squashfs file cached beside the
builds under its image id (about 30 s). Without the archives, or when a build fails,
the calling test skips with the reason. Set ``DISTSPEC_PYXIS_TESTS=0`` to skip these
tests without touching the machine.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from tests.container_image import container_unavailable_reason
from tests.container_image import require_container_image as _require_image
from tests.slurm_cluster import require_slurm_cluster

__all__ = ["SCRIPT", "pyxis_unavailable_reason", "require_pyxis"]

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "pyxis-enroot"
# Cold: the build packages from apt, enroot (~1 min on 2 cores) and pyxis (seconds).
_ENABLE_TIMEOUT_S = 1200
# enroot import of the ~1.25 GB test image: ~30 s; more while other tests run.
_IMPORT_TIMEOUT_S = 600


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def pyxis_unavailable_reason() -> str | None:
    """Why pyxis cannot run here (no source archives, not root, ...), or None."""
    if os.environ.get("DISTSPEC_PYXIS_TESTS", "1") == "0":
        return "pyxis tests disabled by DISTSPEC_PYXIS_TESTS=0"
    if not SCRIPT.is_file():
        return f"{SCRIPT} is missing"
    proc = _run("check")
    if proc.returncode != 0:
        return (
            _last_line(proc.stdout + proc.stderr) or f"pyxis-enroot check exited {proc.returncode}"
        )
    return container_unavailable_reason()


@functools.cache
def _enable_and_import(image: str) -> tuple[Path | None, str]:
    """(None, reason) when pyxis or the test squashfs cannot be had, else (sqsh, "")."""
    reason = pyxis_unavailable_reason()
    if reason is not None:
        return None, reason
    proc = _run("enable", timeout=_ENABLE_TIMEOUT_S)
    if proc.returncode != 0:
        return None, "pyxis-enroot enable failed: " + _last_line(proc.stdout + proc.stderr)
    proc = _run("import", image, timeout=_IMPORT_TIMEOUT_S)
    if proc.returncode != 0:
        return None, "pyxis-enroot import failed: " + _last_line(proc.stdout + proc.stderr)
    return Path(_last_line(proc.stdout)), ""


def require_pyxis() -> Path:
    """The test image (``localhost/distspec-test:cpu``, torch in /opt/venv) as a cached
    squashfs file for ``srun --container-image``, with the Slurm cluster up and pyxis
    enabled. Skips the calling test, with the reason, where it cannot run here (no
    archives, not root); fails it where the build or the import broke."""
    reason = pyxis_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    require_slurm_cluster()
    # The script finds podman's containers.conf through scripts/container-image conf.
    image, _conf = _require_image()
    sqsh, why = _enable_and_import(image)
    if sqsh is None:
        # It can run here (the archives are there): a build or import that broke is a
        # failure, not a reason to skip.
        pytest.fail(why)
    return sqsh
