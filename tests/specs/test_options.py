from __future__ import annotations

import enum
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.errors import OptionError
from distspec.frozen import FrozenDict
from distspec.specs.options import (
    option,
    option_specs,
    options_to_strings,
    parse_cfg,
    parse_options,
)


class Flavor(str, enum.Enum):
    JOB = "job"
    JOBSET = "jobset"


@dataclass(frozen=True, slots=True, kw_only=True)
class Opts:
    partition: str | None = option(None, "Partition.")
    nodes_max: int = option(4, "Cap.")
    exclusive: bool = option(False, "Whole nodes.")
    ratio: float = option(0.5, "A float.")
    exclude: tuple[str, ...] = option((), "Hosts to avoid.")
    labels: FrozenDict[str, str] = option(FrozenDict(), "Labels.")
    flavor: Flavor = option(Flavor.JOB, "Which flavour.")


def test_specs_are_derived_from_the_dataclass() -> None:
    specs = {s.name: s for s in option_specs(Opts)}
    assert specs["partition"].optional and specs["partition"].kind == "str"
    assert specs["exclude"].kind == "list"
    assert specs["labels"].kind == "dict"
    assert specs["flavor"].choices == ("job", "jobset")
    assert specs["exclusive"].help == "Whole nodes."


def test_parse_from_strings() -> None:
    opts = parse_options(
        Opts,
        {
            "partition": "gpu",
            "nodes-max": "8",
            "exclusive": "yes",
            "exclude": "n1;n2",
            "labels": "a=1;b=x=y",
            "flavor": "jobset",
        },
    )
    assert opts == Opts(
        partition="gpu",
        nodes_max=8,
        exclusive=True,
        exclude=("n1", "n2"),
        labels=FrozenDict({"a": "1", "b": "x=y"}),
        flavor=Flavor.JOBSET,
    )


def test_unknown_option_suggests() -> None:
    with pytest.raises(
        OptionError, match=r"unknown option 'partiton' \(did you mean 'partition'\?\)"
    ) as info:
        parse_options(Opts, {"partiton": "gpu"}, scheduler="slurm")
    assert info.value.option == "partiton"
    assert "distspec runopts slurm" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("nodes_max", "many", "invalid literal"),
        ("exclusive", "maybe", "expected true or false"),
        ("flavor", "k8s", "expected one of job, jobset"),
        ("labels", "novalue", "expected k=v"),
    ],
)
def test_bad_values(key: str, value: str, why: str) -> None:
    with pytest.raises(OptionError, match=why):
        parse_options(Opts, {key: value})


def test_parse_cfg_commas_inside_values() -> None:
    assert parse_cfg("partition=gpu,exclude=n1,n2,time=1:00:00") == {
        "partition": "gpu",
        "exclude": "n1,n2",
        "time": "1:00:00",
    }
    assert parse_cfg("") == {}
    with pytest.raises(OptionError, match="malformed -cfg item"):
        parse_cfg("novalue")


_safe = st.text(
    alphabet=st.characters(blacklist_characters=";=", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=8,
)


@given(
    st.one_of(st.none(), _safe),
    st.integers(-1000, 1000),
    st.booleans(),
    st.lists(_safe, max_size=4),
    st.dictionaries(
        _safe,
        st.text(
            alphabet=st.characters(blacklist_characters=";", blacklist_categories=("Cs",)),
            max_size=8,
        ),
        max_size=3,
    ),
    st.sampled_from(list(Flavor)),
)
def test_strings_round_trip(
    partition: str | None,
    n: int,
    ex: bool,
    exclude: list[str],
    labels: dict[str, str],
    flavor: Flavor,
) -> None:
    opts = Opts(
        partition=partition,
        nodes_max=n,
        exclusive=ex,
        exclude=tuple(exclude),
        labels=FrozenDict(labels),
        flavor=flavor,
    )
    assert parse_options(Opts, options_to_strings(opts)) == opts
