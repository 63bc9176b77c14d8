"""Rendezvous timeouts that grow with the node count (issue #28, start-up at scale).

Up to 64 nodes the command is what it always was (torch's defaults); above, the
static ``timeout`` or c10d's ``join_timeout``/``read_timeout`` grow a quarter second
per node. A user's ``--rdzv_conf`` key wins, per key, and the computed keys never
change auto's choice of backend.
"""

from __future__ import annotations

import inspect
import re

import pytest

from distspec.components.binder import bind
from distspec.components.loader import load
from distspec.specs import Role, Topology
from distspec.torchrun import RDZV_SCALE_NODES, scaled_rdzv_conf, torchrun_args


def role(*argv: str) -> Role:
    return bind(load("dist.ddp"), ["--script", "t.py", *argv]).roles[0]


def flag(args: tuple[str, ...] | list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize(
    ("backend", "nodes", "expected"),
    [
        ("static", 2, {}),
        ("static", 64, {}),
        ("static", 68, {}),  # window 601: shorter than torchrun's 900, not written
        ("static", 1264, {}),  # window 900: torchrun's own
        ("static", 1268, {"timeout": 901}),
        ("c10d", 67, {}),  # window 600 + 3 // 4: torch's own
        ("c10d", 68, {"join_timeout": 601}),
        ("static", 4096, {"timeout": 1608}),
        ("c10d", 2, {}),
        ("c10d", 64, {}),
        ("c10d", 100, {"join_timeout": 609}),  # read_timeout 60: torch's own
        ("c10d", 264, {"join_timeout": 650, "read_timeout": 65}),
        ("c10d", 4096, {"join_timeout": 1608, "read_timeout": 160}),
        ("etcd", 4096, {}),
        ("etcd-v2", 4096, {}),
    ],
)
def test_computed_keys(backend: str, nodes: int, expected: dict[str, int]) -> None:
    assert scaled_rdzv_conf(backend, nodes) == expected


@pytest.mark.parametrize("j", ["2x2", "64x2", f"{RDZV_SCALE_NODES}x8", "1x8"])
@pytest.mark.parametrize("backend", ["auto", "static", "c10d"])
def test_small_jobs_keep_the_command_of_today(j: str, backend: str) -> None:
    args = role("-j", j, "--rdzv_backend", backend).args
    assert "--rdzv_conf" not in args


@pytest.mark.parametrize(
    ("argv", "backend", "conf"),
    [
        ([], "static", "timeout=1608"),
        (["--rdzv_backend", "static"], "static", "timeout=1608"),
        (["--rdzv_backend", "c10d"], "c10d", "join_timeout=1608,read_timeout=160"),
        (["--max_restarts", "1"], "c10d", "join_timeout=1608,read_timeout=160"),
    ],
)
def test_4096_nodes_get_longer_windows(argv: list[str], backend: str, conf: str) -> None:
    args = role("-j", "4096x8", *argv).args
    assert flag(args, "--rdzv_backend") == backend
    assert flag(args, "--rdzv_conf") == conf


@pytest.mark.parametrize(
    ("argv", "backend", "conf"),
    [
        # the user's key as typed, the computed one only where the user set none
        (["--rdzv_conf", "timeout=900"], "static", "timeout=900"),
        (["--rdzv_backend", "c10d", "--rdzv_conf", "join_timeout=900"], "c10d",
         "join_timeout=900,read_timeout=160"),
        (["--rdzv_backend", "c10d", "--rdzv_conf", "read_timeout=30,join_timeout=7200"], "c10d",
         "read_timeout=30,join_timeout=7200"),
        (["--rdzv_backend", "c10d", "--rdzv_conf", "close_timeout=60"], "c10d",
         "close_timeout=60,join_timeout=1608,read_timeout=160"),
        # auto: c10d chosen from the user's key, then the c10d keys it lacks
        (["--rdzv_conf", "last_call_timeout=5"], "c10d",
         "last_call_timeout=5,join_timeout=1608,read_timeout=160"),
    ],
)  # fmt: skip
def test_user_keys_win(argv: list[str], backend: str, conf: str) -> None:
    args = role("-j", "4096x8", *argv).args
    assert flag(args, "--rdzv_backend") == backend
    assert flag(args, "--rdzv_conf") == conf


def test_auto_stays_static_at_scale() -> None:
    """The computed c10d keys come after the choice: a large fixed job stays static."""
    args = torchrun_args(Topology.parse("4096x8"), script="t.py")
    assert flag(args, "--rdzv_backend") == "static"
    assert flag(args, "--node_rank") == "${replica_id}"
    assert flag(args, "--rdzv_conf") == "timeout=1608"


def test_elastic_jobs_scale_with_their_most_nodes() -> None:
    args = torchrun_args(Topology.parse("2:4096x8"), script="t.py")
    assert flag(args, "--nnodes") == "2:4096"
    assert flag(args, "--rdzv_conf") == "join_timeout=1608,read_timeout=160"


def test_rdzv_conf_precedes_the_script() -> None:
    args = torchrun_args(Topology.parse("4096x8"), script="t.py", script_args=["--rdzv_conf", "x"])
    assert args.index("--rdzv_conf") < args.index("t.py")
    assert args[-2:] == ["--rdzv_conf", "x"]


@pytest.mark.torch
def test_torch_defaults_are_the_ones_left_out() -> None:
    """If torch changes a default, a 64-node job is no longer torch's default: revisit."""
    from torch.distributed.elastic.rendezvous import (
        c10d_rendezvous_backend,
        dynamic_rendezvous,
        static_tcp_rendezvous,
    )
    from torch.distributed.launcher.api import LaunchConfig

    from distspec import torchrun

    defaults = torchrun.TORCHRUN_RDZV_DEFAULTS
    # torchrun's LaunchConfig fills in `timeout` before the static handler's own 600.
    launch = LaunchConfig(min_nodes=2, max_nodes=2, nproc_per_node=1)
    assert launch.rdzv_configs["timeout"] == defaults["timeout"]
    assert static_tcp_rendezvous._default_timeout_seconds == 600
    join = dynamic_rendezvous.RendezvousTimeout._DEFAULT_TIMEOUTS["join"]
    assert join.total_seconds() == defaults["join_timeout"]
    source = inspect.getsource(c10d_rendezvous_backend)
    read = re.search(r'get_as_int\("read_timeout", (\d+)\)', source)
    assert read is not None and int(read.group(1)) == defaults["read_timeout"]


@pytest.mark.torch
def test_torch_reads_the_computed_keys() -> None:
    """torchrun's own parsing of --rdzv_conf gives the handlers these values."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _get_timeout
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import create_rdzv_handler
    from torch.distributed.elastic.rendezvous.utils import _parse_rendezvous_config

    static = flag(role("-j", "4096x8").args, "--rdzv_conf")
    assert static is not None
    params = RendezvousParameters(
        "static", "h:29500", "id", 4096, 4096, rank=0, **_parse_rendezvous_config(static)
    )
    assert create_rdzv_handler(params).timeout.total_seconds() == 1608  # type: ignore[attr-defined]

    c10d = flag(role("-j", "4096x8", "--rdzv_backend", "c10d").args, "--rdzv_conf")
    assert c10d is not None
    params = RendezvousParameters(
        "c10d", "h:29500", "id", 4096, 4096, **_parse_rendezvous_config(c10d)
    )
    join = _get_timeout(params, "join")
    assert join is not None and join.total_seconds() == 1608
    assert params.get_as_int("read_timeout") == 160
