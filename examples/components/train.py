"""The training script that ``examples/components/trainer.py`` runs under torchrun.

A small regression model trained with DDP on a dataset kept in ``--data`` (a
directory): rank 0 writes a synthetic dataset there the first time, every rank
reads its own shard of it. The flags are the component's knobs::

    distspec run examples/components/trainer.py:trainer --data /tmp/trainer-data --epochs 2

Run it from the repository root (the component names this file by that path).
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="dataset directory (made if missing)")
    parser.add_argument("--epochs", type=int, default=1, help="passes over the data")
    parser.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--tag", action="append", default=[], help="a label for the run")
    parser.add_argument("--resume", default=None, help="a checkpoint to start from")
    parser.add_argument("--save", default=None, help="where rank 0 saves the final model")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch import nn

    from distspec.runtime import init

    with init(seed=0) as job:
        torch.set_num_threads(1)
        data = Path(args.data) / "regression.pt"
        if job.is_main and not data.exists():
            data.parent.mkdir(parents=True, exist_ok=True)
            x = torch.randn(4096, 16, generator=torch.Generator().manual_seed(1))
            torch.save({"x": x, "y": x[:, :4].sum(dim=1, keepdim=True).tanh()}, data)
        job.barrier()  # the other ranks wait until rank 0 has written it
        full = torch.load(data)
        x, y = full["x"][job.rank :: job.world_size], full["y"][job.rank :: job.world_size]

        model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
        if args.resume:
            model.load_state_dict(torch.load(args.resume))
        ddp: nn.Module = nn.parallel.DistributedDataParallel(model)
        if args.compile:
            ddp = torch.compile(ddp)  # type: ignore[assignment]
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16)
            if args.precision == "bf16"
            else contextlib.nullcontext()
        )
        if job.is_main:
            print(f"data {data}: {len(full['x'])} samples, {len(x)} per rank; tags {args.tag}")
        for epoch in range(1, args.epochs + 1):
            for i in range(0, len(x), 64):
                with autocast:
                    loss = nn.functional.mse_loss(ddp(x[i : i + 64]).float(), y[i : i + 64])
                opt.zero_grad()
                loss.backward()
                opt.step()
            dist.all_reduce(loss := loss.detach(), op=dist.ReduceOp.AVG)
            if job.is_main:
                print(f"epoch {epoch}: loss {loss.item():.4f} ({args.precision})")
        if job.is_main and args.save:
            torch.save(model.state_dict(), args.save)
            print(f"saved {args.save}")
        del ddp, opt  # DDP holds the process group: drop it before the group ends
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
