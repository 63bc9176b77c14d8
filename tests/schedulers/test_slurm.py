"""Slurm backend without a cluster: goldens, quoting, the script run under fake srun,
and command parsing through the recording ``fake_commands``."""

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
from distspec.schedulers.slurm import (
    SLURM_STATES,
    GpuFlag,
    SlurmOptions,
    SlurmScheduler,
    expand_hostlist,
)
from distspec.schedulers.slurm.script import sbatch_value
from distspec.specs import AppDef, AppState, Resource, RetryPolicy, Role
from tests.conftest import FakeCommands
from tests.schedulers.batch_apps import APP_ID, compile_text, trainer_role
from tests.schedulers.batch_apps import app as _app
from tests.schedulers.batch_apps import bash_n as _bash_n
from tests.schedulers.batch_apps import pid_gone as _gone


def _role(
    nodes: int, nproc: int, *, gpu: int = 0, min_nodes: int | None = None, name: str = "trainer"
) -> Role:
    return trainer_role(nodes, nproc, gpu=gpu, min_nodes=min_nodes, name=name)


def _compile(app: AppDef, **opts: Any) -> str:
    return compile_text(SlurmScheduler, app, **opts)


ALL_OPTIONS = {
    "partition": "gpu",
    "account": "proj-1",
    "qos": "high",
    "time": "1-02:00:00",
    "constraint": "a100&ib",
    "nodelist": "n[0-3]",
    "exclude": "n7,n8",
    "exclusive": "true",
    "comment": 'say "hi" it\'s #1',
    "mail_user": "me@example.org",
    "mail_type": "END,FAIL",
    "requeue": "true",
    "requeue_signal": "SIGUSR2",
    "requeue_before": "300",
    "kill_on_bad_exit": "false",
    "gpu_flag": "gres",
    "mem": "false",
    "rank0_host": "{host}-ib",
    "sbatch_args": "--reservation=maint;--begin=now+1hour",
    "srun_args": "--mpi=none;--label",
}

GOLDEN_CASES: dict[str, Callable[[], str]] = {
    "1node": lambda: _compile(_app(_role(1, 2))),
    "2x8": lambda: _compile(_app(_role(2, 8, gpu=8))),
    "elastic_1-4x8": lambda: _compile(_app(_role(4, 8, gpu=8, min_nodes=1))),
    "multi_role": lambda: _compile(
        _app(
            _role(2, 4, gpu=4, name="trainer"),
            dataclasses.replace(
                _role(1, 1, name="reader"), entrypoint="python", args=("-m", "reader")
            ),
        )
    ),
    "all_options": lambda: _compile(_app(_role(2, 8, gpu=8)), **ALL_OPTIONS),
    "retries": lambda: _compile(_app(dataclasses.replace(_role(2, 2), max_retries=2))),
    "spares": lambda: _compile(_app(_role(2, 2)), spares="1"),
    "spares_requeue_retries": lambda: _compile(
        _app(dataclasses.replace(_role(4, 8, gpu=8), max_retries=1)),
        spares="2",
        requeue="true",
        rank0_host="{host}-ib",
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_scripts(case: str, golden: Callable[[str, str], None]) -> None:
    text = GOLDEN_CASES[case]()
    golden(f"slurm/{case}.sbatch", text)
    _bash_n(text)


def test_single_role_is_a_plain_job_and_multi_role_a_hetjob() -> None:
    plain = _compile(_app(_role(2, 8)))
    assert "hetjob" not in plain and "--het-group" not in plain
    assert plain.count("\nsrun ") + plain.count("\n  srun ") == 1
    het = _compile(_app(_role(2, 8), _role(1, 1, name="reader")))
    assert het.count("#SBATCH hetjob") == 1
    assert "--het-group=0" in het and "--het-group=1" in het
    assert re.search(r"#SBATCH --nodes=2\n.*#SBATCH hetjob\n#SBATCH --nodes=1", het, re.S)


def test_script_size_does_not_grow_with_nodes() -> None:
    small = _compile(_app(_role(2, 8, gpu=8)))
    large = _compile(_app(_role(1024, 8, gpu=8)))
    assert re.sub(r"\d+", "N", small) == re.sub(r"\d+", "N", large)
    assert abs(len(large) - len(small)) <= 3 * len("1024")  # --nodes, comment, --nnodes


def test_elastic_is_a_node_range() -> None:
    assert "#SBATCH --nodes=1-4\n" in _compile(_app(_role(4, 8, min_nodes=1)))


def test_resources_map_to_flags() -> None:
    text = _compile(_app(_role(2, 4, gpu=4)))
    assert "#SBATCH --cpus-per-task=8\n" in text
    assert "#SBATCH --mem=32768\n" in text
    assert "#SBATCH --gpus-per-node=4\n" in text
    gres = _compile(_app(_role(2, 4, gpu=4)), gpu_flag="gres")
    assert "#SBATCH --gres=gpu:4\n" in gres and "gpus-per-node" not in gres
    dev = dataclasses.replace(_role(1, 1), resource=Resource(cpu=1, gpu=2, devices={"mps": 100}))
    assert "#SBATCH --gres=gpu:2,mps:100\n" in _compile(_app(dev), gpu_flag="gres")
    bad = dataclasses.replace(_role(1, 1), resource=Resource(devices={"vpc.amazonaws.com/efa": 1}))
    with pytest.raises(CompileError, match="gres"):
        _compile(_app(bad))
    # srun 22.05+ does not inherit --cpus-per-task: the step must ask again.
    assert re.search(r"srun [^\n]*--cpus-per-task=8", text)


def test_the_common_case_reads_like_a_hand_written_script() -> None:
    # One role, no retries: one srun in the foreground, none of the wait/retry machinery.
    text = _compile(_app(_role(2, 8, gpu=8)))
    assert len(text.splitlines()) < 40
    assert "distspec_wait" not in text and "set -m" not in text and "declare -f" not in text
    assert text.count("\nsrun ") == 1 and not text.rstrip().endswith("&")
    # Several roles or retries need it, and get it.
    for app in (
        _app(_role(2, 8), _role(1, 1, name="reader")),
        _app(dataclasses.replace(_role(2, 2), max_retries=1)),
    ):
        assert "distspec_wait" in _compile(app)


def test_unspecified_cpu_and_memory_are_left_to_the_cluster() -> None:
    role = dataclasses.replace(_role(2, 8), resource=Resource(gpu=8))
    text = _compile(_app(role))
    assert "--cpus-per-task" not in text and "--mem" not in text
    assert "#SBATCH --gpus-per-node=8\n" in text


def test_unbuffered_output_by_default_and_off_on_request() -> None:
    for app in (_app(_role(2, 8)), _app(_role(2, 8), _role(1, 1, name="reader"))):
        text = _compile(app)
        assert "\nexport PYTHONUNBUFFERED=1\n" in text and " --unbuffered " in text
        off = _compile(app, unbuffered="false")
        assert "PYTHONUNBUFFERED" not in off and "--unbuffered" not in off
    # A role's own value wins: it is exported after the script's default.
    role = dataclasses.replace(_role(1, 1), env={"PYTHONUNBUFFERED": "0"})
    text = _compile(_app(role))
    assert text.index("export PYTHONUNBUFFERED=1") < text.index("export PYTHONUNBUFFERED=0")


def test_unbuffered_reaches_the_replicas(tmp_path: Path) -> None:
    role = dataclasses.replace(_dump_app([], {}).roles[0], env={"DUMP_KEYS": "PYTHONUNBUFFERED"})
    for opts, want in (({}, "1"), ({"unbuffered": "false"}, None)):
        folder = tmp_path / str(want)
        app = AppDef(name="dump", roles=(role,))
        proc = _run_script(_compile_to(app, folder, **opts), tmp_path)
        assert proc.returncode == 0, proc.stderr
        log = (folder / "dump-42" / "r-0.log").read_text().strip().splitlines()[-1]
        assert json.loads(log)["env"] == {"PYTHONUNBUFFERED": want}


def test_env_is_exported_in_the_script_body_not_through_export() -> None:
    role = dataclasses.replace(_role(1, 1), env={"A": "x,y=z", "B": "it's"})
    text = _compile(_app(role))
    assert "  export A=x,y=z\n" in text
    assert "--export" not in text


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"time": "tomorrow"}, "time="),
        ({"mail_type": "END,SOMETIMES"}, "SOMETIMES"),
        ({"requeue_signal": "NOPE"}, "signal"),
        ({"rank0_host": "no-placeholder"}, "rank0_host"),
        ({"sbatch_args": "-p gpu"}, "long flag"),
        ({"sbatch_args": "--output=/tmp/x"}, "set by distspec"),
        ({"sbatch_args": "--partition=x"}, "-cfg partition"),
        ({"srun_args": "--export=NONE"}, "set by distspec"),
        ({"srun_args": "label"}, "long flag"),
        ({"job_dir": "relative/dir"}, "absolute"),
        ({"job_dir": "/a/%j"}, "%"),
        ({"comment": "two\nlines"}, "line break"),
    ],
)
def test_bad_options_are_compile_errors(opts: dict[str, str], match: str) -> None:
    with pytest.raises(CompileError, match=match):
        _compile(_app(_role(1, 1)), **opts)


def test_replica_retry_policy_is_refused() -> None:
    role = dataclasses.replace(_role(2, 2), max_retries=1, retry_policy=RetryPolicy.REPLICA)
    with pytest.raises(CompileError, match="replica"):
        _compile(_app(role))


def test_no_job_dir_without_state_dir_is_a_compile_error() -> None:
    sched = SlurmScheduler()
    with pytest.raises(CompileError, match="job_dir"):
        sched.compile(_app(_role(1, 1)), sched.parse_options({}), app_id=APP_ID)


def test_default_job_dir_is_under_the_state_dir(tmp_path: Path) -> None:
    sched = SlurmScheduler(state_dir=tmp_path)
    text = sched.compile(_app(_role(1, 1)), sched.parse_options({}), app_id=APP_ID).render()
    assert f"#SBATCH --output={tmp_path}/slurm/train-%j.out" in text


def test_mounts_are_refused() -> None:
    from distspec.specs import BindMount

    role = dataclasses.replace(_role(1, 1), mounts=(BindMount(src_path="/a", dst_path="/b"),))
    with pytest.raises(CompileError, match="mount"):
        _compile(_app(role))


def test_every_listed_slurm_state_is_mapped() -> None:
    listed = """PENDING CONFIGURING RUNNING COMPLETING COMPLETED FAILED CANCELLED TIMEOUT
        NODE_FAIL PREEMPTED OUT_OF_MEMORY BOOT_FAIL DEADLINE REQUEUED SUSPENDED"""
    for state in listed.split():
        assert state in SLURM_STATES
    assert SLURM_STATES["TIMEOUT"] is AppState.CANCELLED
    assert SLURM_STATES["PREEMPTED"] is AppState.CANCELLED
    assert SLURM_STATES["COMPLETED"] is AppState.SUCCEEDED
    assert SLURM_STATES["OUT_OF_MEMORY"] is AppState.FAILED


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("n[0-1]", ["n0", "n1"]),
        ("n0,n1", ["n0", "n1"]),
        ("gpu[01-03,07],cpu9", ["gpu01", "gpu02", "gpu03", "gpu07", "cpu9"]),
        ("r[1-2]-n[0-1]", ["r1-n0", "r1-n1", "r2-n0", "r2-n1"]),
        ("None assigned", []),
        ("", []),
    ],
)
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


# -- #SBATCH quoting: sbatch tokenises these lines itself --------------------------


def _sbatch_unquote(text: str) -> str:
    """What sbatch 22.05 makes of a quoted #SBATCH value (checked on the local cluster):
    quotes of either kind are removed, what they enclose is kept verbatim."""
    out, quote = [], ""
    for c in text:
        if quote:
            if c == quote:
                quote = ""
            else:
                out.append(c)
        elif c in "\"'":
            quote = c
        else:
            out.append(c)
    return "".join(out)


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_characters="\n\r\x00", blacklist_categories=("Cs",)))
)
def test_sbatch_values_survive_sbatch_tokenising(text: str) -> None:
    quoted = sbatch_value(text)
    assert _sbatch_unquote(quoted) == text
    assert not re.search(r"\s", _sbatch_unquote_outside(quoted))


def _sbatch_unquote_outside(text: str) -> str:
    """The characters of ``text`` that are outside quotes (must hold no whitespace)."""
    out, quote = [], ""
    for c in text:
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        else:
            out.append(c)
    return "".join(out)


# -- the script itself, run by bash under a fake srun/scontrol ---------------------

FAKE_SRUN = r"""#!/bin/bash
# Fake srun: runs the command once per node, as Slurm would run one task per node.
out=""
while [[ $1 == --* ]]; do
  case $1 in --output=*) out=${1#--output=};; esac
  shift
done
rc=0
for ((i = 0; i < ${FAKE_NODES:-2}; i++)); do
  SLURM_NODEID=$i SLURMD_NODENAME=n$i "$@" >> "${out//%t/$i}" 2>&1 || rc=$?
done
exit $rc
"""

FAKE_SCONTROL = r"""#!/bin/bash
case "$1 $2" in
  "show hostnames") echo n0; echo n1;;
  *) echo "$@" >> "$FAKE_SCONTROL_LOG";;
esac
"""

DUMP = (
    "import json, os, sys; "
    "print(json.dumps({'argv': sys.argv[1:], 'env': {k: os.environ.get(k) for k in "
    "os.environ.get('DUMP_KEYS', '').split(',') if k}}))"
)


def _run_script(
    text: str,
    tmp_path: Path,
    *,
    nodes: int = 2,
    timeout: float = 60,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "n0" if nodes == 1 else f"n[0-{nodes - 1}]",
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "FAKE_NODES": str(nodes),
        "FAKE_SCONTROL_LOG": str(tmp_path / "scontrol.log"),
        **(extra_env or {}),
    }
    return subprocess.run(
        ["bash", str(script)],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _dump_app(args: list[str], env: dict[str, str], *, name: str = "dump") -> AppDef:
    full_env = {**env, "DUMP_KEYS": ",".join(env)}
    return AppDef(
        name=name,
        roles=(
            Role(
                name="r",
                entrypoint="python3",
                args=("-c", DUMP, *args),
                env=full_env,
                num_replicas=2,
            ),
        ),
    )


def _compile_to(app: AppDef, job_dir: Path, **opts: Any) -> str:
    sched = SlurmScheduler(state_dir=job_dir)
    options = sched.parse_options({"job_dir": str(job_dir), **opts})
    return sched.compile(app, options, app_id=APP_ID).render()


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
    comment=st.text(
        alphabet=st.characters(blacklist_characters="\n\r\x00", blacklist_categories=("Cs",)),
        max_size=20,
    ),
    dir_name=st.text(
        alphabet=st.characters(blacklist_characters="\x00/%\\\n\r", blacklist_categories=("Cs",)),
        min_size=1,
        max_size=12,
    ),
)
def test_arbitrary_strings_cannot_break_the_script(
    tmp_path_factory: pytest.TempPathFactory,
    args: list[str],
    env: dict[str, str],
    comment: str,
    dir_name: str,
) -> None:
    env = {
        k: v for k, v in env.items() if k not in {"PATH", "DUMP_KEYS"} and not k.startswith("SLURM")
    }
    tmp = tmp_path_factory.mktemp("prop")
    job_dir = tmp / dir_name
    text = _compile_to(_dump_app(args, env), job_dir, comment=comment)
    _bash_n(text)
    proc = _run_script(text, tmp)
    assert proc.returncode == 0, proc.stderr
    for node in range(2):
        log = (job_dir / "dump-42" / f"r-{node}.log").read_text()
        got = json.loads(log.strip().splitlines()[-1])
        assert got["argv"] == args
        assert got["env"] == env
        assert (job_dir / "dump-42" / f"r-{node}.exit").read_text().strip() == "0"


def test_runtime_macros_are_each_tasks_own_values(tmp_path: Path) -> None:
    app = _dump_app(
        ["${replica_id}", "${rank0_host}:29500", "${app_id}", "${num_replicas}", "${img_root}"],
        {"NODE": "node-${replica_id}"},
    )
    proc = _run_script(_compile_to(app, tmp_path / "jobs", rank0_host="{host}.ib"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    for node in range(2):
        log = (tmp_path / "jobs" / "dump-42" / f"r-{node}.log").read_text()
        got = json.loads(log.strip().splitlines()[-1])
        assert got["argv"] == [str(node), "n0.ib:29500", "42", "2", str(tmp_path)]
        assert got["env"] == {"NODE": f"node-{node}"}
        assert (tmp_path / "jobs" / "dump-42" / f"r-{node}.host").read_text().strip() == f"n{node}"


def test_a_failing_replica_fails_the_script_and_records_its_code(tmp_path: Path) -> None:
    app = AppDef(
        name="fail",
        roles=(
            Role(
                name="r",
                entrypoint="bash",
                args=("-c", 'echo "node $1"; exit $(( $1 == 1 ? 7 : 0 ))', "x", "${replica_id}"),
                num_replicas=2,
            ),
        ),
    )
    proc = _run_script(_compile_to(app, tmp_path / "jobs"), tmp_path)
    assert proc.returncode == 7
    folder = tmp_path / "jobs" / "fail-42"
    assert (folder / "r-0.exit").read_text().strip() == "0"
    assert (folder / "r-1.exit").read_text().strip() == "7"
    assert (folder / "r-1.log").read_text() == "node 1\n"


def test_retries_rerun_the_steps(tmp_path: Path) -> None:
    marker = tmp_path / "tries"
    app = AppDef(
        name="retry",
        roles=(
            Role(
                name="r",
                entrypoint="bash",
                # Fails on the first attempt only.
                args=("-c", f"echo x >> {marker}; [ $(wc -l < {marker}) -gt 2 ]"),
                num_replicas=2,
                max_retries=2,
            ),
        ),
    )
    proc = _run_script(_compile_to(app, tmp_path / "jobs"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "retry 1 of 2" in proc.stderr
    assert (tmp_path / "jobs" / "retry-42" / "attempt").read_text().strip() == "1"


def test_a_failing_step_stops_the_other_steps_tasks(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleeper.pid"
    app = AppDef(
        name="stop",
        roles=(
            # Role a fails once role b's task runs; role b's task runs until stopped.
            Role(
                name="a",
                entrypoint="bash",
                args=("-c", f"while [[ ! -s {pid_file} ]]; do sleep 0.01; done; exit 3"),
            ),
            Role(name="b", entrypoint="bash", args=("-c", f"echo $$ > {pid_file}; exec sleep 60")),
        ),
    )
    try:
        # The fake srun runs its tasks as children, which SIGTERM to srun alone (unlike
        # Slurm, which ends the step's tasks with it) would leave running.
        proc = _run_script(_compile_to(app, tmp_path / "jobs"), tmp_path, nodes=1, timeout=30)
        assert proc.returncode == 3, proc.stderr
        sleeper = int(pid_file.read_text())
        deadline = time.monotonic() + 20
        while not _gone(sleeper):
            assert time.monotonic() < deadline, "role b's task outlived the failed step"
            time.sleep(0.05)
        folder = tmp_path / "jobs" / "stop-42"
        assert (folder / "a-0.exit").read_text().strip() == "3"
        assert not (folder / "b-0.exit").exists()
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_requeue_trap_runs_scontrol_requeue(tmp_path: Path) -> None:
    app = AppDef(
        name="rq",
        roles=(
            Role(
                name="r",
                entrypoint="bash",
                # Sees the flag (as distspec.runtime's `preempted` does) and stops.
                args=("-c", 'kill -USR1 $PPID; sleep 0.5; touch "$DISTSPEC_JOB_DIR/preempt.seen"'),
                num_replicas=1,
            ),
        ),
    )
    text = _compile_to(app, tmp_path / "jobs", requeue="true", time="10")
    assert "#SBATCH --requeue\n#SBATCH --signal=B:USR1@120\n" in text
    # Under the fake srun the task's parent is bash running the role: signal the batch
    # shell instead, as Slurm's --signal=B: does.
    text = text.replace("kill -USR1 $PPID", "kill -USR1 $FAKE_BATCH_PID")
    text = text.replace("#!/bin/bash\n", "#!/bin/bash\nexport FAKE_BATCH_PID=$$\n", 1)
    proc = _run_script(text, tmp_path, nodes=1)
    assert proc.returncode == 0, proc.stderr
    assert "requeueing job 42" in proc.stderr
    assert (tmp_path / "scontrol.log").read_text() == "requeue 42\n"
    assert (tmp_path / "jobs" / "rq-42" / "requeues").read_text() == "1\n"


# -- effectful half through fake commands ------------------------------------------


@pytest.fixture
def sched(fake_commands: FakeCommands, tmp_path: Path) -> SlurmScheduler:
    return SlurmScheduler(run_cmd=fake_commands, state_dir=tmp_path / "state")


def _submit(sched: SlurmScheduler, fake: FakeCommands, tmp_path: Path, app: AppDef) -> str:
    req = sched.compile(
        app, sched.parse_options({"job_dir": str(tmp_path / "jobs")}), app_id=APP_ID
    )
    fake.on("sbatch", stdout="123;cluster\n")
    return sched.submit(req)


def test_submit_writes_the_script_and_returns_the_job_id(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    job = _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    assert job == "123"
    script = tmp_path / "jobs" / f"{APP_ID}.sbatch"
    assert fake_commands.calls == [("sbatch", "--parsable", str(script))]
    assert script.read_text().startswith("#!/bin/bash\n")
    record = json.loads((tmp_path / "state" / "slurm" / "jobs" / "123.json").read_text())
    assert record["folder"] == f"{tmp_path}/jobs/train-123"
    assert record["roles"] == [["trainer", 2]]


def test_submit_failure_is_a_scheduler_error(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    req = sched.compile(_app(_role(1, 1)), sched.parse_options({}), app_id=APP_ID)
    fake_commands.on(
        "sbatch", returncode=1, stderr="sbatch: error: invalid partition specified: nope\n"
    )
    with pytest.raises(SchedulerError, match="invalid partition"):
        sched.submit(req)


def _folder(tmp_path: Path, name: str = "train-123") -> Path:
    folder = tmp_path / "jobs" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_describe_with_accounting_one_query_and_exit_files(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    folder = _folder(tmp_path)
    (folder / "trainer-0.host").write_text("n0\n")
    (folder / "trainer-1.host").write_text("n1\n")
    (folder / "trainer-1.exit").write_text("3\n")
    fake_commands.on(
        "sacct",
        stdout="123|train|FAILED|3:0|n[0-1]|NonZeroExitCode\n"
        "123.batch|batch|FAILED|3:0|n0|\n123.0|bash|FAILED|3:0|n[0-1]|\n",
    )
    fake_commands.calls.clear()
    status = sched.describe("123")
    assert status is not None
    assert [c[0] for c in fake_commands.calls] == ["sacct"]
    assert status.state is AppState.FAILED
    assert "NonZeroExitCode" in status.msg
    failed = status.first_failure()
    assert failed is not None
    assert (failed.role, failed.id, failed.exit_code, failed.hostname) == ("trainer", 1, 3, "n1")
    r0 = status.roles[0].replicas[0]
    assert (r0.state, r0.exit_code, r0.hostname) == (AppState.FAILED, None, "n0")


def test_describe_without_accounting_uses_scontrol(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    fake_commands.on(
        "sacct", returncode=1, stderr="sacct: error: Slurm accounting storage is disabled\n"
    )
    line = (
        "JobId=123 JobName=train UserId=u(1) JobState=RUNNING Reason=None Requeue=1 "
        "Restarts=1 ExitCode=0:0 NodeList=n[0-1] Comment=a b=c StdOut=/x/train-123.out\n"
    )
    fake_commands.on("scontrol", stdout=line)
    fake_commands.on("scontrol", stdout=line.replace("RUNNING", "TIMEOUT"))
    status = sched.describe("123")
    assert status is not None
    assert status.state is AppState.RUNNING
    assert status.num_restarts == 1
    assert [r.hostname for r in status.roles[0].replicas] == ["n0", "n1"]
    # Accounting is known to be off now: the next poll is one scontrol call.
    fake_commands.calls.clear()
    status = sched.describe("123")
    assert status is not None
    assert [c[0] for c in fake_commands.calls] == ["scontrol"]
    assert status.state is AppState.CANCELLED and status.msg == "TIMEOUT"


def test_describe_hetjob_components(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2), _role(1, 1, name="reader")))
    fake_commands.on(
        "sacct",
        stdout="123+0|train|RUNNING|0:0|n[0-1]|None\n123+1|train|RUNNING|0:0|n2|None\n"
        "123+0.0|bash|RUNNING|0:0|n[0-1]|\n",
    )
    status = sched.describe("123")
    assert status is not None
    assert [(r.role, len(r.replicas)) for r in status.roles] == [("trainer", 2), ("reader", 1)]
    assert status.roles[1].replicas[0].hostname == "n2"


def test_describe_after_slurm_forgot_the_job_reads_the_folder(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    folder = _folder(tmp_path)
    for i in range(2):
        (folder / f"trainer-{i}.exit").write_text("0\n")
    sched._accounting = False
    fake_commands.on(
        "scontrol", returncode=1, stderr="slurm_load_jobs error: Invalid job id specified\n"
    )
    status = sched.describe("123")
    assert status is not None
    assert status.state is AppState.SUCCEEDED
    assert "no longer lists" in status.msg


def test_describe_unknown_job_is_none(sched: SlurmScheduler, fake_commands: FakeCommands) -> None:
    sched._accounting = False
    fake_commands.on(
        "scontrol", returncode=1, stderr="slurm_load_jobs error: Invalid job id specified\n"
    )
    assert sched.describe("999") is None
    with pytest.raises(UsageError):
        sched.describe("not-a-job-id")


def test_describe_does_not_flap_back_to_pending_while_sacct_lags(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    fake_commands.on("sacct", stdout="")  # not in the database yet
    fake_commands.on("scontrol", stdout="JobId=123 JobState=RUNNING Reason=None NodeList=n[0-1]\n")
    fake_commands.on("sacct", stdout="123|train|PENDING|0:0|None assigned|None\n")
    first = sched.describe("123")
    second = sched.describe("123")
    assert first is not None and second is not None
    assert first.state is AppState.RUNNING
    assert second.state is AppState.RUNNING


def test_log_iter_reads_the_replica_file_from_the_record(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    (_folder(tmp_path) / "trainer-1.log").write_text("a\nb\n")
    assert list(sched.log_iter("123", "trainer", 1)) == ["a", "b"]
    assert list(sched.log_iter("123", "trainer", 0)) == []
    with pytest.raises(UsageError, match="since"):
        sched.log_iter("123", "trainer", 1, since=0.0)


def test_log_iter_finds_the_folder_through_scontrol_without_a_record(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    folder = _folder(tmp_path, "other-77")
    (folder / "r-0.log").write_text("hello\n")
    fake_commands.on("scontrol", stdout=f"JobId=77 JobState=COMPLETED StdOut={folder}.out\n")
    assert list(sched.log_iter("77", "r", 0)) == ["hello"]


def test_compile_names_the_folder_submit_creates(tmp_path: Path) -> None:
    sched = SlurmScheduler(state_dir=tmp_path)
    app = _app(_role(1, 1))
    assert sched.compile(app, sched.parse_options({}), app_id=APP_ID).job_dir == str(
        tmp_path / "slurm"
    )
    opts = sched.parse_options({"job_dir": "/shared/jobs"})
    assert sched.compile(app, opts, app_id=APP_ID).job_dir == "/shared/jobs"
    assert SlurmScheduler.capabilities.image == "directory"


def test_job_paths_after_submit_name_the_folder_the_logs_and_the_script_output(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    job = _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    paths = sched.job_paths(job)
    assert paths is not None
    assert paths.folder == str(tmp_path / "jobs" / "train-123")
    assert paths.replica_log("trainer", 1) == str(tmp_path / "jobs" / "train-123" / "trainer-1.log")
    # The script's own --output, with %j the job id.
    script = (tmp_path / "jobs" / f"{APP_ID}.sbatch").read_text()
    output = re.search(r"^#SBATCH --output=(\S+)$", script, re.M)
    assert output is not None
    assert paths.script_output == output.group(1).replace("%j", job)
    # The folder the script writes its replicas' logs into.
    folder = re.search(r'^export DISTSPEC_JOB_DIR=(\S+)"\$SLURM_JOB_ID"$', script, re.M)
    assert folder is not None
    assert paths.folder == folder.group(1) + job
    assert fake_commands.calls[1:] == []  # from the record: no query


def test_job_paths_without_a_record_come_from_scontrol(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    fake_commands.on("scontrol", stdout="JobId=77 JobState=COMPLETED StdOut=/shared/j/x-77.out\n")
    paths = sched.job_paths("77")
    assert paths is not None
    assert (paths.folder, paths.script_output) == ("/shared/j/x-77", "/shared/j/x-77.out")
    fake_commands.on(
        "scontrol", returncode=1, stderr="slurm_load_jobs error: Invalid job id specified\n"
    )
    assert sched.job_paths("78") is None
    with pytest.raises(UsageError):
        sched.job_paths("not-a-job-id")


def test_cancel(sched: SlurmScheduler, fake_commands: FakeCommands) -> None:
    fake_commands.on("scancel")
    sched.cancel("123")
    fake_commands.on(
        "scancel",
        returncode=1,
        stderr="scancel: error: Kill job error on job id 123: Job/step already completing or completed\n",
    )
    sched.cancel("123")
    fake_commands.on("scancel", returncode=1, stderr="scancel: error: Access/permission denied\n")
    with pytest.raises(SchedulerError, match="permission"):
        sched.cancel("123")
    assert fake_commands.calls == [("scancel", "123")] * 3


def test_list_with_and_without_accounting(
    sched: SlurmScheduler, fake_commands: FakeCommands
) -> None:
    fake_commands.on(
        "sacct",
        stdout="5|a|COMPLETED|None|2026-11-23T10:00:00|2026-11-23T10:00:42\n"
        "7+0|het|RUNNING|None|2026-11-23T11:00:00|Unknown\n"
        "7+1|het|RUNNING|None|2026-11-23T11:00:00|Unknown\n"
        "6|b|CANCELLED by 0|None|2026-11-23T10:30:00|2026-11-23T10:31:00\n",
    )
    apps = sched.list()
    assert [(a.app_id, a.name, a.state) for a in apps] == [
        ("7", "het", AppState.RUNNING),
        ("6", "b", AppState.CANCELLED),
        ("5", "a", AppState.SUCCEEDED),
    ]
    # Submitted and ended (for an ended job) as POSIX times, read in local time.
    local = time.mktime(time.strptime("2026-11-23T10:00:00", "%Y-%m-%dT%H:%M:%S"))
    assert dict(apps[2].extra) == {"submitted": repr(local), "ended": repr(local + 42)}
    assert dict(apps[0].extra) == {"submitted": repr(local + 3600)}
    assert "--format=JobID,JobName,State,Reason,Submit,End" in fake_commands.calls[-1]
    fresh = SlurmScheduler(run_cmd=fake_commands, state_dir=None)
    fake_commands.on(
        "sacct", returncode=1, stderr="sacct: error: Slurm accounting storage is disabled\n"
    )
    fake_commands.on(
        "squeue",
        stdout="9|x|PENDING|Resources|2026-11-23T10:00:00|N/A\n"
        "8|y|COMPLETED|None|2026-11-23T10:00:00|2026-11-23T10:00:05\n",
    )
    apps = fresh.list()
    assert [(a.app_id, a.state, a.detail) for a in apps] == [
        ("9", AppState.PENDING, "PENDING (Resources)"),
        ("8", AppState.SUCCEEDED, "COMPLETED"),
    ]
    assert dict(apps[0].extra) == {"submitted": repr(local)}
    assert dict(apps[1].extra) == {"submitted": repr(local), "ended": repr(local + 5)}
    assert fake_commands.calls[-1][0] == "squeue"
    assert fake_commands.calls[-1][-1] == "--format=%i|%j|%T|%r|%V|%e"


def test_options_dataclass_is_frozen() -> None:
    opts = SlurmOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.partition = "x"  # type: ignore[misc]
    assert opts.gpu_flag is GpuFlag.GPUS_PER_NODE
    assert os.sep == "/"


def test_a_requeued_job_goes_back_to_pending(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit(sched, fake_commands, tmp_path, _app(_role(2, 2)))
    fake_commands.on("sacct", stdout="123|train|RUNNING|0:0|n[0-1]|None\n")
    fake_commands.on("sacct", stdout="123|train|PENDING|0:0|None assigned|BeginTime\n")
    (_folder(tmp_path) / "requeues").write_text("1\n")
    first = sched.describe("123")
    second = sched.describe("123")
    assert first is not None and second is not None
    assert first.state is AppState.RUNNING
    assert (second.state, second.num_restarts, second.msg) == (
        AppState.PENDING,
        1,
        "PENDING (BeginTime)",
    )
