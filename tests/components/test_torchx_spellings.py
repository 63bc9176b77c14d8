"""TorchX spellings: -j per component, dist.torchrun, --name EXP/RUN, --rdzv_conf,
--memMB, a value-less -h, plain-text help, ``log -t``."""

from __future__ import annotations

import pytest

from distspec.cli.main import build_parser, main
from distspec.components.binder import ComponentHelp, bind, help_text
from distspec.components.dist import EXPERIMENT_METADATA, FULL_NAME_METADATA, job_name
from distspec.components.loader import load
from distspec.errors import ComponentError
from distspec.specs import AppDef, Role


def run(name: str, *argv: str) -> AppDef:
    return bind(load(name), list(argv))


def shape(role: Role) -> tuple[int, int, int]:
    """(nodes, processes per node, GPUs per node)."""
    nproc = int(role.args[role.args.index("--nproc_per_node") + 1])
    return role.num_replicas, nproc, role.resource.gpu


# (component, -j and host flags) -> (nodes, processes per node, GPUs per node), as
# TorchX nightly 2026.10.26 builds them (dist.ddp, dist.spmd, dist.torchrun).
SAME_JOB = [
    ("dist.ddp", ["-j", "2", "--gpu", "8"], (1, 2, 8)),
    ("dist.ddp", ["-j", "4", "-h", "gpu.xlarge"], (1, 4, 8)),
    ("dist.ddp", ["-j", "2x8", "--gpu", "8"], (2, 8, 8)),
    ("dist.ddp", ["-j", "2"], (1, 2, 0)),
    ("dist.spmd", ["-j", "2", "-h", "gpu.xlarge"], (2, 8, 8)),
    ("dist.spmd", ["-j", "2", "-h", "aws_p4d.24xlarge"], (2, 8, 8)),
    ("dist.spmd", ["-j", "2x4", "-h", "aws_p4d.24xlarge"], (2, 4, 8)),
    ("dist.spmd", ["-j", "3", "-h", "gpu.small"], (3, 1, 1)),
    ("dist.torchrun", ["-j", "2", "-h", "aws_p3.8xlarge"], (2, 4, 4)),
    ("dist.torchrun", ["-j", "2"], (1, 2, 0)),
    ("dist.torchrun", ["-j", "2x4"], (2, 4, 0)),
    ("dist.torchrun", ["-j", "2x16", "-h", "aws_trn1.32xlarge"], (2, 16, 0)),
]


@pytest.mark.parametrize(("component", "argv", "expected"), SAME_JOB)
def test_j_means_what_torchx_means(
    component: str, argv: list[str], expected: tuple[int, int, int]
) -> None:
    assert shape(run(component, *argv, "--script", "t.py").roles[0]) == expected


def test_bare_j_on_a_host_without_gpus_is_refused() -> None:
    with pytest.raises(ComponentError, match=r"-j 2 counts nodes of one process per GPU.*2xM"):
        run("dist.torchrun", "-j", "2", "-h", "aws_trn1.32xlarge", "--script", "t.py")


@pytest.mark.parametrize(
    "argv",
    [
        ["-j", "2"],  # TorchX: 2 nodes of gpu.small (its default -h), which distspec won't guess
        ["-j", "2x4"],  # TorchX: 4 processes on gpu.small's 1 GPU
        ["-j", "1x1"],
        ["-j", "2", "-h", "cpu.xlarge"],
        ["-j", "2x2", "--gpu", "0"],
    ],
)
def test_spmd_without_gpus_is_refused(argv: list[str]) -> None:
    with pytest.raises(ComponentError) as info:
        run("dist.spmd", *argv, "--script", "t.py")
    text = str(info.value)
    assert "dist.spmd runs one process per GPU" in text
    assert "TorchX's dist.spmd defaults to -h gpu.small" in text
    assert "dist.ddp -j" in text


def test_each_help_says_what_a_bare_j_means() -> None:
    ddp = help_text(load("dist.ddp"))
    assert "M processes on one node whatever --gpu or -h say" in " ".join(ddp.split())
    spmd = " ".join(help_text(load("dist.spmd")).split())
    assert "a bare -j N counts nodes, one process per GPU" in spmd
    torchrun = " ".join(help_text(load("dist.torchrun")).split())
    assert "with -h a bare N is N nodes of one process per GPU" in torchrun


def test_torchrun_has_ddps_parameters() -> None:
    from distspec.components.binder import params

    ddp = {p.name for p in params(load("dist.ddp"))}
    torchrun = {p.name for p in params(load("dist.torchrun"))}
    assert torchrun <= ddp
    # TorchX's dist.torchrun parameters that distspec shares (metadata: not supported)
    assert {"script", "m", "image", "name", "h", "cpu", "gpu", "mem_mb", "j", "env"} <= torchrun
    assert {"max_retries", "rdzv_port", "rdzv_backend", "rdzv_conf", "mounts", "debug"} <= torchrun
    assert "tee" in torchrun


@pytest.mark.parametrize(
    ("name", "job", "meta"),
    [
        (None, "train", {}),
        ("run1", "run1", {}),
        ("exp/run1", "run1", {FULL_NAME_METADATA: "exp/run1", EXPERIMENT_METADATA: "exp"}),
        ("exp/", "train", {FULL_NAME_METADATA: "exp/", EXPERIMENT_METADATA: "exp"}),
        ("/run1", "run1", {FULL_NAME_METADATA: "/run1"}),
        ("/", "train", {FULL_NAME_METADATA: "/"}),
        (
            "t5/bf16 trial",
            "bf16-trial",
            {FULL_NAME_METADATA: "t5/bf16 trial", "distspec.experiment": "t5"},
        ),
    ],
)
def test_structured_name(name: str | None, job: str, meta: dict[str, str]) -> None:
    assert job_name(name, "train") == (job, meta)


def test_name_through_the_component() -> None:
    app = run("dist.ddp", "--script", "train.py", "--name", "my_experiment/trial_1")
    assert app.name == "trial_1"
    assert dict(app.metadata) == {
        FULL_NAME_METADATA: "my_experiment/trial_1",
        EXPERIMENT_METADATA: "my_experiment",
    }
    assert AppDef.from_dict(app.to_dict()) == app


def test_rdzv_conf_reaches_torchrun() -> None:
    role = run(
        "dist.ddp", "-j", "2x2", "--script", "t.py", "--rdzv_conf", "join_timeout=600,timeout=900"
    ).roles[0]
    i = role.args.index("--rdzv_conf")
    assert role.args[i + 1] == "join_timeout=600,timeout=900"
    assert i < role.args.index("t.py")
    single = run(
        "dist.torchrun", "-j", "1x2", "--script", "t.py", "--rdzv_conf", "timeout=5"
    ).roles[0]
    assert "--rdzv_conf" in single.args
    assert "--rdzv_conf" not in run("dist.ddp", "--script", "t.py").roles[0].args


@pytest.mark.parametrize("bad", ["join_timeout", "=5", "a=1,,b=2"])
def test_rdzv_conf_must_be_pairs(bad: str) -> None:
    with pytest.raises(ComponentError, match="is not KEY=VALUE"):
        run("dist.ddp", "--script", "t.py", "--rdzv_conf", bad)


def test_memMB_is_mem_mb() -> None:
    role = run("dist.ddp", "--script", "t.py", "--memMB", "4096").roles[0]
    assert role.resource.mem_mb == 4096
    assert "--memMB" in help_text(load("dist.ddp"))


@pytest.mark.parametrize(
    "argv",
    [["-h"], ["--script", "t.py", "-h"], ["-h", "--script", "t.py"], ["-h", "--"]],
)
def test_a_valueless_dash_h_shows_help(argv: list[str]) -> None:
    with pytest.raises(ComponentHelp):
        run("dist.ddp", *argv)


def test_dash_h_help_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "dist.ddp", "-h"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: distspec run dist.ddp")


def test_dash_h_inside_script_args_is_the_scripts() -> None:
    role = run("dist.ddp", "--script", "t.py", "--", "-h").roles[0]
    assert role.args[-1] == "-h"


def test_help_is_plain_text() -> None:
    for name in ("dist.ddp", "dist.spmd", "dist.torchrun", "utils.python", "utils.copy"):
        text = help_text(load(name))
        assert "``" not in text, name
        assert "::" not in text, name
    text = help_text(load("dist.ddp"))
    assert "(${rank0_host})" in text
    assert "Examples:\n" in text


def test_log_dash_t_follows_and_tail_keeps_its_number() -> None:
    args = build_parser(["log", "x"]).parse_args(["log", "-t", "local_cwd://s/a"])
    assert args.follow is True and args.tail is None
    args = build_parser(["log", "x"]).parse_args(["log", "--tail", "5", "local_cwd://s/a"])
    assert args.follow is False and args.tail == 5


def test_memMB_as_a_config_default() -> None:
    app = bind(load("dist.ddp"), ["--script", "t.py"], defaults={"memMB": "2048"})
    assert app.roles[0].resource.mem_mb == 2048


def test_valueless_dash_h_on_a_component_without_h() -> None:
    with pytest.raises(ComponentHelp):
        run("utils.echo", "-h")


def test_debug_env_includes_torchx_debug_flags() -> None:
    # torchx.components.dist._TORCH_DEBUG_FLAGS, written down from TorchX nightly
    torchx = {
        "CUDA_LAUNCH_BLOCKING": "1",
        "NCCL_DESYNC_DEBUG": "1",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "TORCH_SHOW_CPP_STACKTRACES": "1",
    }
    for component in ("dist.ddp", "dist.torchrun"):
        env = run(component, "--script", "t.py", "--debug", "true").roles[0].env
        assert torchx.items() <= dict(env).items()


def test_kubernetes_pods_carry_the_full_name() -> None:
    from distspec.schedulers.kubernetes import KubernetesScheduler

    backend = KubernetesScheduler("t")
    app = run("dist.ddp", "--name", "t5/bf16 trial", "--image", "img:1", "--script", "t.py")
    assert app.name == "bf16-trial"
    text = backend.compile(app, backend.parse_options({}), app_id="bf16-trial-0000abcd").render()
    assert 'distspec.io/full-name: "t5/bf16 trial"' in text
    plain = run("dist.ddp", "--name", "plain", "--image", "img:1", "--script", "t.py")
    text = backend.compile(plain, backend.parse_options({}), app_id="plain-0000abcd").render()
    assert "full-name" not in text


def both_spellings(mem_mb: int = 1, memMB: int = 2) -> AppDef:
    """A component that declares TorchX's spelling itself.

    Args:
        mem_mb: one parameter.
        memMB: another parameter, not an alias.
    """
    return AppDef(
        name="t", roles=(Role(name="t", entrypoint="echo", args=(str(mem_mb), str(memMB))),)
    )


def test_an_alias_never_hides_a_parameter_of_that_name() -> None:
    from distspec.components.loader import Component

    comp = Component.of("both", both_spellings)
    app = bind(comp, ["--memMB", "5", "--mem_mb", "3"])
    assert app.roles[0].args == ("3", "5")
    app = bind(comp, [], defaults={"memMB": "9"})
    assert app.roles[0].args == ("1", "9")
