"""``distspec run``: bind a component, compile for a scheduler, submit or print it."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.runner import Runner
    from distspec.specs.handles import AppHandle
    from distspec.specs.state import AppStatus

EPILOG = """\
Everything after COMPONENT goes to the component: `distspec run dist.ddp --help`
lists its parameters. Script arguments follow the component's flags, with or
without `--`.

With --wait, Ctrl-C or SIGTERM cancels the job before exiting (exit code 130).
Exit codes: 0 success; the failing replica's exit code (or 1) when the job fails;
2 for a usage mistake (nothing is submitted).

examples:
  distspec run dist.ddp -j 1x2 --script train.py --lr 0.1
  distspec run -s slurm -cfg partition=gpu,time=1:00:00 --dryrun dist.ddp -j 2x8 --script train.py
  distspec run --dryrun -o out/ -s slurm dist.ddp -j 2x8 --script train.py
"""


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "-s",
        "--scheduler",
        help="backend: local_cwd (default), slurm, pbs, kubernetes, or a plugin",
    )
    parser.add_argument(
        "-cfg",
        "--cfg",
        action="append",
        default=[],
        metavar="K=V[,K=V]",
        help="run options for the scheduler (see `distspec runopts SCHED`); repeatable",
    )
    parser.add_argument(
        "--dryrun", action="store_true", help="print what would be submitted; submit nothing"
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        help="with --dryrun: write the request's files and a submit.sh to DIR",
    )
    parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "component", metavar="COMPONENT", help="builtin name, path/file.py:fn or pkg.mod:fn"
    )
    parser.add_argument("component_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    from distspec.cli._shared import make_runner, print_json
    from distspec.components.binder import ComponentHelp, bind
    from distspec.components.loader import load
    from distspec.errors import UsageError
    from distspec.specs.options import parse_cfg

    runner = make_runner()
    scheduler = args.scheduler or runner.config.scheduler
    if args.output and not args.dryrun:
        raise UsageError("-o/--output writes a dry run's files; add --dryrun")
    cfg: dict[str, str] = {}
    for text in args.cfg:
        cfg.update(parse_cfg(text))
    component = load(args.component)
    try:
        app = bind(
            component,
            args.component_args,
            defaults=runner.config.component_defaults(component.name),
            prog=f"distspec run {args.component}",
            scheduler=scheduler,
        )
    except ComponentHelp as help_:
        print(help_.text)
        return 0
    request = runner.dryrun(app, scheduler, cfg)
    if args.dryrun:
        if args.output:
            from pathlib import Path

            paths = request.write(Path(args.output))
            for path in paths:
                print(path)
        elif args.json:
            print_json(
                {
                    "scheduler": request.scheduler,
                    "app_id": request.app_id,
                    "argv": list(request.argv),
                    "files": dict(request.files),
                    "app": app.to_dict(),
                }
            )
        else:
            sys.stdout.write(request.render())
        return 0
    if not args.wait:
        handle = runner.submit(request)
        if args.json:
            print_json({"handle": handle.format()})
        else:
            print(handle)
        return 0
    # SIGTERM must cancel the job from the moment it exists, so the handler goes in
    # before submit rather than after the handle is printed.
    with _term_as_interrupt():
        handle = runner.submit(request)
        print(handle, file=sys.stderr if args.json else sys.stdout, flush=True)
        status = follow(runner, handle)
    if args.json:
        print_json({"handle": handle.format(), "status": status.to_dict()})
    return exit_code(runner, handle, status)


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt for the duration, so both cancel the same way."""
    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def follow(runner: Runner, handle: AppHandle) -> AppStatus:
    """Wait for the job, showing progress; an interrupt (Ctrl-C, or SIGTERM under
    :func:`_term_as_interrupt`) cancels it and is re-raised."""
    display = _Display(sys.stderr)
    try:
        status = runner.wait(handle, on_status=display.update)
    except KeyboardInterrupt:
        display.finish()
        print(f"distspec: cancelling {handle}", file=sys.stderr)
        runner.cancel(handle)
        raise
    display.update(status)
    display.finish()
    return status


def exit_code(runner: Runner, handle: AppHandle, status: AppStatus) -> int:
    """0 on success; the failing replica's code (or 1) otherwise, after saying who failed."""
    from distspec.specs.state import AppState

    if status.state is AppState.SUCCEEDED:
        return 0
    failed = status.first_failure()
    if failed is None:
        print(
            f"distspec: {handle} ended {status.state.value}"
            + (f": {status.msg}" if status.msg else ""),
            file=sys.stderr,
        )
        return 1
    where = f" on {failed.hostname}" if failed.hostname else ""
    code = failed.exit_code
    print(
        f"distspec: {handle} {status.state.value}: replica {failed.role}/{failed.id}{where} "
        f"exited with {code if code is not None else 'unknown code'}"
        + (f" ({failed.reason})" if failed.reason else ""),
        file=sys.stderr,
    )
    try:
        lines = list(runner.log_lines(handle, failed.role, failed.id, tail=20))
    except Exception as e:  # logs are a courtesy here; the exit code is what matters
        print(f"distspec: (could not read its log: {e})", file=sys.stderr)
        lines = []
    if lines:
        print(f"--- last {len(lines)} lines of {failed.role}/{failed.id} ---", file=sys.stderr)
        for line in lines:
            print(line.text, file=sys.stderr)
    if code is not None and 0 < code < 256:
        return code
    return 1


class _Display:
    """A live line per role on a terminal; plain state-change lines otherwise."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = stream.isatty() and os.environ.get("TERM") != "dumb"
        self.start = time.monotonic()
        self.last: str | None = None
        self.drawn = 0

    def update(self, status: AppStatus) -> None:
        from distspec.specs.state import AppState

        elapsed = time.monotonic() - self.start
        lines = []
        for role in status.roles:
            restarts = sum(r.restarts for r in role.replicas)
            lines.append(
                f"{role.role}: {len(role.replicas)} replicas, "
                f"{role.count(AppState.RUNNING)} running, {role.count(AppState.SUCCEEDED)} succeeded, "
                f"{role.count(AppState.FAILED)} failed, {restarts} restarts"
            )
        summary = f"{status.state.value}" + (f" ({status.msg})" if status.msg else "")
        if self.tty:
            text = [f"[{elapsed:6.1f}s] {summary}", *lines]
            if self.drawn:
                self.stream.write(f"\x1b[{self.drawn}F")
            for line in text:
                self.stream.write("\x1b[2K" + line + "\n")
            self.drawn = len(text)
            self.stream.flush()
        elif summary != self.last:
            self.stream.write(f"[{elapsed:.1f}s] {summary}\n")
            self.stream.flush()
        self.last = summary

    def finish(self) -> None:
        self.stream.flush()
