"""The TorchX spellings in a real job: real torchrun (gloo, CPU) on local_cwd.

``--debug True``, ``--rdzv_conf`` and ``--name EXP/RUN`` reach the processes as
they say: torchrun logs the rendezvous settings it parsed, every rank sees the
debug environment and only the script's own arguments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """\
import os, sys
import torch.distributed as dist
dist.init_process_group("gloo")
print("rank", dist.get_rank(), "of", dist.get_world_size(),
      "debug", os.environ.get("TORCH_DISTRIBUTED_DEBUG"), "args", sys.argv[1:], flush=True)
dist.destroy_process_group()
"""


def distspec(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.torch
@pytest.mark.usefixtures("state_dir")
def test_torchx_spellings_reach_a_real_torchrun(tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text(SCRIPT)
    run = distspec(
        "run", "--wait", "--json", "dist.ddp", "-j", "1x2", "--debug", "True",
        "--rdzv_conf", "join_timeout=60,timeout=60", "--name", "exp/hello",
        "--script", "hello.py", "--", "--lr", "0.1",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    handle = json.loads(run.stdout)["handle"]
    assert "/hello-" in handle  # the job is named RUN
    logs = distspec("log", handle, cwd=tmp_path)
    assert logs.returncode == 0, logs.stderr
    text = logs.stdout
    # torchrun parsed --rdzv_conf into its rendezvous settings
    assert "rdzv_configs" in text and "'join_timeout': '60', 'timeout': '60'" in text
    for rank in (0, 1):
        assert f"rank {rank} of 2 debug DETAIL args ['--lr', '0.1']" in text
