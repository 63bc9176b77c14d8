"""``distspec resources``: the named host types ``-h NAME`` accepts."""

from __future__ import annotations

import argparse

EPILOG = """\
The built-in names are TorchX's, with TorchX's sizes, so `-h gpu.large` is the
same machine in both tools. aws_* types carry their EFA / Neuron devices and the
capability node.kubernetes.io/instance-type. Plugins add names through the
entry-point group distspec.named_resources.

examples:
  distspec resources
  distspec resources gpu.large aws_p4d.24xlarge
  distspec resources --gpus 8 --json
"""


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec resources`` to ``parser``."""
    parser.epilog = EPILOG
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these (default: all)")
    parser.add_argument("--gpus", type=int, metavar="N", help="only host types with N GPUs")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    """Run ``distspec resources`` with the parsed ``args``; returns the exit code."""
    from distspec.cli._shared import print_json
    from distspec.errors import UsageError
    from distspec.specs.resources import NamedResources, ResourceInfo

    if args.gpus is not None and not 0 <= args.gpus <= 2**31 - 1:
        raise UsageError(f"--gpus must be in 0..{2**31 - 1}, got {args.gpus}")
    named = NamedResources()
    if args.names:
        rows = [ResourceInfo(n, _origin(n), named.get(n)) for n in args.names]
    else:
        rows = list(named.items())
    if args.gpus is not None:
        rows = [r for r in rows if r.resource.gpu == args.gpus]
    if args.json:
        print_json([r.to_dict() for r in rows])
        return 0
    table = [("NAME", "CPU", "GPU", "MEMORY", "DEVICES", "CAPABILITIES")]
    for row in rows:
        res = row.resource
        table.append(
            (
                row.name,
                "-" if res.cpu is None else str(res.cpu),
                str(res.gpu),
                "-" if res.mem_mb is None else _memory(res.mem_mb),
                ",".join(f"{k}={v}" for k, v in res.devices.items()) or "-",
                ",".join(f"{k}={v}" for k, v in res.capabilities.items()) or "-",
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    for line in table:
        cells = [cell.ljust(w) for cell, w in zip(line, widths, strict=False)]
        print("  ".join([*cells, line[-1]]).rstrip())
    return 0


def _origin(name: str) -> str:
    from distspec.specs.resources import BUILTIN_RESOURCES

    return "builtin" if name in BUILTIN_RESOURCES else "plugin"


def _memory(mem_mb: int) -> str:
    """``32768`` → ``32768 MiB (32.0 GiB)``: the exact number and a readable one."""
    return f"{mem_mb} MiB ({mem_mb / 1024:.1f} GiB)"
