"""``@frozen`` behaves like ``@dataclass(frozen=True, slots=True, kw_only=True)``,
without importing ``dataclasses`` until something asks for a dataclass view.

Each check builds the same class both ways and compares what users can see:
constructor errors, repr, equality, hashing, ``dataclasses`` helpers, pickling and
copying. ``FrozenDict`` is covered at the end.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import subprocess
import sys
from dataclasses import FrozenInstanceError, dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.frozen import FrozenDict, fields, frozen, frozendict, replace
from distspec.frozen import field as frozen_field


@frozen
class Point:
    """A point."""

    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = frozen_field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class RefPoint:
    """The same point, made by dataclasses."""

    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict, compare=False, repr=False)


@frozen(kw_only=False)
class Pair:
    """Positional arguments allowed."""

    left: str
    right: str = "r"


def as_ref(p: Point) -> RefPoint:
    return RefPoint(x=p.x, y=p.y, tags=p.tags, extra=p.extra)


points = st.builds(
    Point,
    x=st.integers(),
    y=st.integers(),
    tags=st.lists(st.text(max_size=5), max_size=3).map(tuple),
)


@given(points, points)
def test_repr_eq_hash_match_dataclasses(a: Point, b: Point) -> None:
    ra, rb = as_ref(a), as_ref(b)
    assert repr(a).replace("Point(", "RefPoint(", 1) == repr(ra)
    assert (a == b) == (ra == rb)
    assert (a != b) == (ra != rb)
    if a == b:
        assert hash(a) == hash(b)
    assert dataclasses.asdict(a) == dataclasses.asdict(ra)
    assert dataclasses.astuple(a) == dataclasses.astuple(ra)


@given(points)
def test_pickle_copy_and_replace_round_trip(p: Point) -> None:
    for other in (pickle.loads(pickle.dumps(p)), copy.copy(p), copy.deepcopy(p)):
        assert other == p and type(other) is Point
    moved = dataclasses.replace(p, y=p.y + 1)
    assert moved.y == p.y + 1 and moved.x == p.x and moved != p


def test_is_a_slotted_dataclass_with_fields_in_order() -> None:
    p = Point(x=1)
    assert dataclasses.is_dataclass(p)
    assert [f.name for f in dataclasses.fields(Point)] == ["x", "y", "tags", "extra"]
    assert Point.__match_args__ == RefPoint.__match_args__
    assert not hasattr(p, "__dict__")
    assert Point.__doc__ == "A point."


def test_assigning_or_deleting_a_field_raises() -> None:
    p = Point(x=1)
    with pytest.raises(FrozenInstanceError, match="'x'"):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError, match="'y'"):
        del p.y  # type: ignore[misc]
    assert p.x == 1 and p.y == 0


def test_compare_false_field_is_ignored_by_eq_and_hash() -> None:
    a, b = Point(x=1, extra={"a": 1}), Point(x=1, extra={"b": 2})
    assert a == b and hash(a) == hash(b)
    assert Point(x=1) != Point(x=2)
    assert Point(x=1) != RefPoint(x=1)  # another class never compares equal
    assert Point(x=1).__eq__(object()) is NotImplemented


def test_default_factory_gives_each_instance_its_own_value() -> None:
    a, b = Point(x=1), Point(x=1)
    assert a.extra == {} and a.extra is not b.extra


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (Point, r"missing required argument: 'x'"),
        (lambda: Point(x=1, z=2), r"unexpected keyword argument 'z'"),
        (lambda: Point(1), r"keyword arguments only"),
        (lambda: Pair("a", "b", "c"), r"at most 2 positional"),
        (lambda: Pair("a", left="b"), r"multiple values for 'left'"),
    ],
)
def test_constructor_errors_are_type_errors(make: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make()  # type: ignore[operator]


def test_positional_form_takes_fields_in_order() -> None:
    assert Pair("a") == Pair(left="a", right="r")
    assert Pair("a", "b").right == "b"
    assert repr(Pair("a")) == "Pair(left='a', right='r')"


def test_non_default_after_default_is_rejected_for_positional_classes() -> None:
    class Bad:
        a: int = 1
        b: int

    with pytest.raises(TypeError, match="non-default field 'b' follows default field 'a'"):
        frozen(kw_only=False)(Bad)


def test_post_init_runs_and_may_normalise_fields() -> None:
    @frozen
    class Normalised:
        names: tuple[str, ...]

        def __post_init__(self) -> None:
            if not self.names:
                raise ValueError("names may not be empty")
            object.__setattr__(self, "names", tuple(sorted(self.names)))

    assert Normalised(names=("b", "a")).names == ("a", "b")
    with pytest.raises(ValueError, match="may not be empty"):
        Normalised(names=())


def test_methods_the_class_defines_are_kept() -> None:
    @frozen
    class Custom:  # noqa: PLW1641 -- no __hash__ on purpose: @frozen must supply one
        value: int

        def __repr__(self) -> str:
            return f"<{self.value}>"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Custom) and other.value % 10 == self.value % 10

    assert repr(Custom(value=3)) == "<3>"
    assert Custom(value=3) == Custom(value=13)
    # An __eq__ of its own without a __hash__: hashing still follows the fields.
    assert hash(Custom(value=3)) == hash(Custom(value=3))


def test_subclass_inherits_fields() -> None:
    @frozen
    class Base:
        a: int

    @frozen
    class Child(Base):
        b: int = 2

    c = Child(a=1)
    assert (c.a, c.b) == (1, 2)
    assert repr(c).endswith("Child(a=1, b=2)")
    assert c != Base(a=1)


def test_frozendict_is_an_immutable_hashable_mapping() -> None:
    d = frozendict({"a": 1, "b": 2})
    assert d == {"a": 1, "b": 2} and list(d) == ["a", "b"]
    assert hash(d) == hash(FrozenDict({"b": 2, "a": 1}))
    assert frozendict(d) is d and frozendict(None) == {}
    assert pickle.loads(pickle.dumps(d)) == d
    with pytest.raises(TypeError):
        d["c"] = 3  # type: ignore[index]


def test_classvar_annotation_is_not_a_field_even_before_typing_is_imported() -> None:
    # dataclasses spots a string "ClassVar[...]" only once typing is loaded, and the
    # dry-run path never loads it: run in a fresh interpreter to see that case.
    code = """
from __future__ import annotations
import dataclasses, sys
from distspec.frozen import frozen

@frozen
class WithClassVar:
    limit: ClassVar[int] = 3
    value: int = 0

print([f.name for f in dataclasses.fields(WithClassVar)], WithClassVar.limit)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['value']", "3"]


def test_own_fields_and_replace_match_dataclasses() -> None:
    p = Point(x=1, y=2, tags=("a",))
    assert [f.name for f in fields(p)] == [f.name for f in dataclasses.fields(RefPoint)]
    assert [f.compare for f in fields(Point)] == [f.compare for f in dataclasses.fields(RefPoint)]
    assert replace(p, y=5) == dataclasses.replace(p, y=5) == Point(x=1, y=5, tags=("a",))
    ref = RefPoint(x=1)
    assert fields(ref) == dataclasses.fields(ref)  # dataclasses from elsewhere: delegated
    assert replace(ref, x=2) == RefPoint(x=2)


def test_dataclass_view_carries_defaults_and_metadata() -> None:
    @frozen
    class Opts:
        name: str = frozen_field(default="n", metadata={"help": "the name"})
        count: int = 1

    view = {f.name: f for f in dataclasses.fields(Opts)}
    assert view["name"].default == "n" and view["name"].metadata["help"] == "the name"
    assert view["count"].default == 1 and view["count"].kw_only is True
    assert Opts.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert dataclasses.asdict(Opts()) == {"name": "n", "count": 1}


def test_a_dataclasses_field_is_accepted_too() -> None:
    @frozen
    class Mixed:
        items: list[int] = field(default_factory=list)

    assert Mixed().items == [] and Mixed().items is not Mixed().items


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("items: list[int] = []", "mutable default list"),
        ("x: InitVar[int] = 0", "InitVar"),
        ("x: int = frozen_field(init=False)", "init=False needs a default"),
    ],
)
def test_unsupported_declarations_are_errors(body: str, message: str) -> None:
    namespace: dict[str, object] = {"frozen_field": frozen_field}
    code = f"class Bad:\n    {body}\n"
    exec(code, namespace)
    with pytest.raises((TypeError, ValueError), match=message):
        frozen(namespace["Bad"])  # type: ignore[call-overload]


def test_defining_and_using_records_does_not_import_dataclasses() -> None:
    code = """
import sys
from distspec.specs.app import AppDef, Resource, Role
from distspec.frozen import replace
role = Role(name="r", entrypoint="e", resource=Resource(cpu=2))
app = replace(AppDef(name="a", roles=(role,)), name="b")
assert app.name == "b" and hash(app) and repr(app)
print("dataclasses" in sys.modules, "inspect" in sys.modules)
"""
    # -S: no site, so no .pth file (an editable install's finder) imports anything first.
    repo = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": repo},
    )
    assert out.stdout.split() == ["False", "False"]


def test_zero_argument_super_works_in_a_record() -> None:
    @frozen
    class Base:
        a: int = 0

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("a < 0")

    @frozen
    class Child(Base):
        b: int = 0

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.b < 0:
                raise ValueError("b < 0")

        @property
        def total(self) -> int:
            return self.a + self.b + len(__class__.__name__)  # type: ignore[name-defined]

    assert Child(a=1, b=2).total == 3 + len("Child")
    with pytest.raises(ValueError, match="a < 0"):
        Child(a=-1)
    with pytest.raises(ValueError, match="b < 0"):
        Child(b=-1)
