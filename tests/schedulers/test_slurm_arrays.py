"""Slurm job arrays and dependencies without a cluster: goldens, the points file, the
array script run under a fake srun, ids, and the queries through ``fake_commands``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distspec.errors import CompileError, UsageError
from distspec.schedulers.api import Dependency, Points, Request
from distspec.schedulers.batch.script import point_exports, points_file
from distspec.schedulers.slurm import SlurmScheduler
from distspec.schedulers.slurm.script import check_job_id
from distspec.schedulers.slurm.status import expand_array_ids, parse_max_array_size
from distspec.specs import AppDef, AppState, Role
from tests.conftest import FakeCommands
from tests.schedulers.batch_apps import APP_ID, JOB_DIR, STATE_DIR, trainer_role
from tests.schedulers.batch_apps import app as _app
from tests.schedulers.batch_apps import bash_n as _bash_n
from tests.schedulers.test_slurm import FAKE_SCONTROL, FAKE_SRUN


def _swept_role(nodes: int = 2, nproc: int = 2, **changes: Any) -> Role:
    """The goldens' trainer with sweep variables in an argument and in the env."""
    role = trainer_role(nodes, nproc)
    return dataclasses.replace(
        role,
        args=(*role.args, "--seed", "{{seed}}", "--tag", "lr={{lr}}-${app_id}"),
        env={**role.env, "LR": "{{lr}}"},
        **changes,
    )


POINTS = Points(
    names=("lr", "seed"),
    values=(("0.1", "1"), ("1e-3", "2"), ("1e-4", "it's $HOME"), ("a b", "x\ny")),
    first=8,
    max_parallel=2,
)
AFTER = (Dependency("12"), Dependency("13_2", "any"), Dependency("14"), Dependency("15", "failed"))


def _sched(**kwargs: Any) -> SlurmScheduler:
    return SlurmScheduler(state_dir=STATE_DIR, **kwargs)


def _array(app: AppDef, points: Points = POINTS, **opts: Any) -> Request:
    sched = _sched()
    options = sched.parse_options({"job_dir": JOB_DIR, **opts})
    return sched.compile_array(app, options, app_id=APP_ID, points=points)


GOLDEN_CASES: dict[str, Callable[[], str]] = {
    "array_1node": lambda: _array(_app(_swept_role(1, 2))).render(),
    "array_retries": lambda: _array(_app(_swept_role(max_retries=2)), requeue="true").render(),
    "array.points": lambda: _array(_app(_swept_role())).files[f"{APP_ID}.points"],
    "after": lambda: (
        _sched()
        .compile(
            _app(trainer_role(2, 2)),
            _sched().parse_options({"job_dir": JOB_DIR}),
            app_id=APP_ID,
            after=AFTER,
        )
        .render()
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_scripts(case: str, golden: Callable[[str, str], None]) -> None:
    text = GOLDEN_CASES[case]()
    name = case if "." in case else f"{case}.sbatch"
    golden(f"slurm/{name}", text)
    if name.endswith(".sbatch"):
        _bash_n(text)


# -- dependencies ---------------------------------------------------------------------


def test_dependencies_are_one_directive_and_cancel_when_they_cannot_be_met() -> None:
    sched = _sched()
    opts = sched.parse_options({"job_dir": JOB_DIR})
    req = sched.compile(_app(trainer_role(1, 1)), opts, app_id=APP_ID, after=AFTER)
    text = req.render()
    assert "#SBATCH --dependency=afterok:12:14,afterany:13_2,afternotok:15\n" in text
    assert "#SBATCH --kill-on-invalid-dep=yes\n" in text
    assert req.after == AFTER
    plain = sched.compile(_app(trainer_role(1, 1)), opts, app_id=APP_ID)
    assert "--dependency" not in plain.render() and plain.after == ()
    # A repeated job is named once; a hetjob gets the dependency once, job-wide.
    twice = sched.compile(
        _app(trainer_role(1, 1), trainer_role(1, 1, name="reader")),
        opts,
        app_id=APP_ID,
        after=(Dependency("7"), Dependency("7")),
    ).render()
    assert twice.count("--dependency") == 1 and "--dependency=afterok:7\n" in twice
    assert twice.index("--dependency") < twice.index("#SBATCH hetjob")


@pytest.mark.parametrize(
    ("after", "opts", "match"),
    [
        ((Dependency("12", "done"),), {}, "condition"),
        ((Dependency("slurm://x/12"),), {}, "job id"),
        ((Dependency("12_"),), {}, "job id"),
        ((Dependency("12"),), {"sbatch_args": "--dependency=singleton"}, "both"),
    ],
)
def test_bad_dependencies_are_compile_errors(
    after: tuple[Dependency, ...], opts: dict[str, str], match: str
) -> None:
    sched = _sched()
    options = sched.parse_options({"job_dir": JOB_DIR, **opts})
    with pytest.raises(CompileError, match=match):
        sched.compile(_app(trainer_role(1, 1)), options, app_id=APP_ID, after=after)


def test_sbatch_args_may_still_hold_a_dependency_without_after() -> None:
    text = _sched().compile(
        _app(trainer_role(1, 1)),
        _sched().parse_options({"job_dir": JOB_DIR, "sbatch_args": "--dependency=singleton"}),
        app_id=APP_ID,
    )
    assert "#SBATCH --dependency=singleton\n" in text.render()


def test_capabilities_are_honest() -> None:
    caps = SlurmScheduler.capabilities
    assert caps.dependencies and caps.arrays


# -- ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("good", ["1", "1234", "1234_0", "1234_7", "99999999_1000"])
def test_job_ids_and_array_task_ids_are_accepted(good: str) -> None:
    assert check_job_id(good)
    assert _sched()._check_id(good) == good


@pytest.mark.parametrize(
    "bad", ["", "12a", "1234_", "_7", "1234_7_1", "1234.0", "1234+1", "1234_[1-3]", " 12", "-1"]
)
def test_other_ids_are_usage_errors(bad: str) -> None:
    assert not check_job_id(bad)
    with pytest.raises(UsageError, match="1234_7"):
        _sched()._check_id(bad)


@pytest.mark.parametrize(
    ("key", "ids"),
    [
        ("1234_7", ["1234_7"]),
        ("1234", ["1234"]),
        ("1234_[4-6%2]", ["1234_4", "1234_5", "1234_6"]),
        ("1234_[1,3,5-6]", ["1234_1", "1234_3", "1234_5", "1234_6"]),
        ("1234_[9]", ["1234_9"]),
        ("7+1", ["7+1"]),
    ],
)
def test_pending_array_rows_expand_to_their_tasks(key: str, ids: list[str]) -> None:
    assert expand_array_ids(key) == ids


def test_point_ids_are_array_tasks() -> None:
    req = _array(_app(_swept_role()))
    sched = _sched()
    assert [sched.point_id("1234", req, i) for i in range(8, 12)] == [
        "1234_0",
        "1234_1",
        "1234_2",
        "1234_3",
    ]
    with pytest.raises(ValueError, match="point 12"):
        sched.point_id("1234", req, 12)


# -- the array script ------------------------------------------------------------------


def test_an_array_is_one_script_with_the_points_file_beside_it() -> None:
    req = _array(_app(_swept_role()))
    assert req.points == POINTS
    assert set(req.files) == {f"{APP_ID}.sbatch", f"{APP_ID}.points"}
    text = req.render()
    assert "#SBATCH --array=0-3%2\n" in text
    assert f"#SBATCH --output={JOB_DIR}/train-%A_%a.out\n" in text
    assert (
        'DISTSPEC_JOB_DIR=/shared/jobs/train-"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"' in text
    )
    assert '--seed "$DISTSPEC_SWEEP_seed"' in text and 'LR="$DISTSPEC_SWEEP_lr"' in text
    assert "{{" not in text
    # The point is exported before the first srun, so every task inherits it.
    assert text.index('eval "export ${distspec_point[0]}"') < text.index("\nsrun ")
    unthrottled = dataclasses.replace(POINTS, max_parallel=None)
    assert "#SBATCH --array=0-3\n" in _array(_app(_swept_role()), unthrottled).render()


def test_an_array_with_dependencies() -> None:
    sched = _sched()
    opts = sched.parse_options({"job_dir": JOB_DIR})
    req = sched.compile_array(
        _app(_swept_role()), opts, app_id=APP_ID, points=POINTS, after=AFTER[:1]
    )
    assert "#SBATCH --dependency=afterok:12\n" in req.render() and req.after == AFTER[:1]


def test_a_multi_role_array_is_refused() -> None:
    app = _app(_swept_role(), trainer_role(1, 1, name="reader"))
    with pytest.raises(CompileError, match="heterogeneous"):
        _array(app)


def test_an_empty_array_is_refused() -> None:
    with pytest.raises(CompileError, match="at least one point"):
        _array(_app(_swept_role()), Points(names=("lr",), values=()))


# -- the points file -------------------------------------------------------------------

_VALUES = [
    "",
    " ",
    "a b",
    "it's",
    '"q"',
    "$HOME",
    "$(id)",
    "`id`",
    "\\n",
    "x\ny",
    "\r\t\x01\x7f",
    "é ✓",
    "--flag=1",
    "'",
]


def _exported(
    points_text: str, tmp_path: Path, task: int, names: tuple[str, ...]
) -> dict[str, str]:
    """What a task's environment gets from the points file, through the script's lines."""
    path = tmp_path / "x.points"
    path.write_text(points_text)
    keys = ["DISTSPEC_SWEEP_INDEX", *(f"DISTSPEC_SWEEP_{n}" for n in names)]
    script = "\n".join(
        [
            *point_exports(str(path), "SLURM_ARRAY_TASK_ID"),
            "python3 -c 'import json, os, sys; "
            "print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}))' " + " ".join(keys),
        ]
    )
    proc = subprocess.run(
        ["bash", "-c", script],
        env={"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": str(task)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_points_file_carries_any_value(tmp_path: Path) -> None:
    points = Points(names=("v", "w"), values=tuple((v, "x") for v in _VALUES), first=100)
    text = points_file(points, "slurm")
    assert len(text.splitlines()) == len(_VALUES)  # one line per task, line breaks escaped
    for k, value in enumerate(_VALUES):
        got = _exported(text, tmp_path, k, ("v", "w"))
        assert got == {
            "DISTSPEC_SWEEP_INDEX": str(100 + k),
            "DISTSPEC_SWEEP_v": value,
            "DISTSPEC_SWEEP_w": "x",
        }


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))),
        min_size=1,
        max_size=4,
    )
)
def test_points_file_round_trips_arbitrary_text(values: list[str]) -> None:
    import tempfile

    points = Points(names=("v",), values=tuple((v,) for v in values))
    text = points_file(points, "slurm")
    with tempfile.TemporaryDirectory() as tmp:
        task = len(values) - 1
        got = _exported(text, Path(tmp), task, ("v",))
    assert got["DISTSPEC_SWEEP_v"] == values[task]


def test_points_file_refuses_what_it_cannot_carry() -> None:
    with pytest.raises(CompileError, match="NUL"):
        points_file(Points(names=("v",), values=(("a\x00b",),)), "slurm")
    with pytest.raises(CompileError, match="not a valid name"):
        points_file(Points(names=("a-b",), values=(("1",),)), "slurm")
    with pytest.raises(CompileError, match="2 values for 1"):
        points_file(Points(names=("v",), values=(("1", "2"),)), "slurm")


def test_a_task_without_a_point_stops_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "x.points"
    path.write_text(points_file(Points(names=("v",), values=(("1",),)), "slurm"))
    proc = subprocess.run(
        ["bash", "-c", "\n".join([*point_exports(str(path), "T"), "echo ran"])],
        env={"PATH": os.environ["PATH"], "T": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "ran" not in proc.stdout
    assert "no sweep point for array task 1" in proc.stderr


# -- the array script, run by bash under a fake srun ------------------------------------

DUMP = (
    "import json, os, sys; "
    "print(json.dumps({'argv': sys.argv[1:], 'env': os.environ.get('V'), "
    "'index': os.environ.get('DISTSPEC_SWEEP_INDEX')}))"
)


def _run_task(req: Request, job_dir: Path, task: int) -> subprocess.CompletedProcess[str]:
    """Array task ``task`` of the submitted request (its files written into job_dir),
    run by bash with a fake srun and scontrol, as array job 42."""
    bin_dir = job_dir.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    job_dir.mkdir(exist_ok=True)
    for name, text in req.files.items():
        (job_dir / name).write_text(text)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_ID": str(43 + task),
        "SLURM_ARRAY_JOB_ID": "42",
        "SLURM_ARRAY_TASK_ID": str(task),
        "SLURM_JOB_NODELIST": "n[0-1]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_SUBMIT_DIR": str(job_dir.parent),
        "FAKE_NODES": "2",
        "FAKE_SCONTROL_LOG": str(job_dir.parent / "scontrol.log"),
    }
    return subprocess.run(
        ["bash", str(job_dir / req.main_file)],
        env=env,
        cwd=job_dir.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("retries", [0, 1])
def test_each_task_runs_its_own_point_in_its_own_folder(tmp_path: Path, retries: int) -> None:
    role = Role(
        name="r",
        entrypoint="python3",
        args=("-c", DUMP, "{{a}}", "pre-{{b}}-${app_id}", "{{a}}{{b}}"),
        env={"V": "{{b}}"},
        num_replicas=2,
        max_retries=retries,
    )
    points = Points(names=("a", "b"), values=(("1", "x y"), ("2", "it's $HOME\nz")), first=5)
    sched = SlurmScheduler(state_dir=tmp_path)
    job_dir = tmp_path / "jobs"
    opts = sched.parse_options({"job_dir": str(job_dir)})
    req = sched.compile_array(
        AppDef(name="sweep", roles=(role,)), opts, app_id=APP_ID, points=points
    )
    assert ("distspec_wait" in req.render()) == bool(retries)
    for task, (a, b) in enumerate(points.values):
        proc = _run_task(req, job_dir, task)
        assert proc.returncode == 0, proc.stderr
        folder = job_dir / f"sweep-42_{task}"
        for node in range(2):
            got = json.loads((folder / f"r-{node}.log").read_text().strip().splitlines()[-1])
            assert got == {
                "argv": [a, f"pre-{b}-42_{task}", a + b],
                "env": b,
                "index": str(5 + task),
            }
            assert (folder / f"r-{node}.exit").read_text().strip() == "0"


# -- the effectful half through fake commands --------------------------------------------


@pytest.fixture
def sched(fake_commands: FakeCommands, tmp_path: Path) -> SlurmScheduler:
    return SlurmScheduler(run_cmd=fake_commands, state_dir=tmp_path / "state")


SHOW_CONFIG = """Configuration data as of 2026-11-23T10:00:00
AccountingStorageBackupHost = (null)
MaxArraySize            = 16
MaxJobCount             = 10000
"""


def test_max_array_size_is_read_once(sched: SlurmScheduler, fake_commands: FakeCommands) -> None:
    opts = sched.parse_options({"job_dir": "/shared/jobs"})
    fake_commands.on("scontrol", stdout=SHOW_CONFIG)
    assert sched.max_array_size(opts) == 16
    assert sched.max_array_size(opts) == 16
    assert fake_commands.calls == [("scontrol", "show", "config")]
    assert parse_max_array_size("MaxJobCount = 3\n") is None


def test_max_array_size_is_none_when_it_cannot_be_read(
    sched: SlurmScheduler, fake_commands: FakeCommands
) -> None:
    fake_commands.on(
        "scontrol", returncode=1, stderr="slurm_load_ctl_conf error: Unable to contact\n"
    )
    assert sched.max_array_size(sched.parse_options({})) is None


def test_compile_array_refuses_more_points_than_max_array_size(
    sched: SlurmScheduler, fake_commands: FakeCommands
) -> None:
    opts = sched.parse_options({"job_dir": "/shared/jobs"})
    app = _app(_swept_role())
    many = Points(names=("lr", "seed"), values=(("1", "2"),) * 17)
    # Compile asks the cluster nothing: before max_array_size has read it, sbatch decides.
    assert sched.compile_array(app, opts, app_id=APP_ID, points=many).points == many
    assert fake_commands.calls == []
    fake_commands.on("scontrol", stdout=SHOW_CONFIG)
    assert sched.max_array_size(opts) == 16
    with pytest.raises(CompileError, match="MaxArraySize is 16"):
        sched.compile_array(app, opts, app_id=APP_ID, points=many)
    exact = dataclasses.replace(many, values=many.values[:16])
    assert "--array=0-15\n" in sched.compile_array(app, opts, app_id=APP_ID, points=exact).render()


def _submit_array(
    sched: SlurmScheduler, fake: FakeCommands, tmp_path: Path, points: Points = POINTS
) -> Request:
    req = sched.compile_array(
        _app(_swept_role()),
        sched.parse_options({"job_dir": str(tmp_path / "jobs")}),
        app_id=APP_ID,
        points=points,
    )
    fake.on("sbatch", stdout="1234;cluster\n")
    assert sched.submit(req) == "1234"
    return req


def test_submit_writes_the_points_file_beside_the_script(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    req = _submit_array(sched, fake_commands, tmp_path)
    jobs = tmp_path / "jobs"
    assert (jobs / f"{APP_ID}.points").read_text() == req.files[f"{APP_ID}.points"]
    assert (jobs / f"{APP_ID}.points").stat().st_mode & 0o777 == 0o600
    assert fake_commands.calls == [("sbatch", "--parsable", str(jobs / f"{APP_ID}.sbatch"))]
    record = json.loads((tmp_path / "state" / "slurm" / "jobs" / "1234.json").read_text())
    assert record["points"] == 4 and record["folder"] == f"{jobs}/train-1234"


def test_a_point_has_its_own_folder_logs_and_cancel(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    folder = tmp_path / "jobs" / "train-1234_2"
    folder.mkdir(parents=True)
    (folder / "trainer-1.log").write_text("lr 1e-4\n")
    paths = sched.job_paths("1234_2")
    assert paths is not None
    assert (paths.folder, paths.script_output) == (str(folder), f"{folder}.out")
    assert list(sched.log_iter("1234_2", "trainer", 1)) == ["lr 1e-4"]
    fake_commands.calls.clear()
    fake_commands.on("scancel")
    sched.cancel("1234_2")
    assert fake_commands.calls == [("scancel", "1234_2")]


def test_describe_a_point(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    folder = tmp_path / "jobs" / "train-1234_1"
    folder.mkdir(parents=True)
    for i in range(2):
        (folder / f"trainer-{i}.exit").write_text("0\n")
    fake_commands.on(
        "sacct",
        stdout="1234_1|train|COMPLETED|0:0|n[0-1]|None|2026-11-23T10:00:00|"
        "2026-11-23T10:00:01|2026-11-23T10:00:09\n"
        "1234_1.batch|batch|COMPLETED|0:0|n0|||||\n",
    )
    fake_commands.calls.clear()
    status = sched.describe("1234_1")
    assert status is not None
    assert fake_commands.calls[0][:5] == ("sacct", "--parsable2", "--noheader", "--jobs", "1234_1")
    assert status.state is AppState.SUCCEEDED
    assert [r.exit_code for r in status.roles[0].replicas] == [0, 0]


# What sacct --allocations prints for a whole array of 4 tasks with %2: two that ran,
# the rest pending as one row.
SACCT_ARRAY = (
    "1234_0|train|COMPLETED|0:0|n[0-1]|None|2026-11-23T10:00:00|2026-11-23T10:00:01|"
    "2026-11-23T10:00:09\n"
    "1234_1|train|FAILED|3:0|n[0-1]|NonZeroExitCode|2026-11-23T10:00:00|2026-11-23T10:00:01|"
    "2026-11-23T10:00:05\n"
    "1234_[2-3%2]|train|PENDING|0:0|None assigned|JobArrayTaskLimit|2026-11-23T10:00:00|"
    "Unknown|Unknown\n"
)


def test_describe_many_asks_once_per_array(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    failed = tmp_path / "jobs" / "train-1234_1"
    failed.mkdir(parents=True)
    (failed / "trainer-0.exit").write_text("3\n")
    fake_commands.on("sacct", stdout=SACCT_ARRAY)
    fake_commands.calls.clear()
    ids = ["1234_0", "1234_1", "1234_2", "1234_3"]
    statuses = sched.describe_many(ids)
    assert [c[0] for c in fake_commands.calls] == ["sacct"]
    assert "--allocations" in fake_commands.calls[0] and "1234" in fake_commands.calls[0]
    assert list(statuses) == ids
    states = [s.state if s else None for s in statuses.values()]
    assert states == [AppState.SUCCEEDED, AppState.FAILED, AppState.PENDING, AppState.PENDING]
    one = statuses["1234_1"]
    assert one is not None and one.roles[0].replicas[0].exit_code == 3
    assert "JobArrayTaskLimit" in (statuses["1234_3"] or one).msg


SCONTROL_ARRAY = (
    "JobId=1235 ArrayJobId=1234 ArrayTaskId=0 JobName=train JobState=COMPLETED Reason=None "
    "ExitCode=0:0 NodeList=n[0-1] StdOut=/j/train-1234_0.out\n"
    "JobId=1236 ArrayJobId=1234 ArrayTaskId=1 JobName=train JobState=RUNNING Reason=None "
    "ExitCode=0:0 NodeList=n[0-1] StdOut=/j/train-1234_1.out\n"
    "JobId=1234 ArrayJobId=1234 ArrayTaskId=2-3%2 ArrayTaskThrottle=2 JobName=train "
    "JobState=PENDING Reason=JobArrayTaskLimit ExitCode=0:0 NodeList=(null) "
    "StdOut=/j/train-%A_%a.out\n"
)


def test_describe_many_without_accounting_asks_scontrol_once(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    sched._accounting = False
    fake_commands.on("scontrol", stdout=SCONTROL_ARRAY)
    fake_commands.calls.clear()
    ids = ["1234_0", "1234_1", "1234_2", "1234_3"]
    statuses = sched.describe_many(ids)
    assert fake_commands.calls == [("scontrol", "show", "job", "-o", "1234")]
    states = [s.state if s else None for s in statuses.values()]
    assert states == [AppState.SUCCEEDED, AppState.RUNNING, AppState.PENDING, AppState.PENDING]


def test_describe_many_when_slurm_forgot_the_array_reads_the_folders(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    sched._accounting = False
    for task, code in ((0, "0"), (1, "5")):
        folder = tmp_path / "jobs" / f"train-1234_{task}"
        folder.mkdir(parents=True)
        for i in range(2):
            (folder / f"trainer-{i}.exit").write_text(f"{code}\n")
    fake_commands.on(
        "scontrol", returncode=1, stderr="slurm_load_jobs error: Invalid job id specified\n"
    )
    statuses = sched.describe_many(["1234_0", "1234_1"])
    assert [s.state if s else None for s in statuses.values()] == [
        AppState.SUCCEEDED,
        AppState.FAILED,
    ]


def test_describe_many_mixes_arrays_and_plain_jobs(
    sched: SlurmScheduler, fake_commands: FakeCommands
) -> None:
    sched._accounting = False
    fake_commands.on("scontrol", stdout=SCONTROL_ARRAY)
    fake_commands.on("scontrol", stdout="JobId=77 JobName=x JobState=RUNNING NodeList=n0\n")
    statuses = sched.describe_many(["1234_0", "77", "1234_1"])
    assert list(statuses) == ["1234_0", "77", "1234_1"]
    assert [s.state if s else None for s in statuses.values()] == [
        AppState.SUCCEEDED,
        AppState.RUNNING,
        AppState.RUNNING,
    ]
    with pytest.raises(UsageError):
        sched.describe_many(["1234-1"])


def test_list_shows_each_task_of_an_array(
    sched: SlurmScheduler, fake_commands: FakeCommands
) -> None:
    fake_commands.on(
        "sacct",
        stdout="1234_0|train|COMPLETED|None|2026-11-23T10:00:00|2026-11-23T10:00:09\n"
        "1234_[2-3%2]|train|PENDING|JobArrayTaskLimit|2026-11-23T10:00:00|Unknown\n"
        "1234_1|train|RUNNING|None|2026-11-23T10:00:00|Unknown\n"
        "1300|other|RUNNING|None|2026-11-23T11:00:00|Unknown\n"
        "1200|old|COMPLETED|None|2026-11-23T09:00:00|2026-11-23T09:00:09\n",
    )
    apps = sched.list()
    assert [(a.app_id, a.state) for a in apps] == [
        ("1300", AppState.RUNNING),
        ("1234_0", AppState.SUCCEEDED),
        ("1234_1", AppState.RUNNING),
        ("1234_2", AppState.PENDING),
        ("1234_3", AppState.PENDING),
        ("1200", AppState.SUCCEEDED),
    ]
    assert apps[3].detail == "PENDING (JobArrayTaskLimit)"


def test_the_whole_array_sums_up_its_tasks(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    req = _submit_array(sched, fake_commands, tmp_path)
    fake_commands.on("sacct", stdout=SACCT_ARRAY)
    status = sched.describe("1234")
    assert status is not None
    assert status.state is AppState.PENDING  # tasks 2 and 3 wait for their turn
    assert status.msg == "job array of 4 tasks (1234_0..1234_3): 2 PENDING, 1 SUCCEEDED, 1 FAILED"
    done = SACCT_ARRAY.replace("1234_[2-3%2]|train|PENDING", "1234_[2-3%2]|train|COMPLETED")
    fake_commands.on("sacct", stdout=done)
    status = sched.describe("1234")
    assert status is not None and status.state is AppState.FAILED
    # The array has no one folder or log: its tasks each have theirs.
    assert sched.job_paths("1234") is None and sched.job_paths("1234", req) is None
    with pytest.raises(UsageError, match="1234_0 .. 1234_3"):
        sched.log_iter("1234", "trainer", 0)


def test_ended_tasks_are_not_asked_about_again(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    ids = ["1234_0", "1234_1", "1234_2", "1234_3"]
    fake_commands.on("sacct", stdout=SACCT_ARRAY)
    first = sched.describe_many(ids)
    # A new scheduler (a new `distspec status`): the two that ended come from the state
    # dir; the query is still made for the two that wait, and its rows for the others
    # are not read.
    again = SlurmScheduler(run_cmd=fake_commands, state_dir=tmp_path / "state")
    fake_commands.on(
        "sacct", stdout=SACCT_ARRAY.replace("1234_1|train|FAILED", "1234_1|train|RUNNING")
    )
    second = again.describe_many(ids)
    assert second == first
    done = SACCT_ARRAY.replace("1234_[2-3%2]|train|PENDING", "1234_[2-3%2]|train|COMPLETED")
    fake_commands.on("sacct", stdout=done)
    assert [s.state if s else None for s in again.describe_many(ids).values()][2:] == [
        AppState.SUCCEEDED
    ] * 2
    fake_commands.calls.clear()
    last = SlurmScheduler(run_cmd=fake_commands, state_dir=tmp_path / "state").describe_many(ids)
    assert fake_commands.calls == []  # every task has ended: nothing to ask
    assert [s.state if s else None for s in last.values()] == [
        AppState.SUCCEEDED,
        AppState.FAILED,
        AppState.SUCCEEDED,
        AppState.SUCCEEDED,
    ]
    # An array submitted again under the same id (a cluster whose ids restarted) starts
    # with nothing ended.
    _submit_array(sched, fake_commands, tmp_path)
    fake_commands.on("sacct", stdout=SACCT_ARRAY.replace("COMPLETED", "RUNNING"))
    fresh = sched.describe_many(ids)
    assert fresh["1234_0"] is not None and fresh["1234_0"].state is AppState.RUNNING


def test_describe_many_asks_once_for_several_arrays(
    sched: SlurmScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    """A sweep split at MaxArraySize: its arrays' tasks come from one sacct (or one
    scontrol listing every job), not one query per array."""
    _submit_array(sched, fake_commands, tmp_path)
    req = sched.compile_array(
        _app(_swept_role()),
        sched.parse_options({"job_dir": str(tmp_path / "jobs")}),
        app_id=APP_ID + "b",
        points=POINTS,
    )
    fake_commands.on("sbatch", stdout="1240;cluster\n")
    assert sched.submit(req) == "1240"
    second = SACCT_ARRAY.replace("1234_", "1240_").replace("COMPLETED", "RUNNING", 1)
    fake_commands.on("sacct", stdout=SACCT_ARRAY + second)
    fake_commands.calls.clear()
    ids = [f"{a}_{i}" for a in ("1234", "1240") for i in range(4)]
    statuses = sched.describe_many(ids)
    assert [c[0] for c in fake_commands.calls] == ["sacct"]
    assert "1234,1240" in fake_commands.calls[0]
    assert statuses["1234_0"].state is AppState.SUCCEEDED  # type: ignore[union-attr]
    assert statuses["1240_0"].state is AppState.RUNNING  # type: ignore[union-attr]
    assert statuses["1240_3"].state is AppState.PENDING  # type: ignore[union-attr]

    sched._accounting = False
    sched._ended_path = lambda array_id: None  # type: ignore[method-assign]
    fake_commands.on("scontrol", stdout=SCONTROL_ARRAY + SCONTROL_ARRAY.replace("1234", "1240"))
    fake_commands.calls.clear()
    again = sched.describe_many(ids)
    assert fake_commands.calls == [("scontrol", "show", "job", "-o")]
    assert again["1240_1"].state is AppState.RUNNING  # type: ignore[union-attr]
