"""The sweep definition parser: ``--sweep NAME=VALUES``, sweep files, and the checks."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.errors import UsageError
from distspec.sweep import spec
from distspec.sweep.spec import MAX_POINTS, check_size, check_used, parse


def values(definition: str) -> list[str]:
    sweep = parse([definition])
    assert len(sweep.names) == 1
    return [p[0] for p in sweep.points]


def failing(call, *words: str) -> str:
    """Run ``call``; it must raise a one-line UsageError holding every one of ``words``."""
    with pytest.raises(UsageError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    return message


# -- one definition ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("definition", "expected"),
    [
        ("opt=adam,sgd", ["adam", "sgd"]),
        ("x=only", ["only"]),
        ("lr=1e-4,3E-4, 0.001", ["1e-4", "3E-4", " 0.001"]),  # as written, spaces too
        ("v=01,1.50,{a}", ["01", "1.50", "{a}"]),
        ("path=a=b,c:d", ["a=b", "c:d"]),  # only the first '=' splits
        ("k=rangefoo:1", ["rangefoo:1"]),  # not a generator: a plain value
        ("k=lin", ["lin"]),
        ("s=range:0:3", ["0", "1", "2"]),
        ("s=range:3:0:-1", ["3", "2", "1"]),
        ("s=range:0:10:3", ["0", "3", "6", "9"]),
        ("s=range:-2:1", ["-2", "-1", "0"]),
        ("s=range: 1 : 3", ["1", "2"]),
        ("w=lin:0:1:5", ["0", "0.25", "0.5", "0.75", "1"]),
        ("w=lin:0:1:11", ["0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1"]),
        ("w=lin:0.1:0.3:3", ["0.1", "0.2", "0.3"]),
        ("w=lin:0:100:5", ["0", "25", "50", "75", "100"]),
        ("w=lin:1:0:3", ["1", "0.5", "0"]),
        ("w=lin:-1:1:3", ["-1", "0", "1"]),
        ("w=lin:5:9:1", ["5"]),
        ("w=lin:0:1:3", ["0", "0.5", "1"]),
        ("w=lin:0:1:4", ["0", "0.333333333333", "0.666666666667", "1"]),
        ("w=lin:1e-5:3e-5:3", ["1e-05", "2e-05", "3e-05"]),
        ("w=lin:0:2e12:3", ["0", "1e+12", "2e+12"]),
        ("lr=log:1e-5:1e-2:4", ["1e-05", "0.0001", "0.001", "0.01"]),
        ("lr=log:1:1000:4", ["1", "10", "100", "1000"]),
        ("lr=log:1e-2:1e-5:4", ["0.01", "0.001", "0.0001", "1e-05"]),
        ("lr=log:1:2:3", ["1", "1.41421356237", "2"]),
        ("lr=log:2:2:1", ["2"]),
        ("lr=log:3e-4:3e-4:2", ["0.0003", "0.0003"]),
        ("lr=log:1:1e12:3", ["1", "1000000", "1e+12"]),
    ],
)
def test_one_definition(definition: str, expected: list[str]) -> None:
    assert values(definition) == expected


@pytest.mark.parametrize(
    ("definition", "words"),
    [
        ("lr", ["--sweep 'lr'", "no '='", "NAME=VALUES"]),
        ("lr:1,2", ["no '='", "NAME=VALUES"]),
        ("1lr=1", ["'1lr'", "not a variable name"]),
        ("=1", ["''", "not a variable name"]),
        ("l-r=1", ["'l-r'", "not a variable name"]),
        ("l r=1", ["'l r'", "not a variable name"]),
        ("\u00e9t\u00e9=1", ["not a variable name"]),  # {{été}} is not a placeholder
        ("INDEX=1", ["INDEX", "taken", "DISTSPEC_SWEEP_INDEX"]),
        ("lr=", ["'lr='", "no values", "empty sweep"]),
        ("lr=a,,b", ["empty value", "comma"]),
        ("lr=a,b,", ["empty value"]),
        ("lr=,a", ["empty value"]),
        ("lr=,", ["empty value"]),
        ("s=range:a:5", ["'s=range:a:5'", "START 'a'", "not an integer"]),
        ("s=range:0:5.5", ["STOP '5.5'", "not an integer", "lin:START:STOP:NUM"]),
        ("s=range:0:5:x", ["STEP 'x'", "not an integer"]),
        ("s=range::5", ["START ''", "not an integer"]),
        ("s=range:0:5:0", ["STEP", "not be 0"]),
        ("s=range:5:0", ["is empty", "STOP is excluded", "range:3:0:-1"]),
        ("s=range:0:0", ["is empty"]),
        ("s=range:0:5:-1", ["is empty"]),
        ("s=range:0", ["write range:START:STOP[:STEP]"]),
        ("s=range:", ["write range:START:STOP[:STEP]"]),
        ("s=range:0:1:2:3", ["write range:START:STOP[:STEP]"]),
        ("s=range:0:100001", ["more than 100000 values", "at most 100000"]),
        (f"s=range:0:{10**30}", ["more than 100000 values"]),  # len() would overflow
        ("w=lin:a:1:3", ["START 'a'", "not a number"]),
        ("w=lin:0:b:3", ["STOP 'b'", "not a number"]),
        ("w=lin:0:inf:3", ["STOP 'inf'", "not a number"]),
        ("w=lin:nan:1:3", ["START 'nan'", "not a number"]),
        ("w=lin:0:1e400:3", ["STOP '1e400'", "not a number"]),
        ("w=lin:1/3:1:3", ["START '1/3'", "not a number"]),
        ("w=lin:0:1:0", ["NUM 0", "positive integer"]),
        ("w=lin:0:1:-2", ["NUM -2", "positive integer"]),
        ("w=lin:0:1:2.5", ["NUM '2.5'", "positive integer"]),
        ("w=lin:0:1:x", ["NUM 'x'", "positive integer"]),
        ("w=lin:0:1:", ["NUM ''", "positive integer"]),
        ("w=lin:0:1:200000", ["200000 points", "at most 100000"]),
        ("w=lin:0:1", ["write lin:START:STOP:NUM"]),
        ("w=lin:0:1:2:3", ["write lin:START:STOP:NUM"]),
        ("lr=log:0:1:3", ["log needs START and STOP > 0"]),
        ("lr=log:-1:1:3", ["log needs START and STOP > 0"]),
        ("lr=log:1:0:3", ["log needs START and STOP > 0"]),
        ("lr=log:1:x:3", ["STOP 'x'", "not a number"]),
        ("lr=log:1:10:0", ["NUM 0", "positive integer"]),
        ("lr=log:1:10", ["write log:START:STOP:NUM"]),
    ],
)
def test_bad_definition(definition: str, words: list[str]) -> None:
    failing(lambda: parse([definition]), *words)


# -- several definitions ----------------------------------------------------------------


def test_product_in_definition_order_last_fastest() -> None:
    sweep = parse(["a=1,2", "b=x,y,z"])
    assert sweep.names == ("a", "b")
    assert sweep.points == (
        ("1", "x"),
        ("1", "y"),
        ("1", "z"),
        ("2", "x"),
        ("2", "y"),
        ("2", "z"),
    )


def test_product_of_three() -> None:
    sweep = parse(["lr=log:1e-4:1e-2:3", "seed=range:0:2", "opt=adam,sgd"])
    assert len(sweep) == 12
    assert sweep.values(0) == {"lr": "0.0001", "seed": "0", "opt": "adam"}
    assert sweep.values(1) == {"lr": "0.0001", "seed": "0", "opt": "sgd"}
    assert sweep.values(11) == {"lr": "0.01", "seed": "1", "opt": "sgd"}
    assert len(set(sweep.points)) == 12


def test_zip_goes_value_by_value() -> None:
    sweep = parse(["a=1,2,3", "b=range:10:13", "c=lin:0:1:3"], zip=True)
    assert sweep.names == ("a", "b", "c")
    assert sweep.points == (("1", "10", "0"), ("2", "11", "0.5"), ("3", "12", "1"))


def test_zip_of_one_definition() -> None:
    assert parse(["a=1,2"], zip=True).points == (("1",), ("2",))


def test_zip_lengths_differ() -> None:
    failing(
        lambda: parse(["a=1,2,3", "b=x,y", "c=p,q,r"], zip=True),
        "one length",
        "a has 3",
        "b has 2",
        "c has 3",
    )


def test_defined_twice() -> None:
    failing(
        lambda: parse(["lr=1", "seed=0", "lr=2,3"]),
        "'lr'",
        "defined twice",
        "--sweep 'lr=1'",
        "--sweep 'lr=2,3'",
        "define it once",
    )


def test_empty_sweep() -> None:
    failing(lambda: parse([]), "empty sweep", "--sweep NAME=VALUES", "--sweep-file")


def test_too_many_points_in_a_product() -> None:
    # Refused before a list of a million points is built.
    failing(lambda: parse(["a=range:0:1000", "b=range:0:1000"]), "1000000 points", "split")
    failing(lambda: parse(["a=range:0:100000", "b=1,2"]), "200000 points", "split")


# -- files ------------------------------------------------------------------------------


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


MAPPINGS = {
    "s.json": '{"lr": [0.001, 0.01], "seed": [0, 1], "tag": ["a b", "c,d"]}',
    "s.yaml": "lr: [0.001, 0.01]\nseed: [0, 1]\ntag: ['a b', 'c,d']\n",
    "s.yml": "lr:\n  - 0.001\n  - 0.01\nseed: [0, 1]\ntag: [a b, 'c,d']\n",
    "s.toml": 'lr = [0.001, 0.01]\nseed = [0, 1]\ntag = ["a b", "c,d"]\n',
}


@pytest.mark.parametrize("name", sorted(MAPPINGS))
def test_file_mapping_is_a_product(tmp_path: Path, name: str) -> None:
    sweep = parse([], file=write(tmp_path, name, MAPPINGS[name]))
    assert sweep.names == ("lr", "seed", "tag")
    assert len(sweep) == 8
    assert sweep.points[:3] == (("0.001", "0", "a b"), ("0.001", "0", "c,d"), ("0.001", "1", "a b"))
    assert sweep.points[-1] == ("0.01", "1", "c,d")


ZIPPED = {
    "z.json": '{"mode": "zip", "lr": [0.1, 0.2], "seed": [1, 2]}',
    "z.yaml": "mode: zip\nlr: [0.1, 0.2]\nseed: [1, 2]\n",
    "z.toml": 'mode = "zip"\nlr = [0.1, 0.2]\nseed = [1, 2]\n',
}


@pytest.mark.parametrize("name", sorted(ZIPPED))
def test_file_mode_zip(tmp_path: Path, name: str) -> None:
    sweep = parse([], file=write(tmp_path, name, ZIPPED[name]))
    assert sweep.names == ("lr", "seed")
    assert sweep.points == (("0.1", "1"), ("0.2", "2"))


def test_file_mode_product_and_a_variable_named_mode(tmp_path: Path) -> None:
    sweep = parse([], file=write(tmp_path, "m.json", '{"mode": "product", "a": [1, 2]}'))
    assert sweep.names == ("a",)
    sweep = parse([], file=write(tmp_path, "v.json", '{"mode": ["fast", "slow"]}'))
    assert sweep.names == ("mode",)
    assert sweep.points == (("fast",), ("slow",))


def test_file_mode_zip_lengths_differ(tmp_path: Path) -> None:
    path = write(tmp_path, "z.yaml", "mode: zip\na: [1, 2, 3]\nb: [1]\n")
    failing(lambda: parse([], file=path), path, "mode zip", "one length", "a has 3", "b has 1")


POINTS = {
    "p.json": '[{"lr": 0.1, "seed": 1}, {"seed": 2, "lr": "1e-4"}]',
    "p.yaml": "- {lr: 0.1, seed: 1}\n- seed: 2\n  lr: 1e-4\n",  # YAML 1.1: 1e-4 is a string
    "q.json": '{"points": [{"lr": 0.1, "seed": 1}, {"lr": "1e-4", "seed": 2}]}',
    "q.yaml": "points:\n  - {lr: 0.1, seed: 1}\n  - {lr: '1e-4', seed: 2}\n",
    "p.toml": '[[points]]\nlr = 0.1\nseed = 1\n\n[[points]]\nlr = "1e-4"\nseed = 2\n',
}


@pytest.mark.parametrize("name", sorted(POINTS))
def test_file_points(tmp_path: Path, name: str) -> None:
    sweep = parse([], file=write(tmp_path, name, POINTS[name]))
    assert sweep.names == ("lr", "seed")  # the first point's order
    assert sweep.points == (("0.1", "1"), ("1e-4", "2"))


def test_a_variable_named_points(tmp_path: Path) -> None:
    sweep = parse([], file=write(tmp_path, "v.json", '{"points": [1, 2]}'))
    assert sweep.names == ("points",)
    assert sweep.points == (("1",), ("2",))


@pytest.mark.parametrize(
    ("json_value", "expected"),
    [
        ("true", "true"),
        ("false", "false"),
        ("3", "3"),
        ("-7", "-7"),
        ("12345678901234567890", "12345678901234567890"),  # an int in full
        ("3.0", "3"),
        ("0.1", "0.1"),
        ("2.5e-07", "2.5e-07"),
        ("1e-5", "1e-05"),
        ("0.30000000000000004", "0.3"),
        ("1e12", "1e+12"),
        ('"text as is"', "text as is"),
        ('""', ""),
        ('"007"', "007"),
    ],
)
def test_file_values_become_strings(tmp_path: Path, json_value: str, expected: str) -> None:
    sweep = parse([], file=write(tmp_path, "v.json", f'{{"x": [{json_value}]}}'))
    assert sweep.points == ((expected,),)


def test_yaml_and_toml_scalars(tmp_path: Path) -> None:
    yaml_sweep = parse([], file=write(tmp_path, "v.yaml", "x: [yes, off, 1.5, 2, abc]\n"))
    assert [p[0] for p in yaml_sweep.points] == ["true", "false", "1.5", "2", "abc"]
    toml_sweep = parse([], file=write(tmp_path, "v.toml", "x = [true, 1.5, 2, 'abc', 1e-5]\n"))
    assert [p[0] for p in toml_sweep.points] == ["true", "1.5", "2", "abc", "1e-05"]


def test_file_and_definitions_form_a_product(tmp_path: Path) -> None:
    path = write(tmp_path, "p.json", '[{"lr": 0.1, "wd": 0}, {"lr": 0.2, "wd": 1}]')
    sweep = parse(["seed=range:0:2", "opt=a,b"], zip=True, file=path)
    assert sweep.names == ("lr", "wd", "seed", "opt")
    assert sweep.points == (
        ("0.1", "0", "0", "a"),
        ("0.1", "0", "1", "b"),
        ("0.2", "1", "0", "a"),
        ("0.2", "1", "1", "b"),
    )


def test_file_and_definition_define_one_variable_twice(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "lr: [1, 2]\n")
    failing(lambda: parse(["lr=3"], file=path), "'lr'", "defined twice", path, "--sweep 'lr=3'")


def test_zip_without_definitions_points_at_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "lr: [1, 2]\n")
    failing(lambda: parse([], zip=True, file=path), "mode: zip")


@pytest.mark.parametrize(
    ("name", "text", "words"),
    [
        ("s.txt", "a: [1]", ["unknown extension '.txt'", ".json, .yaml, .yml or .toml"]),
        ("sweep", "a: [1]", ["unknown extension ''"]),
        ("bad.json", '{"a": [1,\n  2,,]}', [":2: invalid JSON"]),
        ("bad.yaml", "a: [1, 2]\nb: [3\nc: 4\n", ["invalid YAML", "bad.yaml:"]),
        ("bad.toml", 'a = [1]\nb = "\n', [":2: invalid TOML"]),
        ("s.json", "3", ["expected a mapping of variable to values, or a list of points"]),
        ("s.yaml", "", ["expected a mapping"]),
        ("s.json", '{"a": 1}', ["a must be a list of values"]),
        ("s.json", '{"a": "1,2"}', ["a must be a list of values"]),
        ("s.json", '{"a": []}', ["a has no values", "empty sweep"]),
        ("s.json", "{}", ["defines no variables", "empty sweep"]),
        ("s.json", '{"mode": "zip"}', ["defines no variables"]),
        ("s.json", '{"mode": "grid", "a": [1]}', ["mode is 'product' or 'zip'", "'grid'"]),
        ("s.json", '{"1a": [1]}', ["'1a'", "not a variable name"]),
        ("s.yaml", "1: [1]\n", ["1", "not a variable name"]),
        ("s.json", '{"INDEX": [1]}', ["INDEX", "taken"]),
        ("s.json", '{"a": [null]}', ["a has a NoneType", "strings, numbers or booleans"]),
        ("s.json", '{"a": [[1, 2]]}', ["a has a list"]),
        ("s.json", '{"a": [{"b": 1}]}', ["a has a dict"]),
        ("s.yaml", "a: [2020-01-02]\n", ["a has a date"]),
        ("s.json", "[]", ["no points", "empty sweep"]),
        ("s.json", '{"points": []}', ["no points"]),
        ("s.toml", "points = []\n", ["no points"]),
        ("s.json", "[1, 2]", ["point 1 is not a mapping"]),
        ("s.json", "[{}]", ["point 1 is not a mapping"]),
        ("s.json", '[{"a": 1, "b": 2}, {"a": 1}]', ["point 2", "point 1 names (a, b)"]),
        ("s.json", '[{"a": 1}, {"a": 1, "c": 2}]', ["point 2", "(a)"]),
        ("s.json", '[{"a": 1}, {"a": 2}, 3]', ["point 3"]),
        ("s.json", '[{"a b": 1}]', ["'a b'", "not a variable name"]),
        ("s.json", '[{"a": null}]', ["a has a NoneType"]),
    ],
)
def test_bad_file(tmp_path: Path, name: str, text: str, words: list[str]) -> None:
    path = write(tmp_path, name, text)
    failing(lambda: parse([], file=path), f"sweep file {path}", *words)


def test_unreadable_files(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    failing(lambda: parse([], file=missing), f"sweep file {missing}", "cannot read")
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    failing(lambda: parse([], file=str(folder)), str(folder), "cannot read")
    binary = tmp_path / "b.json"
    binary.write_bytes(b'{"a": ["\xff"]}')
    failing(lambda: parse([], file=str(binary)), str(binary), "not UTF-8")


def test_too_large_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec, "_MAX_FILE_BYTES", 1 << 20)
    path = write(tmp_path, "big.json", json.dumps({"a": ["x" * 100] * 20000}))
    failing(lambda: parse([], file=path), path, "larger than 1 MiB")


def test_too_many_points_in_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, "p.json", json.dumps([{"a": i} for i in range(100_001)]))
    failing(lambda: parse([], file=path), "100001 points", "at most 100000")


# -- check_used -------------------------------------------------------------------------


def test_check_used_accepts_every_variable_used() -> None:
    sweep = parse(["lr=1,2", "seed=0"])
    check_used(["train.py", "--lr={{lr}}", "SEED={{seed}}", "{{lr}}"], sweep)
    check_used(iter(["--lr={{lr}}-{{seed}}"]), sweep)  # any iterable, once


def test_check_used_undefined_with_did_you_mean() -> None:
    sweep = parse(["lr=1,2", "seed=0"])
    message = failing(
        lambda: check_used(["--lr={{lrr}}", "{{seed}}", "{{lr}}"], sweep),
        "{{lrr}}",
        "undefined sweep variable {{lrr}} (did you mean {{lr}}?);",
        "defined: lr, seed",
    )
    assert "{{seed}}" not in message


def test_check_used_undefined_without_a_close_name() -> None:
    sweep = parse(["lr=1,2"])
    message = failing(lambda: check_used(["{{lr}}", "{{batch}}"], sweep), "{{batch}}", "lr")
    assert "did you mean" not in message


def test_check_used_lists_every_undefined_name() -> None:
    sweep = parse(["lr=1"])
    failing(
        lambda: check_used(["{{lr}} {{zz}} {{aa}}"], sweep),
        "undefined sweep variables {{aa}}, {{zz}};",
    )


def test_check_used_undefined_comes_before_unused() -> None:
    sweep = parse(["lr=1", "seed=0"])
    failing(lambda: check_used(["{{lrr}}"], sweep), "did you mean {{lr}}?")


def test_check_used_unused() -> None:
    sweep = parse(["lr=1,2", "seed=0,1"])
    failing(
        lambda: check_used(["--lr={{lr}}"], sweep),
        "sweep variable seed is defined but not used",
        "put {{seed}} where its value goes",
    )
    failing(
        lambda: check_used(["train.py", "{lr}", "${seed}", "{{ lr }}"], sweep),
        "sweep variables lr, seed are defined but not used",
        "{{lr}}, {{seed}} where their values go",
    )


# -- check_size, records, the record type -----------------------------------------------


def test_check_size() -> None:
    check_size(parse([f"i=range:0:{MAX_POINTS}"]), yes=False)
    big = parse([f"i=range:0:{MAX_POINTS + 1}"])
    failing(lambda: check_size(big, yes=False), f"{MAX_POINTS + 1} points", "--yes", "1000")
    check_size(big, yes=True)
    assert MAX_POINTS == 1000


def test_json_round_trip() -> None:
    sweep = parse(['tag=a"b,c d,é', "lr=log:1e-5:1e-2:4"])
    data = json.loads(json.dumps(spec.to_json(sweep)))
    assert data["names"] == ["tag", "lr"]
    assert data["points"][0] == ['a"b', "1e-05"]
    assert spec.from_json(data) == sweep


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {},
        {"names": ["a"]},
        {"points": [["1"]]},
        {"names": "a", "points": [["1"]]},
        {"names": ["a"], "points": [["1", "2"]]},
        {"names": ["a"], "points": [[1]]},
        {"names": [1], "points": [["1"]]},
        {"names": ["a"], "points": ["1"]},
        {"names": ["a"], "points": "1"},
    ],
)
def test_from_json_refuses_a_malformed_record(data: object) -> None:
    with pytest.raises(ValueError, match="not a sweep record"):
        spec.from_json(data)


def test_sweep_record() -> None:
    sweep = parse(["a=1,2,3", "b=x,y"])
    assert len(sweep) == 6
    assert sweep.values(4) == {"a": "3", "b": "x"}
    chosen = sweep.subset([5, 0])
    assert chosen.names == sweep.names
    assert chosen.points == (("3", "y"), ("1", "x"))
    assert len(sweep.subset([])) == 0
    with pytest.raises(IndexError, match="no sweep point 6"):
        sweep.subset([1, 6])
    with pytest.raises(IndexError, match="no sweep point -1"):
        sweep.subset([-1])
    with pytest.raises(dataclasses.FrozenInstanceError):
        sweep.names = ("c",)  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(sweep)) == sweep
    assert hash(sweep) == hash(parse(["a=1,2,3", "b=x,y"]))
    assert [f.name for f in dataclasses.fields(sweep)] == ["names", "points"]


# -- properties -------------------------------------------------------------------------

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False).map(lambda x: f"{x:.6g}")


@given(start=finite, stop=finite, num=st.integers(1, 40))
def test_lin_property(start: str, stop: str, num: int) -> None:
    got = [float(v) for v in values(f"x=lin:{start}:{stop}:{num}")]
    a, b = float(start), float(stop)
    assert len(got) == num
    assert got[0] == a
    if num > 1:
        assert got[-1] == b
    for i, v in enumerate(got):
        exact = a + (b - a) * i / max(num - 1, 1)
        assert math.isclose(v, exact, rel_tol=1e-11, abs_tol=1e-11 * max(abs(a), abs(b)))


@given(
    start=st.floats(1e-12, 1e12).map(lambda x: f"{x:.6g}"),
    stop=st.floats(1e-12, 1e12).map(lambda x: f"{x:.6g}"),
    num=st.integers(2, 30),
)
def test_log_property(start: str, stop: str, num: int) -> None:
    got = [float(v) for v in values(f"x=log:{start}:{stop}:{num}")]
    a, b = float(start), float(stop)
    assert (got[0], got[-1], len(got)) == (a, b, num)
    ratio = (b / a) ** (1 / (num - 1))
    for x, y in itertools.pairwise(got):
        assert math.isclose(y / x, ratio, rel_tol=1e-9)


@given(
    st.lists(st.lists(st.sampled_from(["a", "b", "0", "x y"]), min_size=1, max_size=4), max_size=4)
)
def test_product_and_zip_match_itertools(lists: list[list[str]]) -> None:
    defs = [f"v{i}={','.join(vs)}" for i, vs in enumerate(lists)]
    if not lists:
        failing(lambda: parse(defs), "empty sweep")
        return
    assert parse(defs).points == tuple(itertools.product(*lists))
    if len({len(vs) for vs in lists}) == 1:
        assert parse(defs, zip=True).points == tuple(zip(*lists, strict=True))
    else:
        failing(lambda: parse(defs, zip=True), "one length")


# -- start-up ---------------------------------------------------------------------------


def test_import_is_light() -> None:
    code = (
        "import sys, distspec.sweep; assert 'distspec.sweep.spec' not in sys.modules;"
        "import distspec.sweep.spec;"
        "heavy = {'yaml', 'json', 'tomllib', 'tomli', 'fractions', 'difflib', 'decimal',"
        " 'distspec.specs.placeholders', 'dataclasses', 'inspect'} & set(sys.modules);"
        "assert not heavy, heavy"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_a_fifo_or_a_device_as_the_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "points.toml"
    os.mkfifo(fifo)  # no writer: a plain open() would block forever
    device = tmp_path / "zero.json"
    device.symlink_to("/dev/zero")
    for path in (fifo, device):
        with pytest.raises(UsageError, match="not a regular file"):
            parse([], file=str(path))
