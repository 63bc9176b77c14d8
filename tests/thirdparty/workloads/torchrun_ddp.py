"""A plain torchrun-style DDP script, as PyTorch's own tutorials write one.

It knows nothing of distspec: it reads RANK, LOCAL_RANK and WORLD_SIZE from the
environment a launcher (torchrun, or distspec launch's torchrun-compatible
environment) sets, makes a gloo process group from the env:// rendezvous, trains
a tiny linear model on synthetic data for a few DDP steps and destroys its process
group, as PyTorch's DDP tutorial does::

    torchrun --nproc_per_node 2 torchrun_ddp.py --steps 5

``--fail-rank R`` makes rank R raise ValueError after its first step.

How it ends: torch 2.13 can abort a DDP process as the interpreter shuts down
("terminate called without an active exception", SIGABRT), under any launcher. A
gloo worker thread is still releasing DDP's last all-reduce, which needs the GIL,
when finalization begins; the DDP model keeps the process group (and those
threads) alive past ``destroy_process_group``, so destroying it makes the abort
rarer but not impossible (1 in 20 two-host runs on the OpenPBS test cluster). That
is torch's race, not what the tests are about, so by default the script flushes its
output and leaves with ``os._exit(0)`` after destroying its group, skipping the
interpreter's shutdown. ``--no-destroy`` returns plainly without
``destroy_process_group`` (as many real scripts do) and lets the interpreter shut
down: ``scripts/measure_teardown`` counts how often that aborts.
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
    if args.no_destroy:
        return
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # past torch's teardown race (see the module's docstring)


if __name__ == "__main__":
    sys.exit(main())
