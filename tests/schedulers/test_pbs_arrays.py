"""PBS job arrays (a sweep's points, ``-J`` / Torque ``-t``) and dependencies
(``-W depend=``) without a PBS server: goldens of both dialects, the array script run
by bash once per subjob under fake launchers, and ids, describe, cancel and logs of
subjobs through ``fake_commands``.

The ``qstat`` outputs here are hand-written after the PBS Pro / OpenPBS and Torque
documentation (``qstat -f -t`` lists an array job's subjobs, ``1234[7].pbs01``);
Slurm's PBS wrappers (the real runs are in test_pbs_cluster.py) list none.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from distspec.errors import CompileError, SchedulerError
from distspec.schedulers.api import Dependency, Points, Request
from distspec.schedulers.pbs import PbsScheduler
from distspec.schedulers.pbs.status import array_of, subjob_id
from distspec.specs import AppDef, AppState, Role
from tests.conftest import FakeCommands
from tests.schedulers.batch_apps import APP_ID, JOB_DIR, STATE_DIR, trainer_role
from tests.schedulers.batch_apps import app as _app
from tests.schedulers.batch_apps import bash_n as _bash_n
from tests.schedulers.test_pbs import DUMP, FAKE_HOSTNAME, FAKE_MPIEXEC, FAKE_PBSDSH

#: Two variables; the second point's values need quoting (a quote, a space, a $).
POINTS = Points(
    names=("lr", "seed"), values=(("0.1", "1"), ("1e-3", "it's $2")), first=4, max_parallel=2
)
AFTER = (
    Dependency("12.pbs01", "ok"),
    Dependency("13.pbs01", "ok"),
    Dependency("14.pbs01", "any"),
    Dependency("15.pbs01", "failed"),
)


def _swept(nodes: int, **changes: Any) -> Role:
    """The goldens' torchrun role, with ``{{seed}}`` in its args and ``{{lr}}`` in its env."""
    role = trainer_role(nodes, 2, node_rank=True)
    swept = {"args": (*role.args, "--seed", "{{seed}}"), "env": {**role.env, "LR": "lr={{lr}}"}}
    return dataclasses.replace(role, **{**swept, **changes})


def _request(
    app: AppDef,
    *,
    points: Points | None = POINTS,
    after: tuple[Dependency, ...] = (),
    job_dir: str = JOB_DIR,
    **opts: Any,
) -> Request:
    sched = PbsScheduler(state_dir=STATE_DIR)
    options = sched.parse_options({"job_dir": job_dir, **opts})
    if points is None:
        return sched.compile(app, options, app_id=APP_ID, after=after)
    return sched.compile_array(app, options, app_id=APP_ID, points=points, after=after)


def _script(app: AppDef, **kwargs: Any) -> str:
    return _request(app, **kwargs).render()


GOLDEN_CASES: dict[str, Callable[[], str]] = {
    # PBS Pro / OpenPBS: -J, one node, the role runs in the script itself.
    "array_select.pbs": lambda: _script(_app(_swept(1))),
    # Torque: -t, two nodes through pbsdsh.
    "array_nodes.pbs": lambda: _script(_app(_swept(2)), resource_style="nodes"),
    # Retries: the script's attempt loop, two nodes through mpiexec.
    "array_retries.pbs": lambda: _script(_app(_swept(2, max_retries=1)), launcher="mpiexec"),
    "array.points": lambda: _request(_app(_swept(1))).files[f"{APP_ID}.points"],
    # One job waiting for four, with the depend option's own dependency after them.
    "depend.pbs": lambda: _script(
        _app(trainer_role(1, 2)), points=None, after=AFTER, depend="afterstart:9.pbs01"
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_arrays_and_dependencies(case: str, golden: Callable[[str, str], None]) -> None:
    text = GOLDEN_CASES[case]()
    golden(f"pbs/{case}", text)
    if case.endswith(".pbs"):
        _bash_n(text)


def test_backend_says_it_has_arrays_and_dependencies() -> None:
    caps = PbsScheduler.capabilities
    assert (caps.arrays, caps.dependencies) == (True, True)


# -- dependencies ----------------------------------------------------------------


def test_after_maps_each_condition_and_keeps_the_depend_option() -> None:
    text = _script(_app(trainer_role(1, 2)), points=None, after=(*AFTER, AFTER[0]))
    assert "#PBS -W depend=afterok:12.pbs01:13.pbs01,afterany:14.pbs01,afternotok:15.pbs01\n" in (
        text
    )
    assert text.count("#PBS -W depend=") == 1
    # Slurm's PBS wrappers would otherwise leave a never-satisfiable job pending.
    assert "\n#SBATCH --kill-on-invalid-dep=yes\n" in text
    only = _script(_app(trainer_role(1, 2)), points=None, depend="afterany:7")
    assert "#PBS -W depend=afterany:7\n" in only
    plain = _script(_app(trainer_role(1, 2)), points=None)
    assert "depend" not in plain and "#SBATCH" not in plain
    req = _request(_app(trainer_role(1, 2)), points=None, after=AFTER)
    assert req.after == AFTER


def test_after_a_whole_array_job_and_not_a_subjob() -> None:
    app = _app(trainer_role(1, 2))
    whole = (Dependency("77[].pbs01", "ok"),)
    assert "#PBS -W depend=afterok:77[].pbs01\n" in _script(app, points=None, after=whole)
    # Torque waits for an array job's subjobs with its own dependency types.
    torque = _script(app, points=None, after=whole, resource_style="nodes")
    assert "#PBS -W depend=afterokarray:77[].pbs01\n" in torque
    with pytest.raises(CompileError, match=r"one subjob .*whole array \(77\[\]\.pbs01\)"):
        _script(app, points=None, after=(Dependency("77[3].pbs01", "ok"),))
    with pytest.raises(CompileError, match="a PBS job id is"):
        _script(app, points=None, after=(Dependency("77;rm", "ok"),))
    with pytest.raises(CompileError, match="condition"):
        _script(app, points=None, after=(Dependency("77", "sometimes"),))


# -- array directives and checks ---------------------------------------------------


def test_array_ranges_for_both_dialects() -> None:
    app = _app(_swept(1))
    three = dataclasses.replace(POINTS, values=(*POINTS.values, ("1", "3")), max_parallel=None)
    assert "\n#PBS -J 0-2\n" in _script(app, points=three)
    assert "\n#PBS -t 0-2\n" in _script(app, points=three, resource_style="nodes")
    assert "\n#PBS -J 0-1%2\n" in _script(app)
    assert "\n#PBS -t 0-1%2\n" in _script(app, resource_style="nodes")
    # PBS Pro refuses a range X-Y unless X < Y: one point is 0-1:2, index 0 alone.
    one = dataclasses.replace(POINTS, values=POINTS.values[:1])
    assert "\n#PBS -J 0-1:2%2\n" in _script(app, points=one)
    assert "\n#PBS -t 0%2\n" in _script(app, points=one, resource_style="nodes")
    with pytest.raises(CompileError, match="max_parallel=0"):
        _script(app, points=dataclasses.replace(POINTS, max_parallel=0))
    with pytest.raises(CompileError, match="always rerunnable"):
        _script(app, qsub_args="-r n")
    assert "#PBS -r y\n" in _script(app, qsub_args="-r y")


def test_array_request_files_and_folders() -> None:
    req = _request(_app(_swept(1)))
    assert sorted(req.files) == [f"{APP_ID}.pbs", f"{APP_ID}.points"]
    assert req.points == POINTS and req.main_file == f"{APP_ID}.pbs"
    # The array's -o file is shared; each subjob writes <app>_<k>.out itself.
    assert req.argv == ("qsub", "-j", "oe", "-o", f"{JOB_DIR}/{APP_ID}.out", f"{APP_ID}.pbs")
    text = req.render()
    assert f'export DISTSPEC_JOB_DIR={JOB_DIR}/{APP_ID}_"$distspec_index"\n' in text
    assert f"< {JOB_DIR}/{APP_ID}.points\n" in text


@pytest.mark.parametrize(
    ("role", "match"),
    [
        (_swept(1, args=("{{seeds}}",)), r"\{\{seeds\}\}, which is not a sweep variable"),
        (_swept(1, image="/data/{{lr}}"), "same for every point"),
    ],
)
def test_a_placeholder_the_array_cannot_fill_is_refused(role: Role, match: str) -> None:
    with pytest.raises(CompileError, match=match):
        _script(_app(role))


def test_points_that_cannot_be_carried_are_refused() -> None:
    with pytest.raises(CompileError, match="NUL"):
        _script(_app(_swept(1)), points=dataclasses.replace(POINTS, values=(("a\x00", "1"),)))
    with pytest.raises(CompileError):
        _script(_app(_swept(1)), points=Points(names=("lr", "x-y"), values=(("1", "2"),)))


# -- subjob ids ------------------------------------------------------------------


def test_subjob_ids_from_the_array_id() -> None:
    assert subjob_id("1234[].pbs01", 7) == "1234[7].pbs01"
    assert subjob_id("1234[].torque.example.org", 0) == "1234[0].torque.example.org"
    assert subjob_id("1234", 7) == "1234[7]"  # Slurm's PBS wrappers print the number alone
    with pytest.raises(ValueError):
        subjob_id("12[3].pbs01", 1)
    assert array_of("1234[7].pbs01") == ("1234[].pbs01", 7)
    assert array_of("1234[7]") == ("1234[]", 7)
    assert array_of("1234[].pbs01") is None and array_of("1234.pbs01") is None


def test_point_id_is_the_subjob_of_the_points_index() -> None:
    req = _request(_app(_swept(1)))
    sched = PbsScheduler(state_dir=STATE_DIR)
    assert [sched.point_id("77[].pbs01", req, i) for i in (4, 5)] == [
        "77[0].pbs01",
        "77[1].pbs01",
    ]
    assert sched.point_id("77", req, 5) == "77[1]"
    for outside in (3, 6):
        with pytest.raises(ValueError):
            sched.point_id("77[].pbs01", req, outside)


# -- the array script, run by bash once per subjob ---------------------------------


def _run_subjob(
    text: str, tmp_path: Path, env: dict[str, str], *, hosts: tuple[str, ...] = ("n0", "n1")
) -> subprocess.CompletedProcess[str]:
    """The script as PBS runs a subjob: in $HOME, with ``env`` (its PBS_* variables)."""
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
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (tmp_path / "job.pbs").write_text(text)
    return subprocess.run(
        ["bash", str(tmp_path / "job.pbs")],
        check=False,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "PBS_O_WORKDIR": str(tmp_path),
            "PBS_NODEFILE": str(nodefile),
            "FAKE_LOG": str(tmp_path / "launcher.log"),
            **env,
        },
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
    )


#: Values a shell would mangle if they were not carried quoted.
HARD = Points(
    names=("a", "b"),
    values=(("it's", "$HOME `id` ${x}"), ("two\nlines", " \t"), ("", "é * ?")),
    first=10,
)


def _dump_role(nodes: int, **changes: Any) -> Role:
    return Role(
        name="r",
        entrypoint="python3",
        args=("-c", DUMP, "{{a}}", "<{{b}}>", "${app_id}", "${replica_id}", "${rdzv_port}"),
        env={"A": "{{a}}", "IDX": "x", "DUMP_KEYS": "A,DISTSPEC_SWEEP_INDEX,DISTSPEC_SWEEP_b"},
        num_replicas=nodes,
        **changes,
    )


def _write_points(req: Request, job_dir: Path) -> None:
    """What submit does: the points file beside the script."""
    job_dir.mkdir(parents=True, exist_ok=True)
    name = f"{APP_ID}.points"
    (job_dir / name).write_text(req.files[name])


def _dumps(folder: Path, nodes: int) -> list[Any]:
    return [
        json.loads((folder / f"r-{i}.log").read_text().strip().splitlines()[-1])
        for i in range(nodes)
    ]


@pytest.mark.parametrize(
    ("nodes", "opts"),
    [
        (1, {}),
        (2, {}),
        (2, {"launcher": "mpiexec"}),
        (2, {"resource_style": "nodes"}),
        (1, {"max_retries": "1"}),
        (2, {"max_retries": "1", "launcher": "mpiexec"}),
    ],
)
def test_each_subjob_runs_its_own_point_in_its_own_folder(
    tmp_path: Path, nodes: int, opts: dict[str, str]
) -> None:
    retries = int(opts.pop("max_retries", "0"))
    job_dir = tmp_path / "jobs"
    role = _dump_role(nodes, max_retries=retries)
    req = _request(_app(role), points=HARD, job_dir=str(job_dir), **opts)
    _write_points(req, job_dir)
    torque = opts.get("resource_style") == "nodes"
    for k, (a, b) in enumerate(HARD.values):
        index = {"PBS_ARRAYID" if torque else "PBS_ARRAY_INDEX": str(k)}
        proc = _run_subjob(req.render(), tmp_path, {"PBS_JOBID": f"42[{k}].pbs01", **index})
        assert proc.returncode == 0, proc.stderr
        folder = job_dir / f"{APP_ID}_{k}"
        for replica, got in enumerate(_dumps(folder, nodes)):
            # Subjobs share the array's number: the point's index keeps their ports apart.
            port = str(29500 + (42 + 10 + k) % 2000)
            assert got["argv"] == [a, f"<{b}>", f"42[{k}].pbs01", str(replica), port]
            assert got["env"] == {
                "A": a,
                "DISTSPEC_SWEEP_INDEX": str(10 + k),
                "DISTSPEC_SWEEP_b": b,
            }
        assert (folder / "exit").read_text() == "0\n"
        assert (folder / "jobid").read_text() == f"42[{k}].pbs01\n"
        assert Path(f"{folder}.out").exists()  # the subjob's own output
    assert sorted(p.name for p in job_dir.iterdir() if p.is_dir()) == [
        f"{APP_ID}_0",
        f"{APP_ID}_1",
        f"{APP_ID}_2",
    ]


def test_under_slurms_pbs_wrappers_the_app_id_is_the_subjob_id(tmp_path: Path) -> None:
    """The wrappers give a subjob a job number of its own (PBS_JOBID) and set
    PBS_ARRAY_ID to the array's: ${app_id} is still the handle's 1234[k], and the
    folder records the number the wrappers know it by. A Torque script under them
    (no PBS_ARRAYID) reads PBS_ARRAY_INDEX."""
    job_dir = tmp_path / "jobs"
    req = _request(_app(_dump_role(1)), points=HARD, job_dir=str(job_dir), resource_style="nodes")
    _write_points(req, job_dir)
    env = {"PBS_JOBID": "1236", "PBS_ARRAY_ID": "1234", "PBS_ARRAY_INDEX": "2"}
    proc = _run_subjob(req.render(), tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    folder = job_dir / f"{APP_ID}_2"
    assert _dumps(folder, 1)[0]["argv"][2] == "1234[2]"
    assert (folder / "jobid").read_text() == "1236\n"


def test_a_subjob_without_a_point_fails_clearly(tmp_path: Path) -> None:
    job_dir = tmp_path / "jobs"
    req = _request(_app(_dump_role(1)), points=HARD, job_dir=str(job_dir))
    _write_points(req, job_dir)
    for env in ({"PBS_ARRAY_INDEX": "3"}, {}):
        proc = _run_subjob(req.render(), tmp_path, {"PBS_JOBID": "42[3].pbs01", **env})
        assert proc.returncode == 2
        assert "distspec: no sweep point for array task" in proc.stderr
    assert [p.name for p in job_dir.iterdir()] == [f"{APP_ID}.points"]  # no folder made


def test_a_failing_point_fails_only_its_subjob(tmp_path: Path) -> None:
    job_dir = tmp_path / "jobs"
    role = Role(name="r", entrypoint="bash", args=("-c", "echo point {{a}}; exit {{a}}"))
    points = Points(names=("a",), values=(("0",), ("5",)))
    req = _request(_app(role), points=points, job_dir=str(job_dir))
    _write_points(req, job_dir)
    codes = [
        _run_subjob(req.render(), tmp_path, {"PBS_JOBID": f"8[{k}]", "PBS_ARRAY_INDEX": str(k)})
        for k in range(2)
    ]
    assert [c.returncode for c in codes] == [0, 5]
    for k in range(2):
        folder = job_dir / f"{APP_ID}_{k}"
        assert (folder / "r-0.log").read_text() == f"point {points.values[k][0]}\n"
        assert (folder / "exit").read_text() == f"{points.values[k][0]}\n"


# -- the effectful half through fake commands --------------------------------------


@pytest.fixture
def sched(fake_commands: FakeCommands, tmp_path: Path) -> PbsScheduler:
    return PbsScheduler(run_cmd=fake_commands, state_dir=tmp_path / "state")


def _submit_array(
    sched: PbsScheduler, fake: FakeCommands, tmp_path: Path, printed: str = "1234[].pbs01"
) -> Request:
    opts = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    req = sched.compile_array(_app(_swept(1)), opts, app_id=APP_ID, points=POINTS)
    fake.on("qsub", stdout=f"{printed}\n")
    assert sched.submit(req) == printed
    return req


def _subjob_block(index: int, state: str, extra: str = "") -> str:
    """Hand-written: a subjob's block of PBS Pro's ``qstat -f -t``."""
    return (
        f"Job Id: 1234[{index}].pbs01\n"
        "    Job_Name = train\n"
        f"    job_state = {state}\n"
        f"    exec_host = gpu00{index}/0*4\n"
        "    Output_Path = login01:/shared/elsewhere/train-0000abcd.out\n"
        "    array_id = 1234[].pbs01\n"
        f"    array_index = {index}\n"
        f"{extra}\n"
    )


ARRAY_PARENT = """\
Job Id: 1234[].pbs01
    Job_Name = train
    job_state = B
    array = True
    array_state_count = Queued:0 Running:1 Exiting:0 Expired:1
    Output_Path = login01:/shared/elsewhere/train-0000abcd.out

"""


def test_submit_writes_the_points_file_and_one_record(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    req = _submit_array(sched, fake_commands, tmp_path)
    jobs = tmp_path / "jobs"
    assert (jobs / f"{APP_ID}.points").read_text() == req.files[f"{APP_ID}.points"]
    assert fake_commands.calls == [
        ("qsub", "-j", "oe", "-o", str(jobs / f"{APP_ID}.out"), str(jobs / f"{APP_ID}.pbs"))
    ]
    records = sorted(p.name for p in (tmp_path / "state" / "pbs" / "jobs").iterdir())
    assert records == ["1234[].pbs01.json"]
    paths = sched.job_paths("1234[1].pbs01")
    assert paths is not None
    assert paths.folder == str(jobs / f"{APP_ID}_1")
    assert paths.script_output == str(jobs / f"{APP_ID}_1.out")
    assert fake_commands.calls[1:] == []  # from the record: no query


def test_describe_a_subjob_and_many_in_one_query(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    jobs = tmp_path / "jobs"
    done = jobs / f"{APP_ID}_0"
    done.mkdir()
    (done / "trainer-0.host").write_text("gpu000\n")
    (done / "trainer-0.exit").write_text("3\n")
    (done / "exit").write_text("3\n")
    (jobs / f"{APP_ID}_0" / "trainer-0.log").write_text("boom\n")
    fake_commands.on("qstat", stdout=_subjob_block(1, "R"))
    status = sched.describe("1234[1].pbs01")
    assert status is not None and status.state is AppState.RUNNING
    assert fake_commands.calls[-1] == ("qstat", "-f", "1234[1].pbs01")
    assert status.location == str(jobs / f"{APP_ID}_1")

    fake_commands.calls.clear()
    fake_commands.on(
        "qstat",
        stdout=ARRAY_PARENT + _subjob_block(0, "X", "    Exit_status = 3") + _subjob_block(1, "R"),
    )
    got = sched.describe_many(["1234[0].pbs01", "1234[1].pbs01"])
    assert fake_commands.calls == [("qstat", "-f", "-t", "1234[].pbs01")]
    first, second = got["1234[0].pbs01"], got["1234[1].pbs01"]
    assert first is not None and (first.state, first.msg) == (AppState.FAILED, "exit status 3")
    assert second is not None and second.state is AppState.RUNNING
    assert list(sched.log_iter("1234[0].pbs01", "trainer", 0)) == ["boom"]


def test_a_subjob_without_a_record_finds_its_own_folder(
    sched: PbsScheduler, fake_commands: FakeCommands
) -> None:
    # The server reports the array's -o path; the subjob's folder is that + _<index>.
    fake_commands.on("qstat", stdout=_subjob_block(1, "R"))
    paths = sched.job_paths("1234[1].pbs01")
    assert paths is not None and paths.folder == "/shared/elsewhere/train-0000abcd_1"


def test_an_ended_array_job_is_judged_by_its_subjobs(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    for k, code in enumerate((0, 4)):
        folder = tmp_path / "jobs" / f"{APP_ID}_{k}"
        folder.mkdir()
        (folder / "exit").write_text(f"{code}\n")
    fake_commands.on("qstat", returncode=153)
    status = sched.describe("1234[].pbs01")
    assert status is not None
    assert status.state is AppState.FAILED and "1 of 2 subjobs failed" in status.msg


def test_cancel_a_subjob_or_the_whole_array(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    _submit_array(sched, fake_commands, tmp_path)
    fake_commands.on("qstat", stdout=_subjob_block(1, "R"))
    fake_commands.on("qdel")
    sched.cancel("1234[1].pbs01")
    assert fake_commands.calls[-1] == ("qdel", "1234[1].pbs01")
    fake_commands.on("qstat", stdout=ARRAY_PARENT)
    fake_commands.on("qdel")
    sched.cancel("1234[].pbs01")
    assert fake_commands.calls[-1] == ("qdel", "1234[].pbs01")
    # Cancelling the array marks every subjob: a queued one that never ran is cancelled.
    fake_commands.on("qstat", returncode=153)
    status = sched.describe("1234[0].pbs01")
    assert status is not None and status.state is AppState.CANCELLED
    assert status.msg.endswith("cancelled (qdel)")


def test_subjobs_under_slurms_pbs_wrappers(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    """The wrappers' qsub prints the array's number alone and their qstat knows no
    1234[k]: a subjob is asked for by the job number its folder recorded, and is
    queued (not cancellable alone) until it has one."""
    req = _submit_array(sched, fake_commands, tmp_path, printed="1234")
    point = sched.point_id("1234", req, 5)
    assert point == "1234[1]"
    fake_commands.on("qstat", returncode=153)  # 1234[1]: unknown to the wrappers
    fake_commands.on("qstat", stdout="Job Id:\t1234\n\tJob_Name = train\n\tjob_state = Q\n")
    status = sched.describe(point)
    assert status is not None and status.state is AppState.PENDING
    assert "not started; its array job 1234 is queued" in status.msg
    fake_commands.on("qstat", returncode=153)
    fake_commands.on("qstat", stdout="Job Id:\t1234\n\tJob_Name = train\n\tjob_state = Q\n")
    with pytest.raises(SchedulerError, match="cancel the whole array job 1234"):
        sched.cancel(point)

    folder = tmp_path / "jobs" / f"{APP_ID}_1"
    folder.mkdir()
    (folder / "jobid").write_text("1236\n")
    fake_commands.calls.clear()
    fake_commands.on("qstat", returncode=153)
    fake_commands.on("qstat", stdout="Job Id:\t1236\n\tJob_Name = train\n\tjob_state = R\n")
    fake_commands.on("qdel")
    sched.cancel(point)
    assert fake_commands.calls == [
        ("qstat", "-f", "1234[1]"),
        ("qstat", "-f", "1236"),
        ("qdel", "1236"),
    ]


def test_a_job_deleted_for_its_dependency_says_so(
    sched: PbsScheduler, fake_commands: FakeCommands, tmp_path: Path
) -> None:
    opts = sched.parse_options({"job_dir": str(tmp_path / "jobs")})
    req = sched.compile(
        _app(trainer_role(1, 2)), opts, app_id=APP_ID, after=(Dependency("12.pbs01"),)
    )
    fake_commands.on("qsub", stdout="20.pbs01\n")
    sched.submit(req)
    # PBS deleted it when job 12 failed: it never ran and the server forgot it.
    fake_commands.on("qstat", returncode=153, stderr="qstat: Unknown Job Id 20.pbs01\n")
    status = sched.describe("20.pbs01")
    assert status is not None and status.state is AppState.CANCELLED
    assert "it waited for afterok:12.pbs01, which can no longer be met" in status.msg


# Hand-written: `qstat -B -f` of a PBS Pro server and of a Torque server.
PBSPRO_SERVER = """\
Server: pbs01
    server_state = Active
    server_host = pbs01.example.org
    total_jobs = 3
    default_queue = workq
    max_array_size = 2000
    pbs_version = 2022.1.1
"""
TORQUE_SERVER = """\
Server: torque.example.org
    server_state = Active
    max_job_array_size = 500
    pbs_version = 6.1.3
"""


@pytest.mark.parametrize(
    ("answer", "limit"),
    [
        ({"stdout": PBSPRO_SERVER}, 2000),
        ({"stdout": TORQUE_SERVER}, 500),
        # Not set (OpenPBS then allows 10,000; qsub has the last word), or no answer.
        ({"stdout": PBSPRO_SERVER.replace("    max_array_size = 2000\n", "")}, None),
        ({"returncode": 2, "stderr": "qstat: cannot connect to server\n"}, None),
    ],
)
def test_max_array_size_is_read_once_from_the_server(
    sched: PbsScheduler, fake_commands: FakeCommands, answer: dict[str, Any], limit: int | None
) -> None:
    fake_commands.on("qstat", **answer)
    opts = sched.parse_options({})
    assert sched.max_array_size(opts) == limit
    assert sched.max_array_size(opts) == limit
    assert fake_commands.calls == [("qstat", "-B", "-f")]
