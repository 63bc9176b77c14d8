"""Containers on real PBS: ``-cfg container=podman`` on the local OpenPBS cluster.

The same test image and third-party style script as on Slurm
(tests/schedulers/test_podman_slurm_cluster.py), here started by ``pbsdsh -n`` on
each of OpenPBS's two hosts, pbs0 and pbs1: every rank runs inside podman (rootful,
host networking), a failing rank is named with its traceback, and ``distspec cancel``
(``qdel``) leaves no container in any state and no process on either host. Without
OpenPBS's source archive or podman these tests skip and say why.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.container_image import ranks_in_the_image, require_container_image
from tests.schedulers.test_openpbs_cluster import _distspec, pbs_path, workdir
from tests.schedulers.test_podman_slurm_cluster import INSIDE, SLEEPER, _processes_running

pytestmark = [pytest.mark.openpbs, pytest.mark.slow, pytest.mark.torch]

__all__ = ["pbs_path", "workdir"]  # fixtures, used by name

PODMAN = "container=podman"


@pytest.fixture
def image(pbs_path: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test image; podman's settings for this machine in the environment, which
    ``#PBS -V`` passes on to the job."""
    name, conf = require_container_image()
    monkeypatch.setenv("CONTAINERS_CONF", conf)
    return name


@pytest.fixture
def job_name() -> str:
    """A name of the test's own: its containers are ``distspec-<name>-<8 hex>-...``."""
    return f"pod{uuid.uuid4().hex[:8]}"


def _containers(image: str, job_name: str) -> list[str]:
    """The job's containers of the test image, in any state (podman's state is the
    machine's, shared by both hosts)."""
    proc = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"ancestor={image}",
         "--filter", f"name=^distspec-{job_name}-", "--format", "{{.Names}}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return proc.stdout.split()


def _run(workdir: Path, image: str, job_name: str, *extra: str, wait: bool = True):
    return _distspec(
        workdir, "run", "-s", "pbs", *(["--wait"] if wait else []), "-cfg", PODMAN,
        "dist.ddp", "--name", job_name, "--image", image, *extra,
        timeout=300,
    )  # fmt: skip


def test_ddp_2x2_runs_every_rank_inside_podman_on_both_pbs_hosts(
    image: str, job_name: str, workdir: Path
) -> None:
    (workdir / "inside.py").write_text(INSIDE)
    proc = _run(workdir, image, job_name, "-j", "2x2", "--script", "inside.py")
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    handle = re.search(r"pbs://\S+", said)
    assert handle, said
    logs = _distspec(workdir, "log", handle.group(0)).stdout
    # The image's Python ran each rank in a container; the all_reduce crossed hosts.
    ranks_in_the_image(logs, {"pbs0", "pbs1"}, marked=True)
    assert _containers(image, job_name) == []


def test_a_failing_rank_inside_podman_on_pbs_is_named_with_its_traceback(
    image: str, job_name: str, workdir: Path
) -> None:
    (workdir / "inside.py").write_text(INSIDE)
    proc = _run(
        workdir, image, job_name, "-j", "2x2", "--env", "FAIL_RANK=3", "--script", "inside.py"
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 2), said
    assert re.search(r"FAILED after .*rank 3 on pbs1", said), said
    assert "ValueError: rank 3 fails inside the container" in said, said
    assert _containers(image, job_name) == []


def test_cancel_on_pbs_leaves_no_container_and_no_process(
    image: str, job_name: str, workdir: Path
) -> None:
    (workdir / "sleeper.py").write_text(SLEEPER)
    proc = _run(workdir, image, job_name, "-j", "2x1", "--script", "sleeper.py", wait=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = re.search(r"pbs://\S+", proc.stdout)
    assert handle, proc.stdout
    deadline = time.monotonic() + 180
    while len(_containers(image, job_name)) < 2:
        assert time.monotonic() < deadline, "the job's two containers never started"
        time.sleep(1)
    cancel = _distspec(workdir, "cancel", handle.group(0))
    assert cancel.returncode == 0, cancel.stderr
    deadline = time.monotonic() + 60
    # podman's client names the folder; torchrun (in the container) the job's name in its
    # rendezvous id; pbs_path then finds no process but the daemons in either host.
    while left := [
        *_containers(image, job_name),
        *_processes_running(workdir),
        *_processes_running(job_name),
    ]:
        assert time.monotonic() < deadline, f"left after cancel: {left}"
        time.sleep(1)
