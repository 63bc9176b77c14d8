from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.errors import ComponentError, TopologyError, UsageError
from distspec.specs.topology import BareJ, Topology, parse_component_j, parse_launch_j


@pytest.mark.parametrize(
    ("text", "nodes", "nproc", "min_nodes"),
    [
        ("2x8", 2, 8, None),
        ("1:4x8", 4, 8, 1),
        ("8", 1, 8, None),
        ("1x1", 1, 1, None),
        (" 3x2 ", 3, 2, None),
    ],
)
def test_parse_accepted_forms(text: str, nodes: int, nproc: int, min_nodes: int | None) -> None:
    t = Topology.parse(text)
    assert (t.nodes, t.nproc_per_node, t.min_nodes) == (nodes, nproc, min_nodes)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("1x0", "processes per node must be at least 1"),
        ("0x1", "number of nodes must be at least 1"),
        ("3:2x1", "MIN (3) is larger than MAX (2)"),
        ("2x", "'x' must be followed"),
        ("abc", "not a topology"),
        ("", "not a topology"),
        ("2x8x1", "not a topology"),
        ("1:4", "elastic MIN:MAX needs xM"),
        ("0:2x1", "MIN must be between 1"),
    ],
)
def test_bad_values_say_why_and_show_forms(text: str, why: str) -> None:
    with pytest.raises(TopologyError) as info:
        Topology.parse(text)
    message = str(info.value)
    assert why in message
    assert "accepted forms" in message and "NxM" in message and "MIN:MAXxM" in message
    assert isinstance(info.value, UsageError)
    assert "\n" not in message


def test_gpu_hosts_infer_processes_per_node() -> None:
    t = Topology.parse("2", gpus_per_node=8)
    assert (t.nodes, t.nproc_per_node) == (2, 8)
    assert Topology.parse("2x4", gpus_per_node=8).nproc_per_node == 4
    assert Topology.parse("1:3", gpus_per_node=8).format() == "1:3x8"


def test_elastic_and_torchrun_nnodes() -> None:
    assert Topology.parse("1:4x8").nnodes_arg == "1:4"
    assert Topology.parse("4:4x8").elastic is False
    assert Topology.parse("2x8").nnodes_arg == "2"
    assert Topology.parse("2x8").world_size == 16


@given(
    st.integers(1, 4096),
    st.integers(1, 512),
    st.one_of(st.none(), st.integers(1, 4096)),
)
def test_parse_format_round_trip(nodes: int, nproc: int, lo: int | None) -> None:
    if lo is not None and lo > nodes:
        lo = nodes
    t = Topology(nodes=nodes, nproc_per_node=nproc, min_nodes=lo)
    assert Topology.parse(t.format()) == t


_GRAMMAR = re.compile(r"(?:(\d+):)?(\d+)(?:x(\d+))?")


@given(st.text(alphabet="0123456789x: ", max_size=9))
def test_parse_accepts_exactly_the_grammar(text: str) -> None:
    """The parser (str methods) agrees with the grammar written as a regex."""
    match = _GRAMMAR.fullmatch(text.strip())
    try:
        Topology.parse(text)
    except TopologyError as e:
        accepted, reason = False, str(e)
    else:
        accepted, reason = True, ""
    if match is None:
        assert not accepted
    elif accepted:
        lo, n, m = match.groups()
        t = Topology.parse(text)
        assert t.nodes == (int(n) if m else 1)
        assert t.min_nodes == (int(lo) if lo else None)
    else:  # grammatical but meaningless: an empty job, MIN > MAX, MIN:MAX without xM
        assert reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("99999999999999999999999x1", "at most 65536 nodes"),
        ("65537x1", "at most 65536 nodes"),
        ("1:70000x8", "at most 65536 nodes"),
        ("2x1025", "at most 1024 processes per node"),
        ("4096", "at most 1024 processes per node"),
    ],
)
def test_absurd_sizes_are_refused_at_once(text: str, reason: str) -> None:
    with pytest.raises(TopologyError, match=reason):
        Topology.parse(text)
    assert Topology.parse("65536x1024").world_size == 65536 * 1024


def test_parse_launch_j() -> None:
    assert parse_launch_j("2x4") == (2, 4)
    assert parse_launch_j("x4") == (None, 4)
    assert parse_launch_j("3") == (1, 3)
    for bad in ("1:2x4", "2x", "abc", "0x2", "x", "x0"):
        with pytest.raises(TopologyError):
            parse_launch_j(bad)


@pytest.mark.parametrize(
    ("j", "bare_j", "gpus", "h", "expected"),
    [
        ("4", BareJ.PROCESSES, 8, "gpu.large", "1x4"),
        ("2", BareJ.NODES, 8, None, "2x8"),
        ("2", BareJ.NODES_WITH_H, 8, "gpu.large", "2x8"),
        ("2", BareJ.NODES_WITH_H, 0, None, "1x2"),
        ("1:2x4", BareJ.NODES, 8, None, "1:2x4"),
    ],
)
def test_parse_component_j(j: str, bare_j: BareJ, gpus: int, h: str | None, expected: str) -> None:
    assert parse_component_j(j, bare_j, gpus=gpus, h=h).format() == expected


@pytest.mark.parametrize(
    ("j", "bare_j", "h", "message"),
    [
        (
            "1:2",
            BareJ.PROCESSES,
            None,
            "-j 1:2: an elastic MIN:MAX needs xM, the processes per node (-j 1:2x1)",
        ),
        (
            "2",
            BareJ.NODES,
            "cpu.small",
            "dist.spmd runs one process per GPU, but -h cpu.small has no GPU (TorchX's "
            "dist.spmd defaults to -h gpu.small); give -h NAME or --gpu N, or run CPU "
            "processes with dist.ddp -j 2xM",
        ),
        (
            "2",
            BareJ.NODES_WITH_H,
            "cpu.small",
            "-j 2 counts nodes of one process per GPU, but -h cpu.small has no GPU; "
            "give -j 2xM (M processes per node), or GPUs with -h or --gpu",
        ),
    ],
)
def test_parse_component_j_refuses(j: str, bare_j: BareJ, h: str | None, message: str) -> None:
    with pytest.raises(ComponentError) as err:
        parse_component_j(j, bare_j, gpus=0, h=h)
    assert str(err.value) == message
