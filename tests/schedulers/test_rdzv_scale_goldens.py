"""Dry runs of ``dist.ddp`` on Slurm at 2, 64 and 4,096 nodes (issue #28).

The 2- and 64-node scripts carry torchrun's default rendezvous timeouts (no
``--rdzv_conf``); at 4,096 nodes the static rendezvous waits ``timeout=1608`` s
(see :func:`distspec.torchrun.scaled_rdzv_conf`). Everything else in the script
does not grow with the node count.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from distspec.components.binder import bind
from distspec.components.loader import load
from distspec.schedulers.slurm import SlurmScheduler
from tests.schedulers.batch_apps import APP_ID, JOB_DIR, STATE_DIR, bash_n


def dry_slurm(j: str) -> str:
    app = bind(load("dist.ddp"), ["--script", "train.py", "-j", j])
    sched = SlurmScheduler(state_dir=STATE_DIR)
    options = sched.parse_options({"job_dir": JOB_DIR})
    text: str = sched.compile(app, options, app_id=APP_ID).render()
    return text


@pytest.mark.parametrize(
    ("j", "conf"),
    [("2x2", None), ("64x2", None), ("4096x8", "timeout=1608")],
)
def test_slurm_ddp_golden(j: str, conf: str | None, golden: Callable[[str, str], None]) -> None:
    text = dry_slurm(j)
    golden(f"slurm/ddp_{j}.sbatch", text)
    bash_n(text)
    nodes = j.split("x", maxsplit=1)[0]
    assert f"#SBATCH --nodes={nodes}\n" in text
    torchrun = next(line for line in text.splitlines() if line.strip().startswith("torchrun "))
    assert f"--nnodes {nodes} " in torchrun
    assert "--rdzv_backend static" in torchrun
    if conf is None:
        assert "--rdzv_conf" not in text
    else:
        assert f"--rdzv_conf {conf} --max_restarts 0 " in torchrun


def test_only_the_rendezvous_window_grows() -> None:
    """A 4,096-node script is the 64-node one with other counts and the window."""
    small, large = dry_slurm("64x8"), dry_slurm("4096x8")
    assert large.replace(" --rdzv_conf timeout=1608", "").replace("4096", "64") == small
