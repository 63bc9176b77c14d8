"""``distspec run``: bind a component, compile for a scheduler, submit or print it."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

    from distspec.runner import Runner
    from distspec.specs.handles import AppHandle
    from distspec.specs.state import AppStatus

EPILOG = """\
Everything after COMPONENT goes to the component: `distspec run dist.ddp --help`
lists its parameters. Script arguments follow the component's flags, with or
without `--`.

--wait follows the job to its end: the job's output is streamed on every backend,
to a terminal, a pipe or a file alike (--no-log: only its state), each line
prefixed `ROLE/REPLICA rank N|`, and the end says the duration, final state, where
the logs are and, on failure, the failing rank's traceback, exit code and host.

Ctrl-C during --wait: on local_cwd it cancels the job (as for a foreground
torchrun), also when the output goes to a pipe (`2>&1 | tee run.log`) whose reader
the same Ctrl-C ended. On slurm, pbs and kubernetes the first Ctrl-C stops
following and says how to follow or cancel the still-running job; a second one
within 3 s (or --cancel-on-interrupt) cancels it. SIGTERM cancels a local job and
detaches from the others. A reader that goes away (`| head`) counts as one Ctrl-C.

The job runs the code it was submitted with: on slurm and pbs, distspec copies the
files git tracks (and untracked ones it does not ignore) of the script's repository
into a snapshot at submit, and the job runs that copy from the directory you submitted
in (-cfg snapshot=on|off|auto; on local_cwd and kubernetes it is off unless asked).
`distspec describe HANDLE` shows what ran (commit, diff, options); `distspec rerun
HANDLE` runs the same code again.

A sweep (--sweep NAME=VALUES, --sweep-file) runs the job once per point, each
{{NAME}} in the component's arguments (script arguments, --env, string parameters)
taking the point's value; the point also finds its values in DISTSPEC_SWEEP_<NAME> and
its index in DISTSPEC_SWEEP_INDEX. On slurm the points go out as one job array
(`sbatch --array`, split at the cluster's MaxArraySize); elsewhere, or when a value
changes the job's shape (`-j {{n}}x8`), as one job per point. The handle printed
is the sweep's: status, describe and cancel take it or a point's; `distspec rerun
--failed SWEEP` runs the points that did not succeed again.

--after HANDLE[:ok|any|failed] holds the job (or every point of a sweep) until that
job or sweep of the same scheduler has ended: succeeded (ok, the default), ended in
any state, or failed. A job whose dependency can no longer be met ends CANCELLED
without running (slurm, pbs, local_cwd; kubernetes has no dependencies).

Exit codes: 0 success; the failing replica's exit code (or 1) when the job fails;
2 for a usage mistake (nothing is submitted); 130 when interrupted; 141 when the
reader of the output went away.

examples:
  distspec run dist.ddp -j 1x2 --script train.py -- --lr 0.1
  distspec run -s slurm -cfg partition=gpu,time=1:00:00 --dryrun dist.ddp -j 2x8 --script train.py
  distspec run --dryrun -o out/ -s slurm dist.ddp -j 2x8 --script train.py
  distspec run -s slurm --sweep lr=log:1e-4:1e-2:3 --sweep seed=0,1 dist.ddp -j 1x8 --script train.py -- --lr {{lr}} --seed {{seed}}
"""

#: After a first Ctrl-C detached from a batch job, a second one this soon cancels it.
SECOND_INTERRUPT_WINDOW = 3.0


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec run`` to ``parser``."""
    from distspec.cli._shared import add_scheduler

    parser.epilog = EPILOG
    add_scheduler(parser, "backend: local_cwd (default), slurm, pbs, kubernetes, or a plugin")
    add_follow_arguments(parser)
    add_after(parser)
    sweep = parser.add_argument_group(
        "sweeps", "run the job once per point; {{NAME}} in COMPONENT's arguments takes its value"
    )
    sweep.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="NAME=VALUES",
        help="a swept variable: a,b,c | range:START:STOP[:STEP] | lin:START:STOP:NUM | "
        "log:START:STOP:NUM; repeatable (every combination, or --zip)",
    )
    sweep.add_argument(
        "--sweep-file", metavar="FILE", help="points or variables from a .toml, .yaml or .json file"
    )
    sweep.add_argument(
        "--zip",
        action="store_true",
        help="pair the variables' i-th values instead of combining all",
    )
    sweep.add_argument("--max-parallel", type=int, metavar="K", help="run at most K points at once")
    sweep.add_argument(
        "--yes",
        action="store_true",
        help="submit a sweep of more points than the ceiling (1000) without asking",
    )
    parser.add_argument(
        "--spares",
        type=int,
        metavar="N",
        help="allocate N spare nodes: when a node of the job fails, it runs on from its "
        "checkpoint on the others, in the same allocation (Slurm; -cfg spares=N)",
    )
    parser.add_argument(
        "component", metavar="COMPONENT", help="builtin name, path/file.py:fn or pkg.mod:fn"
    )
    parser.add_argument("component_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def add_after(parser: argparse.ArgumentParser) -> None:
    """``--after HANDLE[:ok|any|failed]``, repeatable."""
    parser.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="HANDLE[:COND]",
        help="start only after that job (or sweep) of the same scheduler has ended: "
        ":ok succeeded (the default), :any ended, :failed failed; repeatable",
    )


def add_follow_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``run`` and ``rerun`` share: -cfg, --dryrun, -o, --wait, --log, --json."""
    parser.add_argument(
        "-cfg",
        "--cfg",
        "--scheduler_args",  # TorchX's long spelling
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
        help="with --dryrun: write the request's files to DIR, and a DIR/submit.sh that "
        "submits them from the current directory",
    )
    parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
    parser.add_argument(
        "--log",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --wait: stream the job's output (the default, on every backend); "
        "--no-log shows only its state",
    )
    parser.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="with --wait: the first Ctrl-C cancels a slurm/pbs/kubernetes job too",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    """Run ``distspec run`` with the parsed ``args``; returns the exit code."""
    from distspec.cli._shared import make_runner
    from distspec.components.binder import ComponentHelp
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
    if args.spares is not None:
        cfg["spares"] = _spares(runner, scheduler, args.spares)
    component = load(args.component)
    if args.sweep or args.sweep_file:
        from distspec.cli.sweep import run_sweep

        return run_sweep(runner, component, scheduler, cfg, args)
    if args.zip or args.max_parallel is not None:
        flag = "--zip" if args.zip else "--max-parallel"
        raise UsageError(f"{flag} is for sweeps: add --sweep NAME=VALUES (or --sweep-file)")
    try:
        app = runner.bind(
            component,
            args.component_args,
            prog=f"distspec run {args.component}",
            scheduler=scheduler,
        )
    except ComponentHelp as help_:
        print(help_.text)
        return 0
    # The dry run's own output folder is never part of the snapshot: -o writes into it
    # before the snapshot is taken.
    keep_out = [args.output] if args.output else []
    request = runner.dryrun(app, scheduler, cfg, after=args.after, keep_out=keep_out)
    return submit_or_show(runner, request, args)


def _spares(runner: Runner, scheduler: str, count: int) -> str:
    """``--spares N`` as the run option ``spares``, which only a backend that can keep
    spare nodes in a job's allocation declares; the option checks the number."""
    from distspec.errors import UsageError

    names = {spec.name for spec in runner.registry.get(scheduler).run_opts()}
    if "spares" not in names:
        raise UsageError(
            f"--spares: the {scheduler} backend cannot keep spare nodes; Slurm can "
            "(-s slurm --spares N)"
        )
    return str(count)


def submit_or_show(
    runner: Runner,
    request: Any,
    args: argparse.Namespace,
    submit: Callable[[Any], AppHandle] | None = None,
) -> int:
    """What ``run`` and ``rerun`` do with a compiled ``request``: print it (``--dryrun``,
    ``-o``, ``--json``), submit it (with ``submit``, by default ``runner.submit``), or
    submit and follow it (``--wait``)."""
    if submit is None:
        submit = runner.submit
    from distspec.cli._shared import print_json
    from distspec.errors import UsageError

    app = request.app
    scheduler = request.scheduler
    if args.dryrun:
        if args.output:
            try:
                written = request.write(args.output)
            except OSError as e:
                raise UsageError(
                    f"-o {args.output}: cannot write the dry run there: {e.strerror or e}"
                ) from None
            if request.snapshot is not None:
                # submit.sh submits a job that runs the snapshot: it must exist by then.
                from distspec.snapshot.policy import take

                tell(f"distspec: the job runs the code snapshot {take(request.snapshot)}")
                staged = runner.scheduler(request.scheduler).stage_snapshot(request)
                if staged:
                    tell(f"distspec: the code snapshot is {staged}")
            for path in written:
                print(path)
        elif args.json:
            print_json(
                {
                    "scheduler": request.scheduler,
                    "app_id": request.app_id,
                    "argv": list(request.argv),
                    "files": dict(request.files),
                    "app": (request.origin.app if request.origin else app).to_dict(),
                    "snapshot": (
                        {"id": request.snapshot.tree_id, "path": request.snapshot.job_path}
                        if request.snapshot is not None
                        else None
                    ),
                }
            )
        else:
            sys.stdout.write(request.render())
        return 0
    if not args.wait:
        handle = submit(request)
        if args.json:
            print_json({"handle": handle.format()})
        else:
            print(handle)
        return 0
    logs = args.log is not False  # --wait streams the job's output unless --no-log
    # An interactive backend's job is a foreground program's: Ctrl-C cancels it.
    cancel = runner.scheduler(scheduler).capabilities.interactive or args.cancel_on_interrupt
    out = sys.stderr if args.json else sys.stdout
    # SIGTERM must reach the job from the moment it exists, so the handler goes in
    # before submit rather than after the handle is printed.
    with _term_as_interrupt() as terminated:
        began = time.monotonic()
        handle = submit(request)
        try:
            status = follow(
                runner,
                handle,
                announce=out,
                logs=out if logs else None,
                cancel_on_interrupt=cancel,
                terminated=terminated,
            )
        except ReaderGone:
            from distspec.errors import EXIT_READER_GONE

            return EXIT_READER_GONE
    if status is None:  # detached
        return 130
    if args.json:
        print_json({"handle": handle.format(), "status": status.to_dict()})
    try:
        return exit_code(runner, handle, status, time.monotonic() - began)
    except BrokenPipeError:  # nobody reads the summary any more; the job's code still counts
        return job_exit_code(status)


class _Terminated:
    """Set when SIGTERM (not Ctrl-C) raised the KeyboardInterrupt."""

    def __init__(self) -> None:
        self.value = False


@contextlib.contextmanager
def _term_as_interrupt() -> Iterator[_Terminated]:
    """Turn SIGTERM into KeyboardInterrupt for the duration, so both stop ``--wait``."""
    import signal

    flag = _Terminated()

    def on_term(signum: int, frame: Any) -> None:
        flag.value = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGTERM, previous)


#: While streaming, how often the wait looks up from the job to see whether the reader
#: of the output went away (a silent job gives no state change to wake it).
READER_CHECK_INTERVAL = 2.0


class ReaderGone(Exception):
    """Whoever read distspec's output (``| head``, ``| tee`` killed) has closed the pipe."""


class _LogPump:
    """Streams every replica's lines to ``out`` from a thread, while the main thread waits."""

    def __init__(self, runner: Runner, handle: AppHandle, out: Any) -> None:
        import threading

        self.out = out
        self.stopped = False
        self.broken = False
        self.error: BaseException | None = None
        self.lines = runner.log_lines(handle, follow=True)
        self.thread = threading.Thread(target=self._run, name="distspec-logs", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        out = self.out
        try:
            for line in self.lines:
                if self.stopped:
                    return
                out.write(line.format() + "\n")
                out.flush()
        except (BrokenPipeError, ValueError):  # the reader went away (ValueError: closed)
            self.broken = self.stopped = True
        except Exception as e:  # the logs are a view; the job's end still counts
            self.error = e

    def finish(self, timeout: float = 60.0) -> None:
        """Let the streams drain (they end once the replicas have), then stop."""
        self.thread.join(timeout)
        self.stopped = True
        if self.error is not None:
            tell(f"distspec: (stopped streaming logs: {self.error})")


def tell(text: str) -> None:
    """One line on stderr that never fails (see :func:`distspec.runner.tell`)."""
    from distspec.runner import tell as say

    say(text)


def follow(
    runner: Runner,
    handle: AppHandle,
    *,
    announce: Any = None,
    logs: Any = None,
    cancel_on_interrupt: bool = True,
    terminated: _Terminated | None = None,
) -> AppStatus | None:
    """Print the handle to ``announce`` (a text stream) if given, then wait for the job,
    streaming its lines to ``logs`` if given and showing its state on stderr. Returns
    the final status, or None when an interrupt detached from a job that goes on.

    An interrupt (Ctrl-C, or SIGTERM under :func:`_term_as_interrupt`) with
    ``cancel_on_interrupt`` cancels the job and is re-raised; without it, it says how
    to follow or cancel the job, and a second Ctrl-C within
    :data:`SECOND_INTERRUPT_WINDOW` seconds cancels it (and is re-raised). The cancel
    comes first and what is said after, never failing: the reader of a pipe may have
    died of the same Ctrl-C (``2>&1 | tee run.log``).

    A reader that went away (a write to ``announce``, ``logs`` or stderr found the pipe
    closed) counts as one Ctrl-C, without the second chance; then :class:`ReaderGone`
    is raised.
    """
    display = _Display(sys.stderr, live=logs is None)
    pump: _LogPump | None = None
    try:
        if announce is not None:
            _write(announce, f"{handle}\n")
        if logs is not None:
            pump = _LogPump(runner, handle, logs)
        status = _wait(runner, handle, display, pump)
    except (KeyboardInterrupt, ReaderGone) as e:
        gone = isinstance(e, ReaderGone)
        if pump is not None:
            pump.stopped = True
        ended = _ended(runner, handle) if gone else None
        if ended is not None:  # the job ended before the reader was missed: its code counts
            return ended
        if cancel_on_interrupt:
            _cancel(runner, handle)
            if gone:
                raise ReaderGone from None
            raise
        _detach(runner, handle, second_chance=not gone and not (terminated and terminated.value))
        if gone:
            raise ReaderGone from None
        return None
    if pump is not None:
        pump.finish()
    try:
        display.update(status)
        display.finish()
    except ReaderGone:  # the job has ended; its exit code still counts
        pass
    return status


def _ended(runner: Runner, handle: AppHandle) -> AppStatus | None:
    """The job's status if it has ended, else None (also when it cannot be read)."""
    try:
        status = runner.status(handle)
    except Exception:
        return None
    return status if status.is_terminal else None


def _wait(runner: Runner, handle: AppHandle, display: _Display, pump: _LogPump | None) -> AppStatus:
    """``runner.wait``; while streaming, raises ReaderGone within
    :data:`READER_CHECK_INTERVAL` of the pump finding the pipe closed."""
    if pump is None:
        return runner.wait(handle, on_status=display.update)
    while True:
        try:
            return runner.wait(handle, timeout=READER_CHECK_INTERVAL, on_status=display.update)
        except TimeoutError:
            if pump.broken:
                raise ReaderGone from None


def _write(stream: Any, text: str) -> None:
    """Write and flush ``text``; a closed pipe (or stream) raises ReaderGone."""
    try:
        stream.write(text)
        stream.flush()
    except (BrokenPipeError, ValueError):
        raise ReaderGone from None


def _cancel(runner: Runner, handle: AppHandle) -> None:
    """Cancel after an interrupt (:func:`distspec.runner.cancel_interrupted`). An
    interrupt that lands before its signals are held off (a second Ctrl-C at once)
    does not skip the cancel: it is tried again (cancelling twice is a no-op)."""
    from distspec.runner import cancel_interrupted

    while True:
        try:
            cancel_interrupted(lambda: runner.cancel(handle), handle)
            return
        except KeyboardInterrupt:
            continue


def _detach(runner: Runner, handle: AppHandle, *, second_chance: bool) -> None:
    tell(
        f"distspec: stopped following {handle}; the job goes on.\n"
        f"  follow it:  distspec log -f {handle}\n"
        f"  its state:  distspec status {handle}\n"
        f"  cancel it:  distspec cancel {handle}"
    )
    if not second_chance:
        return
    try:  # before the prompt: a Ctrl-C right after it must find the handler in place
        tell(f"distspec: press Ctrl-C again within {SECOND_INTERRUPT_WINDOW:g} s to cancel it now")
        time.sleep(SECOND_INTERRUPT_WINDOW)
    except KeyboardInterrupt:
        _cancel(runner, handle)
        raise


def _where(status: AppStatus) -> list[str]:
    lines = []
    if status.location:
        lines.append(f"  run directory: {status.location}")
    logs = [r.log for role in status.roles for r in role.replicas if r.log]
    if logs:
        folder = os.path.dirname(logs[0])
        # A Kubernetes replica's log is a pod ("pod/NAME (namespace NS)"), not a file.
        same = all(os.path.dirname(p) == folder for p in logs) and not logs[0].startswith("pod/")
        lines.append(f"  logs:          {folder}/" if same else f"  logs:          {logs[0]} ...")
    return lines


def metrics_summary(runner: Runner, handle: AppHandle, stream: Any) -> list[str]:
    """The end of ``run --wait`` for a job that recorded metrics
    (:func:`distspec.runtime.log`): the main metric's last value and step, a
    sparkline of its history where ``stream`` can show one, and the command that
    prints it all. Nothing for a job without metrics; never an error."""
    from distspec.metrics import (
        main_metric,
        metric_names,
        read_history,
        sparkline,
        value_text,
        wide_range,
    )

    try:
        folder = runner.job_folder(handle)
        if folder is None:
            return []
        records = read_history(folder)
    except Exception:  # a summary line is not worth failing the command over
        return []
    name = main_metric(metric_names(records))
    if name is None:
        return []
    history = [(r.step, r.metrics[name]) for r in records if name in r.metrics]
    step, last = history[-1]
    text = f"  {name + ':':<14} {value_text(last)}" + (
        f" at step {step}" if step is not None else ""
    )
    values = [v for _, v in history]
    log = wide_range(values)
    line = sparkline(values, log=log) + (" (log scale)" if log else "")
    try:
        line.encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        line = ""
    if len(history) > 1 and line:
        text += f"  {line}"
    return [
        text,
        f"  its metrics:   distspec metrics {handle}",
        f"  its curves:    distspec plot {handle}",
    ]


def job_exit_code(status: AppStatus) -> int:
    """What ``run --wait`` exits with for a job that ended with ``status``: 0 on
    success, the first failed replica's exit code when it is 1-255, else 1."""
    from distspec.specs.state import AppState

    if status.state is AppState.SUCCEEDED:
        return 0
    failed = status.first_failure()
    code = failed.exit_code if failed is not None else None
    return code if code is not None and 0 < code < 256 else 1


def exit_code(
    runner: Runner, handle: AppHandle, status: AppStatus, elapsed: float | None = None
) -> int:
    """0 on success; the failing replica's code (or 1) otherwise. Either way, says on
    stderr how long it took, how it ended, where its files are and what to run next;
    on failure also who failed (rank, host, exit code or signal) and its traceback."""
    from distspec.cli.status import duration_text
    from distspec.specs.state import AppState
    from distspec.torchrun_output import aborted_at_exit, signal_name

    err = sys.stderr
    # Where the scheduler gives no times (Slurm, PBS), the time this command followed it.
    took = duration_text(status.duration if status.duration is not None else elapsed)
    if status.state is AppState.SUCCEEDED:
        print(f"distspec: {handle} SUCCEEDED in {took}", file=err)
        for line in _where(status):
            print(line, file=err)
        print(f"  its logs:      distspec log {handle}", file=err)
        for line in metrics_summary(runner, handle, err):
            print(line, file=err)
        return 0
    failed = status.first_failure()
    if failed is None:
        print(
            f"distspec: {handle} {status.state.value} after {took}"
            + (f": {status.msg}" if status.msg else ""),
            file=err,
        )
        _print_script_output(status, err)
        for line in _where(status):
            print(line, file=err)
        print(f"  its logs:      distspec log {handle}", file=err)
        return 1
    hung = _hang_report(runner, handle, status, took, err)
    if hung is not None:
        return hung
    rank, excerpt, error = _failing_rank(runner, handle, failed.role, failed.id)
    code = failed.exit_code
    if code is None:
        how = "ended with an unknown exit code"
    elif code > 128 and code - 128 < 65:
        how = f"was killed by {signal_name(code - 128)} (exit code {code})"
    else:
        how = f"exited with {code}"
    who = f"{failed.role}/{failed.id}" + (f" rank {rank}" if rank is not None else "")
    where = f" on {failed.hostname}" if failed.hostname else ""
    print(f"distspec: {handle} {status.state.value} after {took}: {who}{where} {how}", file=err)
    if failed.reason:
        print(f"  reason: {failed.reason}", file=err)
    if excerpt:
        what = f"rank {rank}" if rank is not None else f"{failed.role}/{failed.id}"
        count = f"last {len(excerpt)} lines" if len(excerpt) != 1 else "last line"
        print(f"--- {what}: {count} ---", file=err)
        for text in excerpt:
            print(text, file=err)
        print("---", file=err)
        _snapshot_note(runner, handle, excerpt, err)
        if aborted_at_exit(excerpt):
            print(
                f"  note: {what} aborted as its process exited, after its script had returned "
                "(the script ran to its end: the training completed): torch's threads were "
                "still running as Python shut down. destroy_process_group() at the end makes "
                "this rarer; os._exit(0) after it avoids it (docs: troubleshooting)",
                file=err,
            )
    elif error:
        print(f"  (could not read its log: {error})", file=err)
    if not excerpt:  # nothing from the replica: the batch script may have failed first
        _print_script_output(status, err)
    for line in _where(status):
        print(line, file=err)
    more = f"--rank {rank}" if rank is not None else f"{failed.role}/{failed.id}"
    print(f"  its log:       distspec log {handle} {more}", file=err)
    for line in metrics_summary(runner, handle, err):
        print(line, file=err)
    return job_exit_code(status)


def _hang_report(
    runner: Runner, handle: AppHandle, status: AppStatus, took: str, err: TextIO
) -> int | None:
    """For a job the hang watchdog ended (``-cfg watchdog``): say so, where each rank
    was and where the stacks are, and return :data:`~distspec.hangs.HUNG_EXIT`; None
    for any other failure."""
    from distspec.hangs import HANG_DIR, HUNG_EXIT, read_hang, summary_lines

    failed = status.first_failure()
    if failed is None or failed.exit_code != HUNG_EXIT:
        return None
    try:
        folder = runner.job_folder(handle)
        hang = read_hang(folder) if folder is not None else None
    except Exception:  # the failure report below stands without it
        return None
    if hang is None or folder is None:
        return None
    print(f"distspec: {handle} HUNG after {took}: {hang.headline()}", file=err)
    for line in summary_lines(hang):
        print(f"  {line}", file=err)
    print(f"  stacks:        {os.path.join(folder, HANG_DIR, 'stacks')}/", file=err)
    for line in _where(status):
        print(line, file=err)
    print(f"  its logs:      distspec log {handle}", file=err)
    for line in metrics_summary(runner, handle, err):
        print(line, file=err)
    return HUNG_EXIT


def _snapshot_note(runner: Runner, handle: AppHandle, excerpt: list[str], err: TextIO) -> None:
    """Say which folder a traceback's snapshot paths copy, when the excerpt names them."""
    try:
        record = runner.provenance(handle)
    except Exception:  # a courtesy: the failure report stands without it
        return
    snap = (record or {}).get("snapshot")
    if not isinstance(snap, dict) or not snap.get("job_path"):
        return
    if any(str(snap["job_path"]) in line for line in excerpt):
        print(
            f"  (the job ran the code snapshot {snap['job_path']}/: {snap.get('base')}/ "
            "as it was submitted)",
            file=err,
        )


def _print_script_output(status: AppStatus, err: TextIO, lines: int = 10) -> None:
    """The last lines of a Slurm or PBS job's own output (``<run directory>.out``: what
    the batch script printed before or around its replicas), if it printed anything."""
    if not status.location:
        return
    try:
        with open(status.location + ".out", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    if not tail:
        return
    count = f"last {len(tail)} lines" if len(tail) != 1 else "last line"
    print(f"--- the job script's output ({status.location}.out): {count} ---", file=err)
    for line in tail:
        print(line, file=err)
    print("---", file=err)


def _failing_rank(
    runner: Runner, handle: AppHandle, role: str, replica: int
) -> tuple[int | None, list[str], str]:
    """(rank, its traceback or last lines, error) from the failed replica's log."""
    from distspec.torchrun_output import failure_excerpt

    try:
        lines = [(ln.rank, ln.text) for ln in runner.log_lines(handle, role, replica)]
    except Exception as e:  # the log is a courtesy here; the exit code is what matters
        return None, [], str(e)
    rank, excerpt = failure_excerpt(lines)
    return rank, excerpt, ""


class _Display:
    """Progress on ``stream``: a live line per role on a terminal (``live``, when no
    log lines are streamed), else a line per change of state. A closed pipe raises
    :class:`ReaderGone`."""

    def __init__(self, stream: Any, *, live: bool = True) -> None:
        self.stream = stream
        self.tty = live and stream.isatty() and os.environ.get("TERM") != "dumb"
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
            up = f"\x1b[{self.drawn}F" if self.drawn else ""
            _write(self.stream, up + "".join("\x1b[2K" + line + "\n" for line in text))
            self.drawn = len(text)
        elif summary != self.last:
            _write(self.stream, f"[{elapsed:.1f}s] {summary}\n")
        self.last = summary

    def finish(self) -> None:
        _write(self.stream, "")
