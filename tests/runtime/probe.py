"""A worker the runtime tests start under real launchers (torchrun, srun, mpiexec, qsub).

``python probe.py '<json>'`` initialises through ``distspec.runtime.init`` with the
options in the JSON, does real collectives, and prints one line per rank::

    PROBE {"rank": 0, "world": 4, "sum": 10.0, "group_sum": 4.0, ...}

Keys: ``init`` (keyword arguments for init), ``meshes`` (a list of degree dicts:
each builds a mesh and reports the rank's coordinates and the tp group's sum),
``raise`` (raise inside the ``with`` and report whether the group was destroyed).
"""

from __future__ import annotations

import json
import random
import sys
import warnings


def main() -> int:
    spec = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    import numpy
    import torch
    import torch.distributed as tdist

    from distspec.runtime import current, init

    torch.set_num_threads(1)
    kwargs = spec.get("init", {})
    out: dict[str, object] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = init(**kwargs)
    out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    try:
        with dist:
            assert current() is dist
            env = dist.env
            out.update(
                rank=dist.rank,
                world=dist.world_size,
                local_rank=dist.local_rank,
                local_world=dist.local_world_size,
                node_rank=dist.node_rank,
                num_nodes=dist.num_nodes,
                launcher=str(env.launcher),
                backend=dist.backend,
                device=str(dist.device),
                host=__import__("socket").gethostname(),
            )
            out["random"] = [random.random(), float(numpy.random.rand()), float(torch.rand(1))]
            if dist.backend is not None:
                t = torch.tensor([float(dist.rank + 1)])
                tdist.all_reduce(t)
                out["sum"] = t.item()
                g = torch.tensor([float(dist.rank + 1)])
                tdist.all_reduce(g, group=dist.group)
                out["group_sum"] = g.item()
                if dist.coords is not None:
                    out["coords"] = str(dist.coords)
            meshes = []
            for degrees in spec.get("meshes", []):
                mesh_dist = init(degrees=degrees, log=False)
                tp = torch.tensor([float(dist.rank)])
                tdist.all_reduce(tp, group=mesh_dist.mesh["tp"].get_group())
                meshes.append({"coords": str(mesh_dist.coords), "tp_sum": tp.item()})
                mesh_dist.close()
            out["meshes"] = meshes
            if spec.get("raise"):
                raise RuntimeError("raised in the body")
    except RuntimeError as e:
        out["raised"] = str(e)
    out["initialized_after"] = tdist.is_available() and tdist.is_initialized()
    # one write: with PYTHONUNBUFFERED, print() writes the line and its newline separately
    sys.stdout.write("PROBE " + json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
