"""init() with real processes: torchrun and plain python, gloo on the CPU (no mocks of torch)."""

from __future__ import annotations

import itertools
import json
import sys

import pytest

from distspec.errors import RuntimeEnvError
from distspec.runtime.initialize import _check_groups

from .launched import PROBE, reports, run, torchrun

pytest.importorskip("torch", reason="torch is not installed")
pytestmark = pytest.mark.torch


def test_two_ranks_all_reduce_and_the_log_line() -> None:
    got, stderr = torchrun(2, {})
    assert [r["sum"] for r in got] == [3.0, 3.0]
    assert [r["launcher"] for r in got] == ["torchrun", "torchrun"]
    assert {r["backend"] for r in got} == {"gloo"} and {r["device"] for r in got} == {"cpu"}
    # rank 0 (only) describes the job in one line
    lines = [line for line in stderr.splitlines() if line.startswith("distspec.runtime:")]
    assert (
        len(lines) == 1 and "launcher=torchrun world=2" in lines[0] and "backend=gloo" in lines[0]
    )


def test_four_ranks_subgroups_reduce_within_themselves_and_the_group_is_destroyed() -> None:
    got, _ = torchrun(4, {"init": {"groups": [[0, 2], [1, 3]]}, "raise": True})
    assert [r["sum"] for r in got] == [10.0] * 4
    # ranks 0,2 hold 1+3; ranks 1,3 hold 2+4
    assert [r["group_sum"] for r in got] == [4.0, 6.0, 4.0, 6.0]
    # an exception in the body still destroys the process group (and the run exits 0)
    assert all(r["raised"] == "raised in the body" for r in got)
    assert not any(r["initialized_after"] for r in got)


def _factorisations(n: int) -> list[dict[str, int]]:
    out = []
    for pp, dp, cp, tp in itertools.product(range(1, n + 1), repeat=4):
        if pp * dp * cp * tp == n:
            out.append({"pp": pp, "dp": dp, "cp": cp, "tp": tp})
    return out


def test_every_factorisation_of_four_builds_a_mesh_with_the_right_coordinates() -> None:
    meshes = _factorisations(4)
    assert len(meshes) == 10
    got, _ = torchrun(4, {"meshes": meshes})
    for degrees_i, degrees in enumerate(meshes):
        for r in got:
            rank = int(r["rank"])  # type: ignore[call-overload]
            # row-major over (pp, dp, cp, tp): tp varies fastest
            pp, rest = divmod(rank, degrees["dp"] * degrees["cp"] * degrees["tp"])
            dp, rest = divmod(rest, degrees["cp"] * degrees["tp"])
            cp, tp = divmod(rest, degrees["tp"])
            mesh = r["meshes"][degrees_i]  # type: ignore[index]
            assert mesh["coords"] == f"pp={pp},dp={dp},cp={cp},tp={tp}", (degrees, rank)
            # the tp group holds the ranks that differ only in tp: their ranks add up
            base = rank - tp
            assert mesh["tp_sum"] == sum(range(base, base + degrees["tp"])), (degrees, rank)


def test_degrees_from_the_environment_and_a_mismatch_is_refused() -> None:
    got, _ = torchrun(4, {}, DISTSPEC_DEGREES="pp=1,cp=1,tp=2")
    assert [r["coords"] for r in got] == [
        "pp=0,dp=0,cp=0,tp=0",
        "pp=0,dp=0,cp=0,tp=1",
        "pp=0,dp=1,cp=0,tp=0",
        "pp=0,dp=1,cp=0,tp=1",
    ]
    proc = run([sys.executable, str(PROBE), "{}"], DISTSPEC_DEGREES="tp=2")
    assert proc.returncode != 0
    assert "RuntimeEnvError" in proc.stderr and "tp=2 does not divide 1 processes" in proc.stderr


def test_asking_for_nccl_on_a_cpu_only_machine_warns_once_and_works() -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the fallback is not taken")
    got, _ = torchrun(2, {"init": {"backend": "nccl"}})
    assert [r["sum"] for r in got] == [3.0, 3.0] and {r["backend"] for r in got} == {"gloo"}
    warned = [r["warnings"] for r in got]
    assert len(warned[0]) == 1 and warned[1] == []  # one warning: local rank 0's
    assert "instead of nccl" in warned[0][0] and "no cuda device" in warned[0][0]  # type: ignore[operator]


def test_the_same_seed_gives_the_same_numbers_and_seed_per_rank_differs() -> None:
    spec = {"init": {"seed": 1234}}
    first, _ = torchrun(2, spec)
    again = reports(run([sys.executable, str(PROBE), json.dumps(spec)]).stdout)
    assert first[0]["random"] == first[1]["random"] == again[0]["random"]
    per_rank, _ = torchrun(2, {"init": {"seed": 1234, "seed_per_rank": True}})
    assert per_rank[0]["random"] == first[0]["random"]  # rank 0: offset 0
    assert per_rank[1]["random"] != per_rank[0]["random"]


def test_plain_python_is_a_world_of_one_and_groups_none_makes_no_group() -> None:
    got = reports(run([sys.executable, str(PROBE), "{}"]).stdout)
    assert [(r["rank"], r["world"], r["launcher"], r["sum"]) for r in got] == [(0, 1, "none", 1.0)]
    none = reports(run([sys.executable, str(PROBE), json.dumps({"init": {"groups": None}})]).stdout)
    assert none[0]["backend"] is None and "sum" not in none[0]


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ([[0, 1], [1, 2, 3]], "rank 1 is in groups[0] and groups[1]"),
        ([[0, 1], [2, 4]], "groups[1] names rank 4, not in 0..3"),
        ([[0, 1], [2]], "rank 3 is in no group"),
        ([[0, 1, 2, 3], []], "groups[1] is empty"),
    ],
)
def test_bad_groups_name_the_offending_rank(groups: list[list[int]], message: str) -> None:
    with pytest.raises(RuntimeEnvError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _check_groups(groups, 4)
