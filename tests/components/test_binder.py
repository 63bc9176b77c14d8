"""The binder: signature + docstring → command line → AppDef."""

from __future__ import annotations

import enum
import textwrap
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.components.binder import (
    ComponentHelp,
    Kind,
    bind,
    format_dict,
    format_list,
    help_text,
    params,
    parse_dict,
    parse_list,
)
from distspec.components.loader import Component, load
from distspec.errors import ComponentError, DistspecError, TopologyError, UsageError
from distspec.specs import AppDef, Role

STYLES = "tests.components.sample_styles"


def _app(*args: str) -> AppDef:
    return AppDef(name="t", roles=(Role(name="t", entrypoint="echo", args=args),))


def args_of(app: AppDef) -> tuple[str, ...]:
    return app.roles[0].args


LAST: dict[str, object] = {}


class Color(enum.Enum):
    RED = "red"
    DARK_BLUE = "dark-blue"


def kitchen_sink(
    *rest: str,
    name: str,
    count: int = 1,
    ratio: float = 0.5,
    verbose: bool = False,
    color: Color = Color.RED,
    tags: list[str] | None = None,
    labels: dict[str, str] | None = None,
    maybe: Optional[int] = None,  # noqa: UP045 - the spelling under test
    other: int | None = None,
    dry_run: bool = True,
    x: str = "ex",
) -> AppDef:
    """Every supported kind.

    Args:
        rest: the rest.
        name: a name.
        count: a count.
        ratio: a ratio.
        verbose: talk more.
        color: a color.
        tags: some tags.
        labels: some labels.
        maybe: an optional int, typing.Optional.
        other: an optional int, PEP 604.
        dry_run: a flag that defaults to true.
        x: a one-letter flag.
    """
    LAST.clear()
    LAST.update(
        rest=rest,
        name=name,
        count=count,
        ratio=ratio,
        verbose=verbose,
        color=color,
        tags=tags,
        labels=labels,
        maybe=maybe,
        other=other,
        dry_run=dry_run,
        x=x,
    )
    return _app(name)


SINK = Component.of("sink", kitchen_sink)


def sink(argv: list[str], **kw: object) -> dict[str, object]:
    bind(SINK, argv, **kw)  # type: ignore[arg-type]
    return dict(LAST)


# -- kinds --------------------------------------------------------------------


def test_defaults_when_nothing_given() -> None:
    got = sink(["--name", "n"])
    assert got == dict(
        rest=(),
        name="n",
        count=1,
        ratio=0.5,
        verbose=False,
        color=Color.RED,
        tags=None,
        labels=None,
        maybe=None,
        other=None,
        dry_run=True,
        x="ex",
    )


def test_every_kind_parses() -> None:
    got = sink(
        [
            "--name=n",
            "--count",
            "3",
            "--ratio",
            "2.5",
            "--verbose",
            "--color",
            "dark-blue",
            "--tags",
            "a,b\\,c",
            "--tags",
            "d",
            "--labels",
            "k=v,k2=v=2",
            "--labels",
            "k3=3",
            "--maybe",
            "7",
            "--other",
            "8",
            "--no-dry-run",
            "-x",
            "why",
        ]
    )
    assert got["count"] == 3 and got["ratio"] == 2.5 and got["verbose"] is True
    assert got["color"] is Color.DARK_BLUE
    assert got["tags"] == ["a", "b,c", "d"]
    assert got["labels"] == {"k": "v", "k2": "v=2", "k3": "3"}
    assert got["maybe"] == 7 and got["other"] == 8
    assert got["dry_run"] is False and got["x"] == "why"


def test_enum_accepts_member_name_too() -> None:
    assert sink(["--name", "n", "--color", "DARK_BLUE"])["color"] is Color.DARK_BLUE


def test_underscore_and_dash_spellings() -> None:
    assert sink(["--name", "n", "--no-dry_run"])["dry_run"] is False
    assert sink(["--name", "n", "--dry-run"])["dry_run"] is True


def test_optional_spellings_bind_the_same() -> None:
    by_name = {p.name: p for p in params(SINK)}
    assert by_name["maybe"].kind is Kind.INT and by_name["maybe"].optional
    assert by_name["other"].kind is Kind.INT and by_name["other"].optional
    assert by_name["maybe"].type_name == by_name["other"].type_name == "int | None"


def test_flag_naming_rule() -> None:
    by_name = {p.name: p for p in params(SINK)}
    assert by_name["x"].flags == ("-x",)
    assert by_name["count"].flags == ("--count",)
    assert by_name["dry_run"].flags == ("--dry_run", "--dry-run")
    assert by_name["dry_run"].negative_flags == ("--no-dry-run", "--no-dry_run")


# -- script args ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "rest"),
    [
        (["--name", "n", "a", "--b", "c"], ("a", "--b", "c")),
        (["--name", "n", "--", "--b", "c"], ("--b", "c")),
        (["--", "--name", "x"], None),  # after --, --name is a script arg: name is missing
        (["--name", "n", "--", "a", "--", "b"], ("a", "--", "b")),
        (["--name", "n", "a", "--", "b"], ("a", "--", "b")),
        (["--name", "n", "--", "--help"], ("--help",)),
        (["--name", "n", "a", "--count", "9"], ("a", "--count", "9")),
        (["--name", "n", "--"], ()),
    ],
)
def test_script_args_with_and_without_dashdash(
    argv: list[str], rest: tuple[str, ...] | None
) -> None:
    if rest is None:
        with pytest.raises(ComponentError, match="--name"):
            sink(argv)
        return
    got = sink(argv)
    assert got["rest"] == rest
    assert got["count"] == 1


def test_positional_parameter_before_args() -> None:
    comp = load(f"{STYLES}:positional_then_args")
    app = bind(comp, ["--first", "one", "--flag", "--", "two", "three"])
    assert args_of(app) == ("one", "two", "three", "True")
    # a word after a bool flag is its value or an error, never a script argument
    with pytest.raises(ComponentError, match="'two' is not true or false"):
        bind(comp, ["--first", "one", "--flag", "two", "three"])


# -- argument errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--name", "n", "--count", "x"], "argument --count: expected an integer, got 'x'"),
        (["--name", "n", "--ratio", "nan-ish"], "expected a number"),
        (["--count", "1"], "required: --name"),
        (["--name", "n", "--colr", "red"], "did you mean '--color'"),
        (["--name", "n", "--color", "green"], "expected one of red, dark-blue"),
        (["--name", "n", "--labels", "novalue"], "expected KEY=VALUE"),
        (["--name"], "expected one argument"),
    ],
)
def test_argument_errors_are_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(ComponentError) as info:
        sink(argv)
    text = str(info.value)
    assert message in text
    assert "\n" not in text
    assert text.startswith("sink: ")


def test_unknown_positional_without_args_param() -> None:
    comp = load(f"{STYLES}:google_style")
    with pytest.raises(ComponentError, match="unrecognized arguments: extra"):
        bind(comp, ["--alpha", "a", "extra"])


@pytest.mark.parametrize(
    ("component", "argv", "hint"),
    [
        # A script flag before --: say where it goes, not "did you mean '--help'?".
        ("dist.ddp", ["--script", "t.py", "--lr", "0.1"], "after --: ... -- --lr ..."),
        ("dist.ddp", ["--script", "t.py", "--epochs=3"], "after --: ... -- --epochs ..."),
        ("utils.sh", ["--zzz"], "after --"),
        # A misspelt flag of the component's own: the close match, with its dashes.
        (
            "dist.ddp",
            ["--script", "t.py", "--max_restart", "1"],
            "(did you mean '--max_restarts'?)",
        ),
        ("dist.ddp", ["--scrpit", "t.py"], "(did you mean '--script'?)"),
        ("utils.echo", ["--mgs", "hi"], "(did you mean '--msg'?)"),
    ],
)
def test_an_unknown_flag_gets_a_useful_hint(component: str, argv: list[str], hint: str) -> None:
    with pytest.raises(ComponentError) as info:
        bind(load(component), argv)
    assert hint in str(info.value)
    assert "--help" not in str(info.value)


def test_no_script_hint_for_a_component_without_script_arguments() -> None:
    with pytest.raises(ComponentError) as info:
        bind(load("utils.echo"), ["--zzz"])
    assert str(info.value) == "utils.echo: unrecognized arguments: --zzz"


def test_usage_error_from_component_passes_through() -> None:
    with pytest.raises(TopologyError):
        bind(load("dist.ddp"), ["--script", "t.py", "-j", "2y3"])


def test_non_appdef_result_is_rejected() -> None:
    with pytest.raises(
        ComponentError, match=r"sample_styles\.py:\d+: .* returned str, not an AppDef"
    ):
        bind(load(f"{STYLES}:returns_string"), [])


# -- help -----------------------------------------------------------------------


def test_help_raises_component_help_not_an_error() -> None:
    with pytest.raises(ComponentHelp) as info:
        sink(["--help"])
    assert not isinstance(info.value, DistspecError)
    text = info.value.text
    assert text.startswith("usage: distspec run sink")
    for doc in (
        "a name.",
        "a count.",
        "talk more.",
        "an optional int, typing.Optional.",
        "the rest.",
    ):
        assert doc in text
    assert "[int, default: 1]" in text
    assert "[str, required]" in text
    assert "{red,dark-blue}" in text
    assert "--no-verbose" in text


def test_help_wins_over_missing_required_flags() -> None:
    with pytest.raises(ComponentHelp):
        sink(["--help"])  # --name is required but help comes first


def test_dash_h_is_not_help() -> None:
    app = bind(load("dist.ddp"), ["-h", "gpu.small", "--script", "t.py", "-j", "1"])
    assert app.roles[0].resource.gpu == 1


def test_help_shows_config_defaults() -> None:
    text = help_text(SINK, defaults={"count": "5"})
    assert "[int, default: 5]" in text


@pytest.mark.parametrize("fn", ["google_style", "rest_style", "numpy_style"])
def test_every_docstring_style_gives_help(fn: str) -> None:
    text = help_text(load(f"{STYLES}:{fn}"))
    style = fn.split("_", maxsplit=1)[0]
    for name in ("alpha", "beta", "gamma"):
        assert f"the {name}-{style} " in text
    assert "--beta_count BETA_COUNT, --beta-count BETA_COUNT" in text
    assert "[float | None, default: None]" in text


# -- config defaults ------------------------------------------------------------


def test_config_defaults_override_function_defaults() -> None:
    got = sink([], defaults={"name": "cfg", "count": "4", "tags": ["a", "b"], "verbose": "true"})
    assert got["name"] == "cfg" and got["count"] == 4 and got["tags"] == ["a", "b"]
    assert got["verbose"] is True
    got = sink(
        ["--count", "9", "--no-verbose"], defaults={"name": "cfg", "count": 4, "verbose": True}
    )
    assert got["count"] == 9 and got["verbose"] is False


def test_config_default_keys_may_use_dashes() -> None:
    assert sink(["--name", "n"], defaults={"dry-run": False})["dry_run"] is False


def test_unknown_config_default_key_is_named() -> None:
    with pytest.raises(ComponentError, match=r"default 'cont' .* \(did you mean 'count'\?\)"):
        sink(["--name", "n"], defaults={"cont": 3})


def test_badly_typed_config_default() -> None:
    with pytest.raises(ComponentError, match=r"default count='many'.*expected an integer"):
        sink(["--name", "n"], defaults={"count": "many"})
    with pytest.raises(ComponentError, match="expected int"):
        sink(["--name", "n"], defaults={"count": True})


# -- malformed components -------------------------------------------------------


BAD = {
    "unsupported_set": (
        "def bad(ids: set[int]) -> AppDef:\n    '''Doc.'''\n",
        r"'ids': unsupported type set\[int\]",
    ),
    "no_docstring": ("def bad(x: str) -> AppDef:\n    return None\n", "has no docstring"),
    "kwargs": ("def bad(**kw: str) -> AppDef:\n    '''Doc.'''\n", r"\*\*kw is not supported"),
    "unannotated": ("def bad(x) -> AppDef:\n    '''Doc.'''\n", "'x' has no type annotation"),
    "int_args": ("def bad(*a: int) -> AppDef:\n    '''Doc.'''\n", r"\*a must be annotated str"),
    "help_param": ("def bad(help: str) -> AppDef:\n    '''Doc.'''\n", "may not be called 'help'"),
    "union": ("def bad(x: int | str) -> AppDef:\n    '''Doc.'''\n", "unsupported type"),
    "list_int": (
        "def bad(x: list[int]) -> AppDef:\n    '''Doc.'''\n",
        r"unsupported type list\[int\]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_component_is_rejected_with_file_and_line(case: str, tmp_path: Path) -> None:
    body, message = BAD[case]
    path = tmp_path / f"{case}.py"
    path.write_text(
        "from __future__ import annotations\nfrom distspec.specs import AppDef\n\n\n" + body
    )
    comp = load(f"{path}:bad")
    for attempt in (lambda: bind(comp, []), lambda: help_text(comp)):
        with pytest.raises(ComponentError, match=message) as info:
            attempt()
        assert str(info.value).startswith(f"{path}:5: component ")


def test_malformed_example_file_from_text(tmp_path: Path) -> None:
    path = tmp_path / "two.py"
    path.write_text(
        textwrap.dedent(
            '''
            from distspec.specs import AppDef

            def fine(x: str = "a") -> AppDef:
                """Fine.

                Args:
                    x: fine.
                """
                raise NotImplementedError

            def undocumented(x: str = "a") -> AppDef:
                raise NotImplementedError
            '''
        )
    )
    with pytest.raises(
        ComponentError, match=r"two\.py:12: component 'undocumented': has no docstring"
    ):
        bind(load(f"{path}:undocumented"), [])


# -- escapes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A=1,B=2", {"A": "1", "B": "2"}),
        ("A=x\\,y", {"A": "x,y"}),
        ("A=x,y", {"A": "x,y"}),  # a comma not followed by KEY= does not split
        ("PATHS=/a,/b,MODE=x", {"PATHS": "/a,/b", "MODE": "x"}),
        ("A=x\\,B=y", {"A": "x,B=y"}),
        ("A=b=c", {"A": "b=c"}),
        ("A=", {"A": ""}),
        ("A=C:\\dir\\x", {"A": "C:\\dir\\x"}),  # other backslashes are kept
        ("A=x\\\\,B=y", {"A": "x\\", "B": "y"}),
        ("", {}),
    ],
)
def test_parse_dict(text: str, expected: dict[str, str]) -> None:
    assert parse_dict(text) == expected


@pytest.mark.parametrize("text", ["novalue", "=v", " =v", "x,A=1"])
def test_parse_dict_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_dict(text)


def test_parse_list() -> None:
    assert parse_list("a,b\\,c,,d") == ["a", "b,c", "d"]
    assert parse_list("") == []


KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@given(st.dictionaries(KEYS, st.text()))
def test_dict_escape_round_trip(mapping: dict[str, str]) -> None:
    assert parse_dict(format_dict(mapping)) == mapping


@given(st.lists(st.text(min_size=1)))
def test_list_escape_round_trip(items: list[str]) -> None:
    assert parse_list(format_list(items)) == items


@given(st.dictionaries(KEYS, st.text()))
def test_env_round_trip_through_the_cli(mapping: dict[str, str]) -> None:
    got = sink(["--name", "n", "--labels", format_dict(mapping)])
    assert (got["labels"] or {}) == mapping


def test_component_help_is_exception_not_usage_error() -> None:
    assert issubclass(ComponentHelp, Exception)
    assert not issubclass(ComponentHelp, UsageError)


def test_prog_with_or_without_the_component_name() -> None:
    assert help_text(SINK, "distspec run").startswith("usage: distspec run sink [--help]")
    assert help_text(SINK, "distspec run sink").startswith("usage: distspec run sink [--help]")


def _f1(a: int, b: str = "x") -> None: ...
def _f2(a: int, /, b: int, *, c: bool = False, d: float) -> None: ...
def _f3(*args: str) -> None: ...
def _f4(a: int, *rest: str, flag: bool = True, **extra: str) -> None: ...
def _f5(a: list[str] | None = None, b: int = 3) -> None: ...
def _f6() -> None: ...


@pytest.mark.parametrize("fn", [_f1, _f2, _f3, _f4, _f5, _f6])
def test_signature_from_code_matches_inspect(fn: Any) -> None:
    from distspec.components.binder import _signature, _signature_by_inspect

    assert _signature(fn) == _signature_by_inspect(fn)
