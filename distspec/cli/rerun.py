"""``distspec rerun HANDLE``: submit a run again from the same snapshot, bit for bit."""

from __future__ import annotations

import argparse

EPILOG = """\
The rerun compiles the run's recorded AppDef again (for -s SCHED if given, else its own
backend, with the -cfg values it was given plus yours), runs it from the same snapshot
(the code exactly as it was submitted, whatever the working tree holds now), in the
directory it was submitted from, and records that it is a rerun of HANDLE. Arguments
after `--` replace the script's arguments.

With --failed, HANDLE is a sweep's: its points that failed or were cancelled run
again, from the sweep's snapshot, as a new sweep.

It needs a run that took a snapshot (-cfg snapshot=on; the default on slurm and pbs)
whose snapshot has not been pruned.

examples:
  distspec rerun local_cwd://distspec/train-1a2b3c4d --wait
  distspec rerun local_cwd://distspec/train-1a2b3c4d -s slurm -cfg partition=gpu
  distspec rerun slurm://distspec/4242 -- --lr 0.01
  distspec rerun --failed slurm://distspec/sweep-train-1a2b3c4d --wait
"""


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec rerun`` to ``parser``."""
    from distspec.cli._shared import add_handle, add_scheduler
    from distspec.cli.run import add_follow_arguments

    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    add_handle(parser)
    add_scheduler(parser, "the backend to run it on (default: the run's own)")
    add_follow_arguments(parser)
    parser.add_argument(
        "--failed",
        action="store_true",
        help="HANDLE is a sweep: run again only its points that failed or were cancelled",
    )
    parser.usage = "distspec rerun [options] HANDLE [-- SCRIPT_ARGS...]"
    parser.set_defaults(after_dashes=None)


def main(args: argparse.Namespace) -> int:
    """Run ``distspec rerun`` with the parsed ``args``; returns the exit code."""
    import os

    from distspec.cli._shared import make_runner
    from distspec.cli.run import submit_or_show
    from distspec.errors import UsageError
    from distspec.runner import tell
    from distspec.snapshot.rerun import rerun_record, rerun_request, submitter
    from distspec.specs.options import parse_cfg

    if args.output and not args.dryrun:
        raise UsageError("-o/--output writes a dry run's files; add --dryrun")
    cfg: dict[str, str] = {}
    for text in args.cfg:
        cfg.update(parse_cfg(text))
    runner = make_runner()
    if args.failed:
        from distspec.cli.sweep import rerun_failed

        return rerun_failed(runner, args, cfg)
    if runner.sweep(args.handle) is not None:
        raise UsageError(f"{args.handle} is a sweep: add --failed to run its failed points again")
    record = rerun_record(runner, args.handle)
    where = record.get("cwd")
    if isinstance(where, str) and where != os.getcwd():
        if not os.path.isdir(where):
            raise UsageError(
                f"{args.handle} was submitted from {where}, which is gone; its relative paths "
                "would mean nothing here"
            )
        os.chdir(where)
        if not args.dryrun:
            tell(f"distspec: rerunning {args.handle} from {where}, where it was submitted")
    request = rerun_request(
        runner,
        args.handle,
        record,
        scheduler=args.scheduler,
        cfg=cfg,
        script_args=args.after_dashes,
    )
    return submit_or_show(runner, request, args, submitter(runner, args.handle, request))
