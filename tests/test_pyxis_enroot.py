"""scripts/pyxis-enroot: pyxis + enroot on the local Slurm cluster (tests/pyxis_enroot.py)."""

from __future__ import annotations

import os
import subprocess

import pytest

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
