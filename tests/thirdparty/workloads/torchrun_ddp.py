"""A plain torchrun-style DDP script, as PyTorch's own tutorials write one.

It knows nothing of distspec: it reads RANK, LOCAL_RANK and WORLD_SIZE from the
environment a launcher (torchrun, or distspec launch's torchrun-compatible
environment) sets, makes a gloo process group from the env:// rendezvous, trains
a tiny linear model on synthetic data for a few DDP steps, destroys its process
group and returns, as PyTorch's DDP tutorial does::

    torchrun --nproc_per_node 2 torchrun_ddp.py --steps 5

``--fail-rank R`` makes rank R raise ValueError after its first step.
``--no-destroy`` returns without ``destroy_process_group`` (as many real scripts
do): torch then tears the group down at interpreter exit, and its gloo threads now
and then abort the process there (SIGABRT; ``scripts/measure_teardown`` counts how
often), which is torch's behaviour under any launcher, not one to test for.
Each rank prints ``step S rank R loss L`` and ``rank R done: trained S steps``.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--no-destroy", action="store_true")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    print(f"rank {rank} (local {local_rank}) of {world_size} joined", flush=True)

    torch.manual_seed(rank)
    model = DDP(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    target = torch.arange(8, dtype=torch.float32)
    for step in range(1, args.steps + 1):
        x = torch.randn(16, 8)
        loss = nn.functional.mse_loss(model(x).squeeze(1), x @ target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} rank {rank} loss {loss.item():.4f}", flush=True)
        if args.fail_rank == rank:
            raise ValueError(f"rank {rank} fails on purpose after step {step}")
    print(f"rank {rank} done: trained {args.steps} steps", flush=True)
    if not args.no_destroy:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
