"""Parallel degrees: the spec, and the compile-time check in dist.ddp / dist.spmd (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.errors import SpecError
from distspec.specs.degrees import DEGREES_ENV, Degrees
from distspec.specs.topology import Topology


def test_dp_is_derived_and_fixed_dp_must_match() -> None:
    assert Degrees(tp=2, pp=2).resolve(16) == Degrees(pp=2, dp=4, cp=1, tp=2)
    with pytest.raises(SpecError, match="tp=3 does not divide 16 processes"):
        Degrees(tp=3).resolve(16)
    with pytest.raises(SpecError, match=r"pp=2 x tp=4 = 8 does not divide 12"):
        Degrees(tp=4, pp=2).resolve(12)
    with pytest.raises(SpecError, match="makes 8 processes, not the 16"):
        Degrees(dp=4, tp=2).resolve(16)


def test_elastic_jobs_are_checked_at_every_node_count() -> None:
    Degrees(tp=2).check(Topology.parse("1:4x2"))
    with pytest.raises(SpecError, match=r"tp=4 does not divide 2 processes with 1 node\(s\)"):
        Degrees(tp=4).check(Topology.parse("1:4x2"))
    with pytest.raises(SpecError, match="leave dp out"):
        Degrees(dp=2).check(Topology.parse("1:2x2"))


@given(st.dictionaries(st.sampled_from(["pp", "dp", "cp", "tp"]), st.integers(1, 64)))
def test_format_parse_round_trip(values: dict[str, int]) -> None:
    degrees = Degrees.from_mapping(values)
    assert Degrees.parse(degrees.format()) == degrees


@pytest.mark.parametrize(
    ("text", "message"),
    [("tp=2,tp=2", "given twice"), ("xp=2", "not DIM=N"), ("tp=two", "not a whole number"),
     ("tp=0", "at least 1")],
)  # fmt: skip
def test_bad_environment_values(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        Degrees.parse(text)


def _dryrun(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", "run", "--dryrun", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["dist.ddp", "-j", "2x8", "--tp", "3"], "tp=3 does not divide 16 processes (-j 2x8)"),
        (["dist.spmd", "-j", "1:3x2", "--gpu", "2", "--tp", "4"], "tp=4 does not divide 2 processes with 1 node(s)"),
        (["dist.ddp", "-j", "1x4", "--tp", "2", "--pp", "4"], "pp=4 x tp=2 = 8 does not divide 4"),
        (["dist.ddp", "-j", "1x4", "--cp", "0"], "cp=0 must be a whole number of at least 1"),
    ],
)  # fmt: skip
def test_degrees_that_do_not_fit_exit_2_with_the_numbers(args: list[str], message: str) -> None:
    proc = _dryrun(*args, "--script", "train.py")
    assert proc.returncode == 2
    assert (
        proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    )


def test_degrees_reach_the_job_as_one_variable() -> None:
    proc = _dryrun("dist.ddp", "-j", "1x4", "--tp", "2", "--script", "train.py")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout[proc.stdout.index("{") :])
    env = plan["roles"][0]["replicas"][0]["env"]
    assert Degrees.parse(env[DEGREES_ENV]).resolve(4) == Degrees(pp=1, dp=2, cp=1, tp=2)
    plain = _dryrun("dist.ddp", "-j", "1x4", "--script", "train.py")
    assert DEGREES_ENV not in plain.stdout
