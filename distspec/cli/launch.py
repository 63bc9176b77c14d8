"""``distspec launch [-j [N]xM] [--dryrun] ... -- CMD [ARGS...]``: run CMD on every host
of the allocation this shell is in (Slurm, PBS, or none: locally).

The logic lives in :mod:`distspec.runtime.launch`; this module parses arguments and
turns the plan's exit code into the process's.
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from distspec.runtime.launch import LaunchPlan

EPILOG = """\
Where it runs, and the command it builds:
  Slurm (salloc, sbatch)  srun, one task per process (--launcher torchrun: one
                          torchrun per node, rendezvous on the first node)
  PBS job, or --hostfile  mpiexec (MPICH/Hydra or Cray PALS flags); pbsdsh +
                          torchrun where no mpiexec is on PATH
  nowhere                 a warning, then torchrun --standalone on this host
A CMD ending in .py gets this Python in front. Every process gets torchrun's
variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...): under srun and
mpiexec through `python -m distspec.runtime.torchrun_env CMD`. The command is
printed (one shell-quoted line) before it runs; SIGINT/SIGTERM are passed on to
it, and its exit code is launch's (under torchrun: the failed rank's, named with
its host and traceback). Exit 2: a usage mistake (nothing started).

examples:
  salloc -N2 --ntasks-per-node=2
  distspec launch -- python train.py --lr 0.1
  distspec launch -j 1x2 --launcher torchrun --dryrun -- train.py
  distspec launch --hostfile hosts.txt -j x4 -- python train.py
"""

LAUNCHERS = ("auto", "srun", "mpiexec", "torchrun")


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec launch`` to ``parser``."""
    parser.epilog = EPILOG
    parser.add_argument(
        "-j",
        metavar="[N]xM",
        help="N hosts (at most the allocation's; all without N) x M processes each",
    )
    parser.add_argument("--nnodes", type=int, metavar="N", help="hosts to use (default: all)")
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        metavar="M",
        help="processes per host (default: the allocation's tasks per node, else its GPUs, else 1)",
    )
    parser.add_argument(
        "--hostfile", metavar="FILE", help="hosts, one per line (instead of $PBS_NODEFILE)"
    )
    parser.add_argument(
        "--launcher", choices=LAUNCHERS, default="auto", help="what starts the processes"
    )
    parser.add_argument(
        "--dryrun", action="store_true", help="print the command and exit 0; run nothing"
    )
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="REGEX",
        help="drop output lines matching REGEX; repeatable",
    )
    parser.add_argument(
        "--filter-common",
        action="store_true",
        help="also drop the launchers' common noise (listed in docs/launch.md)",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]", help="what to run"
    )


def plan_from_args(
    args: argparse.Namespace, environ: Mapping[str, str], **inject: Any
) -> LaunchPlan:
    """The plan for parsed ``args`` in ``environ``; ``inject`` passes test doubles
    (``which``, ``read_hostfile``, ``python``, ``torchrun``) to ``plan_launch``."""
    from distspec.errors import UsageError
    from distspec.runtime.launch import Launcher, plan_launch
    from distspec.specs.topology import parse_launch_j

    command = _command(args)
    nnodes, nproc = args.nnodes, args.nproc_per_node
    if args.j is not None:
        if nnodes is not None or nproc is not None:
            raise UsageError("give -j or --nnodes/--nproc-per-node, not both")
        nnodes, nproc = parse_launch_j(args.j)
    return plan_launch(
        command,
        environ,
        nnodes=nnodes,
        nproc_per_node=nproc,
        hostfile=args.hostfile,
        launcher=Launcher(args.launcher),
        **inject,
    )


def _command(args: argparse.Namespace) -> list[str]:
    from distspec.errors import UsageError

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if command and not command[0].strip():
        # torchrun would fail an assertion deep in its agent on an empty program.
        raise UsageError("the command's program name is empty (an unset variable?)")
    return command


def main(args: argparse.Namespace) -> int:
    """Run ``distspec launch`` with the parsed ``args``; returns the exit code."""
    import os
    import sys

    from distspec.runtime.launch import (
        DEFAULT_FILTERS,
        check_command,
        command_argv,
        compile_filters,
        run_plan,
    )

    filters = [*args.filter, *(DEFAULT_FILTERS if args.filter_common else ())]
    compile_filters(filters)  # a bad regex is a usage mistake, also in a dry run
    plan = plan_from_args(args, os.environ)
    # A missing program or script fails here, in one line, also in a dry run.
    check_command(command_argv(_command(args), sys.executable), os.environ)
    _log_plan(plan)
    if plan.warning:
        print(plan.warning, file=sys.stderr)
    print(plan.render(), flush=True)
    if args.dryrun:
        return 0
    return run_plan(plan, filters=filters)


def _log_plan(plan: LaunchPlan) -> None:
    """With ``-v``: what was found and chosen, on stderr."""
    from distspec.cli import _shared

    if not _shared.verbosity:
        return
    import logging

    logging.basicConfig(level=logging.INFO, format="distspec %(levelname)s %(name)s: %(message)s")
    alloc = plan.allocation
    logging.getLogger("distspec.launch").info(
        "%s%s: hosts %s (%d of %d), %d process(es) each, world size %d, via %s",
        alloc.where,
        f" job {alloc.job_id}" if alloc.job_id else "",
        ",".join(plan.hosts),
        len(plan.hosts),
        len(alloc.hosts) or 1,
        plan.nproc_per_host,
        plan.world_size,
        plan.method,
    )
