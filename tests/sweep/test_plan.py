"""How a sweep is compiled (distspec.sweep.plan) and submitted (distspec.sweep.submit),
against Slurm with a recording command runner: one array when only text changes,
split at MaxArraySize (the arrays chained under --max-parallel), one job per point
when a value changes the job's shape; dependencies from --after."""

from __future__ import annotations

from pathlib import Path

import pytest

from distspec.components.loader import load
from distspec.errors import UsageError
from distspec.runner import Runner
from distspec.sweep.plan import fill_app, plan_sweep
from distspec.sweep.spec import parse
from distspec.sweep.submit import submit_sweep
from tests.conftest import FakeCommands

CFG = {"snapshot": "off"}


def _runner(fake: FakeCommands, max_array: int | None) -> Runner:
    runner = Runner(run_cmd=fake)
    sched = runner.scheduler("slurm")
    sched.max_array_size = lambda opts: max_array  # type: ignore[method-assign]
    return runner


def _plan(runner: Runner, args: list[str], defs: list[str], **kw: object) -> object:
    return plan_sweep(
        runner,
        load("dist.ddp"),
        args,
        parse(defs),
        "slurm",
        CFG,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


ARGS = ["-j", "1x2", "--script", "train.py", "--", "--lr", "{{lr}}", "--seed", "{{seed}}"]


def test_text_only_values_make_one_array(work: Path, fake_commands: FakeCommands) -> None:
    runner = _runner(fake_commands, None)
    req = _plan(runner, ARGS, ["lr=0.1,0.2,0.3", "seed=0,1"], max_parallel=2)
    assert req.arrays and len(req.requests) == 1  # type: ignore[attr-defined]
    script = req.requests[0].render()  # type: ignore[attr-defined]
    assert "#SBATCH --array=0-5%2" in script
    assert '--lr "$DISTSPEC_SWEEP_lr" --seed "$DISTSPEC_SWEEP_seed"' in script
    points = req.requests[0].points  # type: ignore[attr-defined]
    assert points.values[5] == ("0.3", "1") and points.first == 0


def test_an_array_over_max_array_size_is_split_and_chained(
    work: Path, fake_commands: FakeCommands
) -> None:
    runner = _runner(fake_commands, 2)
    req = _plan(runner, ARGS, ["lr=0.1,0.2,0.3", "seed=0"], max_parallel=1)
    firsts = [r.points.first for r in req.requests]  # type: ignore[attr-defined]
    assert firsts == [0, 2]
    assert "#SBATCH --array=0-1%1" in req.requests[0].render()  # type: ignore[attr-defined]
    assert "#SBATCH --array=0-0%1" in req.requests[1].render()  # type: ignore[attr-defined]
    fake_commands.on("sbatch", stdout="100\n")
    fake_commands.on("sbatch", stdout="101\n")
    record = submit_sweep(runner, req)  # type: ignore[arg-type]
    sbatches = [c for c in fake_commands.calls if c[0] == "sbatch"]
    assert len(sbatches) == 2
    second = Path(sbatches[1][-1]).read_text()
    # the second array waits for the first: together never more than K at once
    assert "#SBATCH --dependency=afterany:100" in second
    assert [h.rsplit("/", 1)[1] for h in record.handles] == ["100_0", "100_1", "101_0"]
    assert record.dependency_ids() == ["100", "101"]


def test_a_value_that_changes_the_shape_makes_one_job_per_point(
    work: Path, fake_commands: FakeCommands
) -> None:
    runner = _runner(fake_commands, None)
    args = ["-j", "{{n}}x1", "--script", "train.py"]
    req = _plan(runner, args, ["n=1,2"])
    assert not req.arrays and len(req.requests) == 2  # type: ignore[attr-defined]
    assert "not plain text" in (req.why_not_array or "")  # type: ignore[attr-defined]
    nodes = ["#SBATCH --nodes=1", "#SBATCH --nodes=2"]
    for request, line in zip(req.requests, nodes, strict=True):  # type: ignore[attr-defined]
        assert line in request.render()
        assert request.app.roles[0].env["DISTSPEC_SWEEP_n"] in ("1", "2")


def test_lanes_keep_max_parallel_without_arrays(work: Path, fake_commands: FakeCommands) -> None:
    runner = _runner(fake_commands, None)
    req = _plan(runner, ["-j", "{{n}}x1", "--script", "train.py"], ["n=1,2,3"], max_parallel=2)
    for job in ("200", "201", "202"):
        fake_commands.on("sbatch", stdout=job + "\n")
    submit_sweep(runner, req)  # type: ignore[arg-type]
    scripts = [Path(c[-1]).read_text() for c in fake_commands.calls if c[0] == "sbatch"]
    assert "--dependency" not in scripts[0] and "--dependency" not in scripts[1]
    assert "#SBATCH --dependency=afterany:200" in scripts[2]  # point 2 waits for point 0


def test_after_reaches_every_array(work: Path, fake_commands: FakeCommands) -> None:
    runner = _runner(fake_commands, None)
    fake_commands.on("sacct", stdout="")  # the dependency's existence is asked of Slurm
    fake_commands.on("scontrol", stdout="JobId=77 JobName=x JobState=COMPLETED ExitCode=0:0\n")
    deps = runner.dependencies("slurm", ["slurm://distspec/77:failed"])
    req = _plan(runner, ARGS, ["lr=0.1", "seed=0"], after=deps)
    assert "#SBATCH --dependency=afternotok:77" in req.requests[0].render()  # type: ignore[attr-defined]


def test_fill_app_fills_every_text(work: Path) -> None:
    runner = Runner()
    app = runner.bind(load("dist.ddp"), ["--script", "train.py", "--env", "X={{v}}", "--", "{{v}}"])
    filled = fill_app(app, {"v": "7"})
    assert filled.roles[0].env["X"] == "7" and filled.roles[0].args[-1] == "7"


def test_bad_max_parallel_and_a_point_that_does_not_bind(work: Path) -> None:
    runner = Runner()
    with pytest.raises(UsageError, match=">= 1"):
        _plan(runner, ARGS, ["lr=0.1", "seed=0"], max_parallel=0)
    with pytest.raises(UsageError, match=r"sweep point 1 \(n=zz\)"):
        _plan(runner, ["-j", "{{n}}x1", "--script", "train.py"], ["n=1,zz"])


def test_binding_again_reuses_nothing_it_should_not(work: Path) -> None:
    """The binder keeps the last component's parser (a sweep binds once per point): the
    same component with other arguments, other defaults or another component still
    binds as if for the first time."""
    from distspec.components.binder import bind

    ddp = load("dist.ddp")
    a = bind(ddp, ["--script", "train.py", "--", "1"])
    b = bind(ddp, ["--script", "train.py", "--", "2"])
    assert a.roles[0].args[-1] == "1" and b.roles[0].args[-1] == "2"
    c = bind(ddp, ["--script", "train.py"], defaults={"j": "1x3"})
    d = bind(ddp, ["--script", "train.py"])

    def nproc(app: object) -> str:
        args = list(app.roles[0].args)  # type: ignore[attr-defined]
        return str(args[args.index("--nproc_per_node") + 1])

    assert (nproc(c), nproc(d)) == ("3", "2")
    echo = bind(load("utils.echo"), ["--msg", "hi"])
    assert echo.roles[0].args[-1] == "hi"


K8S_ARGS = ["-j", "1x1", "--image", "img:1", "--script", "train.py", "--", "--v", "{{v}}"]


def _k8s_plan(defs: list[str], **kw: object) -> object:
    return plan_sweep(
        Runner(),
        load("dist.ddp"),
        K8S_ARGS,
        parse(defs),
        "kubernetes",
        CFG,
        **kw,  # type: ignore[arg-type]
    )


def test_kubernetes_points_over_a_configmap_are_split_into_arrays(work: Path) -> None:
    """800 points of 2 KB take 1.6 MB, over the 1 MB a points ConfigMap holds: they are
    split into arrays that fit (not one Job per point), in the order of the points, and
    --max-parallel is shared out among them (Kubernetes cannot chain them)."""
    import yaml

    from distspec.schedulers.kubernetes.array import MAX_POINTS_TEXT

    values = [f"{i:04d}" + "x" * 1996 for i in range(800)]
    req = _k8s_plan(["v=" + ",".join(values)], max_parallel=7)
    requests = req.requests  # type: ignore[attr-defined]
    assert req.arrays and len(requests) == 2  # type: ignore[attr-defined]
    assert [r.points.first for r in requests] == [0, 400]
    assert [v for r in requests for (v,) in r.points.values] == values
    for r in requests:
        config_map, job = [d for d in yaml.safe_load_all(r.render()) if d]
        text = next(iter(config_map["data"].values()))
        assert len(text.encode()) <= MAX_POINTS_TEXT
        assert job["spec"]["parallelism"] == 3  # 7 shared by 2 arrays: never more than 7
    with pytest.raises(UsageError, match="--max-parallel 1: these points are 2 arrays"):
        _k8s_plan(["v=" + ",".join(values)], max_parallel=1)


def test_a_kubernetes_point_too_big_for_any_array_runs_as_its_own_job(work: Path) -> None:
    big = "y" * 1_100_000
    req = _k8s_plan([f"v=small,{big}"])
    assert not req.arrays and len(req.requests) == 2  # type: ignore[attr-defined]
    assert "ConfigMap holds at most" in req.why_not_array  # type: ignore[attr-defined]


def test_kubernetes_arrays_are_submitted_side_by_side(work: Path) -> None:
    """Two arrays of one sweep on Kubernetes: both submitted, and neither compiled to
    wait for the other (Kubernetes has no dependencies; the share of --max-parallel
    keeps the total)."""
    values = [f"{i:04d}" + "x" * 1996 for i in range(800)]
    runner = Runner()
    sched = runner.scheduler("kubernetes")
    submitted: list[object] = []

    def submit(request: object) -> str:
        submitted.append(request)
        return f"default:{request.app_id}"  # type: ignore[attr-defined]

    sched.submit = submit  # type: ignore[method-assign]
    req = plan_sweep(
        runner,
        load("dist.ddp"),
        K8S_ARGS,
        parse(["v=" + ",".join(values)]),
        "kubernetes",
        CFG,
        max_parallel=8,
    )
    record = submit_sweep(runner, req)
    assert len(submitted) == 2
    assert [r.after for r in submitted] == [(), ()]  # type: ignore[attr-defined]
    assert [r.points.max_parallel for r in submitted] == [4, 4]  # type: ignore[attr-defined]
    assert len(record.handles) == 800
