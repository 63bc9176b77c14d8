"""A torchrun-style training script, written as PyTorch's DDP tutorial writes one.

It never imports distspec: it reads ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` from
its environment, calls ``init_process_group("gloo")`` (``env://``: ``MASTER_ADDR``
and ``MASTER_PORT``), and trains a small model with DistributedDataParallel for a
few steps. It also checks every variable torchrun gives a worker against what the
process group says, and prints one line ``ENV {json}`` per rank with their values
and its host, for the tests to compare across ranks.

Test knobs (environment): ``DDP_FAIL_RANK`` makes that rank fail after the steps:
with ``DDP_FAIL_CODE`` it prints a traceback (``traceback.print_exc``, no rank
prefix) and exits with that code; without, it raises (torch's exception hook then
prefixes the traceback with ``[rankN]: ``, and the exit code is 1). A rank that
succeeds destroys its group and leaves with ``os._exit(0)``, past torch's teardown
race (see the end of ``main``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# What torchrun's agent sets for every worker (torch 2.13, LocalElasticAgent).
TORCHRUN_VARIABLES = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)  # fmt: skip


def main() -> int:
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    env = {name: os.environ.get(name) for name in TORCHRUN_VARIABLES}
    missing = [name for name, value in env.items() if value is None]
    assert not missing, f"rank {rank}: not set: {missing}"
    assert dist.get_rank() == rank and dist.get_world_size() == world_size
    local_world = int(env["LOCAL_WORLD_SIZE"] or 0)
    group_rank = int(env["GROUP_RANK"] or 0)
    assert 0 <= local_rank < local_world <= world_size
    assert group_rank * local_world + local_rank == rank, env
    assert int(env["GROUP_WORLD_SIZE"] or 0) * local_world == world_size, env
    assert env["ROLE_RANK"] == str(rank) and env["ROLE_WORLD_SIZE"] == str(world_size), env
    assert env["ROLE_NAME"] == "default", env
    assert dist.is_torchelastic_launched()  # what Lightning and torch itself ask

    torch.manual_seed(0)
    model = DDP(nn.Linear(10, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        loss = model(torch.randn(8, 10)).pow(2).mean()
        loss.backward()
        optimizer.step()
    # DDP keeps the replicas equal: every rank holds the same weights.
    weights = model.module.weight.detach().clone()
    gathered = [torch.zeros_like(weights) for _ in range(world_size)]
    dist.all_gather(gathered, weights)
    assert all(torch.equal(weights, other) for other in gathered)

    line = json.dumps(
        {**env, "host": socket.gethostname(), "OMP": os.environ.get("OMP_NUM_THREADS")}
    )
    sys.stdout.write(f"ENV {line}\n")
    sys.stdout.flush()
    if os.environ.get("DDP_FAIL_RANK") == str(rank):
        code = os.environ.get("DDP_FAIL_CODE")
        if code is None:
            raise RuntimeError(f"rank {rank} fails on purpose")
        try:
            raise ValueError(f"rank {rank} is broken on purpose")
        except ValueError:
            traceback.print_exc()
        sys.stderr.flush()
        os._exit(int(code))
    dist.destroy_process_group()
    # torch 2.13 can abort a DDP process as the interpreter shuts down: a gloo thread
    # still releasing DDP's last all-reduce needs the GIL as finalization begins
    # (SIGABRT, "terminate called without an active exception"; docs/troubleshooting.md).
    # That race is torch's, not what these tests are about: leave past it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
