"""Entry point: picks the verb, imports only that verb's module, maps errors to exit codes.

Exit codes: 0 success; 1 a scheduler or job failure (``run --wait`` exits with the
failing replica's code); 2 a usage mistake (one line on stderr, nothing submitted);
130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from distspec._argparse import HelpFormatter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["main"]

# verb -> (module, one-line help). Only the chosen verb's module is imported.
VERBS: dict[str, tuple[str, str]] = {
    "run": ("distspec.cli.run", "compile a component and run it (or --dryrun to print it)"),
    "rerun": (
        "distspec.cli.rerun",
        "run a run again from its snapshot: the same code, bit for bit",
    ),
    "builtins": ("distspec.cli.builtins", "list the built-in components and schedulers"),
    "runopts": ("distspec.cli.runopts", "list a scheduler's run options (-cfg)"),
    "status": ("distspec.cli.status", "print an app's state"),
    "describe": ("distspec.cli.status", "print an app's state, replicas, hosts and exit codes"),
    "log": ("distspec.cli.log", "print or follow an app's logs"),
    "metrics": ("distspec.cli.metrics", "print or follow the metrics an app recorded"),
    "plot": (
        "distspec.cli.plot",
        "draw the metrics of runs or a sweep's points, in the terminal or into a picture",
    ),
    "report": (
        "distspec.cli.report",
        "write an HTML page of a run or sweep: metrics charts, timeline, provenance",
    ),
    "cancel": ("distspec.cli.cancel", "stop an app"),
    "list": ("distspec.cli.list", "list apps a scheduler knows"),
    "prune": ("distspec.cli.prune", "delete the run directories of ended local runs"),
    "configure": ("distspec.cli.configure", "write a commented config with every run option"),
    "config": ("distspec.cli.config", "print the effective configuration and where it came from"),
    "completion": ("distspec.cli.completion", "print a bash or zsh completion script"),
    "resources": ("distspec.cli.resources", "list the named host types for -h (TorchX's names)"),
    "launch": (
        "distspec.cli.launch",
        "run a command on every host of the allocation you are in (Slurm, PBS, local)",
    ),
}

#: Verbs whose words after ``--`` are passed on whole (``args.after_dashes``), not parsed.
_AFTER_DASHES = frozenset({"rerun"})

DESCRIPTION = """\
Compile a distributed PyTorch job, written once as a typed component, into a
real job on the local machine, Slurm, PBS or Kubernetes.

  distspec run dist.ddp -j 1x2 --script train.py            run locally
  distspec run -s slurm --dryrun dist.ddp -j 2x8 --script train.py
  distspec status local_cwd://distspec/train-1a2b3c4d
"""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a mistake as one line and exit code 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            from distspec._text import unrecognized

            # argparse would print every word, values included (--env HF_TOKEN=...).
            self.error(f"unrecognized arguments: {unrecognized(list(extra))[0]}")
        return ns

    def error(self, message: str) -> None:  # type: ignore[override]
        from distspec._text import escape

        # argparse quotes what it was given unescaped ("unrecognized arguments: ...").
        self.exit(2, f"{self.prog}: error: {escape(message)} (see --help)\n")


def _verb(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser, with arguments only for the verb that ``argv`` names."""
    import importlib

    parser = _Parser(
        prog="distspec",
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log what distspec does to stderr (-v: INFO, -vv: DEBUG); also after the verb",
    )
    # An explicit prog keeps argparse from building a help formatter (and importing
    # shutil) just to name the sub-commands.
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser, prog="distspec")
    chosen = _verb(argv)
    # A known verb gets only its own sub-parser: each ArgumentParser costs ~1 ms of
    # start-up, and only `distspec --help` or a mistyped verb needs the whole list.
    wanted = (
        [chosen] if chosen in VERBS and "-h" not in argv[:1] and "--help" not in argv[:1] else VERBS
    )
    for name in wanted:
        module, help_text = VERBS[name]
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            importlib.import_module(module).add_arguments(p, name)
            _refuse_empty(p)
            taken = {o for a in p._actions for o in a.option_strings}
            if not taken & {"-v", "--verbose"}:
                p.add_argument(
                    "-v",
                    "--verbose",
                    action="count",
                    default=argparse.SUPPRESS,
                    help="log what distspec does to stderr (-v: INFO, -vv: DEBUG)",
                )
    return parser


def _one_line(error: Exception, verbose: int) -> str:
    """The error's first line; the rest (a multi-line ImportError from a component,
    a scheduler's stderr) only with ``-v``, so that a mistake costs one line.

    Control characters and bidi overrides are escaped (:func:`distspec._text.escape`),
    whatever part of the message they came from: a backstop for a value that reached
    the message unquoted."""
    from distspec._text import escape

    text = str(error).strip("\n")
    first, sep, rest = text.partition("\n")
    if not sep:
        return escape(text)
    if verbose:
        return escape(text, keep="\n")
    return f"{escape(first)} (-v shows {rest.count(chr(10)) + 1} more lines)"


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("may not be empty")
    return text


def _refuse_empty(parser: argparse.ArgumentParser) -> None:
    """Make every option and positional that takes one string refuse an empty one.

    An empty value is never what a user meant: `-s ""` (an unset ``$SCHED``) would
    otherwise fall back to the default backend and run the job locally, `-o ""`
    would write into the current directory. Optional positionals (``nargs="?"``),
    where leaving the word out is the same as giving nothing, are left alone.
    """
    for action in parser._actions:
        if (
            action.type is None
            and action.nargs is None
            and isinstance(action, (argparse._StoreAction, argparse._AppendAction))
        ):
            action.type = _nonempty


def _version() -> str:
    from distspec import __version__

    return f"distspec {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    import importlib

    from distspec.errors import AppNotFound, DistspecError, UsageError

    args_list = list(sys.argv[1:] if argv is None else argv)
    after: list[str] | None = None
    if _verb(args_list) in _AFTER_DASHES and "--" in args_list:
        cut = args_list.index("--")
        args_list, after = args_list[:cut], args_list[cut + 1 :]
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    if after is not None:
        args.after_dashes = after
    if args.verb is None:
        parser.print_help()
        return 2
    module = importlib.import_module(VERBS[args.verb][0])
    if args.verbose:
        from distspec.cli import _shared

        _shared.verbosity = args.verbose
    try:
        code: int = module.main(args)
        return code
    except (UsageError, AppNotFound) as e:
        print(f"distspec {args.verb}: error: {_one_line(e, args.verbose)}", file=sys.stderr)
        return 2
    except DistspecError as e:
        print(f"distspec {args.verb}: {_one_line(e, args.verbose)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted()
    except RuntimeError as e:
        if not _wraps_interrupt(e):
            raise
        return _interrupted()
    except BrokenPipeError:  # `distspec log ... | head`
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as e:
        # A file system fault (a full disk, a path that vanished, no permission) is
        # the machine's state, not a bug: one line, exit 1. -v shows the traceback.
        if args.verbose:
            raise
        from distspec._text import escape

        where = f"{e.filename}: " if e.filename else ""
        print(f"distspec {args.verb}: {escape(f'{where}{e.strerror or e}')}", file=sys.stderr)
        return 1


def run() -> None:
    """The ``distspec`` console script: :func:`main`, then :func:`fast_exit`.

    A Ctrl-C anywhere in it ends the process with ``distspec: interrupted`` and exit
    code 130, never a traceback: while the CLI imports, through the handler that
    ``distspec/__init__.py`` installs for the console script; from here on, SIGINT
    raises ``KeyboardInterrupt`` again (the verbs clean up on it) and what reaches
    this function ends the same way.
    """
    try:
        _restore_interrupts()
        code = main()
    except KeyboardInterrupt:  # while parsing or importing the verb, outside its own handling
        code = _interrupted()
    except RuntimeError as e:
        if not _wraps_interrupt(e):
            raise
        code = _interrupted()
    try:
        fast_exit(code)
    except KeyboardInterrupt:  # while flushing the output at exit
        import distspec

        distspec._exit_interrupted()


def _restore_interrupts() -> None:
    """Python's SIGINT handler (``KeyboardInterrupt``) back in place of the start-up one."""
    import _signal  # type: ignore[import-not-found]  # built in, loaded: `signal` imports enum

    import distspec

    if _signal.getsignal(_signal.SIGINT) is distspec._interrupted_at_startup:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)


def _wraps_interrupt(e: BaseException) -> bool:
    """Whether ``e`` is a Ctrl-C that Python re-raised as another error.

    Before Python 3.12 an exception raised in a descriptor's ``__set_name__``, which
    runs while a class is created (distspec's records are built that way), comes out
    as ``RuntimeError`` raised from it.
    """
    while isinstance(e, RuntimeError) and e.__cause__ is not None:
        e = e.__cause__
    return isinstance(e, KeyboardInterrupt)


def _interrupted() -> int:
    try:
        print("distspec: interrupted", file=sys.stderr)
    except (OSError, ValueError, KeyboardInterrupt):
        pass
    return 130


def fast_exit(code: int) -> None:
    """Leave with ``code``, skipping interpreter teardown when nothing needs it.

    Teardown frees every module and object one by one: ~5 ms of CPU after a dry
    run, a tenth of the whole command. What must still happen at exit is done
    here instead: stdout and stderr are flushed and the atexit handlers run
    (``weakref.finalize`` and ``logging`` register theirs there); then the process
    ends with ``os._exit``. Only while another non-daemon thread runs (Python's
    exit waits for it) does it exit the normal way.

    Daemon threads, such as ``run --wait --log``'s log pump blocked reading a
    stream, are why teardown is worse than slow: Python 3.11 tearing down while
    one sits in a socket read aborted the process now and then (exit -6 after
    ``distspec: interrupted``).

    Output nobody reads any more (``distspec ... | head -1``) is dropped without
    the "Exception ignored ... BrokenPipeError" Python would print at exit.
    """
    import atexit
    import os

    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)  # CPython; else the normal way
    threading = sys.modules.get("threading")
    if run_exitfuncs is None or (
        threading is not None
        and any(not t.daemon for t in threading.enumerate() if t is not threading.current_thread())
    ):
        sys.exit(code)
    run_exitfuncs()
    try:
        sys.stdout.flush()  # what the atexit handlers printed
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
