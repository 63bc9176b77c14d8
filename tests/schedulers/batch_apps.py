"""The apps test_slurm and test_pbs compile, and the helpers both use.

One torchrun role (``--nnodes N[:M]``, c10d on ``${rank0_host}``), optionally with
``--node_rank ${replica_id}``, in an app named ``train`` with a fixed app id and
job dir, so that both backends' goldens come from the same inputs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from distspec.schedulers.api import Scheduler
from distspec.specs import AppDef, Resource, Role

JOB_DIR = "/shared/jobs"
APP_ID = "train-0000abcd"
STATE_DIR = "/home/user/.local/state/distspec"


def torchrun_args(nnodes: str, nproc: int, *, node_rank: bool = False) -> tuple[str, ...]:
    return (
        *("--nnodes", nnodes, "--nproc_per_node", str(nproc)),
        *(("--node_rank", "${replica_id}") if node_rank else ()),
        *("--rdzv_backend", "c10d", "--rdzv_endpoint", "${rank0_host}:29500"),
        *("--rdzv_id", "${app_id}", "train.py", "--lr", "0.1"),
    )


def trainer_role(
    nodes: int,
    nproc: int,
    *,
    gpu: int = 0,
    min_nodes: int | None = None,
    name: str = "trainer",
    node_rank: bool = False,
) -> Role:
    nnodes = f"{min_nodes}:{nodes}" if min_nodes else str(nodes)
    return Role(
        name=name,
        entrypoint="torchrun",
        args=torchrun_args(nnodes, nproc, node_rank=node_rank),
        env={"LOGLEVEL": "INFO", "NODE": "${replica_id}"},
        num_replicas=nodes,
        min_replicas=min_nodes,
        resource=Resource(cpu=nproc * 2, gpu=gpu, mem_mb=nproc * 8192),
    )


def app(*roles: Role, name: str = "train") -> AppDef:
    return AppDef(name=name, roles=roles)


def compile_text(scheduler: type[Scheduler[Any]], app: AppDef, **opts: Any) -> str:
    """The rendered dry run of ``app`` on ``scheduler`` with ``job_dir`` and ``opts``."""
    sched = scheduler(state_dir=STATE_DIR)
    options = sched.parse_options({"job_dir": JOB_DIR, **opts})
    return sched.compile(app, options, app_id=APP_ID).render()


def bash_n(text: str) -> None:
    """``text`` parses as bash."""
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def pid_gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie that nobody reaps counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


#: ``fail.py HOW``: rank 1 fails (exit7, raise, or a signal's name such as SIGKILL);
#: the other rank sleeps, so rank 1 is torchrun's root cause.
FAILING_RANK = (
    "import atexit, os, signal, sys, time\n"
    "rank = int(os.environ['RANK'])\n"
    "if rank != 1:\n"
    "    time.sleep(30)\n"
    "    sys.exit(0)\n"
    "print('rank 1 about to fail', flush=True)\n"
    "how = sys.argv[1]\n"
    "if how == 'raise':\n"
    "    # Like torch's warnings at exit: printed after the traceback.\n"
    "    atexit.register(print, 'UserWarning: printed last', file=sys.stderr, flush=True)\n"
    "    raise ValueError('the real error')\n"
    "if how == 'exit7':\n"
    "    sys.exit(7)\n"
    "os.kill(os.getpid(), getattr(signal, how))\n"
)


def report_then_plain(tmp_path: Path) -> AppDef:
    """One node, one retry: attempt 0 runs real torchrun, whose rank 1 exits 7 (torchrun
    reports it and exits 1); attempt 1 fails with 4 and prints no report."""
    script = tmp_path / "fail.py"
    script.write_text(FAILING_RANK)
    marker = tmp_path / "first-attempt-done"
    command = (
        f"if [[ ! -e {marker} ]]; then touch {marker}; exec torchrun --standalone --nnodes 1 "
        f"--nproc_per_node 2 {script} exit7; fi; "
        'echo "attempt 1 fails without a report"; exit 4'
    )
    return AppDef(
        name="lastreport",
        roles=(Role(name="r", entrypoint="bash", args=("-c", command), max_retries=1),),
    )


def processes_with(marker: str) -> list[str]:
    """The live (not zombie) processes whose command line holds ``marker``."""
    out = subprocess.run(["ps", "-eo", "stat=,args="], capture_output=True, text=True, check=True)
    return [
        line
        for line in out.stdout.splitlines()
        if marker in line and not line.lstrip().startswith("Z")
    ]


#: ``(HOW, run --wait's exit code, how the summary says it ended)`` for FAILING_RANK.
FAILING_RANK_CASES = [
    ("exit7", 7, "exited with 7"),
    ("SIGKILL", 137, "was killed by SIGKILL (exit code 137)"),
    ("SIGSEGV", 139, "was killed by SIGSEGV (exit code 139)"),
    ("raise", 1, "exited with 1"),
]


def private_modes(state_dir: Path, scheduler: str, folder: str) -> dict[str, str]:
    """``{path relative to the state dir: octal mode}`` of what a batch backend
    wrote about one job: its job dir, job folder, script, record (and their folders)."""
    base = state_dir / scheduler
    paths = [base, base / "jobs", Path(folder)]
    paths += [p for p in base.iterdir() if p.is_file()]
    paths += list((base / "jobs").iterdir())
    return {str(p.relative_to(state_dir)): oct(p.stat().st_mode & 0o777) for p in paths}


def assert_private(modes: dict[str, str]) -> None:
    """Folders 0700, scripts and records 0600. The job's output (``.out``, logs) keeps
    the job's umask, as the user's own files do; the private folder around it hides it."""
    wrong = {
        path: mode
        for path, mode in modes.items()
        if not path.endswith(".out")
        and mode != ("0o700" if "." not in path.rsplit("/", 1)[-1] else "0o600")
    }
    assert not wrong, modes
