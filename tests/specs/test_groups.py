"""Process subgroups' text form (``0,2;1,3``) and their check against -j."""

from __future__ import annotations

import pytest

from distspec.errors import ComponentError
from distspec.specs.groups import format_groups, groups_problem, parse_groups
from distspec.specs.topology import Topology


def test_parse_and_format_are_inverse() -> None:
    assert parse_groups("0,2;1,3") == [[0, 2], [1, 3]]
    assert format_groups([[0, 2], [1, 3]]) == "0,2;1,3"
    assert format_groups(((0,), (1, 2))) == "0;1,2"
    assert parse_groups(format_groups([[5], [1, 0]])) == [[5], [1, 0]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0,a", "--groups '0,a': give ranks separated by commas, groups by semicolons (0,2;1,3)"),
        ("0;;1", "--groups '0;;1': give ranks separated by commas, groups by semicolons (0,2;1,3)"),
        ("0,-1", "--groups '0,-1': ranks cannot be negative"),
    ],
)
def test_parse_refuses(text: str, message: str) -> None:
    with pytest.raises(ComponentError) as err:
        parse_groups(text)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("groups", "j", "problem"),
    [
        ([], "1x2", None),
        ([[0, 1]], "1x2", None),
        ([[0], []], "1x2", "group 1 is empty"),
        ([[0, 2]], "1x2", "rank 2 is not in 0..1 (-j 1x2)"),
        ([[0, 0], [1]], "1x2", "rank 0 is twice in group 0: a rank belongs to one group"),
        ([[0, 1], [1]], "1x2", "rank 1 is in groups 0 and 1: a rank belongs to one group"),
        ([[0]], "1x2", "rank 1 is in no group: the groups must cover all 2 ranks"),
        ([[0]], "1:2x1", None),
    ],
)
def test_groups_problem(groups: list[list[int]], j: str, problem: str | None) -> None:
    assert groups_problem(groups, Topology.parse(j)) == problem
