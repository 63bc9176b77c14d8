"""A Lightning Trainer with strategy="ddp" on CPU, as Lightning's docs set one up.

It knows nothing of distspec: Lightning finds its ranks from the environment the
launcher made (torchrun's, or Slurm's when srun starts one process per rank), and
the Trainer is told the same layout: ``devices`` processes per node from
LOCAL_WORLD_SIZE (or SLURM_NTASKS_PER_NODE), ``num_nodes`` from NUM_NODES (or
WORLD_SIZE / LOCAL_WORLD_SIZE, or SLURM_NNODES)::

    torchrun --nproc_per_node 2 lightning_ddp.py --steps 3

A tiny linear regression on synthetic data, a few steps, no logger, no checkpoint.
``--fail-rank R`` makes rank R raise ValueError in its second training step.
Each rank prints ``rank R done: trained S steps``.
"""

from __future__ import annotations

import argparse
import os

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def _env_int(*names: str, default: int = 1) -> int:
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return default


class Regression(L.LightningModule):
    def __init__(self, fail_rank: int | None) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 1)
        self.fail_rank = fail_rank

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        if batch_idx == 1 and self.fail_rank == self.global_rank:
            raise ValueError(f"rank {self.global_rank} fails on purpose in step {batch_idx + 1}")
        loss = nn.functional.mse_loss(self.layer(x).squeeze(1), y)
        print(f"step {batch_idx + 1} rank {self.global_rank} loss {loss.item():.4f}", flush=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fail-rank", type=int, default=None)
    args = parser.parse_args()

    torch.set_num_threads(1)
    devices = _env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE")
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS")
    num_nodes = _env_int("NUM_NODES", default=max(world // devices, 1))
    x = torch.randn(64, 8)
    y = x @ torch.arange(8, dtype=torch.float32)
    trainer = L.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=devices,
        num_nodes=num_nodes,
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regression(args.fail_rank), DataLoader(TensorDataset(x, y), batch_size=4))
    print(f"rank {trainer.global_rank} done: trained {trainer.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
