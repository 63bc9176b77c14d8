"""A small but real DDP training script: an MLP learns a fixed "teacher" function.

Run it under any launcher (any number of nodes and processes), on CPU with gloo or
on GPUs with nccl; ``distspec.runtime.init()`` finds out where it is::

    distspec run dist.ddp -j 1x2 --script examples/train_ddp.py
    torchrun --nproc_per_node 2 examples/train_ddp.py --steps 300
    srun -N2 --ntasks-per-node 2 python examples/train_ddp.py    # no torchrun

Every rank draws its own synthetic batches (seeded by rank), gradients are
averaged by DistributedDataParallel, the loss printed by rank 0 is the mean over
all ranks and goes down; every ``--metrics-every`` steps the same mean goes into the
job's metrics history (``distspec.runtime``'s ``Dist.log``: ``distspec metrics``
prints it). Rank 0 saves a checkpoint at the end, by default into the
job's folder (``$DISTSPEC_JOB_DIR``: the local run directory, or the Slurm/PBS job
folder on the file system the nodes share), so it outlives the job and is found
beside its logs; without one (a plain ``torchrun``) into the working directory.

Inside a distspec job it also restarts from its last checkpoint: every
``--save-every`` steps rank 0 saves the model, the optimizer and the step
(``Dist.save_checkpoint``, into ``Dist.checkpoint_dir``, the same folder across
requeues and retries), and a restarted job (a retry after a failed rank, a Slurm
requeue) loads the latest one and goes on from there, printing
``resuming from step N (attempt A, reason R)``. When Slurm's requeue signal comes
(``-cfg requeue=true``), the ranks agree to stop, rank 0 saves, and the script exits
0: distspec requeues the job, which resumes. Outside a distspec job (no
``$DISTSPEC_JOB_DIR``, no ``$DISTSPEC_CHECKPOINT_DIR``) every run starts from step 0.

It needs torch and distspec, and finishes a few hundred steps in about a second on
two CPU cores, which makes it the script the docs, tests and benchmarks run.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distspec.runtime import Dist


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps (default 300)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    parser.add_argument("--hidden", type=int, default=64, help="hidden layer width")
    parser.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    parser.add_argument(
        "--metrics-every",
        type=int,
        default=10,
        help="record the loss in the job's metrics history every N steps (distspec metrics)",
    )
    parser.add_argument("--seed", type=int, default=0, help="base random seed")
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="where rank 0 saves the final model (default: $DISTSPEC_JOB_DIR/train_ddp.pt, "
        "./train_ddp.pt outside a distspec job); 'none' saves nothing",
    )
    parser.add_argument(
        "--save-every",
        type=int,
        default=50,
        help="inside a distspec job, save a checkpoint to resume from every N steps "
        "(default 50; 0: only when pre-empted)",
    )
    parser.add_argument(
        "--keep", type=int, default=3, help="how many of those checkpoints to keep (default 3)"
    )
    parser.add_argument(
        "--step-delay",
        type=float,
        default=0.0,
        help="seconds to sleep after each step (slows the run down, to try pre-emption)",
    )
    parser.add_argument(
        "--fail-at",
        type=int,
        default=None,
        help="on the job's first attempt, rank 0 fails at this step (to try restarts)",
    )
    return parser.parse_args(argv)


def default_checkpoint() -> Path:
    """``$DISTSPEC_JOB_DIR/train_ddp.pt``, where the job's logs are (a local path; a
    URL, as Kubernetes may give, is not one torch.save can write), else the working
    directory: never rank 0's node-local temp directory, which the other nodes, the
    next attempt and the user cannot see."""
    job_dir = os.environ.get("DISTSPEC_JOB_DIR", "")
    if job_dir and "://" not in job_dir:
        return Path(job_dir) / "train_ddp.pt"
    return Path("train_ddp.pt")


def resumable() -> bool:
    """Whether this run keeps checkpoints to resume from: inside a distspec job, whose
    checkpoint folder belongs to the job (never a stale ``./checkpoints`` of an
    earlier run)."""
    return bool(os.environ.get("DISTSPEC_JOB_DIR") or os.environ.get("DISTSPEC_CHECKPOINT_DIR"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from distspec.runtime import init

    started = time.monotonic()
    # init() finds the launcher (torchrun, srun, mpiexec, ...), picks the device and
    # backend (nccl on GPUs, gloo otherwise), and makes the process group; leaving the
    # `with` destroys it, also when training raises.
    with init() as job:
        train(args, job, started)
    return 0


def train(args: argparse.Namespace, job: Dist, started: float) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    rank, world, device = job.rank, job.world_size, job.device
    use_cuda = device.type == "cuda"
    backend = job.backend
    if not use_cuda:
        # Several ranks share the host's cores; one thread each avoids oversubscription.
        torch.set_num_threads(1)

    features = 16
    # The teacher is the same on every rank (same seed); the data differs per rank.
    teacher_gen = torch.Generator().manual_seed(args.seed)
    teacher_w = torch.randn(features, 1, generator=teacher_gen) / features**0.5
    data_gen = torch.Generator().manual_seed(args.seed + 1 + rank)

    torch.manual_seed(args.seed)  # identical initial weights (DDP also broadcasts them)
    model = nn.Sequential(
        nn.Linear(features, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1)
    ).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if use_cuda else None)
    optim = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.MSELoss()

    if rank == 0:
        print(f"training: world_size={world} backend={backend} steps={args.steps}", flush=True)
    first_loss = last_loss = float("nan")
    start = 0
    resume = resumable()
    got = job.load_checkpoint(map_location="cpu") if resume else None
    if got is not None:
        state, start = got
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        first_loss, last_loss = state["first_loss"], state["last_loss"]
        # This rank's batches go on where they were: draw the ones already trained on.
        for _ in range(start):
            torch.randn(args.batch_size, features, generator=data_gen)
        if rank == 0:
            print(
                f"resuming from step {start} (attempt {job.attempt}, reason {job.restart_reason})",
                flush=True,
            )

    stopped = False
    for step in range(start + 1, args.steps + 1):
        x = torch.randn(args.batch_size, features, generator=data_gen)
        y = torch.sin(x @ teacher_w)
        x, y = x.to(device), y.to(device)
        optim.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        optim.step()
        if step == 1 or step % args.metrics_every == 0 or step == args.steps:
            # The mean over all ranks, recorded by rank 0 in the job folder's
            # metrics.jsonl: `distspec metrics HANDLE` prints the history, and
            # `run --wait` ends with its last value and a sparkline.
            job.log(step=step, reduce="mean", loss=loss.item())
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            last_loss = mean.item() / world
            if step == 1:
                first_loss = last_loss
            if rank == 0:
                print(f"step {step:5d}  loss {last_loss:.5f}", flush=True)
        if resume and args.save_every > 0 and step % args.save_every == 0:
            _save(job, step, args.keep, model, optim, first_loss, last_loss)
            if rank == 0:
                print(f"saved step {step}", flush=True)
        if args.fail_at == step and rank == 0 and job.attempt == 0:
            raise RuntimeError(f"--fail-at {step}: failing on purpose (attempt 0)")
        if resume and _stop_everywhere(job, device):
            # The requeue signal came: every rank stops at this step, rank 0 saves, and
            # the script exits 0; distspec requeues the job, which resumes from here.
            _save(job, step, args.keep, model, optim, first_loss, last_loss)
            if rank == 0:
                print(f"pre-empted at step {step}: saved, stopping", flush=True)
            stopped = True
            break
        if args.step_delay > 0:
            time.sleep(args.step_delay)

    if rank == 0 and not stopped:
        elapsed = time.monotonic() - started
        print(f"done: loss {first_loss:.4f} -> {last_loss:.4f} in {elapsed:.2f}s", flush=True)
        if args.checkpoint != "none":
            path = Path(args.checkpoint) if args.checkpoint else default_checkpoint()
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "steps": args.steps, "loss": last_loss}, path)
            print(f"checkpoint: {path}", flush=True)
    job.barrier()
    # DDP holds the process group: drop it first, so that the group is torn down when
    # the `with` ends rather than during interpreter shutdown, where gloo now and then
    # aborted a rank (torch 2.13, 2 CPU cores: 4 of ~110 runs before, 0 of 120 after).
    del ddp, optim


def _save(
    job: Dist, step: int, keep: int, model: Any, optim: Any, first: float, last: float
) -> None:
    """Rank 0 saves what a restart needs, atomically, in the job's checkpoint folder."""
    state = {"model": model.state_dict(), "optim": optim.state_dict()}
    job.save_checkpoint({**state, "first_loss": first, "last_loss": last}, step, keep=keep)


def _stop_everywhere(job: Dist, device: Any) -> bool:
    """Whether any rank has seen the pre-emption flag: one small all-reduce, so that
    every rank stops at the same step (a rank that left alone would hang the others)."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1.0 if job.preempted else 0.0], device=device)
    if job.world_size > 1:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


if __name__ == "__main__":
    raise SystemExit(main())
