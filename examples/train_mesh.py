"""Two-dimensional parallel training, small and real: data parallel x tensor parallel.

The mesh comes from the job's declared degrees: ``dist.ddp --tp 2`` puts
``DISTSPEC_DEGREES=pp=1,cp=1,tp=2`` in the environment and
``distspec.runtime.init()`` builds a DeviceMesh with dims ``pp, dp, cp, tp`` (data
parallel is what is left). Run it on 4 CPU processes::

    distspec run --wait dist.ddp -j 1x4 --tp 2 --script examples/train_mesh.py
    torchrun --nproc_per_node 4 examples/train_mesh.py          # tp=2 by default

The model is a two-layer MLP split the Megatron way over the ``tp`` dim: the first
layer's output features are split across the tp ranks (column parallel), the
second layer's input features likewise (row parallel), and one all-reduce over
the tp group adds the partial outputs. Ranks with the same ``dp`` coordinate see
the same batch; gradients are averaged over the ``dp`` group. The loss printed by
rank 0 goes down, and every tp rank holds only its share of the hidden layer.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from distspec.runtime import Dist


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden width (split over tp)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per dp rank per step")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument(
        "--tp",
        type=int,
        default=None,
        help="tensor-parallel degree (default: the job's $DISTSPEC_DEGREES, else 2)",
    )
    parser.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from distspec.runtime import init

    degrees = None  # None: init() reads the job's DISTSPEC_DEGREES (dist.ddp --tp N)
    if args.tp or not os.environ.get("DISTSPEC_DEGREES"):
        degrees = {"tp": args.tp or 2}
    with init(seed=0, degrees=degrees) as job:
        train(args, job)
    return 0


def train(args: argparse.Namespace, job: Dist, features: int = 16) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    started = time.monotonic()
    assert job.coords is not None and job.degrees is not None
    tp, tp_rank = job.degrees.tp, job.coords.tp
    tp_group = job.mesh["tp"].get_group()
    dp_group = job.mesh["dp"].get_group()
    if args.hidden % tp:
        raise SystemExit(f"--hidden {args.hidden} must be a multiple of tp={tp}")
    shard = args.hidden // tp

    class AllReduceForward(torch.autograd.Function):
        """Sum over the tp group going forward; the gradient passes through unchanged."""

        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            out = x.clone()
            dist.all_reduce(out, group=tp_group)
            return out

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad

    # Build the full layers identically everywhere (same seed), keep this rank's slices.
    torch.manual_seed(0)
    full1, full2 = nn.Linear(features, args.hidden), nn.Linear(args.hidden, 1)
    cols = slice(tp_rank * shard, (tp_rank + 1) * shard)
    w1 = nn.Parameter(full1.weight.detach()[cols].clone())  # column parallel: [shard, features]
    b1 = nn.Parameter(full1.bias.detach()[cols].clone())
    w2 = nn.Parameter(full2.weight.detach()[:, cols].clone())  # row parallel: [1, shard]
    b2 = nn.Parameter(full2.bias.detach().clone())  # replicated over tp
    params = [w1, b1, w2, b2]
    optim = torch.optim.SGD(params, lr=args.lr, momentum=0.9)

    teacher = torch.randn(features, 1, generator=torch.Generator().manual_seed(1)) / features**0.5
    data = torch.Generator().manual_seed(100 + job.coords.dp)  # one stream per dp replica
    dp_size = job.degrees.dp or 1

    if job.is_main:
        print(
            f"training: world={job.world_size} mesh pp={job.degrees.pp} dp={dp_size} "
            f"cp={job.degrees.cp} tp={tp} (hidden {args.hidden} = {tp} x {shard} per rank)",
            flush=True,
        )
    first = last = float("nan")
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, features, generator=data)
        y = torch.sin(x @ teacher)
        hidden = torch.tanh(x @ w1.t() + b1)
        out = AllReduceForward.apply(hidden @ w2.t()) + b2
        loss = nn.functional.mse_loss(out, y)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        for p in params:  # data parallel: average over the replicas
            assert p.grad is not None
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= dp_size
        optim.step()
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            mean = loss.detach().clone()
            dist.all_reduce(mean, group=dp_group)
            last = mean.item() / dp_size
            first = last if step == 1 else first
            if job.is_main:
                print(f"step {step:5d}  loss {last:.5f}", flush=True)
    job.barrier()
    if job.is_main:
        took = time.monotonic() - started
        print(f"done: loss {first:.4f} -> {last:.4f} in {took:.2f}s", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
