"""The torchrun command line; the last tests hand it to a real torchrun."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distspec.errors import ComponentError
from distspec.specs import Topology
from distspec.specs.macros import Macro, substitute
from distspec.torchrun import TORCHRUN, escape_dollars, torchrun_args

#: Arguments torchrun's string.Template would change if distspec did not escape them.
_DOLLARS = ["$$x", "$", "a$", "${local_rank}", "$local_rank", "$$${x}", "$${app_id", "${"]


def topo(text: str) -> Topology:
    return Topology.parse(text)


def test_single_node() -> None:
    assert torchrun_args(topo("1x4"), script="train.py", script_args=["--lr", "1"]) == [
        "--nnodes", "1", "--nproc_per_node", "4",
        "--rdzv_backend", "c10d", "--rdzv_endpoint", "localhost:0", "--rdzv_id", "${app_id}",
        "--max_restarts", "0",
        "train.py", "--lr", "1",
    ]  # fmt: skip


def test_single_node_ignores_the_multi_node_backend() -> None:
    args = torchrun_args(topo("1x2"), module="m", rdzv_backend="static")
    assert args[args.index("--rdzv_backend") + 1] == "c10d"
    assert "--node_rank" not in args


def test_multi_node_c10d() -> None:
    args = torchrun_args(
        topo("2x8"), module="pkg.train", tee=3, role="train", rdzv_port=1234, rdzv_backend="c10d"
    )
    assert args == [
        "--nnodes", "2", "--nproc_per_node", "8",
        "--rdzv_backend", "c10d", "--rdzv_endpoint", "${rank0_host}:1234", "--rdzv_id", "${app_id}",
        "--max_restarts", "0", "--tee", "3", "--role", "train",
        "-m", "pkg.train",
    ]  # fmt: skip


def test_multi_node_static_has_node_rank() -> None:
    args = torchrun_args(topo("2x1"), script="s.py", rdzv_backend="static")
    assert args[args.index("--node_rank") + 1] == Macro.REPLICA_ID.token


def test_auto_is_static_for_a_fixed_node_count() -> None:
    """The default: static (no store polling while training, no silent joining of
    another job's store on a port clash) when nothing needs a re-rendezvous."""
    args = torchrun_args(topo("2x8"), module="pkg.train", rdzv_port=1234)
    assert args == [
        "--nnodes", "2", "--nproc_per_node", "8",
        "--rdzv_backend", "static", "--rdzv_endpoint", "${rank0_host}:1234", "--rdzv_id", "${app_id}",
        "--node_rank", "${replica_id}",
        "--max_restarts", "0",
        "-m", "pkg.train",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("j", "max_restarts"), [("1:4x2", 0), ("2:3x2", 0), ("2x2", 1), ("3x1", 5)]
)
def test_auto_is_c10d_for_elastic_jobs_and_restarts(j: str, max_restarts: int) -> None:
    args = torchrun_args(topo(j), script="s.py", max_restarts=max_restarts)
    assert args[args.index("--rdzv_backend") + 1] == "c10d"
    assert "--node_rank" not in args


def test_elastic() -> None:
    args = torchrun_args(topo("1:4x2"), script="s.py")
    assert args[args.index("--nnodes") + 1] == "1:4"
    assert "--node_rank" not in args
    assert torchrun_args(topo("1:1x2"), script="s.py")[1] == "1"  # 1:1 is one node


def test_literal_values_for_in_job_launch() -> None:
    args = torchrun_args(
        topo("2x1"), script="s.py", rank0_host="node7", rdzv_id="job42", rdzv_port=29500
    )
    assert "node7:29500" in args and "job42" in args


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of --script and -m"),
        ({"script": "a", "module": "b"}, "exactly one of --script and -m"),
        ({"script": "a", "rdzv_backend": "zk"}, "unknown rendezvous backend 'zk'"),
        ({"script": "a", "rdzv_port": 0}, "not in 1..65535"),
        ({"script": "a", "tee": 4}, "--tee must be"),
        ({"script": "a", "max_restarts": -1}, "max restarts"),
    ],
)
def test_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ComponentError, match=message):
        torchrun_args(topo("2x1"), **kwargs)  # type: ignore[arg-type]


def test_static_elastic_is_an_error() -> None:
    with pytest.raises(ComponentError, match="fixed node count"):
        torchrun_args(topo("1:2x1"), script="s.py", rdzv_backend="static")


# -- real torchrun --------------------------------------------------------------

HAVE_TORCH = importlib.util.find_spec("torch") is not None
TORCHRUN_BIN = shutil.which(TORCHRUN, path=os.path.dirname(sys.executable)) or shutil.which(
    TORCHRUN
)

WORKER = """
import os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"RESULT rank={dist.get_rank()} world={dist.get_world_size()} sum={int(t.item())} "
      f"args={sys.argv[1:]}", flush=True)
dist.destroy_process_group()
"""

real = pytest.mark.skipif(not (HAVE_TORCH and TORCHRUN_BIN), reason="needs torch and torchrun")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    env.pop("TORCHELASTIC_RUN_ID", None)
    return env


def _results(out: str) -> list[str]:
    return sorted(line[line.index("RESULT") :] for line in out.splitlines() if "RESULT" in line)


@pytest.mark.torch
@pytest.mark.slow
@real
def test_real_torchrun_single_node(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    # torchrun's ${local_rank} substitution (a string.Template) would turn $$ into $.
    script_args = ["--x", "a b", *_DOLLARS, "node-${replica_id}"]
    args = torchrun_args(topo("1x2"), script=str(script), script_args=script_args, tee=3)
    args = [substitute(a, {Macro.APP_ID: "t1", Macro.REPLICA_ID: "0"}) for a in args]
    proc = subprocess.run(
        [str(TORCHRUN_BIN), *args], capture_output=True, text=True, timeout=240, env=_env(),
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = ["--x", "a b", *_DOLLARS, "node-0"]
    assert _results(proc.stdout) == [
        f"RESULT rank=0 world=2 sum=2 args={expected!r}",
        f"RESULT rank=1 world=2 sum=2 args={expected!r}",
    ]


@pytest.mark.torch
@pytest.mark.slow
@real
@pytest.mark.parametrize("backend", ["c10d", "static"])
def test_real_torchrun_two_nodes_on_one_host(tmp_path: Path, backend: str) -> None:
    """Two torchrun agents act as two nodes; the multi-node line rendezvouses as written."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = torchrun_args(
        topo("2x1"), script=str(script), rdzv_backend=backend, rdzv_port=_free_port()
    )
    procs = []
    for node in range(2):
        values = {Macro.APP_ID: "t2", Macro.RANK0_HOST: "127.0.0.1", Macro.REPLICA_ID: str(node)}
        argv = [str(TORCHRUN_BIN), *(substitute(a, values) for a in args)]
        procs.append(
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(),
                cwd=tmp_path,
            )
        )
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert _results("".join(o for o, _ in outs)) == [
        "RESULT rank=0 world=2 sum=2 args=[]",
        "RESULT rank=1 world=2 sum=2 args=[]",
    ]
    if backend == "c10d":
        assert not any("node_rank is only used" in err for _, err in outs)


# -- byte-identical arguments through torchrun's ${local_rank} substitution ----------

_DOLLAR_TEXT = st.lists(
    st.one_of(
        st.sampled_from(["$", "$$", "{", "}", "local_rank", "${local_rank}", "x", " "]),
        st.sampled_from([m.token for m in Macro]),
        st.text(max_size=3),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(args=st.lists(_DOLLAR_TEXT, max_size=4), module=st.booleans(), no_python=st.booleans())
def test_every_argument_survives_torchrun_substitution(
    args: list[str], module: bool, no_python: bool
) -> None:
    """What torchrun does to each worker argument (``Template(arg).safe_substitute(
    local_rank=...)``, torch/distributed/elastic/utils/api.py) after the backend
    filled in distspec's macros gives what the user typed, macros filled in."""
    from string import Template

    values = {m: f"v-{m.value}" for m in Macro}
    target = "pkg.mod$x" if module else "train$$.py"
    kwargs = {"module": target} if module else {"script": target, "no_python": no_python}
    argv = torchrun_args(topo("1x2"), script_args=args, **kwargs)  # type: ignore[arg-type]
    cut = len(argv) - len(args) - 1
    worker = [substitute(a, values) for a in argv[cut:]]
    substituted = [Template(a).safe_substitute(local_rank="3") for a in worker]
    if no_python and not module:
        # torchrun runs the program itself and substitutes only its arguments.
        substituted[0] = worker[0]
    assert substituted == [substitute(a, values) for a in [target, *args]]


def test_escape_dollars_keeps_distspec_macros() -> None:
    assert escape_dollars("$$x") == "$$$$x"
    assert escape_dollars("${local_rank}") == "$${local_rank}"
    assert escape_dollars("a${replica_id}$b") == "a${replica_id}$$b"
    assert escape_dollars("plain") == "plain"
