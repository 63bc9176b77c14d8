"""The podman test image (``scripts/container-image``), for the container tests on
the local Slurm cluster::

    from tests.container_image import require_container_image

    def test_something(...) -> None:
        image, conf = require_container_image()   # built, or skip with the reason
        env["CONTAINERS_CONF"] = conf
        ...

The first call builds the image (about 80 s cold on 2 cores: debootstrap, an offline
torch install; cached in podman's storage and ~/.cache/distspec/containers). Set
``DISTSPEC_CONTAINER_TESTS=0`` to skip these tests without touching the machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = [
    "SCRIPT",
    "container_unavailable_reason",
    "require_container_image",
    "require_oci_bundle",
    "slurm_oci_conf",
]

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "container-image"
# Cold: podman and debootstrap from apt, debootstrap itself, the wheels, the build.
_BUILD_TIMEOUT_S = 1200


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def container_unavailable_reason() -> str | None:
    """Why the podman test image cannot be had here, or None when it can."""
    if os.environ.get("DISTSPEC_CONTAINER_TESTS", "1") == "0":
        return "container tests disabled by DISTSPEC_CONTAINER_TESTS=0"
    proc = _run("check")
    if proc.returncode != 0:
        return (
            _last_line(proc.stdout + proc.stderr)
            or f"container-image check exited {proc.returncode}"
        )
    return None


@functools.cache
def _build() -> tuple[str | None, str, bool]:
    """(image, containers.conf, True) once built; (None, why, can_run_here) if not."""
    reason = container_unavailable_reason()
    if reason is not None:
        return None, reason, False
    proc = _run("build", timeout=_BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        return (
            None,
            "the podman test image did not build: " + _last_line(proc.stdout + proc.stderr),
            True,
        )
    image = os.environ.get("DISTSPEC_CONTAINER_IMAGE", "localhost/distspec-test:cpu")
    return image, _run("conf").stdout.strip(), True


def require_container_image() -> tuple[str, str]:
    """The test image's name and the containers.conf podman needs here; builds the image
    once per machine. Skips the calling test, with the reason, where it cannot run here
    (not root, no podman and no apt-get); fails it where the build itself broke."""
    image, conf, can_run = _build()
    if image is None:
        if can_run:
            pytest.fail(conf)
        pytest.skip(conf)
    return image, conf


@functools.cache
def _bundle() -> tuple[Path | None, str]:
    require_container_image()
    proc = _run("bundle", timeout=_BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        return None, "the OCI bundle was not made: " + _last_line(proc.stdout + proc.stderr)
    return Path(_last_line(proc.stdout)), ""


def require_oci_bundle() -> Path:
    """An OCI bundle of the test image for Slurm's ``srun --container`` (runc), made
    once per image; the calling test fails where the image built but the bundle did not
    (skips, as :func:`require_container_image`, where neither can be had here)."""
    bundle, why = _bundle()
    if bundle is None:
        pytest.fail(why)
    return bundle


@contextlib.contextmanager
def slurm_oci_conf() -> Iterator[None]:
    """/etc/slurm/oci.conf with runc's commands while inside; removed after. Skips the
    calling test where the machine has an oci.conf of its own."""
    proc = _run("oci", "on")
    if proc.returncode != 0:
        pytest.skip(_last_line(proc.stdout + proc.stderr))
    try:
        yield
    finally:
        _run("oci", "off")


def ranks_in_the_image(logs: str, hosts: set[str], *, marked: bool = False) -> dict[str, str]:
    """Check the 2x2 container tests' script output (``rank R host H prefix P
    [container C] sum S`` per rank): ranks 0-3 all reported, from both ``hosts``, each
    run by the image's Python (``/opt/venv``, which the host lacks), the all_reduce
    over every rank summed to 10, and with ``marked`` each saw podman's
    ``/run/.containerenv``. Returns each rank's host."""
    seen = re.findall(r"rank (\d) host (\S+) prefix (\S+)(?: container (\w+))? sum (\d+)", logs)
    assert sorted(rank for rank, *_ in seen) == ["0", "1", "2", "3"], logs
    assert {host for _, host, *_ in seen} == hosts, logs
    assert {(prefix, total) for _, _, prefix, _, total in seen} == {("/opt/venv", "10")}, logs
    if marked:
        assert {inside for *_, inside, _ in seen} == {"True"}, logs
    return {rank: host for rank, host, *_ in seen}
