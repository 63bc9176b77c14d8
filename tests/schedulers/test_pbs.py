"""PBS backend without a PBS server: goldens, the script run by bash under a fake
pbsdsh / mpiexec / hostname, and qsub/qstat/qdel parsing through ``fake_commands``.

The ``qstat`` outputs below marked "hand-written" were written from the PBS Pro /
OpenPBS and Torque documentation, not captured from a server (none is installable
here); the one marked "captured" is what Slurm's PBS wrappers print on the local
cluster.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distspec.errors import CompileError, SchedulerError, UsageError
from distspec.schedulers.batch.folder import read_job_folder, replica_exit
from distspec.schedulers.pbs import (
    PBS_STATES,
    Launcher,
    PbsOptions,
    PbsScheduler,
    ResourceStyle,
    parse_qstat_full,
)
from distspec.schedulers.pbs.script import job_name
from distspec.specs import AppDef, AppState, Resource, RetryPolicy, Role
from tests.conftest import FakeCommands
from tests.schedulers.batch_apps import APP_ID, compile_text, trainer_role
from tests.schedulers.batch_apps import app as _app
from tests.schedulers.batch_apps import bash_n as _bash_n
from tests.schedulers.batch_apps import pid_gone as _gone


def _role(nodes: int, nproc: int, *, gpu: int = 0, name: str = "trainer") -> Role:
    return trainer_role(nodes, nproc, gpu=gpu, name=name, node_rank=True)


def _compile(app: AppDef, **opts: Any) -> str:
    return compile_text(PbsScheduler, app, **opts)


ALL_OPTIONS = {
    "queue": "gpu",
    "account": "proj-1",
    "walltime": "02:00:00",
    "place": "scatter:excl",
    "mem": "true",
    "launcher": "mpiexec",
    "mpiexec_args": "--map-by;ppr:1:node",
    "export_env": "false",
    "mail_user": "me@example.org",
    "mail_events": "abe",
    "depend": "afterok:1234.server:1235.server",
    "job_name_max": "4",
    "rank0_host": "{host}-ib",
    "qsub_args": "-r y;-p 10;-l software=cfd;-W group_list=hpc",
}

GOLDEN_CASES: dict[str, Callable[[], str]] = {
    "1node": lambda: _compile(_app(_role(1, 2))),
    "2x8_select": lambda: _compile(_app(_role(2, 8, gpu=8))),
    "2x8_nodes": lambda: _compile(_app(_role(2, 8, gpu=8)), resource_style="nodes"),
    "2x8_mpiexec": lambda: _compile(_app(_role(2, 8, gpu=8)), launcher="mpiexec"),
    "all_options": lambda: _compile(_app(_role(2, 8, gpu=8)), **ALL_OPTIONS),
    "retries": lambda: _compile(_app(dataclasses.replace(_role(2, 2), max_retries=2))),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_scripts(case: str, golden: Callable[[str, str], None]) -> None:
    text = GOLDEN_CASES[case]()
    golden(f"pbs/{case}.pbs", text)
    _bash_n(text)


def test_script_size_does_not_grow_with_nodes() -> None:
    for opts in ({}, {"resource_style": "nodes"}, {"launcher": "mpiexec"}):
        small = _compile(_app(_role(2, 8, gpu=8)), **opts)
        large = _compile(_app(_role(1024, 8, gpu=8)), **opts)
        assert re.sub(r"\d+", "N", small) == re.sub(r"\d+", "N", large)
        assert len(large) - len(small) <= 12 * len("024")


def test_resources_map_to_select_or_nodes() -> None:
    select = _compile(_app(_role(2, 4, gpu=4)))
    assert "#PBS -l select=2:ncpus=8:mpiprocs=1:ngpus=4:mem=32768mb\n" in select
    assert "#PBS -l place=scatter\n" in select
    nodes = _compile(_app(_role(2, 4, gpu=4)), resource_style="nodes")
    assert "#PBS -l nodes=2:ppn=8:gpus=4\n#PBS -l mem=65536mb\n" in nodes
    assert "#PBS -l select" not in nodes and "#PBS -l place" not in nodes
    assert "mem=" not in _compile(_app(_role(2, 4)), mem="false")
    free = _compile(_app(_role(2, 4)), place="")
    assert "#PBS -l place" not in free and "-cfg place=scatter puts each" in free
    dev = dataclasses.replace(_role(1, 1), resource=Resource(cpu=1, devices={"nvme_gb": 100}))
    assert "#PBS -l select=1:ncpus=1:mpiprocs=1:nvme_gb=100\n" in _compile(_app(dev))
    with pytest.raises(CompileError, match="resource_style=select"):
        _compile(_app(dev), resource_style="nodes")
    bad = dataclasses.replace(_role(1, 1), resource=Resource(devices={"vpc.amazonaws.com/efa": 1}))
    with pytest.raises(CompileError, match="PBS resource name"):
        _compile(_app(bad))


def test_unspecified_cpu_and_memory_are_left_to_the_server() -> None:
    role = dataclasses.replace(_role(2, 4), resource=Resource(gpu=4))
    assert "#PBS -l select=2:mpiprocs=1:ngpus=4\n" in _compile(_app(role))
    nodes = _compile(_app(role), resource_style="nodes")
    assert "#PBS -l nodes=2:gpus=4\n" in nodes and "mem=" not in nodes


def test_unbuffered_output_by_default_and_off_on_request() -> None:
    # In the script (a one-node job runs there) and in the task file the hosts run.
    assert '\nexport DISTSPEC_WORKDIR="$PWD" PYTHONUNBUFFERED=1\n' in _compile(_app(_role(1, 4)))
    text = _compile(_app(_role(2, 4)))
    assert " DISTSPEC_WORKDIR=$3 PYTHONUNBUFFERED=1\n" in text
    for nodes in (1, 2):
        assert "PYTHONUNBUFFERED" not in _compile(_app(_role(nodes, 4)), unbuffered="false")


def test_one_node_runs_directly_and_many_use_the_launcher() -> None:
    one = _compile(_app(_role(1, 2)))
    assert 'train.py --lr 0.1 >> "$DISTSPEC_JOB_DIR/trainer-0.log" 2>&1 < /dev/null &\n' in one
    assert "pbsdsh" not in one and "mpiexec" not in one and "task.sh" not in one
    two = _compile(_app(_role(2, 2)))
    assert 'do pbsdsh -n "${vnodes[i]}" -- "${task[@]}" "$i" < /dev/null & launchers+=' in two
    mpi = _compile(_app(_role(2, 2)), launcher="mpiexec")
    assert '\nmpiexec -n 2 --ppn 1 "${task[@]}" < /dev/null & launchers=$!\n' in mpi


def test_common_case_scripts_are_short() -> None:
    """#13: one role without retries reads like a hand-written script (< 40 lines when
    #13 set it; 40 since each torchrun command has its worker-Python line, #21; 41 since
    the job takes qsub's PATH back from a real PBS's login shell, #29)."""
    for nodes, opts in (
        (1, {}),
        (2, {}),
        (2, {"launcher": "mpiexec"}),
        (64, {"resource_style": "nodes"}),
    ):
        text = _compile(_app(_role(nodes, 8, gpu=8)), **opts)
        assert len(text.splitlines()) <= 41, text
        assert "distspec_wait" not in text and "attempt" not in text


def test_env_is_exported_in_the_script_body() -> None:
    role = dataclasses.replace(_role(1, 1), env={"A": "x,y=z", "B": "it's"})
    for text in (_compile(_app(role)), _compile(_app(dataclasses.replace(role, num_replicas=2)))):
        assert "\nexport A=x,y=z\n" in text
        assert "\nexport B='it'\"'\"'s'\n" in text
        assert "#PBS -v" not in text


@pytest.mark.parametrize(
    ("app_name", "limit", "expected"),
    [("train", 15, "train"), ("a-very-long-app-name", 15, "a-very-long-app"), ("1st", 15, "j1st")],
)
def test_job_names_start_with_a_letter_and_are_cut(
    app_name: str, limit: int, expected: str
) -> None:
    assert job_name(app_name, limit) == expected
    text = _compile(_app(_role(1, 1), name=app_name), job_name_max=str(limit))
    assert f"#PBS -N {expected}\n" in text


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"walltime": "tomorrow"}, "walltime="),
        ({"walltime": "1-00:00:00"}, "walltime="),
        ({"place": "everywhere"}, "place="),
        ({"mail_events": "xyz"}, "mail_events"),
        ({"depend": "after ok"}, "depend="),
        ({"job_name_max": "0"}, "job_name_max"),
        ({"rank0_host": "no-placeholder"}, "rank0_host"),
        ({"queue": "a queue"}, "queue="),
        ({"account": "x\ny"}, "account="),
        ({"qsub_args": "--long"}, "not a qsub flag"),
        ({"qsub_args": "-N other"}, "set by distspec"),
        ({"qsub_args": "-o /tmp/x"}, "set by distspec"),
        ({"qsub_args": "-q gpu"}, "-cfg queue"),
        ({"qsub_args": "-W depend=afterok:1"}, "-cfg depend"),
        ({"qsub_args": "-V"}, "export_env"),
        ({"qsub_args": "-l walltime=1:00:00"}, "walltime"),
        ({"qsub_args": "-l select=4"}, "set by distspec"),
        ({"qsub_args": "-r y n"}, "#PBS value"),
        ({"mpiexec_args": "a\nb"}, "line break"),
        ({"job_dir": "relative/dir"}, "absolute"),
        ({"job_dir": "/a b"}, "job_dir"),
        ({"job_dir": "/host:path"}, "job_dir"),
    ],
)
def test_bad_options_are_compile_errors(opts: dict[str, str], match: str) -> None:
    with pytest.raises(CompileError, match=match):
        _compile(_app(_role(1, 1)), **opts)


def test_elastic_multi_role_and_replica_retries_are_refused() -> None:
    elastic = dataclasses.replace(_role(4, 1), min_replicas=2)
    with pytest.raises(CompileError, match="elastic"):
        _compile(_app(elastic))
    with pytest.raises(CompileError, match="2 roles"):
        _compile(_app(_role(1, 1), _role(1, 1, name="reader")))
    role = dataclasses.replace(_role(2, 2), max_retries=1, retry_policy=RetryPolicy.REPLICA)
    with pytest.raises(CompileError, match="replica"):
        _compile(_app(role))


def test_default_job_dir_is_under_the_state_dir(tmp_path: Path) -> None:
    sched = PbsScheduler(state_dir=tmp_path)
    req = sched.compile(_app(_role(1, 1)), sched.parse_options({}), app_id=APP_ID)
    assert f"#PBS -o {tmp_path}/pbs/{APP_ID}.out\n" in req.render()
    assert req.argv == ("qsub", "-j", "oe", "-o", f"{tmp_path}/pbs/{APP_ID}.out", f"{APP_ID}.pbs")
    with pytest.raises(CompileError, match="job_dir"):
        no_state = PbsScheduler()
        no_state.compile(_app(_role(1, 1)), no_state.parse_options({}), app_id=APP_ID)


def test_every_pbs_state_letter_is_mapped() -> None:
    assert set("QHWTMSURBECFX") <= set(PBS_STATES)
    assert PBS_STATES["E"] is AppState.RUNNING  # exiting: not ended yet
    assert PBS_STATES["H"] is AppState.PENDING
    opts = PbsOptions()
    assert (opts.launcher, opts.resource_style) == (Launcher.PBSDSH, ResourceStyle.SELECT)


# -- the script itself, run by bash under fake launchers ---------------------------

# pbsdsh -n VNODE -- PROGRAM ARGS: runs PROGRAM as the task on the VNODE-th line's host.
FAKE_PBSDSH = r"""#!/bin/bash
[[ $1 == -n ]] || { echo "fake pbsdsh: expected -n" >&2; exit 2; }
vnode=$2; shift 2
[[ $1 == -- ]] && shift
host=$(sed -n "$((vnode + 1))p" "$PBS_NODEFILE")
echo "$vnode $host" >> "$FAKE_LOG"
PBS_VNODENUM=$vnode FAKE_HOST=$host "$@"
"""

# mpiexec -n N ARGS... /bin/bash TASK: one rank per distinct host, PMI_RANK set.
FAKE_MPIEXEC = r"""#!/bin/bash
[[ $1 == -n ]] || exit 2
n=$2; shift 2
echo "mpiexec $*" >> "$FAKE_LOG"
while [[ $1 != /bin/bash ]]; do shift; done
mapfile -t hosts < <(awk '!seen[$1]++ {print $1}' "$PBS_NODEFILE")
rc=0
for ((i = 0; i < n; i++)); do
  PMI_RANK=$i FAKE_HOST=${hosts[i]} "$@" || rc=$?
done
exit $rc
"""

FAKE_HOSTNAME = """#!/bin/bash
echo "${FAKE_HOST:-head}"
"""

DUMP = (
    "import json, os, sys; "
    "print(json.dumps({'argv': sys.argv[1:], 'env': {k: os.environ.get(k) for k in "
    "os.environ.get('DUMP_KEYS', '').split(',') if k}}))"
)


def _run_script(
    text: str, tmp_path: Path, *, hosts: list[str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (
        ("pbsdsh", FAKE_PBSDSH),
        ("mpiexec", FAKE_MPIEXEC),
        ("hostname", FAKE_HOSTNAME),
    ):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("".join(f"{h}\n" for h in hosts))
    script = tmp_path / "job.pbs"
    script.write_text(text)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PBS_JOBID": "42.server",
        "PBS_O_WORKDIR": str(tmp_path),
        "PBS_NODEFILE": str(nodefile),
        "FAKE_LOG": str(tmp_path / "launcher.log"),
    }
    # PBS starts the script in $HOME, not where qsub ran.
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(script)],
        check=False,
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _dump_app(args: list[str], env: dict[str, str], *, replicas: int = 2) -> AppDef:
    full_env = {**env, "DUMP_KEYS": ",".join(env)}
    return AppDef(
        name="dump",
        roles=(
            Role(
                name="r",
                entrypoint="python3",
                args=("-c", DUMP, *args),
                env=full_env,
                num_replicas=replicas,
            ),
        ),
    )


def _compile_to(app: AppDef, job_dir: Path, **opts: Any) -> str:
    sched = PbsScheduler(state_dir=job_dir)
    options = sched.parse_options({"job_dir": str(job_dir), **opts})
    return sched.compile(app, options, app_id=APP_ID).render()


def _dump(folder: Path, replica: int) -> Any:
    log = (folder / f"r-{replica}.log").read_text()
    return json.loads(log.strip().splitlines()[-1])


_plain_text = st.text(
    alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20
)
#: Plain strings, and ones full of ``$`` sequences (shell and torchrun's Template both
#: give ``$`` a meaning): joined pieces such as ``$$x``, ``${local_rank}``, ``$(id)``.
_text = st.one_of(
    _plain_text,
    st.lists(
        st.sampled_from(["$", "$$", "${", "}", "local_rank", "(", ")", "`", "x", "'", '"']),
        max_size=6,
    ).map("".join),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    args=st.lists(_text, max_size=4),
    env=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), _text, max_size=3),
    launcher=st.sampled_from(["pbsdsh", "mpiexec"]),
    dir_name=st.from_regex(r"[A-Za-z0-9_.+@=,~-]{1,12}", fullmatch=True).filter(
        lambda s: s not in {".", ".."}
    ),
)
def test_arbitrary_strings_cannot_break_the_script(
    tmp_path_factory: pytest.TempPathFactory,
    args: list[str],
    env: dict[str, str],
    launcher: str,
    dir_name: str,
) -> None:
    env = {
        k: v
        for k, v in env.items()
        if k not in {"PATH", "DUMP_KEYS", "HOME", "PWD", "OLDPWD", "SHLVL"}
        and not k.startswith(("PBS", "DISTSPEC", "FAKE", "BASH"))
    }
    tmp = tmp_path_factory.mktemp("prop")
    job_dir = tmp / dir_name
    text = _compile_to(_dump_app(args, env), job_dir, launcher=launcher)
    _bash_n(text)
    proc = _run_script(text, tmp, hosts=["n0", "n1"])
    assert proc.returncode == 0, proc.stderr
    for node in range(2):
        got = _dump(job_dir / APP_ID, node)
        assert got["argv"] == args
        assert got["env"] == env
        assert (job_dir / APP_ID / f"r-{node}.exit").read_text().strip() == "0"


@pytest.mark.parametrize("launcher", ["pbsdsh", "mpiexec"])
def test_runtime_macros_are_each_tasks_own_values(tmp_path: Path, launcher: str) -> None:
    app = _dump_app(
        ["${replica_id}", "${rank0_host}:29500", "${app_id}", "${num_replicas}", "${img_root}"],
        {"NODE": "node-${replica_id}"},
    )
    text = _compile_to(app, tmp_path / "jobs", launcher=launcher, rank0_host="{host}.ib")
    # Torque-style nodefile: one line per slot (ppn=3), so host i's vnode is 3*i.
    proc = _run_script(text, tmp_path, hosts=["n0"] * 3 + ["n1"] * 3)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "jobs" / APP_ID
    for node in range(2):
        got = _dump(folder, node)
        assert got["argv"] == [str(node), "n0.ib:29500", "42.server", "2", str(tmp_path)]
        assert got["env"] == {"NODE": f"node-{node}"}
        assert (folder / f"r-{node}.host").read_text().strip() == f"n{node}"
    calls = (tmp_path / "launcher.log").read_text()
    if launcher == "pbsdsh":
        assert sorted(calls.splitlines()) == ["0 n0", "3 n1"]
    else:
        assert calls == f"mpiexec --ppn 1 /bin/bash {folder}/task.sh 42.server n0.ib {tmp_path}\n"
    assert (folder / "exit").read_text().strip() == "0"


@pytest.mark.parametrize("launcher", ["pbsdsh", "mpiexec"])
def test_unbuffered_reaches_the_replicas(tmp_path: Path, launcher: str) -> None:
    role = dataclasses.replace(_dump_app([], {}).roles[0], env={"DUMP_KEYS": "PYTHONUNBUFFERED"})
    for opts, want in (({}, "1"), ({"unbuffered": "false"}, None)):
        job_dir = tmp_path / str(want)
        app = AppDef(name="dump", roles=(role,))
        proc = _run_script(
            _compile_to(app, job_dir, launcher=launcher, **opts), tmp_path, hosts=["n0", "n1"]
        )
        assert proc.returncode == 0, proc.stderr
        assert _dump(job_dir / APP_ID, 1)["env"] == {"PYTHONUNBUFFERED": want}


def test_one_node_runs_without_a_launcher_in_the_submit_dir(tmp_path: Path) -> None:
    app = _dump_app(["${replica_id}", "${rank0_host}"], {}, replicas=1)
    proc = _run_script(_compile_to(app, tmp_path / "jobs"), tmp_path, hosts=["n7"] * 4)
    assert proc.returncode == 0, proc.stderr
    # One host: the rendezvous host is the one the script runs on (the fake hostname
    # says "head"), whatever the nodefile says; no nodefile is needed at all.
    assert _dump(tmp_path / "jobs" / APP_ID, 0)["argv"] == ["0", "head"]
    assert (tmp_path / "jobs" / APP_ID / "r-0.host").read_text() == "head\n"
    assert not (tmp_path / "launcher.log").exists()


def test_too_few_hosts_is_a_clear_failure(tmp_path: Path) -> None:
    proc = _run_script(_compile_to(_dump_app([], {}), tmp_path / "jobs"), tmp_path, hosts=["n0"])
    assert proc.returncode == 1
    assert "2 hosts needed, PBS gave 1: n0" in proc.stderr


@pytest.mark.parametrize("launcher", ["pbsdsh", "mpiexec"])
def test_a_failing_replica_fails_the_script_and_records_its_code(
    tmp_path: Path, launcher: str
) -> None:
    app = AppDef(
        name="fail",
        roles=(
            Role(
                name="r",
                entrypoint="bash",
                # Replica 1 fails only once replica 0 has recorded its code: the script
                # stops the other replicas as soon as one fails, so without the wait
                # replica 0's code is there or not by chance.
                args=(
                    "-c",
                    'echo "node $1"; (( $1 == 1 )) || exit 0; for _ in $(seq 200); do '
                    '[[ -s "$DISTSPEC_JOB_DIR/r-0.exit" ]] && break; sleep 0.05; done; exit 7',
                    "x",
                    "${replica_id}",
                ),
                num_replicas=2,
            ),
        ),
    )
    text = _compile_to(app, tmp_path / "jobs", launcher=launcher)
    # A launcher that loses its tasks' codes, as pbsdsh and Slurm's mpiexec wrapper do.
    text = text.replace(" < /dev/null &", " < /dev/null || true &")
    assert text.count("|| true &") == 1
    proc = _run_script(text, tmp_path, hosts=["n0", "n1"])
    assert proc.returncode == 7, proc.stderr
    folder = tmp_path / "jobs" / APP_ID
    assert (folder / "r-0.exit").read_text().strip() == "0"
    assert (folder / "r-1.exit").read_text().strip() == "7"
    assert (folder / "r-1.log").read_text() == "node 1\n"
    assert (folder / "exit").read_text().strip() == "7"


def test_a_replica_without_an_exit_code_fails_the_job(tmp_path: Path) -> None:
    app = _dump_app([], {})
    text = _compile_to(app, tmp_path / "jobs")
    # The launcher never starts replica 1 (and says nothing about it).
    launch = 'do pbsdsh -n "${vnodes[i]}"'
    assert text.count(launch) == 1
    text = text.replace(launch, 'do (( i == 1 )) || pbsdsh -n "${vnodes[i]}"')
    proc = _run_script(text, tmp_path, hosts=["n0", "n1"])
    assert proc.returncode == 1
    assert "a replica recorded no exit code" in proc.stderr
    assert (tmp_path / "jobs" / APP_ID / "exit").read_text() == "1\n"


def test_retries_rerun_the_replicas(tmp_path: Path) -> None:
    marker = tmp_path / "tries"
    app = AppDef(
        name="retry",
        roles=(
            Role(
                name="r",
                entrypoint="bash",
                # Replica 0 fails on the first attempt only (mkdir succeeds once).
                args=("-c", f'[ "$1" != 0 ] || ! mkdir {marker} 2>/dev/null', "x", "${replica_id}"),
                num_replicas=2,
                max_retries=2,
            ),
        ),
    )
    proc = _run_script(_compile_to(app, tmp_path / "jobs"), tmp_path, hosts=["n0", "n1"])
    assert proc.returncode == 0, proc.stderr
    assert "retry 1 of 2" in proc.stderr
    assert (tmp_path / "jobs" / APP_ID / "attempt").read_text().strip() == "1"


# Replica 1 fails twice: first with a torchrun root-cause report (the shape torchrun
# prints), then without one; replica 0 succeeds.
_REPORT_THEN_PLAIN = r"""
(( DISTSPEC_REPLICA_ID == 1 )) || exit 0
# Fail only once replica 0 has recorded its 0: a failure stops the other replicas, and
# one stopped before it wrote its .exit would leave nothing to compare.
until [[ -e $DISTSPEC_JOB_DIR/r-0.exit ]]; do sleep 0.05; done
if [[ ! -e $DISTSPEC_JOB_DIR/../first-run-done ]]; then
  touch "$DISTSPEC_JOB_DIR/../first-run-done"
  printf '%s\n' '[rank1]:ValueError: attempt 0' 'Root Cause (first observed failure):' '[0]:' \
    '  rank      : 1 (local_rank: 1)' '  exitcode  : 7 (pid: 4242)'
  exit 1
fi
echo "this time it fails without a report"
exit 4
"""


@pytest.mark.parametrize("retries", [1, 0])
def test_the_last_attempts_failure_is_reported_not_an_earlier_ones(
    tmp_path: Path, retries: int
) -> None:
    """#15: the log keeps every attempt's output; what is read back about a replica
    (torchrun's report, the worker's code) is the last attempt's. Without retries the
    same holds when PBS reruns the job (the script runs twice)."""
    app = AppDef(
        name="report",
        roles=(
            Role(
                name="r",
                entrypoint="bash",
                args=("-c", _REPORT_THEN_PLAIN),
                num_replicas=2,
                max_retries=retries,
            ),
        ),
    )
    text = _compile_to(app, tmp_path / "jobs")
    folder = tmp_path / "jobs" / APP_ID
    for _ in range(1 if retries else 2):  # no retries: PBS reruns the job (-r y, qrerun)
        proc = _run_script(text, tmp_path, hosts=["n0", "n1"])
    assert proc.returncode == 4, proc.stderr
    assert "exitcode  : 7" in (folder / "r-1.log").read_text()  # the first run's report
    files = read_job_folder(folder)
    assert (files["r-0.exit"], files["r-1.exit"]) == ("0", "4")
    assert replica_exit(folder, files, "r", 1) == (4, "exited with 4")
    # Read from the log's start (no .start file), the first run's report would win.
    whole = {k: v for k, v in files.items() if not k.endswith(".start")}
    assert replica_exit(folder, whole, "r", 1)[0] == 7


# Attempt 0: replica 0 stops the batch shell, replica 1 succeeds, replica 0 fails, and
# the shell goes on only once both launchers have ended: its next `wait -n` reports
# replica 0's failure, and replica 1's ending is left unreported. Attempt 1: replica 1
# is slow. A wait that counted `wait -n` returns took that leftover for one of attempt
# 1's launchers and read the .exit files while replica 1 still ran ("1 replica(s)
# recorded no exit code" on every retry).
STALE_ENDING = r"""
attempt=$(< "$DISTSPEC_JOB_DIR/attempt")
stopped=$DISTSPEC_JOB_DIR/../stopped
if (( attempt == 0 && $1 == 0 )); then
  kill -STOP "$FAKE_BATCH_PID"
  touch "$stopped"
  while [[ ! -s $DISTSPEC_JOB_DIR/r-1.exit ]]; do sleep 0.01; done
  (sleep 0.5; kill -CONT "$FAKE_BATCH_PID") > /dev/null 2>&1 &
  exit 3
fi
if (( attempt == 0 )); then
  while [[ ! -e $stopped ]]; do sleep 0.01; done
fi
if (( attempt > 0 && $1 == 1 )); then sleep 1; fi
"""


def test_a_retry_waits_for_its_own_replicas(tmp_path: Path) -> None:
    app = AppDef(
        name="stale",
        roles=(
            Role(
                name="r",
                entrypoint="bash",
                args=("-c", STALE_ENDING, "x", "${replica_id}"),
                num_replicas=2,
                max_retries=1,
            ),
        ),
    )
    text = _compile_to(app, tmp_path / "jobs")
    text = text.replace("distspec_attempt=0\n", "export FAKE_BATCH_PID=$$\ndistspec_attempt=0\n", 1)
    proc = _run_script(text, tmp_path, hosts=["n0", "n1"])
    assert proc.returncode == 0, proc.stderr
    assert "retry 1 of 1" in proc.stderr
    assert "recorded no exit code" not in proc.stderr
    folder = tmp_path / "jobs" / APP_ID
    assert (folder / "attempt").read_text().strip() == "1"
    assert [(folder / f"r-{i}.exit").read_text().strip() for i in (0, 1)] == ["0", "0"]


def test_a_failure_stops_what_the_other_launchers_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    app = AppDef(
        name="stop",
        roles=(
            Role(
                name="r",
                entrypoint="bash",
                # Replica 1 runs until stopped; replica 0 fails once replica 1 runs.
                args=(
                    "-c",
                    f"if (( $1 == 1 )); then echo $$ > {pid_file}; exec sleep 60; fi; "
                    f"while [[ ! -s {pid_file} ]]; do sleep 0.01; done; exit 3",
                    "x",
                    "${replica_id}",
                ),
                num_replicas=2,
            ),
        ),
    )
    try:
        # The fake pbsdsh runs its task as a child, which SIGTERM to pbsdsh alone would
        # leave running (and writing its .exit into whatever attempt comes next).
        text = _compile_to(app, tmp_path / "jobs")
        proc = _run_script(text, tmp_path, hosts=["n0", "n1"], timeout=30)
        assert proc.returncode == 3, proc.stderr
        sleeper = int(pid_file.read_text())
        deadline = time.monotonic() + 20
        while not _gone(sleeper):
            assert time.monotonic() < deadline, "replica 1 outlived the failed attempt"
            time.sleep(0.05)
        assert not (tmp_path / "jobs" / APP_ID / "r-1.exit").exists()
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_sigterm_records_the_signal(tmp_path: Path) -> None:
    app = AppDef(
        name="term",
        roles=(Role(name="r", entrypoint="sleep", args=("30",), num_replicas=1),),
    )
    text = _compile_to(app, tmp_path / "jobs")
    folder = tmp_path / "jobs" / APP_ID
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hostname").write_text(FAKE_HOSTNAME)
    (bin_dir / "hostname").chmod(0o755)
    (tmp_path / "job.pbs").write_text(text)
    proc = subprocess.Popen(
        ["bash", str(tmp_path / "job.pbs")],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PBS_JOBID": "9", "PBS_O_WORKDIR": str(tmp_path)},
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (folder / "r-0.host").exists():
            assert time.monotonic() < deadline, "the replica never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # what qdel does first
        assert proc.wait(timeout=30) == 143
    finally:
        proc.kill()
        proc.wait()
    assert (folder / "signal").read_text().strip() == "TERM"
    assert (folder / "exit").read_text().strip() == "143"


# -- qstat parsing: hand-written samples after the PBS Pro / Torque documentation --

# Hand-written: PBS Pro 2022 `qstat -f` of a running job; long values wrap onto lines
# that start with a tab.
PBSPRO_RUNNING = """\
Job Id: 1234.pbs01
    Job_Name = train
    Job_Owner = alice@login01.example.org
    resources_used.cpupercent = 1590
    resources_used.walltime = 00:05:12
    job_state = R
    queue = workq
    server = pbs01
    Checkpoint = u
    ctime = Mon Jan 15 10:00:00 2024
    Error_Path = login01.example.org:/shared/jobs/train-0000abcd.e1234
    exec_host = gpu001/0*16+gpu002/0*16
    exec_vnode = (gpu001:ncpus=16:ngpus=8:mem=67108864kb)+(gpu002:ncpus=16:ngpus=8:mem
	=67108864kb)
    Hold_Types = n
    Join_Path = oe
    Keep_Files = n
    Mail_Points = a
    Output_Path = login01.example.org:/shared/jobs/train-00
	00abcd.out
    Resource_List.mpiprocs = 2
    Resource_List.ncpus = 32
    Resource_List.nodect = 2
    Resource_List.place = scatter
    Resource_List.select = 2:ncpus=16:mpiprocs=1:ngpus=8:mem=65536mb
    Resource_List.walltime = 02:00:00
    substate = 42
    comment = Job run at Mon Jan 15 at 10:00 on (gpu001:ncpus=16:ngpus=8:mem=6710886
	4kb)+(gpu002:ncpus=16:ngpus=8:mem=67108864kb)
    Submit_arguments = -j oe -o /shared/jobs/train-0000abcd.out train-0000abcd.pbs
    project = _pbs_project_default
"""

# Hand-written: PBS Pro `qstat -x -f` of the same job after it failed.
PBSPRO_FINISHED = PBSPRO_RUNNING.replace("job_state = R", "job_state = F").replace(
    "    substate = 42\n", "    substate = 92\n    Exit_status = 3\n"
)

PBSPRO_QUEUED = """\
Job Id: 1240.pbs01
    Job_Name = train
    job_state = Q
    queue = workq
    comment = Not Running: Insufficient amount of resource: ngpus (R: 16 A: 8 T: 8)
    Output_Path = login01:/shared/jobs/train-0000abcd.out
"""

# Hand-written: Torque 6 `qstat -f` of a completed job.
TORQUE_COMPLETED = """\
Job Id: 77.torque.example.org
    Job_Name = train
    Job_Owner = bob@head.example.org
    resources_used.walltime = 00:00:31
    job_state = C
    queue = batch
    server = torque.example.org
    exec_host = n01/0-7+n02/0-7
    Output_Path = head.example.org:/shared/jobs/train-0000abcd.out
    Resource_List.nodes = 2:ppn=8
    exit_status = 0
"""

# Captured from Slurm's PBS wrappers on the local cluster (qstat -f of a finished job).
WRAPPER_COMPLETED = """\
Job Id:\t90
\tJob_Name = probe
\tJob_Owner = root@localhost
\tjob_state = C
\tqueue = debug
\tqtime = Sun Nov 22 23:47:59 2026
\tAccount_Name = root
\texec_host = n0/1+n1/1
\tResource_List.walltime = 00:05:00
\tResource_List.nodect = 2
"""


def test_parse_qstat_full_joins_wrapped_values() -> None:
    attrs = parse_qstat_full(PBSPRO_RUNNING)["1234.pbs01"]
    assert attrs["job_state"] == "R"
    assert attrs["Output_Path"] == "login01.example.org:/shared/jobs/train-0000abcd.out"
    assert attrs["exec_vnode"].endswith("+(gpu002:ncpus=16:ngpus=8:mem=67108864kb)")
    assert attrs["Resource_List.select"] == "2:ncpus=16:mpiprocs=1:ngpus=8:mem=65536mb"
    wrapper = parse_qstat_full(WRAPPER_COMPLETED)["90"]
    assert (wrapper["job_state"], wrapper["exec_host"]) == ("C", "n0/1+n1/1")
    assert parse_qstat_full("") == {}


# -- the effectful half through fake commands --------------------------------------


@pytest.fixture
def sched(fake_commands: FakeCommands, tmp_path: Path) -> PbsScheduler:
    return PbsScheduler(run_cmd=fake_commands, state_dir=tmp_path / "state")


def _submit(
    sched: PbsScheduler, fake: FakeCommands, tmp_path: Path, app: AppDef, job: str = "1234.pbs01"
) -> str:
    req = sched.compile(
        app, sched.parse_options({"job_dir": str(tmp_path / "jobs")}), app_id=APP_ID
    )
    fake.on("qsub", stdout=f"{job}\n")
    return sched.submit(req)


def test_compile_names_the_folder_submit_creates(tmp_path: Path) -> None:
    sched = PbsScheduler(state_dir=tmp_path)
    app = _app(_role(1, 1))
    assert sched.compile(app, sched.parse_options({}), app_id=APP_ID).job_dir == str(
        tmp_path / "pbs"
    )
    opts = sched.parse_options({"job_dir": "/shared/jobs"})
    assert sched.compile(app, opts, app_id=APP_ID).job_dir == "/shared/jobs"
    assert PbsScheduler.capabilities.image == "directory"


def test_job_paths_after_submit_name_the_folder_the_logs_and_the_script_output(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    job = _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    paths = sched.job_paths(job)
    assert paths is not None
    assert paths.folder == str(tmp_path / "jobs" / APP_ID)
    assert paths.replica_log("trainer", 1) == str(tmp_path / "jobs" / APP_ID / "trainer-1.log")
    # The script's own output is what qsub -o names, and the folder is the script's.
    assert paths.script_output == fake_commands.calls[0][4]
    script = (tmp_path / "jobs" / f"{APP_ID}.pbs").read_text()
    assert f"export DISTSPEC_JOB_DIR={paths.folder}\n" in script
    assert fake_commands.calls[1:] == []  # from the record: no query
    fake_commands.on("qstat", returncode=153, stderr="qstat: Unknown Job Id 99.pbs01\n")
    assert sched.job_paths("99.pbs01") is None


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "jobs" / APP_ID
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_submit_writes_the_script_and_returns_the_job_id(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    job = _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    assert job == "1234.pbs01"
    script = tmp_path / "jobs" / f"{APP_ID}.pbs"
    out = tmp_path / "jobs" / f"{APP_ID}.out"
    assert fake_commands.calls == [("qsub", "-j", "oe", "-o", str(out), str(script))]
    assert script.read_text().startswith("#!/bin/bash\n#PBS -N train\n")
    record = json.loads((tmp_path / "state" / "pbs" / "jobs" / "1234.pbs01.json").read_text())
    assert record["folder"] == f"{tmp_path}/jobs/{APP_ID}"
    assert record["roles"] == [["trainer", 2]]


def test_submit_failures_are_scheduler_errors(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    req = sched.compile(_app(_role(1, 1)), sched.parse_options({}), app_id=APP_ID)
    fake_commands.on("qsub", returncode=38, stderr="qsub: Unknown queue\n")
    with pytest.raises(SchedulerError, match="Unknown queue"):
        sched.submit(req)
    # Slurm's wrapper reports sbatch's error on stdout (captured).
    fake_commands.on(
        "qsub",
        returncode=1,
        stdout="There was an error running the Slurm sbatch command.\n"
        "and the output was:\n'sbatch: error: Unable to open file /nonexistent\n'\n",
    )
    with pytest.raises(SchedulerError, match="Unable to open file"):
        sched.submit(req)
    fake_commands.on("qsub", stdout="something odd\n")
    with pytest.raises(SchedulerError, match="not a job id"):
        sched.submit(req)


def test_describe_pbspro_running_then_finished_through_history(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 8)))
    folder = _folder(tmp_path)
    (folder / "trainer-0.host").write_text("gpu001\n")
    fake_commands.on("qstat", stdout=PBSPRO_RUNNING)
    status = sched.describe("1234.pbs01")
    assert status is not None
    assert (status.state, status.msg) == (AppState.RUNNING, "running")
    assert [r.hostname for r in status.roles[0].replicas] == ["gpu001", "gpu002"]

    (folder / "trainer-1.host").write_text("gpu002\n")
    (folder / "trainer-0.exit").write_text("0\n")
    (folder / "trainer-1.exit").write_text("3\n")
    fake_commands.on(
        "qstat",
        returncode=35,
        stderr="qstat: 1234.pbs01 Job has finished, use -x or -H to obtain historical "
        "job information\n",
    )
    fake_commands.on("qstat", stdout=PBSPRO_FINISHED, match=lambda a: "-x" in a)
    fake_commands.calls.clear()
    status = sched.describe("1234.pbs01")
    assert fake_commands.calls == [
        ("qstat", "-f", "1234.pbs01"),
        ("qstat", "-x", "-f", "1234.pbs01"),
    ]
    assert status is not None
    assert (status.state, status.msg) == (AppState.FAILED, "exit status 3")
    failed = status.first_failure()
    assert failed is not None
    assert (failed.id, failed.exit_code, failed.hostname) == (1, 3, "gpu002")


@pytest.mark.parametrize(
    ("exit_status", "state", "msg"),
    [
        ("0", AppState.SUCCEEDED, "finished"),
        ("271", AppState.CANCELLED, "killed by SIGTERM"),
        ("-29", AppState.CANCELLED, "walltime"),
        ("-1", AppState.FAILED, "could not start"),
        ("-99", AppState.FAILED, "could not run"),
    ],
)
def test_pbspro_exit_status_values(
    sched: PbsScheduler,
    fake_commands: FakeCommands,
    tmp_path: Path,
    exit_status: str,
    state: AppState,
    msg: str,
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 8)))
    fake_commands.on(
        "qstat", stdout=PBSPRO_FINISHED.replace("Exit_status = 3", f"Exit_status = {exit_status}")
    )
    status = sched.describe("1234.pbs01")
    assert status is not None
    assert status.state is state
    assert msg in status.msg


def test_a_walltime_kill_is_said_as_such_though_the_script_saw_sigterm(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    """A real OpenPBS server ends a job past its walltime with SIGTERM (the script's trap
    writes ``signal``) and Exit_status -29: the walltime is the reason given (#29)."""
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 8)))
    (_folder(tmp_path) / "signal").write_text("TERM\n")
    fake_commands.on(
        "qstat", stdout=PBSPRO_FINISHED.replace("Exit_status = 3", "Exit_status = -29")
    )
    status = sched.describe("1234.pbs01")
    assert status is not None
    assert (status.state, status.msg) == (
        AppState.CANCELLED,
        "the job exceeded its walltime (Exit_status -29)",
    )
    # Without a limit's code, the trap's record says how it ended.
    fake_commands.on(
        "qstat", stdout=PBSPRO_FINISHED.replace("Exit_status = 3", "Exit_status = 271")
    )
    status = sched.describe("1234.pbs01")
    assert status is not None and status.msg == "terminated by SIGTERM"


def test_describe_queued_shows_the_server_comment(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 8)), job="1240.pbs01")
    fake_commands.on("qstat", stdout=PBSPRO_QUEUED)
    status = sched.describe("1240.pbs01")
    assert status is not None
    assert status.state is AppState.PENDING
    assert "Insufficient amount of resource: ngpus" in status.msg


def test_describe_torque_without_a_record_finds_the_folder(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    # Submitted from another state dir: the folder comes from Output_Path.
    folder = Path("/shared/jobs/train-0000abcd")
    fake_commands.on("qstat", stdout=TORQUE_COMPLETED)
    status = sched.describe("77.torque.example.org")
    assert status is not None
    assert status.state is AppState.SUCCEEDED
    assert [(r.role, r.hostname) for r in status.roles[0].replicas] == [
        ("train", "n01"),
        ("train", "n02"),
    ]
    fake_commands.on("qstat", stdout=TORQUE_COMPLETED)
    paths = sched.job_paths("77.torque.example.org")
    assert paths is not None
    assert (paths.folder, paths.script_output) == (str(folder), f"{folder}.out")


def test_a_finished_job_without_record_or_output_path_is_unknown_not_cancelled(
    sched: PbsScheduler, fake_commands: FakeCommands
) -> None:
    # Submitted by hand (the -o DIR files) and listed by Slurm's wrappers, which name no
    # Output_Path: nothing says how it ended, so distspec does not guess CANCELLED.
    fake_commands.on("qstat", stdout=WRAPPER_COMPLETED)
    status = sched.describe("90")
    assert status is not None
    assert status.state is AppState.UNKNOWN
    assert "job folder is unknown" in status.msg
    assert {r.state for r in status.roles[0].replicas} == {AppState.UNKNOWN}


@pytest.mark.parametrize(
    ("files", "state", "msg"),
    [
        ({"exit": "0", "trainer-0.exit": "0", "trainer-1.exit": "0"}, AppState.SUCCEEDED, ""),
        ({"exit": "4", "trainer-0.exit": "4", "trainer-0.host": "n0"}, AppState.FAILED, "4"),
        ({"exit": "143", "signal": "TERM", "trainer-0.host": "n0"}, AppState.CANCELLED, "TERM"),
        ({}, AppState.CANCELLED, "before any replica started"),
        ({"trainer-0.host": "n0"}, AppState.FAILED, "without recording"),
    ],
)
def test_wrapper_finished_job_state_comes_from_the_folder(
    sched: PbsScheduler,
    fake_commands: FakeCommands,
    tmp_path: Path,
    files: dict[str, str],
    state: AppState,
    msg: str,
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)), job="90")
    folder = _folder(tmp_path)
    for name, text in files.items():
        (folder / name).write_text(text + "\n")
    fake_commands.on("qstat", stdout=WRAPPER_COMPLETED)
    status = sched.describe("90")
    assert status is not None
    assert status.state is state, status.format()
    assert msg in status.msg


def test_describe_after_pbs_forgot_the_job(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)), job="90")
    folder = _folder(tmp_path)
    for name in ("exit", "trainer-0.exit", "trainer-1.exit"):
        (folder / name).write_text("0\n")
    fake_commands.on("qstat", returncode=153)  # Slurm's wrapper: silent
    status = sched.describe("90")
    assert status is not None
    assert status.state is AppState.SUCCEEDED
    assert "no longer lists job 90" in status.msg
    fake_commands.on("qstat", returncode=153, stderr="qstat: Unknown Job Id 999.pbs01\n")
    assert sched.describe("999.pbs01") is None
    fake_commands.on("qstat", returncode=1, stderr="qstat: cannot connect to server pbs01\n")
    with pytest.raises(SchedulerError, match="cannot connect"):
        sched.describe("90")
    with pytest.raises(UsageError):
        sched.describe("not a job")


def test_log_iter_reads_the_replica_file(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    (_folder(tmp_path) / "trainer-1.log").write_text("a\nb\n")
    assert list(sched.log_iter("1234.pbs01", "trainer", 1)) == ["a", "b"]
    assert list(sched.log_iter("1234.pbs01", "trainer", 0)) == []
    with pytest.raises(UsageError, match="since"):
        sched.log_iter("1234.pbs01", "trainer", 1, since=0.0)
    fake_commands.on("qstat", returncode=153)
    with pytest.raises(SchedulerError, match="log folder"):
        sched.log_iter("55", "trainer", 0)


def test_cancel(sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 8)))
    fake_commands.on("qstat", stdout=PBSPRO_RUNNING)
    fake_commands.on("qdel")
    sched.cancel("1234.pbs01")
    assert fake_commands.calls[-1] == ("qdel", "1234.pbs01")
    # The marker makes the finished job read as cancelled whatever its exit status.
    fake_commands.on("qstat", stdout=PBSPRO_FINISHED)
    status = sched.describe("1234.pbs01")
    assert status is not None and status.state is AppState.CANCELLED

    # Already finished: no qdel at all.
    fake_commands.calls.clear()
    fake_commands.on("qstat", stdout=PBSPRO_FINISHED)
    sched.cancel("1234.pbs01")
    assert [c[0] for c in fake_commands.calls] == ["qstat"]

    # qdel fails because the job ended in between (Slurm's wrapper: rc 1, silent).
    fake_commands.on("qstat", stdout=PBSPRO_RUNNING)
    fake_commands.on("qdel", returncode=1)
    fake_commands.on("qstat", returncode=153)
    sched.cancel("1234.pbs01")

    # qdel fails and the job still runs: an error.
    fake_commands.on("qstat", stdout=PBSPRO_RUNNING)
    fake_commands.on("qdel", returncode=159, stderr="qdel: Unauthorized Request 1234.pbs01\n")
    fake_commands.on("qstat", stdout=PBSPRO_RUNNING)
    with pytest.raises(SchedulerError, match="Unauthorized"):
        sched.cancel("1234.pbs01")


# Hand-written: PBS Pro's default `qstat` table.
PBSPRO_TABLE = """\
Job id            Name             User              Time Use S Queue
----------------  ---------------- ----------------  -------- - -----
1233.pbs01        other            someoneelse       00:00:01 R workq
1234.pbs01        train            {user}            00:05:12 R workq
1240.pbs01        train            {user}                   0 Q workq
"""


def test_list_keeps_the_users_jobs(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    import getpass

    user = getpass.getuser()
    fake_commands.on("qstat", stdout=PBSPRO_TABLE.format(user=user))
    apps = sched.list()
    assert [(a.app_id, a.name, a.state) for a in apps] == [
        ("1240.pbs01", "train", AppState.PENDING),
        ("1234.pbs01", "train", AppState.RUNNING),
    ]
    # Slurm's wrappers also list finished jobs (C): the job folder decides their state.
    _submit(sched, fake_commands, tmp_path, _app(_role(1, 1)), job="90")
    (_folder(tmp_path) / "exit").write_text("0\n")
    fake_commands.on(
        "qstat",
        stdout=f"Job id   Name   Username   Time Use S Queue\n"
        f"------- ------ ------- -------- - -----\n"
        f"90    train    {user}    00:00:00 C debug\n",
    )
    # The table has no times: submitted comes from the record, ended from the folder.
    record = tmp_path / "state" / "pbs" / "jobs" / "90.json"
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "submitted": 1000.0}))
    os.utime(_folder(tmp_path) / "exit", (1042.5, 1042.5))
    apps = sched.list()
    assert [(a.app_id, a.state, a.detail) for a in apps] == [("90", AppState.SUCCEEDED, "finished")]
    assert dict(apps[0].extra) == {"submitted": "1000.0", "ended": "1042.5"}
    # While it runs: submitted only.
    fake_commands.on(
        "qstat",
        stdout=f"Job id   Name   Username   Time Use S Queue\n"
        f"------- ------ ------- -------- - -----\n"
        f"90    train    {user}    00:00:00 R debug\n",
    )
    assert dict(sched.list()[0].extra) == {"submitted": "1000.0"}


@pytest.mark.parametrize(
    "x_answer",
    [
        (
            "Unknown option: x\nUsage:\n    qstat [-f] [-a|-i|-r] [job_id...]\n",
            0,
        ),  # Slurm's wrapper
        ('<?xml version="1.0"?><Data><Job><Job_Id>1234.pbs01</Job_Id></Job></Data>', 0),  # Torque
        ("", 2),
    ],
)
def test_list_asks_qstat_x_for_the_history_and_falls_back_to_plain_qstat(
    sched: PbsScheduler, fake_commands: FakeCommands, x_answer: tuple[str, int]
) -> None:
    """PBS Pro and OpenPBS list finished jobs only with -x (a real OpenPBS server showed
    it, #29); Torque's -x is XML and Slurm's wrappers have no -x: plain qstat then."""
    import getpass

    table = PBSPRO_TABLE.format(user=getpass.getuser())
    fake_commands.on("qstat", stdout=x_answer[0], returncode=x_answer[1])
    fake_commands.on("qstat", stdout=table)
    assert [a.app_id for a in sched.list()] == ["1240.pbs01", "1234.pbs01"]
    assert fake_commands.calls == [("qstat", "-x"), ("qstat",)]
    # A server with history answers -x with its table: one query.
    fake_commands.calls.clear()
    fake_commands.on("qstat", stdout=table, match=lambda argv: list(argv) == ["qstat", "-x"])
    assert [a.app_id for a in sched.list()] == ["1240.pbs01", "1234.pbs01"]
    assert fake_commands.calls == [("qstat", "-x")]


def test_a_rerun_counts_as_a_restart(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    """PBS Pro's ``run_count`` 3 (two qreruns or requeues; a real OpenPBS server showed
    it, #29): two restarts, and the last run's exit status decides."""
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 8)))
    finished = PBSPRO_FINISHED.replace("Exit_status = 3", "Exit_status = 0\n    run_count = 3")
    fake_commands.on("qstat", stdout=finished)
    status = sched.describe("1234.pbs01")
    assert status is not None
    assert (status.state, status.num_restarts) == (AppState.SUCCEEDED, 2)
    assert {r.restarts for r in status.roles[0].replicas} == {2}


def test_exit_status_0_without_the_scripts_exit_is_not_success(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    """``qsig -s KILL`` kills the script before its EXIT trap writes ``exit``, and a
    real OpenPBS server still reports Exit_status 0 (#29): not SUCCEEDED."""
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 8)))
    (_folder(tmp_path) / "trainer-0.host").write_text("gpu001\n")
    zero = PBSPRO_FINISHED.replace("Exit_status = 3", "Exit_status = 0")
    fake_commands.on("qstat", stdout=zero)
    status = sched.describe("1234.pbs01")
    assert status is not None and status.state is AppState.FAILED, status
    assert "killed before it recorded its exit" in status.msg
    # With the script's own record, 0 is success.
    (_folder(tmp_path) / "exit").write_text("0\n")
    fake_commands.on("qstat", stdout=zero)
    status = sched.describe("1234.pbs01")
    assert status is not None and status.state is AppState.SUCCEEDED, status
