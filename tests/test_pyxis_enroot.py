"""scripts/pyxis-enroot: pyxis + enroot on the local Slurm cluster (tests/pyxis_enroot.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.container_image import ranks_in_the_image
from tests.pyxis_enroot import SCRIPT, pyxis_unavailable_reason, require_pyxis

# One task per node, each printing what it sees from inside the container (whose root
# is writable, as enroot is set up here).
_WHERE = (
    "import os, socket, sys; open('/tmp/written', 'w').close(); "
    "print(os.environ['SLURM_PROCID'], socket.gethostname(), sys.prefix, flush=True)"
)
_ALL_REDUCE = """
import os, socket, torch, torch.distributed as dist
os.environ["RANK"] = os.environ["SLURM_PROCID"]
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(dist.get_rank(), socket.gethostname(), t.item(), flush=True)
dist.destroy_process_group()
"""


def _srun(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["srun", "-N2", "--ntasks-per-node=1", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_a_missing_archive_is_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTSPEC_ENROOT_SOURCE", "/nonexistent/enroot-0.tar.gz")
    reason = pyxis_unavailable_reason()
    assert reason is not None
    assert "/nonexistent/enroot-0.tar.gz" in reason or "root" in reason


@pytest.mark.slurm
@pytest.mark.slow
def test_each_rank_runs_in_the_image_on_its_node() -> None:
    sqsh = require_pyxis()
    proc = _srun(f"--container-image={sqsh}", "/opt/venv/bin/python", "-c", _WHERE)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split("\n")[:-1]) == ["0 n0 /opt/venv", "1 n1 /opt/venv"]


@pytest.mark.slurm
@pytest.mark.slow
def test_gloo_all_reduce_across_two_containers() -> None:
    sqsh = require_pyxis()
    env = {"MASTER_ADDR": "n0", "MASTER_PORT": "29537", "WORLD_SIZE": "2"}
    proc = _srun(f"--container-image={sqsh}", "/opt/venv/bin/python", "-c", _ALL_REDUCE, env=env)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split("\n")[:-1]) == ["0 n0 3.0", "1 n1 3.0"]


@pytest.mark.slurm
def test_a_step_whose_container_fails_fails() -> None:
    """Not run on the host instead: what an 'optional' plugstack line would do."""
    require_pyxis()
    proc = _srun("--container-image=/nonexistent/image.sqsh", "/bin/true")
    assert proc.returncode != 0
    assert "/nonexistent/image.sqsh" in proc.stderr


# The same third-party style script as the podman tests: where each rank ran, and one
# gloo all_reduce across all four (1 + 2 + 3 + 4 = 10).
_INSIDE = """\
import os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
print(f"rank {rank} host {socket.gethostname()} prefix {sys.prefix} sum {total.item():.0f}", flush=True)
if rank == int(os.environ.get("FAIL_RANK", "-1")):
    raise ValueError(f"rank {rank} fails inside the container")
dist.destroy_process_group()
"""


def _distspec(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "inside.py").write_text(_INSIDE)
    bin_dir = Path(sys.executable).parent
    return subprocess.run(
        [str(bin_dir / "distspec"), *args],
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.torch
def test_distspec_ddp_2x2_in_pyxis_containers(state_dir: Path, tmp_path: Path) -> None:
    """-cfg container=pyxis: each node's torchrun and its ranks run in the image (its
    venv at /opt/venv, which the host does not have: container_path puts it on PATH,
    as enroot keeps its own default PATH), across n0 and n1."""
    sqsh = require_pyxis()
    run = _distspec(
        tmp_path, "run", "-s", "slurm", "--wait", "-cfg", "container=pyxis,container_path=/opt/venv/bin",
        "dist.ddp", "-j", "2x2", "--image", str(sqsh), "--script", "inside.py",
    )  # fmt: skip
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    handle = re.search(r"slurm://\S+", said)
    assert handle, said
    logs = _distspec(tmp_path, "log", handle.group(0)).stdout
    ranks_in_the_image(logs, {"n0", "n1"})


@pytest.mark.torch
def test_distspec_names_a_failing_rank_in_a_pyxis_container(
    state_dir: Path, tmp_path: Path
) -> None:
    sqsh = require_pyxis()
    run = _distspec(
        tmp_path, "run", "-s", "slurm", "--wait", "-cfg", "container=pyxis,container_path=/opt/venv/bin",
        "dist.ddp", "-j", "2x2", "--image", str(sqsh), "--env", "FAIL_RANK=2", "--script", "inside.py",
    )  # fmt: skip
    said = run.stdout + run.stderr
    assert run.returncode not in (0, 2), said
    assert re.search(r"FAILED after .*rank 2 on n1", said), said
    assert "ValueError: rank 2 fails inside the container" in said, said
