"""detect() and init() under real launchers on the local two-node Slurm cluster.

One ``salloc -N2 --ntasks-per-node 2`` runs the probe four ways, with no torchrun:
``srun`` (Slurm's own variables), ``srun --mpi=pmi2`` (PMI), ``srun --mpi=cray_shasta``
(a real PALS environment: ``PALS_RANKID`` and the apinfo file) and
``mpiexec.mpich`` / ``mpiexec.openmpi`` (Debian's MPICH and Open MPI, bootstrapping
through Slurm). Then a PBS job through Slurm's PBS wrappers (``qsub``): plain python
in the job script, and MPICH's ``mpiexec`` over the job's nodefile.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.slurm_cluster import require_slurm_cluster

from .launched import PROBE, clean_env, reports

pytest.importorskip("torch", reason="torch is not installed")
pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]

PY = sys.executable
SPEC = '{"init": {"groups": [[0, 1], [2, 3]]}}'


def _sections(stdout: str) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    name = ""
    for line in stdout.splitlines():
        if line.startswith("=== "):
            name = line[4:].strip()
            out[name] = []
        elif "PROBE {" in line and name:
            out[name] += reports(line)
    return {k: sorted(v, key=lambda r: int(r["rank"])) for k, v in out.items()}  # type: ignore[call-overload]


def _check_2x2(got: list[dict[str, object]], launcher: str) -> None:
    assert [r["rank"] for r in got] == [0, 1, 2, 3], got
    assert {r["launcher"] for r in got} == {launcher}
    assert [r["local_rank"] for r in got] == [0, 1, 0, 1]
    assert [r["node_rank"] for r in got] == [0, 0, 1, 1]
    assert [r["host"] for r in got] == ["n0", "n0", "n1", "n1"]  # two real nodes
    assert [r["sum"] for r in got] == [10.0] * 4  # across the nodes, over TCP
    assert [r["group_sum"] for r in got] == [3.0, 3.0, 7.0, 7.0]  # within each subgroup


def test_srun_pmi2_pals_mpich_openmpi_without_torchrun() -> None:
    require_slurm_cluster()
    for tool in ("mpiexec.mpich", "mpiexec.openmpi"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install mpich openmpi-bin)")
    probe = f"{PY} {PROBE} '{SPEC}'"
    script = "; ".join(
        [
            f"echo '=== srun'; srun {probe}",
            f"echo '=== pmi2'; srun --mpi=pmi2 {probe}",
            f"echo '=== pals'; srun --mpi=cray_shasta {probe}",
            f"echo '=== mpich'; mpiexec.mpich -n 4 -ppn 2 {probe}",
            "echo '=== openmpi'; mpiexec.openmpi --allow-run-as-root -n 4 --map-by ppr:2:node "
            f"-x PYTHONPATH {probe}",
        ]
    )
    proc = subprocess.run(
        ["salloc", "-N2", "--ntasks-per-node", "2", "-t", "10", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=540,
        env=clean_env(OMP_NUM_THREADS="1"),
        check=False,
    )
    got = _sections(proc.stdout)
    detail = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, detail
    _check_2x2(got["srun"], "slurm")
    _check_2x2(got["pmi2"], "slurm")  # srun's PMI numbers are srun's own
    _check_2x2(got["pals"], "pals")
    _check_2x2(got["mpich"], "mpich")
    _check_2x2(got["openmpi"], "openmpi")


def test_pbs_job_plain_python_and_mpich_over_the_nodefile(tmp_path: Path) -> None:
    require_slurm_cluster()
    if shutil.which("qsub") is None or shutil.which("mpiexec.mpich") is None:
        pytest.skip("needs Slurm's PBS wrappers (qsub) and MPICH's mpiexec")
    out = tmp_path / f"pbs-{uuid.uuid4().hex}.out"
    script = tmp_path / "job.pbs"
    # Slurm's wrappers never set PBS_NODEFILE: the job makes one, as a PBS server would.
    script.write_text(
        "#!/bin/bash\n"
        "export PBS_NODEFILE=$(generate_pbs_nodefile)\n"
        f"echo '=== plain'; {PY} {PROBE} '{{}}'\n"
        f"echo '=== mpich'; mpiexec.mpich -f \"$PBS_NODEFILE\" -n 4 -ppn 2 {PY} {PROBE} '{SPEC}'\n"
    )
    proc = subprocess.run(
        ["qsub", "-l", "nodes=2:ppn=2,walltime=00:10:00", "-o", str(out), "-j", "oe",
         "-W", "block=true", str(script)],
        capture_output=True, text=True, timeout=540, cwd=tmp_path,
        env=clean_env(OMP_NUM_THREADS="1"), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    got = _sections(text)
    plain = got["plain"]
    assert [(r["rank"], r["world"], r["launcher"]) for r in plain] == [(0, 1, "pbs")], text[-3000:]
    _check_2x2(got["mpich"], "mpich")
