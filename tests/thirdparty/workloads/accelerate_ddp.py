"""A training loop made distributed by Hugging Face Accelerate, as its docs show.

It knows nothing of distspec: ``Accelerator(cpu=True)`` reads the ranks torchrun (or
another launcher) put in the environment and makes a gloo process group; ``prepare``
wraps the model in DDP and shards the data loader::

    torchrun --nproc_per_node 2 accelerate_ddp.py --steps 3

``--fail-rank R`` makes rank R raise ValueError after its first step.
Each rank prints ``rank R done: trained S steps``.
"""

from __future__ import annotations

import argparse

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fail-rank", type=int, default=None)
    args = parser.parse_args()

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x @ torch.arange(8, dtype=torch.float32)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    step = 0
    model.train()
    for inputs, targets in loader:
        loss = nn.functional.mse_loss(model(inputs).squeeze(1), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        print(f"step {step} rank {rank} loss {loss.item():.4f}", flush=True)
        if args.fail_rank == rank:
            raise ValueError(f"rank {rank} fails on purpose after step {step}")
        if step == args.steps:
            break
    accelerator.wait_for_everyone()
    print(
        f"rank {rank} done: trained {step} steps "
        f"(world {accelerator.num_processes}, {accelerator.distributed_type})",
        flush=True,
    )
    accelerator.end_training()


if __name__ == "__main__":
    main()
