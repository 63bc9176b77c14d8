"""``distspec configure -s SCHED``: write a commented config section listing every option.

``--from-torchx`` writes the sections a TorchX ``.torchxconfig`` amounts to instead
(:func:`distspec.config_torchx.convert`).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec configure`` to ``parser``."""
    from distspec.cli._shared import add_scheduler

    add_scheduler(parser, "the scheduler to configure")
    parser.add_argument(
        "--show",
        action="store_true",
        help="print the effective configuration and where each value came from "
        "(= `distspec config`) instead",
    )
    parser.add_argument(
        "-o",
        "--output",
        default=".distspecconfig",
        help="file to add the section to (default: ./.distspecconfig); '-' prints it",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing section")
    parser.add_argument(
        "--from-torchx",
        action="store_true",
        help="convert .torchxconfig ($TORCHXCONFIG, ./ and ~/) into distspec's sections "
        "instead (docs/migrating-from-torchx.md)",
    )


def render_section(scheduler: str) -> str:
    """A ``[scheduler:NAME]`` section: every option commented out at its default, with help."""
    from distspec.schedulers._registry import SchedulerRegistry

    cls = SchedulerRegistry().get(scheduler)
    lines = [f"[scheduler:{scheduler}]"]
    for spec in cls.run_opts():
        lines.append("")
        for text in textwrap.wrap(f"{spec.help} ({spec.type_name})", 76):
            lines.append(f"# {text}")
        lines.append(f"# {spec.name} = {spec.format(spec.default)}")
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    """Run ``distspec configure`` with the parsed ``args``; returns the exit code."""
    import os
    import stat

    from distspec.errors import UsageError

    if args.show:
        from distspec.cli.config import show

        return show()
    if args.from_torchx:
        from distspec.config_torchx import convert

        home = os.environ.get("HOME") or os.path.expanduser("~")
        section, headers = convert(os.getcwd(), home, os.environ)
    elif not args.scheduler:
        raise UsageError("configure needs -s SCHEDULER (or --show, or --from-torchx)")
    else:
        section = render_section(args.scheduler)
        headers = [f"[scheduler:{args.scheduler}]"]
    if args.output == "-":
        sys.stdout.write(section)
        return 0
    path = Path(args.output)
    from distspec.config import read_text
    from distspec.errors import ConfigError

    mode: int | None = None  # a new file: the umask's default
    existing = ""
    try:
        if os.path.lexists(path):
            # read_text: a FIFO, a device or a huge file is refused, never waited on.
            existing = read_text(str(path))
            # It keeps its mode: a private config (holding secret_env) stays private.
            mode = stat.S_IMODE(os.stat(path).st_mode)
    except (ConfigError, OSError) as e:
        why = str(e).partition(f"{path}: ")[2] if isinstance(e, ConfigError) else e.strerror
        why = (why or str(e)).removeprefix("cannot read it: ")
        raise UsageError(f"-o {path}: cannot read it: {why}") from None
    for header in headers:
        if header in existing.splitlines():
            if not args.force:
                raise UsageError(f"{path} already has {header}; use --force to replace it")
            existing = _drop_section(existing, header)
    text = (existing.rstrip("\n") + "\n\n" if existing.strip() else "") + section
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(text)
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)  # nothing half-written is left beside the config
        raise UsageError(f"-o {path}: cannot write it: {e.strerror or e}") from None
    print(f"wrote {', '.join(headers) or 'comments only'} to {path}")
    return 0


def _drop_section(text: str, header: str) -> str:
    out, skipping = [], False
    for line in text.splitlines():
        if line.strip().startswith("[") and line.strip().endswith("]"):
            skipping = line.strip() == header
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"
