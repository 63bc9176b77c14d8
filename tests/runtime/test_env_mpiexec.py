"""detect() under a bare ``mpiexec`` (no Slurm or PBS allocation), with Debian's real MPICH and Open MPI.

Hydra treats ``localhost`` and this machine's own name in a hostfile as two hosts
(each rank sees ``MPI_LOCALNRANKS=1``) yet starts both ranks here without ssh: a
real two-"host" world in which nothing but the hostfile names rank 0's host.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path

import pytest

from .launched import PROBE, reports, run

pytestmark = pytest.mark.slow

DETECT = (
    "import json, sys\n"
    "from distspec.errors import RuntimeEnvError\n"
    "from distspec.runtime.env import detect\n"
    "try:\n"
    "    e = detect()\n"
    "except RuntimeEnvError as err:\n"
    "    print('ERROR ' + str(err), flush=True); sys.exit(3)\n"
    # One write for the whole line: print() unbuffered writes the text and its newline
    # separately, and mpiexec, copying both ranks' output, can put the other rank's
    # line between the two (seen once: two JSON objects on one line).
    "sys.stdout.write('DETECT ' + json.dumps(e.to_dict()) + '\\n'); sys.stdout.flush()\n"
)


def _mpich() -> str:
    mpiexec = shutil.which("mpiexec.mpich")
    if mpiexec is None:
        pytest.skip("MPICH is not installed (apt-get install mpich)")
    return mpiexec


def _detected(stdout: str) -> list[dict[str, object]]:
    found = [json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("DETECT ")]
    return sorted(found, key=lambda d: int(d["rank"]))  # type: ignore[call-overload]


@pytest.fixture
def two_hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_text(f"localhost:1\n{socket.gethostname()}:1\n")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_hydra_host_file_names_rank_0s_host(two_hosts: Path) -> None:
    proc = run([_mpich(), "-n", "2", sys.executable, "-c", DETECT], HYDRA_HOST_FILE=str(two_hosts))
    got = _detected(proc.stdout)
    assert proc.returncode == 0 and len(got) == 2, proc.stdout + proc.stderr
    assert [(d["rank"], d["local_world_size"], d["num_nodes"]) for d in got] == [
        (0, 1, 2),
        (1, 1, 2),
    ]
    assert {d["master_addr"] for d in got} == {"localhost"}


@pytest.mark.torch
def test_hydra_host_file_world_meets_and_all_reduces(two_hosts: Path) -> None:
    pytest.importorskip("torch", reason="torch is not installed")
    proc = run(
        [_mpich(), "-n", "2", sys.executable, str(PROBE), "{}"],
        HYDRA_HOST_FILE=str(two_hosts),
        MASTER_PORT=str(_free_port()),
        OMP_NUM_THREADS="1",
    )
    got = reports(proc.stdout)
    assert proc.returncode == 0 and len(got) == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [(r["launcher"], r["num_nodes"], r["sum"]) for r in got] == [("mpich", 2, 3.0)] * 2


def test_a_hostfile_given_only_on_the_command_line_asks_for_master_addr(two_hosts: Path) -> None:
    proc = run([_mpich(), "-f", str(two_hosts), "-n", "2", sys.executable, "-c", DETECT])
    assert proc.returncode != 0
    errors = [line for line in proc.stdout.splitlines() if line.startswith("ERROR ")]
    assert errors, proc.stdout + proc.stderr
    assert "set MASTER_ADDR" in errors[0] and "-genv MASTER_ADDR" in errors[0]
    assert "HYDRA_HOST_FILE" in errors[0]


def test_a_hydra_host_file_that_is_not_mpiexecs_is_caught_on_rank_0(
    two_hosts: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.write_text(f"{socket.gethostname()}:1\nlocalhost:1\n")
    proc = run(
        [_mpich(), "-f", str(other), "-n", "2", sys.executable, "-c", DETECT],
        HYDRA_HOST_FILE=str(two_hosts),
    )
    assert proc.returncode != 0
    assert "so mpiexec used another host list" in proc.stdout, proc.stdout + proc.stderr


def test_open_mpi_on_one_host_needs_no_master_addr() -> None:
    mpiexec = shutil.which("mpiexec.openmpi")
    if mpiexec is None:
        pytest.skip("Open MPI is not installed (apt-get install openmpi-bin)")
    proc = run(
        [mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, "-c",
         DETECT]
    )  # fmt: skip
    got = _detected(proc.stdout)
    assert proc.returncode == 0 and len(got) == 2, proc.stdout + proc.stderr
    assert {(d["launcher"], d["master_addr"], d["num_nodes"]) for d in got} == {
        ("openmpi", "127.0.0.1", 1)
    }


def test_mpi4py_broadcasts_rank_0s_host(two_hosts: Path) -> None:
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (not a distspec dependency)")
    # -f only: no hostfile variable, so only mpi4py can tell rank 0's host.
    proc = run([_mpich(), "-f", str(two_hosts), "-n", "2", sys.executable, "-c", DETECT])
    got = _detected(proc.stdout)
    assert proc.returncode == 0 and len(got) == 2, proc.stdout + proc.stderr
    assert {d["master_addr"] for d in got} == {socket.gethostname()}
