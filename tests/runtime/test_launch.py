"""``distspec launch``: dry runs from recorded environments (goldens), mistakes (exit 2),
and real local runs (the warning, then torchrun with two processes; --filter; SIGTERM).

The environments are in tests/data/launch/*.json, each saying where it was recorded
(or, for PBS Pro with Cray PALS, which cannot run here, that it was written by hand).
The Slurm and MPI runs are in test_launch_slurm.py and test_launch_mpi.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from distspec.cli.launch import plan_from_args
from distspec.cli.main import build_parser
from distspec.errors import RuntimeEnvError, UsageError
from distspec.runtime.launch import (
    Method,
    Where,
    command_argv,
    find_allocation,
    plan_launch,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "launch"
ALLREDUCE = DATA / "allreduce.py"
DDP_TUTORIAL = DATA / "ddp_tutorial.py"
BIN = Path(sys.executable).parent
PYTHON = "/opt/venv/bin/python"
TORCHRUN = "/opt/venv/bin/torchrun"

# (arguments after `distspec launch --dryrun`, programs on PATH to add or remove)
CASES: dict[str, list[tuple[list[str], dict[str, str | None]]]] = {
    "slurm-salloc": [
        (["--", "python", "allreduce.py"], {}),
        (["--launcher", "torchrun", "--", "train.py", "--lr", "0.1"], {}),
        (["-j", "1x2", "--", "train.py"], {}),
        (["-j", "x1", "--launcher", "torchrun", "--", "train.py"], {}),
        (["-j", "2x4", "--", "train.py"], {}),
    ],
    "slurm-sbatch": [
        (["--", "python", "allreduce.py"], {}),
        (["--launcher", "torchrun", "--", "python", "allreduce.py"], {}),
    ],
    "pbs-mpich": [
        (["--", "python", "allreduce.py"], {}),
        (["-j", "1x2", "--", "train.py"], {}),
        (["--hostfile", "/work/hosts.txt", "--", "train.py"], {}),
        (["--", "train.py", "--lr", "0.1"], {"mpiexec": None, "pbsdsh": "/usr/bin/pbsdsh"}),
        (["--launcher", "torchrun", "--", "train.py"], {}),
    ],
    "pbspro-pals": [
        (["--", "python", "allreduce.py"], {}),
        (["-j", "1x2", "--", "train.py"], {}),
        (["--nnodes", "2", "--nproc-per-node", "8", "--", "train.py"], {}),
    ],
    "local": [
        (["--", "python", "allreduce.py"], {}),
        (["-j", "4", "--", "train.py", "--lr", "0.1"], {}),
        (["--hostfile", "/work/hosts.txt", "--launcher", "torchrun", "--", "train.py"], {}),
        (
            ["--hostfile", "/work/hosts.txt", "--", "train.py"],
            {"mpiexec": "/usr/bin/mpiexec.mpich"},
        ),
    ],
}

# A hand-written hostfile the cases above name: one host, two slots.
EXTRA_HOSTFILES = {"/work/hosts.txt": "node7\nnode7\n"}


def fixture(name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((DATA / f"{name}.json").read_text())
    assert isinstance(data["recorded"], str) and data["recorded"]
    return data


def injected(data: dict[str, object], programs: dict[str, str | None]) -> dict[str, object]:
    """Test doubles for plan_launch: the recorded programs and hostfiles."""
    found = {**data["programs"], **programs}  # type: ignore[dict-item]
    files = {**data["hostfiles"], **EXTRA_HOSTFILES}  # type: ignore[dict-item]

    def read(path: str) -> list[str]:
        if path not in files:
            raise RuntimeEnvError(f"cannot read the host file {path!r}: no such file")
        return [line for line in files[path].splitlines() if line.strip()]

    return {"which": found.get, "read_hostfile": read, "python": PYTHON, "torchrun": TORCHRUN}


def dryrun(name: str, args: list[str], programs: dict[str, str | None]) -> str:
    data = fixture(name)
    argv = ["launch", "--dryrun", *args]
    parsed = build_parser(argv).parse_args(argv)
    plan = plan_from_args(parsed, data["environ"], **injected(data, programs))  # type: ignore[arg-type]
    return plan.render()


@pytest.mark.parametrize("name", sorted(CASES))
def test_dryrun_goldens(name: str, golden: Callable[[str, str], None]) -> None:
    data = fixture(name)
    out = [f"# {line}" for line in str(data["recorded"]).splitlines()]
    for args, programs in CASES[name]:
        note = "" if not programs else f"   (PATH: {programs})"
        out.append(f"$ distspec launch --dryrun {' '.join(args)}{note}")
        out.append(dryrun(name, args, programs))
    golden(f"launch/{name}.txt", "\n".join(out) + "\n")


def test_slurm_plan_layout() -> None:
    data = fixture("slurm-salloc")
    plan = plan_launch(["python", "x.py"], data["environ"], **injected(data, {}))  # type: ignore[arg-type]
    assert plan.allocation.where is Where.SLURM
    assert plan.hosts == ("n0", "n1")
    assert plan.nproc_per_host == 2  # SLURM_NTASKS_PER_NODE
    assert plan.world_size == 4
    assert plan.method is Method.SRUN
    assert plan.warning is None


def test_pbs_slots_per_host_from_the_nodefile() -> None:
    data = fixture("pbs-mpich")
    alloc = find_allocation(data["environ"], read_hostfile=injected(data, {})["read_hostfile"])  # type: ignore[arg-type]
    assert (alloc.where, alloc.hosts, alloc.slots_per_host) == (Where.PBS, ("n0", "n1"), 2)


def test_pals_defaults_to_gpus_per_host_and_binds_by_depth() -> None:
    data = fixture("pbspro-pals")
    plan = plan_launch(["train.py"], data["environ"], **injected(data, {}))  # type: ignore[arg-type]
    assert plan.method is Method.PALS
    assert plan.nproc_per_host == 4  # one slot per host in the nodefile, NGPUS=4
    assert "--depth" in plan.argv and plan.argv[plan.argv.index("--depth") + 1] == "16"


def test_gpus_per_node_from_slurm_variables() -> None:
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "g[01-02]", "SLURM_JOB_GPUS": "0,1,2,3"}
    assert find_allocation(env).gpus_per_host == 4
    plan = plan_launch(["x"], env, which=lambda _: None, python=PYTHON, torchrun=TORCHRUN)
    assert plan.nproc_per_host == 4 and plan.hosts == ("g01", "g02")


def test_a_py_command_gets_the_interpreter() -> None:
    assert command_argv(["train.py", "-v"], "/py") == ["/py", "train.py", "-v"]
    assert command_argv(["python", "train.py"], "/py") == ["python", "train.py"]
    with pytest.raises(UsageError, match="no command"):
        command_argv([], "/py")


def test_more_nodes_than_the_allocation_names_both_numbers() -> None:
    data = fixture("slurm-salloc")
    with pytest.raises(UsageError, match=r"^3 nodes asked for but the Slurm allocation 21 has 2"):
        plan_launch(["x"], data["environ"], nnodes=3, **injected(data, {}))  # type: ignore[arg-type]


def test_launchers_that_cannot_run_here() -> None:
    data = fixture("slurm-salloc")
    with pytest.raises(UsageError, match="mpiexec is for PBS"):
        plan_launch(["x"], data["environ"], launcher="mpiexec", **injected(data, {}))  # type: ignore[arg-type]
    pbs = fixture("pbs-mpich")
    with pytest.raises(UsageError, match="srun needs a Slurm allocation"):
        plan_launch(["x"], pbs["environ"], launcher="srun", **injected(pbs, {}))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="neither mpiexec nor pbsdsh"):
        plan_launch(["x"], pbs["environ"], **injected(pbs, {"mpiexec": None}))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# the CLI, as a process


def _env(**extra: str) -> dict[str, str]:
    """This environment without any allocation variables, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PBS_", "DISTSPEC_")) and k not in ("NCPUS", "NGPUS")
    }
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return {**env, **extra}


def _launch(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "distspec"), "launch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_cli_more_nodes_than_the_allocation_exits_2() -> None:
    env = _env(**fixture("slurm-salloc")["environ"])  # type: ignore[arg-type]
    proc = _launch("-j", "3x2", "--", "python", "x.py", env=env)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "distspec launch: error: 3 nodes asked for but the Slurm allocation 21 has 2: "
        "use -j/--nnodes 2 or fewer"
    ]


def test_cli_pbs_job_without_nodefile_exits_2(tmp_path: Path) -> None:
    proc = _launch("--", "python", "x.py", env=_env(PBS_JOBID="12.server"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1
    assert "PBS_NODEFILE" in proc.stderr and "--hostfile" in proc.stderr

    missing = tmp_path / "nope"
    proc = _launch("--hostfile", str(missing), "--", "x", env=_env(PBS_JOBID="12.server"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1
    assert str(missing) in proc.stderr
    assert "PBS_NODEFILE" in proc.stderr and "--hostfile" in proc.stderr

    proc = _launch("--", "x", env=_env(PBS_JOBID="12.server", PBS_NODEFILE=str(missing)))
    assert proc.returncode == 2 and "PBS_NODEFILE" in proc.stderr and "--hostfile" in proc.stderr


def test_cli_dryrun_prints_one_line_and_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = _launch("--dryrun", "--", "touch", str(marker), env=_env())
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"--no-python touch {marker}")
    assert proc.stderr.splitlines() == [
        "distspec launch: not inside a Slurm or PBS allocation (no SLURM_JOB_ID, PBS_JOBID "
        "or --hostfile): running locally"
    ]
    assert not marker.exists()


def test_help_lists_launch_without_importing_it() -> None:
    code = (
        "import sys\n"
        "from distspec.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in sys.modules if m in ('distspec.cli.launch', 'distspec.runtime',"
        " 'distspec.runtime.launch')]\n"
        "print('IMPORTED', bad)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "launch" in proc.stdout
    assert "IMPORTED []" in proc.stdout


# ---------------------------------------------------------------------------
# real local runs (torchrun, gloo)


@pytest.mark.torch
@pytest.mark.slow
def test_local_fallback_warns_then_runs_two_processes() -> None:
    proc = _launch("-j", "1x2", "--filter", r"rank=1 ", "--", "python", str(ALLREDUCE), env=_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == (
        "distspec launch: not inside a Slurm or PBS allocation (no SLURM_JOB_ID, PBS_JOBID "
        "or --hostfile): running locally"
    )
    lines = proc.stdout.splitlines()
    assert lines[0].split()[1:7] == [
        "--standalone", "--nnodes", "1", "--nproc_per_node", "2", "--max_restarts"
    ]  # fmt: skip
    results = [line for line in lines if line.startswith("allreduce ")]
    # rank 1's line was dropped by --filter; rank 0 saw the sum of 1 + 2.
    assert len(results) == 1
    assert re.fullmatch(r"allreduce rank=0 world=2 host=\S+ launcher=torchrun sum=3", results[0])


@pytest.mark.torch
@pytest.mark.slow
def test_local_failing_rank_exit_code_and_sigterm(tmp_path: Path) -> None:
    env = _env(ALLREDUCE_FAIL_RANK="1", ALLREDUCE_FAIL_CODE="7")
    proc = _launch("-j", "2", "--", "python", str(ALLREDUCE), env=env)
    # torchrun itself exits 1 and prints a ChildFailedError traceback; launch exits
    # with the worker's code and names it instead.
    assert proc.returncode == 7, proc.stderr
    assert "ChildFailedError" not in proc.stderr and "Root Cause" not in proc.stderr
    assert re.search(
        r"^distspec launch: failed: rank 1 \(local rank 1\) on \S+ exited with 7\n"
        r"  \(it printed no traceback\)\n\Z",
        proc.stderr,
        re.MULTILINE,
    ), proc.stderr

    pids = tmp_path / "pids"
    pids.mkdir()
    env = _env(ALLREDUCE_SLEEP="120", ALLREDUCE_PIDS=str(pids))
    launch = subprocess.Popen(
        [str(BIN / "distspec"), "launch", "-j", "2", "--", "python", str(ALLREDUCE)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(pids.iterdir())) < 2:
            assert launch.poll() is None, "launch ended before its ranks started"
            assert time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.2)
        ranks = [int(p.name.rsplit("-", 1)[1]) for p in pids.iterdir()]
        launch.send_signal(signal.SIGTERM)
        code = launch.wait(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
    assert code != 0  # torchrun exits non-zero when its workers are stopped by a signal
    for pid in ranks:
        assert not _alive(pid), f"rank process {pid} still running after SIGTERM to launch"


@pytest.mark.torch
@pytest.mark.slow
def test_local_fallback_runs_a_torchrun_style_script_and_reports_its_failure() -> None:
    """tests/data/launch/ddp_tutorial.py never imports distspec: it reads RANK,
    LOCAL_RANK and WORLD_SIZE, init_process_group("gloo") and trains with DDP; it
    asserts torchrun's variables itself and prints them per rank."""
    proc = _launch("-j", "2", "--", "python", str(DDP_TUTORIAL), env=_env())
    assert proc.returncode == 0, proc.stderr
    ranks = sorted(
        (json.loads(line[4:]) for line in proc.stdout.splitlines() if line.startswith("ENV ")),
        key=lambda r: int(r["RANK"]),
    )
    assert [(r["RANK"], r["LOCAL_RANK"], r["WORLD_SIZE"], r["GROUP_RANK"]) for r in ranks] == [
        ("0", "0", "2", "0"),
        ("1", "1", "2", "0"),
    ]
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"], r["TORCHELASTIC_RUN_ID"]) for r in ranks}) == 1

    # Rank 1 prints a traceback and exits 7: launch exits 7, naming rank, host, traceback.
    env = _env(DDP_FAIL_RANK="1", DDP_FAIL_CODE="7")
    proc = _launch("-j", "2", "--", "python", str(DDP_TUTORIAL), env=env)
    assert proc.returncode == 7, proc.stderr
    assert "ChildFailedError" not in proc.stderr
    report = proc.stderr[proc.stderr.index("distspec launch: failed:") :].splitlines()
    assert re.fullmatch(r"distspec launch: failed: rank 1 \(local rank 1\) on \S+ exited with 7",
                        report[0])  # fmt: skip
    assert report[1:3] == ["--- rank 1: last 4 lines ---", "Traceback (most recent call last):"]
    assert report[-2:] == ["ValueError: rank 1 is broken on purpose", "---"]


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_slurm_tasks_per_node_without_ntasks_per_node() -> None:
    base = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[0-1]"}
    # salloc -N2: Slurm writes 1(x2) although nobody asked for tasks: not a request
    assert find_allocation({**base, "SLURM_TASKS_PER_NODE": "1(x2)"}).slots_per_host is None
    # salloc -N2 -n4: 2(x2)
    alloc = find_allocation({**base, "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x2)"})
    assert alloc.slots_per_host == 2
    # -n 4 on 3 + 1: uneven, so no single number
    uneven = {**base, "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "3,1"}
    assert find_allocation(uneven).slots_per_host is None


def test_inside_a_step_srun_overlaps() -> None:
    data = fixture("slurm-salloc")
    environ = {**data["environ"], "SLURM_STEP_ID": "0"}  # type: ignore[dict-item]
    plan = plan_launch(["x"], environ, **injected(data, {}))  # type: ignore[arg-type]
    assert "--overlap" in plan.argv
    plain = plan_launch(["x"], data["environ"], **injected(data, {}))  # type: ignore[arg-type]
    assert "--overlap" not in plain.argv


def test_cli_bad_filter_exits_2_even_in_a_dry_run() -> None:
    proc = _launch("--dryrun", "--filter", "(", "--", "x", env=_env())
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1].startswith("distspec launch: error: --filter '(' is not")


def test_torchrun_args_for_launch() -> None:
    from distspec.errors import ComponentError
    from distspec.specs.topology import Topology
    from distspec.torchrun import torchrun_args

    one = Topology(nodes=1, nproc_per_node=2)
    assert torchrun_args(one, script="python", script_args=["t.py"], no_python=True,
                         standalone=True) == [
        "--standalone", "--nnodes", "1", "--nproc_per_node", "2", "--max_restarts", "0",
        "--no-python", "python", "t.py",
    ]  # fmt: skip
    with pytest.raises(ComponentError, match="--standalone runs one node"):
        torchrun_args(Topology(nodes=2, nproc_per_node=1), script="x", standalone=True)
    with pytest.raises(ComponentError, match="cannot run a module"):
        torchrun_args(one, module="m", no_python=True)


def test_default_filters_drop_the_noise_recorded_here() -> None:
    import io

    from distspec.runtime.launch import DEFAULT_FILTERS, _copy_lines, compile_filters

    # Lines as torchrun, c10d and the job printed them in a 2x2 run on the local cluster.
    noise = [
        b"W1123 11:04:10.169000 22077 torch/distributed/run.py:874] \n",
        b"W1123 11:04:10.169000 22077 torch/distributed/run.py:874] *****************************************\n",
        b"W1123 11:04:10.169000 22077 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed. \n",
        b"[W1123 11:03:53.359349184 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3\n",
    ]  # fmt: skip
    kept = [b"allreduce rank=0 world=4 host=n0 launcher=slurm sum=10\n", b"step 50 \xff loss\n"]

    class Sink:
        buffer = io.BytesIO()

    sink = Sink()
    _copy_lines(io.BytesIO(b"".join([noise[0], kept[0], *noise[1:], kept[1]])), sink,  # type: ignore[arg-type]
                compile_filters(DEFAULT_FILTERS))  # fmt: skip
    assert sink.buffer.getvalue() == b"".join(kept)


def test_cli_verbose_says_what_it_found() -> None:
    env = _env(**fixture("slurm-sbatch")["environ"])  # type: ignore[arg-type]
    proc = _launch("-v", "--dryrun", "-j", "1x2", "--", "true", env=env)
    assert proc.returncode == 0, proc.stderr
    assert (
        "distspec INFO distspec.launch: slurm job 23: hosts n0 (1 of 2), 2 process(es) each, "
        "world size 2, via srun"
    ) in proc.stderr.splitlines()
