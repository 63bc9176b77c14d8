"""dist.ddp and dist.spmd."""

from __future__ import annotations

import pytest

from distspec.components.binder import bind
from distspec.components.dist import DEBUG_ENV, ddp, group_mounts, role_name_for
from distspec.components.loader import load
from distspec.errors import ComponentError, SpecError, TopologyError
from distspec.specs import AppDef, BindMount, Macro, VolumeMount
from distspec.specs import macros as macro_mod


def run(name: str, *argv: str) -> AppDef:
    return bind(load(name), list(argv))


def flag(args: tuple[str, ...], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_single_node_uses_localhost_with_a_free_port() -> None:
    app = run("dist.ddp", "--script", "train.py", "-j", "1x4")
    role = app.roles[0]
    assert role.entrypoint == "torchrun"
    assert flag(role.args, "--rdzv_endpoint") == "localhost:0"
    assert flag(role.args, "--rdzv_backend") == "c10d"
    assert flag(role.args, "--nnodes") == "1"
    assert flag(role.args, "--nproc_per_node") == "4"
    assert role.num_replicas == 1 and role.min_replicas is None
    assert Macro.RANK0_HOST not in _macros(app)
    assert "--node_rank" not in role.args
    assert dict(role.port_map) == {}


def test_multi_node_rendezvous_on_rank0_host() -> None:
    app = run(
        "dist.ddp", "--script", "train.py", "-j", "2x8", "--rdzv_port", "29400",
        "--rdzv_backend", "c10d",
    )  # fmt: skip
    role = app.roles[0]
    assert flag(role.args, "--rdzv_endpoint") == "${rank0_host}:29400"
    assert flag(role.args, "--rdzv_id") == "${app_id}"
    assert flag(role.args, "--nnodes") == "2"
    # c10d assigns node ranks itself; torchrun warns about and ignores --node_rank there
    assert "--node_rank" not in role.args
    assert role.num_replicas == 2
    assert dict(role.port_map) == {"c10d": 29400}
    assert "localhost" not in " ".join(role.args)


def test_default_rendezvous_is_static_for_a_fixed_node_count_c10d_with_restarts() -> None:
    """Issue 15 item 11: a fixed-size job needs no re-rendezvous, and c10d's polling of
    the store fails jobs that finished; restarts need c10d's re-rendezvous."""
    role = run("dist.ddp", "--script", "t.py", "-j", "2x2").roles[0]
    assert flag(role.args, "--rdzv_backend") == "static"
    assert flag(role.args, "--node_rank") == "${replica_id}"
    role = run("dist.ddp", "--script", "t.py", "-j", "2x2", "--max_restarts", "2").roles[0]
    assert flag(role.args, "--rdzv_backend") == "c10d"
    assert "--node_rank" not in role.args


def test_static_rendezvous_passes_replica_id_as_node_rank() -> None:
    role = run("dist.ddp", "--script", "t.py", "-j", "3x2", "--rdzv_backend", "static").roles[0]
    assert flag(role.args, "--node_rank") == "${replica_id}"
    assert flag(role.args, "--rdzv_backend") == "static"


def test_elastic() -> None:
    role = run("dist.ddp", "--script", "t.py", "-j", "1:4x8").roles[0]
    assert flag(role.args, "--nnodes") == "1:4"
    assert role.num_replicas == 4 and role.min_replicas == 1 and role.elastic
    assert "--node_rank" not in role.args
    with pytest.raises(ComponentError, match="static rendezvous needs a fixed node count"):
        run("dist.ddp", "--script", "t.py", "-j", "1:4x8", "--rdzv_backend", "static")


@pytest.mark.parametrize(
    ("argv", "given"),
    [(["--script", "a.py", "-m", "pkg.a"], "both"), ([], "neither")],
)
def test_script_xor_module(argv: list[str], given: str) -> None:
    with pytest.raises(
        ComponentError, match=rf"exactly one of --script .* and -m .*; {given} was given"
    ):
        run("dist.ddp", *argv)


def test_module_and_script_args() -> None:
    role = run("dist.ddp", "-m", "pkg.sub.trainer", "--", "--lr", "0.1").roles[0]
    assert role.args[-4:] == ("-m", "pkg.sub.trainer", "--lr", "0.1")
    assert role.name == "trainer"


def test_named_resource_sets_the_resource_and_ddp_j_stays_processes() -> None:
    # TorchX's dist.ddp: a bare -j M is M processes on one node, even on GPU hosts
    app = run("dist.ddp", "-h", "gpu.xlarge", "-j", "2", "--script", "t.py")
    role = app.roles[0]
    assert role.num_replicas == 1
    assert flag(role.args, "--nproc_per_node") == "2"
    assert (role.resource.cpu, role.resource.gpu, role.resource.mem_mb) == (64, 8, 256 * 1024)
    role = run("dist.ddp", "-j", "2", "--gpu", "8", "--script", "t.py").roles[0]
    assert (role.num_replicas, flag(role.args, "--nproc_per_node"), role.resource.gpu) == (
        1,
        "2",
        8,
    )


def test_explicit_knobs_override_the_named_resource() -> None:
    role = run(
        "dist.ddp", "-h", "gpu.xlarge", "--mem_mb", "2048", "--script", "t.py", "-j", "1"
    ).roles[0]
    assert (role.resource.cpu, role.resource.gpu, role.resource.mem_mb) == (64, 8, 2048)


def test_plain_resource_defaults() -> None:
    # No invented CPU or memory numbers: unspecified, left to the cluster's defaults.
    r = run("dist.ddp", "--script", "t.py").roles[0].resource
    assert (r.cpu, r.gpu, r.mem_mb) == (None, 0, None)
    r = run("dist.ddp", "--script", "t.py", "--gpu", "8", "-j", "1x8").roles[0].resource
    assert (r.cpu, r.gpu, r.mem_mb) == (None, 8, None)
    r = run("dist.ddp", "--script", "t.py", "--cpu", "4").roles[0].resource
    assert (r.cpu, r.gpu, r.mem_mb) == (4, 0, None)


def test_more_processes_than_gpus_is_an_error() -> None:
    with pytest.raises(ComponentError, match="runs 16 processes per node but each node has 8 GPU"):
        run("dist.ddp", "-h", "gpu.xlarge", "-j", "1x16", "--script", "t.py")


def test_unknown_named_resource() -> None:
    with pytest.raises(
        SpecError, match="unknown named resource 'gpu.lrge'.*did you mean 'gpu.large'"
    ):
        run("dist.ddp", "-h", "gpu.lrge", "--script", "t.py")


def test_bad_topology_is_a_topology_error() -> None:
    with pytest.raises(TopologyError):
        run("dist.ddp", "-j", "2x", "--script", "t.py")


def test_env_escapes_through_the_cli() -> None:
    role = run("dist.ddp", "--script", "t.py", "--env", "A=x\\,B=y,PATHS=/a,/b,Q=k=v").roles[0]
    assert dict(role.env) == {"A": "x,B=y", "PATHS": "/a,/b", "Q": "k=v"}


def test_debug_env_and_user_env_wins() -> None:
    role = run("dist.ddp", "--script", "t.py", "--debug", "--env", "NCCL_DEBUG=WARN").roles[0]
    assert role.env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert role.env["NCCL_DEBUG"] == "WARN"
    assert role.env["TORCH_SHOW_CPP_STACKTRACES"] == "1"
    assert role.env["LOGLEVEL"] == "INFO"
    assert dict(run("dist.ddp", "--script", "t.py").roles[0].env) == {}
    assert set(DEBUG_ENV) <= set(role.env)


def test_tee_and_restarts() -> None:
    role = run("dist.ddp", "--script", "t.py", "--tee", "1", "--max_restarts", "2").roles[0]
    assert flag(role.args, "--tee") == "1"
    assert flag(role.args, "--max_restarts") == "2"
    with pytest.raises(ComponentError, match="--tee must be"):
        run("dist.ddp", "--script", "t.py", "--tee", "7")


def test_names() -> None:
    app = run("dist.ddp", "--script", "dir/my train.py")
    assert app.name == app.roles[0].name == "my-train"
    assert run("dist.ddp", "--script", "t.py", "--name", "exp1").name == "exp1"
    assert role_name_for(script="./run", module=None) == "run"
    assert role_name_for(script="_.py", module=None) == "worker"


def test_mounts() -> None:
    role = run(
        "dist.ddp", "--script", "t.py",
        "--mounts", "type=bind,src=/data,dst=/mnt/data,readonly,type=volume,src=ckpt,dst=/ckpt",
        "--mounts", "type=bind,src=/scratch",
    ).roles[0]  # fmt: skip
    assert role.mounts == (
        BindMount(src_path="/data", dst_path="/mnt/data", read_only=True),
        VolumeMount(src="ckpt", dst_path="/ckpt"),
        BindMount(src_path="/scratch", dst_path="/scratch"),
    )
    assert group_mounts(["src=/a,dst=/b", "type=volume,src=v,dst=/v"]) == [
        "src=/a,dst=/b",
        "type=volume,src=v,dst=/v",
    ]


def test_retries() -> None:
    assert run("dist.ddp", "--script", "t.py", "--max_retries", "3").roles[0].max_retries == 3


def test_spmd_requires_j() -> None:
    with pytest.raises(ComponentError, match="required: -j"):
        run("dist.spmd", "--script", "t.py")


def test_spmd_one_process_per_gpu() -> None:
    role = run("dist.spmd", "--gpu", "4", "-j", "2", "--script", "t.py").roles[0]
    assert role.num_replicas == 2 and flag(role.args, "--nproc_per_node") == "4"
    role = run("dist.spmd", "-h", "gpu.xlarge", "-j", "1:3", "-m", "p.m").roles[0]
    assert (role.min_replicas, role.num_replicas) == (1, 3)
    assert flag(role.args, "--nnodes") == "1:3"
    assert flag(role.args, "--nproc_per_node") == "8"
    # no GPUs: refused (TorchX's spmd would take -h gpu.small); CPU processes are dist.ddp's
    for j in ("4", "1x4"):
        with pytest.raises(ComponentError, match="dist.spmd runs one process per GPU"):
            run("dist.spmd", "-j", j, "--script", "t.py")


def test_only_known_macros_are_used() -> None:
    app = run("dist.ddp", "--script", "t.py", "-j", "2x2", "--rdzv_backend", "static")
    for arg in app.roles[0].args:
        stripped = macro_mod.substitute(arg, {m: "" for m in Macro})
        assert "${" not in stripped


def test_round_trips_through_json() -> None:
    app = run("dist.ddp", "--script", "t.py", "-j", "1:2x2", "--env", "A=1", "--mounts", "src=/a")
    assert AppDef.from_dict(app.to_dict()) == app


def test_callable_directly() -> None:
    app = ddp("--lr", "1", script="t.py", j="2x1")
    assert app.roles[0].args[-3:] == ("t.py", "--lr", "1")


def _macros(app: AppDef) -> set[Macro]:
    found: set[Macro] = set()
    for role in app.roles:
        for text in (*role.args, *role.env.values()):
            found |= macro_mod.find(text)
    return found
