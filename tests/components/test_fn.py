"""dist.fn: the launch of dist.ddp (one role builder), with the callables worker as program."""

from __future__ import annotations

import pytest

from distspec.components.binder import bind
from distspec.components.dist import EXPERIMENT_METADATA, FULL_NAME_METADATA
from distspec.components.fn import ROLE, WORKER_MODULE, job_name
from distspec.components.loader import load
from distspec.errors import ComponentError
from distspec.specs import AppDef


def run(name: str, *argv: str) -> AppDef:
    return bind(load(name), list(argv))


def flag(args: tuple[str, ...], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize(
    "launch",
    [
        ["-j", "1x2"],
        ["-j", "3"],
        ["-j", "2x4", "--rdzv_port", "29400", "--debug", "--env", "A=1"],
        ["-j", "2", "--gpu", "8"],
        ["-j", "1:3x2", "-h", "gpu.xlarge", "--max_retries", "2", "--tee", "1"],
        ["-j", "2x1", "--rdzv_backend", "static", "--cpu", "4", "--mem_mb", "1024"],
        ["-j", "1x2", "--mounts", "type=bind,src=/a,dst=/b", "--image", "repo/img"],
    ],
)
def test_the_launch_is_dist_ddps(launch: list[str]) -> None:
    """Everything but the program, the role name and max_restarts (always 0: a restart
    would run the function again) is what dist.ddp compiles for the same options."""
    fn_app = run("dist.fn", *launch, "--fn", "pkg.mod:work", "--", "a", "$x")
    ddp_app = run(
        "dist.ddp", *launch, "-m", WORKER_MODULE, "--", "--fn", "pkg.mod:work", "--", "a", "$x"
    )
    (fn_role,) = fn_app.roles
    (ddp_role,) = ddp_app.roles
    assert fn_role.name == ROLE
    # torchrun's --role is the role name; the rest of the command line is the same.
    ddp_args = list(ddp_role.args)
    ddp_args[ddp_args.index("--role") + 1] = ROLE
    assert list(fn_role.args) == ddp_args
    assert flag(fn_role.args, "--max_restarts") == "0"
    for field in ("image", "entrypoint", "env", "num_replicas", "min_replicas", "resource"):
        assert getattr(fn_role, field) == getattr(ddp_role, field), field
    for field in ("port_map", "max_retries", "mounts"):
        assert getattr(fn_role, field) == getattr(ddp_role, field), field


def test_bare_j_is_processes_on_one_node_whatever_the_gpus() -> None:
    # It counted nodes on GPU hosts before dist.fn shared dist.ddp's role builder.
    for gpus in (["--gpu", "8"], ["-h", "gpu.xlarge"], []):
        role = run("dist.fn", "-j", "2", *gpus, "--fn", "m:f").roles[0]
        assert (role.num_replicas, flag(role.args, "--nproc_per_node")) == (1, "2"), gpus
    role = run("dist.fn", "-j", "2x8", "-h", "gpu.xlarge", "--fn", "m:f").roles[0]
    assert (role.num_replicas, flag(role.args, "--nproc_per_node")) == (2, "8")


def test_more_processes_than_gpus_is_refused() -> None:
    with pytest.raises(ComponentError, match="runs 4 processes per node but each node has 2"):
        run("dist.fn", "-j", "4", "--gpu", "2", "--fn", "m:f")


@pytest.mark.parametrize(
    ("argv", "name", "meta"),
    [
        (["--fn", "pkg.mod:train"], "train", {}),
        ([], "fn", {}),
        (["--fn", "pkg.mod:_private"], "private", {}),  # --fn takes Python names only
        (["--name", "mine"], "mine", {}),
        (
            ["--name", "exp/run1"],
            "run1",
            {FULL_NAME_METADATA: "exp/run1", EXPERIMENT_METADATA: "exp"},
        ),
        (
            ["--name", "exp/", "--fn", "m:work"],
            "work",
            {FULL_NAME_METADATA: "exp/", EXPERIMENT_METADATA: "exp"},
        ),
        (["--name", "my run"], "my-run", {FULL_NAME_METADATA: "my run"}),
    ],
)
def test_names(argv: list[str], name: str, meta: dict[str, str]) -> None:
    app = run("dist.fn", "-j", "1x2", *argv)
    assert app.name == name
    assert dict(app.metadata) == meta
    assert app.roles[0].name == ROLE


@pytest.mark.parametrize(
    ("text", "expected"),
    [("<lambda>", "lambda"), ("train", "train"), ("a/b", "a-b"), ("", "fn"), ("<>", "fn")],
)
def test_function_names_become_job_names(text: str, expected: str) -> None:
    assert job_name(text) == expected


def test_callables_compile_the_same_reading_of_j_and_name(state_dir: object) -> None:
    """``distspec.submit`` goes through dist.fn: its Job's shape is the job's shape."""
    from distspec.callables import compile_call

    call = compile_call(lambda: 1, j="2", scheduler="slurm", options={"gpu": 8})
    assert (call.nodes, call.nproc_per_node, call.role) == (1, 2, ROLE)
    text = call.request.render()
    assert "--nodes=1" in text and "--nnodes 1 --nproc_per_node 2" in text
    call = compile_call(lambda: 1, j="2x8", scheduler="slurm", options={"name": "exp/run7"})
    assert (call.nodes, call.nproc_per_node) == (2, 8)
    assert "--job-name=run7" in call.request.render()
    call = compile_call(lambda: 1, j="1x2", scheduler="local_cwd")
    assert call.request.render().count('"lambda-') >= 1  # named after the function
