"""One rank's checks of distspec.runtime's nccl paths (run under torchrun or srun).

Asserts the backend and device the runtime picked, a barrier (nccl's device_ids path),
an all_reduce on the GPU, and ``Dist.log(reduce=...)``, which reduces on the process
group's device (CUDA tensors under nccl). Prints one ``ok`` line per check.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    import torch
    import torch.distributed as tdist

    from distspec.runtime import init

    want = os.environ.get("WANT_BACKEND", "nccl")
    with init() as job:
        print(
            f"rank {job.rank}/{job.world_size}: backend={job.backend} device={job.device}",
            flush=True,
        )
        assert job.backend == want, (job.backend, want)
        if want == "nccl":
            assert job.device.type == "cuda", job.device
            assert tdist.get_backend() == "nccl", tdist.get_backend()
        job.barrier()
        t = torch.full((4,), float(job.rank + 1), device=job.device)
        tdist.all_reduce(t)
        expect = job.world_size * (job.world_size + 1) / 2
        assert t.tolist() == [expect] * 4, t
        job.log(1, reduce="mean", loss=float(job.rank))
        job.log(2, reduce="max", loss=float(job.rank))
        print(f"rank {job.rank}: ok barrier, all_reduce, log(reduce)", flush=True)
    assert not tdist.is_initialized()
    print(f"rank {job.rank}: ok close", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
