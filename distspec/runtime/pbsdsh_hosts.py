"""One task on each host of a PBS job: ``pbsdsh -n VNODE -- COMMAND`` per host.

``python -m distspec.runtime.pbsdsh_hosts VNODE[,VNODE...] -- COMMAND [ARG...]``

``$PBS_NODEFILE`` lists a host once per MPI slot, and pbsdsh numbers its tasks by
those lines: ``pbsdsh -n I`` runs on the host of line I. One task per *host* (one
``torchrun`` each) therefore takes one ``pbsdsh -n`` per host, at the index of the
host's first line. Torque's ``pbsdsh -u`` does this in one call, but PBS Pro's and
OpenPBS's pbsdsh has no ``-u`` (a real OpenPBS 23.06 server showed it), while
``-n`` is in both.

This process starts them all, passes SIGINT and SIGTERM on to each, and exits with
the first non-zero exit code among them (128 + N for a signal N), else 0. A task
pbsdsh started keeps running on its host if pbsdsh itself is killed; the job's end
stops it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["main"]

USAGE = "usage: python -m distspec.runtime.pbsdsh_hosts VNODE[,VNODE...] -- COMMAND [ARG...]"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tasks; the exit code to exit with."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        vnodes = [int(v) for v in args[0].split(",")]
    except ValueError:
        print(f"pbsdsh_hosts: not a list of line numbers: {args[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    command = args[2:]
    procs = [
        subprocess.Popen(["pbsdsh", "-n", str(v), "--", *command], stdin=subprocess.DEVNULL)
        for v in vnodes
    ]

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = 0
    for proc in procs:
        rc = proc.wait()
        rc = 128 - rc if rc < 0 else rc
        if rc and not code:
            code = rc
    return code


if __name__ == "__main__":
    sys.exit(main())
