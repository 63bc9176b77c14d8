"""``distspec launch``'s mpiexec path with Debian's real MPICH (``mpiexec.mpich``, Hydra).

- a hand-written hostfile naming this host twice: two ranks here, no scheduler;
- a PBS job through Slurm's PBS wrappers (``qsub`` from slurm-wlm-torque) on the
  local two-node cluster. The wrappers set no ``PBS_NODEFILE``; the job writes one
  with their ``generate_pbs_nodefile``, as a real PBS would provide it. Hydra then
  starts its proxies on n0 and n1 through Slurm (it detects the allocation).

``mpiexec`` on this machine is whichever MPI the alternatives system picked (Open
MPI here), so the tests put a folder first on PATH whose ``mpiexec`` links to
``mpiexec.mpich`` — as ``module load mpich`` would on a cluster. Hydra looks for
``hydra_pmi_proxy`` beside the ``mpiexec`` it was started as, so that is linked too.
Cray PALS cannot run here: its command is covered by the dry-run golden only.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

BIN = Path(sys.executable).parent
ALLREDUCE = Path(__file__).resolve().parents[1] / "data" / "launch" / "allreduce.py"
RESULT = re.compile(r"^allreduce rank=(\d+) world=(\d+) host=(\S+) launcher=(\S+) sum=(\d+)$", re.M)


@pytest.fixture
def mpich_path(tmp_path: Path) -> str:
    """A PATH whose ``mpiexec`` is MPICH's Hydra, then this venv, then the rest."""
    mpiexec = shutil.which("mpiexec.mpich")
    proxy = shutil.which("hydra_pmi_proxy")
    if mpiexec is None or proxy is None:
        pytest.skip("MPICH is not installed (apt-get install mpich)")
    folder = tmp_path / "mpich-bin"
    folder.mkdir()
    (folder / "mpiexec").symlink_to(mpiexec)
    (folder / "hydra_pmi_proxy").symlink_to(proxy)
    return f"{folder}:{BIN}:{os.environ.get('PATH', '')}"


def _env(path: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PBS_", "DISTSPEC_", "ALLREDUCE_", "MASTER_"))
    }
    env["PATH"] = path
    return env


def _results(text: str) -> list[tuple[int, int, str, str, int]]:
    return sorted((int(r), int(w), h, la, int(s)) for r, w, h, la, s in RESULT.findall(text))


def test_hand_written_hostfile_runs_mpich(tmp_path: Path, mpich_path: str) -> None:
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("localhost\nlocalhost\n")
    proc = subprocess.run(
        [str(BIN / "distspec"), "launch", "--hostfile", str(hostfile), "--", "python",
         str(ALLREDUCE)],
        # NCPUS (PBS Pro sets it) makes launch bind each rank to NCPUS / 2 cores.
        env={**_env(mpich_path), "NCPUS": "2"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == (
        f"mpiexec -n 2 -ppn 2 --hostfile {hostfile} -bind-to core:1 -genv MASTER_ADDR localhost "
        f"{sys.executable} -m distspec.runtime.torchrun_env python {ALLREDUCE}"
    )
    host = os.uname().nodename
    assert _results(proc.stdout) == [(0, 2, host, "mpich", 3), (1, 2, host, "mpich", 3)]


@pytest.mark.slurm
def test_pbs_job_through_slurm_wrappers_runs_mpich_on_two_nodes(
    tmp_path: Path, mpich_path: str
) -> None:
    from tests.slurm_cluster import require_slurm_cluster

    require_slurm_cluster()
    if shutil.which("qsub") is None or shutil.which("generate_pbs_nodefile") is None:
        pytest.skip("Slurm's PBS wrappers (slurm-wlm-torque) are not installed")
    name = f"launch-pbs-{uuid.uuid4().hex[:8]}"
    job = tmp_path / "job.pbs"
    job.write_text(
        "\n".join(
            [
                "#!/bin/bash",
                # Slurm's PBS wrappers set no PBS_NODEFILE; a real PBS would.
                "export PBS_NODEFILE=$(generate_pbs_nodefile)",
                f"cd {shlex.quote(str(tmp_path))}",
                shlex.join(["distspec", "launch", "--", "python", str(ALLREDUCE)])
                + " > launch.out 2> launch.err",
                "echo $? > launch.rc",
                "",
            ]
        )
    )
    env = _env(mpich_path)
    try:
        proc = subprocess.run(
            ["qsub", "-N", name, "-l", "nodes=2:ppn=2", "-j", "oe", "-o", str(tmp_path / "q.log"),
             "-V", str(job)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 240
        rc = tmp_path / "launch.rc"
        while not rc.exists() or not rc.read_text().strip():
            assert time.monotonic() < deadline, "the PBS job never finished"
            time.sleep(0.5)
    finally:
        subprocess.run(["scancel", "--name", name], capture_output=True, check=False)
    out = (tmp_path / "launch.out").read_text()
    err = (tmp_path / "launch.err").read_text()
    assert rc.read_text().strip() == "0", out + err
    command = out.splitlines()[0]
    assert re.fullmatch(
        rf"mpiexec -n 4 -ppn 2 --hostfile \S+ -genv MASTER_ADDR n0 {re.escape(sys.executable)} "
        rf"-m distspec.runtime.torchrun_env python {re.escape(str(ALLREDUCE))}",
        command,
    ), command
    assert _results(out) == [
        (0, 4, "n0", "mpich", 10),
        (1, 4, "n0", "mpich", 10),
        (2, 4, "n1", "mpich", 10),
        (3, 4, "n1", "mpich", 10),
    ], out + err
