"""The job the launch tests start: every rank adds rank + 1 in a gloo all-reduce.

It initialises through :func:`distspec.runtime.init`, so it runs under any launcher
``distspec launch`` builds (srun per process, torchrun, mpiexec). Each rank prints
one line ``allreduce rank=R world=W host=H launcher=L sum=S``; with world size W the
right sum is W * (W + 1) / 2.

Test knobs (environment): ``ALLREDUCE_FAIL_RANK`` / ``ALLREDUCE_FAIL_CODE`` make that
rank exit with that code after the all-reduce; ``ALLREDUCE_SLEEP`` makes every rank
write its pid to ``$ALLREDUCE_PIDS/<host>-<pid>`` and sleep that long after it.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from distspec.runtime import init


def main() -> int:
    with init(log=False) as dist:
        import torch
        import torch.distributed as td

        total = torch.tensor([float(dist.rank + 1)])
        td.all_reduce(total)
        # One write per line: under PYTHONUNBUFFERED print() writes the text and its
        # newline separately, and ranks sharing a pipe then interleave mid-line.
        sys.stdout.write(
            f"allreduce rank={dist.rank} world={dist.world_size} "
            f"host={socket.gethostname()} launcher={dist.env.launcher} sum={int(total.item())}\n"
        )
        sys.stdout.flush()
        if os.environ.get("ALLREDUCE_FAIL_RANK") == str(dist.rank):
            # A delay lets the other ranks end first: otherwise srun's kill of the rest
            # (--kill-on-bad-exit) may reach them first, and srun reports 128+SIGTERM.
            time.sleep(float(os.environ.get("ALLREDUCE_FAIL_DELAY", "0")))
            return int(os.environ.get("ALLREDUCE_FAIL_CODE", "7"))
        sleep = float(os.environ.get("ALLREDUCE_SLEEP", "0"))
        if sleep:
            pids = os.environ.get("ALLREDUCE_PIDS")
            if pids:
                with open(os.path.join(pids, f"{socket.gethostname()}-{os.getpid()}"), "w"):
                    pass
            time.sleep(sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
