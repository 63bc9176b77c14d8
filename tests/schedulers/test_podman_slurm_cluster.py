"""Containers for real: ``-cfg container=podman`` on the local two-node Slurm cluster.

Every rank runs inside podman (rootful, host networking) from the test image that
``scripts/container-image`` builds: Debian 12 with its own venv and torch at
/opt/venv, nothing of the host's Python. The scripts are third-party style: they read
torchrun's variables and never import distspec (see docs/containers.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.container_image import ranks_in_the_image, require_container_image
from tests.slurm_cluster import (
    cluster_is_up,
    require_slurm_cluster,
    slurm_cluster_unavailable_reason,
)

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

BIN = Path(sys.executable).parent

# Where it ran, and one gloo all_reduce across every rank: ranks 0..3 add up to 10.
INSIDE = """\
import os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
inside = os.path.exists("/run/.containerenv")
print(f"rank {rank} host {socket.gethostname()} prefix {sys.prefix} "
      f"container {inside} sum {total.item():.0f}", flush=True)
if rank == int(os.environ.get("FAIL_RANK", "-1")):
    raise ValueError(f"rank {rank} fails inside the container")
dist.destroy_process_group()
"""

SLEEPER = """\
import os, time
print(f"rank {os.environ['RANK']} sleeping", flush=True)
time.sleep(600)
"""


@pytest.fixture
def image() -> str:
    reason = slurm_cluster_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if not cluster_is_up():
        require_slurm_cluster()
    name, _ = require_container_image()
    return name


@pytest.fixture
def env(state_dir: Path) -> dict[str, str]:
    """A private state dir, podman's settings for this machine, the venv on PATH."""
    _, conf = require_container_image()
    return {
        **os.environ,
        "CONTAINERS_CONF": conf,
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
    }


def _cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300):
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _containers(image: str, handle: str) -> list[str]:
    """The containers of the test image that the job ``handle`` named (its folder is
    ``<app>-<job id>``, see slurm.script.container_name), on any node (podman's state
    is the machine's: the nodes share its filesystem), in any state: one left
    "Stopping" by a ``podman rm`` that was killed still has its processes, though plain
    ``podman ps`` omits it. Another job's containers (a developer's own) are not this
    test's to judge."""
    job_id = handle.rstrip("/").rsplit("/", 1)[-1]
    argv = ["podman", "ps", "-a", "--filter", f"ancestor={image}"]
    argv += ["--filter", f"name=^distspec-[^-]+-{job_id}-", "--format", "{{.Names}}"]
    proc = subprocess.run(
        argv,
        env={**os.environ, "CONTAINERS_CONF": require_container_image()[1]},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout.split()


def _processes_running(path: Path | str) -> list[str]:
    """The processes on this machine (every node's) whose command line names ``path``
    (or holds that text): what a container's record can outlive."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if proc.name.isdigit() and str(path) in argv:
            found.append(f"{proc.name} {argv}")
    return found


def _run_2x2(image: str, env: dict[str, str], cwd: Path, *extra: str):
    return _cli(
        ["run", "-s", "slurm", "--wait", "-cfg", "container=podman", "dist.ddp", "-j", "2x2",
         "--image", image, "--script", "inside.py", *extra],
        env, cwd,
    )  # fmt: skip


def test_ddp_2x2_runs_every_rank_inside_podman_on_both_nodes(
    image: str, env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "inside.py").write_text(INSIDE)
    proc = _run_2x2(image, env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = re.search(r"slurm://\S+", proc.stdout + proc.stderr)
    assert handle, proc.stdout + proc.stderr
    logs = _cli(["log", handle.group(0)], env, tmp_path).stdout
    # The image's own Python ran each rank, in a container, and the all_reduce crossed
    # both nodes over host networking.
    ranks_in_the_image(logs, {"n0", "n1"}, marked=True)
    assert _containers(image, handle.group(0)) == []


def test_a_failing_rank_inside_podman_is_named_with_its_traceback(
    image: str, env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "inside.py").write_text(INSIDE)
    proc = _run_2x2(image, {**env, "FAIL_RANK": "3"}, tmp_path, "--env", "FAIL_RANK=3")
    assert proc.returncode not in (0, 2), proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert re.search(r"FAILED after .*rank 3 on n1", said), said
    assert "ValueError: rank 3 fails inside the container" in said, said
    handle = re.search(r"slurm://\S+", said)
    assert handle, said
    assert _containers(image, handle.group(0)) == []


def test_cancel_leaves_no_container_running(
    image: str, env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    proc = _cli(
        ["run", "-s", "slurm", "-cfg", "container=podman", "dist.ddp", "-j", "2x1",
         "--image", image, "--script", "sleeper.py"],
        env, tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    handle = re.search(r"slurm://\S+", proc.stdout)
    assert handle, proc.stdout
    deadline = time.monotonic() + 180
    while len(_containers(image, handle.group(0))) < 2:
        assert time.monotonic() < deadline, "the job's two containers never started"
        time.sleep(1)
    cancel = _cli(["cancel", handle.group(0)], env, tmp_path)
    assert cancel.returncode == 0, cancel.stderr
    deadline = time.monotonic() + 60
    while _containers(image, handle.group(0)) or _processes_running(tmp_path):
        assert time.monotonic() < deadline, (
            f"left after cancel: {_containers(image, handle.group(0))} "
            f"{_processes_running(tmp_path)}"
        )
        time.sleep(1)


def test_a_failed_pull_is_the_jobs_cause_naming_its_node(
    image: str, env: dict[str, str], tmp_path: Path
) -> None:
    """pull=true with an image no registry serves: real podman fails its pull on the
    nodes before any rank starts, and the job's failure is that pull (its node and
    podman's own last line), not a torchrun traceback."""
    (tmp_path / "inside.py").write_text(INSIDE)
    nowhere = "localhost:9/distspec-nowhere:none"  # port 9 (discard): nothing answers
    proc = _cli(
        ["run", "-s", "slurm", "--wait", "-cfg", "container=podman,pull=true", "dist.ddp",
         "-j", "2x1", "--image", nowhere, "--script", "inside.py"],
        env, tmp_path,
    )  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 2), said
    assert re.search(rf"image {re.escape(nowhere)} could not be pulled on node n[01]: \S", said), (
        said
    )
    assert "Traceback" not in said and "torchrun" not in said, said
    handle = re.search(r"slurm://\S+", said)
    assert handle, said
    assert _containers(nowhere, handle.group(0)) == []
