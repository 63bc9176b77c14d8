"""Bool parameters: every spelling means what it says, in every position.

A hypothesis property over the spellings (``--debug``, ``--debug VALUE``,
``--debug=VALUE``, ``--no-debug``, dashed names) by the truth values by where the
flag sits among the other flags and the script arguments; plus the rule that a
word after a bool flag that is not a truth value is an error, never silently a
script argument.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.components.binder import bind, truth
from distspec.components.loader import Component, load
from distspec.errors import ComponentError
from distspec.specs import AppDef, Role

SEEN: dict[str, object] = {}


def switches(
    *rest: str, dry_run: bool = True, verbose: bool = False, count: int = 1, v: bool = False
) -> AppDef:
    """Bool flags of every naming form.

    Args:
        rest: script arguments.
        dry_run: a two-word flag, default true.
        verbose: a one-word flag, default false.
        count: a plain int, to sit beside the flags.
        v: a one-letter flag.
    """
    SEEN.clear()
    SEEN.update(rest=rest, dry_run=dry_run, verbose=verbose, count=count, v=v)
    return AppDef(name="t", roles=(Role(name="t", entrypoint="true"),))


COMP = Component.of("switches", switches)

TRUE_WORDS = ["true", "True", "TRUE", "yes", "Yes", "1", "on", "ON"]
FALSE_WORDS = ["false", "False", "FALSE", "no", "NO", "0", "off", "Off"]


def spellings(param: str, value: bool) -> st.SearchStrategy[list[str]]:
    """Every way to say ``param=value`` on the command line."""
    names = [f"--{param}"] if len(param) > 1 else [f"-{param}"]
    if "_" in param:
        names.append(f"--{param.replace('_', '-')}")
    negatives = sorted({f"--no-{param}", f"--no-{param.replace('_', '-')}"})
    words = TRUE_WORDS if value else FALSE_WORDS
    forms: list[st.SearchStrategy[list[str]]] = [
        st.builds(lambda n, w: [n, w], st.sampled_from(names), st.sampled_from(words)),
        st.builds(lambda n, w: [f"{n}={w}"], st.sampled_from(names), st.sampled_from(words)),
    ]
    if value:
        forms.append(st.builds(lambda n: [n], st.sampled_from(names)))
    else:
        forms.append(st.builds(lambda n: [n], st.sampled_from(negatives)))
    return st.one_of(forms)


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[list[str], dict[str, object]]:
    """A command line setting some bools (in any order, around --count) and its meaning."""
    expected: dict[str, object] = {"dry_run": True, "verbose": False, "v": False, "count": 1}
    pieces: list[list[str]] = []
    for param in draw(st.lists(st.sampled_from(["dry_run", "verbose", "v"]), unique=True)):
        value = draw(st.booleans())
        pieces.append(draw(spellings(param, value)))
        expected[param] = value
    if draw(st.booleans()):
        pieces.append(["--count", "7"])
        expected["count"] = 7
    order = draw(st.permutations(range(len(pieces))))
    argv = [word for i in order for word in pieces[i]]
    rest = draw(st.lists(st.sampled_from(["a.csv", "--lr", "0.1", "true", "--verbose"])))
    if rest:
        # after `--` anything is the script's, truth words and flags included; without
        # `--`, script arguments start with a word that is neither a flag nor a truth
        # value, and not right after a bare bool flag (it would be read as its value)
        bare_bool_last = bool(argv) and argv[-1].startswith("-")
        if (
            draw(st.booleans())
            or bare_bool_last
            or rest[0].startswith("-")
            or truth(rest[0]) is not None
        ):
            argv += ["--", *rest]
        else:
            argv += rest
    expected["rest"] = tuple(rest)
    return argv, expected


@given(command_lines())
def test_every_spelling_in_every_position(case: tuple[list[str], dict[str, object]]) -> None:
    argv, expected = case
    bind(COMP, argv)
    assert expected == SEEN, argv


@given(
    st.sampled_from(["--verbose", "--dry-run", "-v"]),
    st.sampled_from(["maybe", "main.py", "2x8", "yess", "tru", "-"]),
    st.sampled_from([[], ["--count", "2"], ["x.py"]]),
)
def test_a_non_truth_word_after_a_flag_is_an_error(flag: str, word: str, after: list[str]) -> None:
    with pytest.raises(ComponentError) as info:
        bind(COMP, [flag, word, *after]) if word != "-" else bind(COMP, [f"{flag}={word}"])
    assert "is not true or false" in str(info.value)
    assert "after --" in str(info.value)


@pytest.mark.parametrize("argv", [["--no-verbose", "true"], ["--no-verbose=1"]])
def test_a_negative_flag_takes_no_value(argv: list[str]) -> None:
    with pytest.raises(ComponentError, match="--no-verbose takes no value"):
        bind(COMP, argv)


def test_the_word_stays_a_script_argument_after_dashdash() -> None:
    bind(COMP, ["--verbose", "--", "maybe", "--count", "3"])
    assert SEEN["verbose"] is True and SEEN["rest"] == ("maybe", "--count", "3")
    assert SEEN["count"] == 1


def test_the_torchx_example_builds_the_job_it_says() -> None:
    # issue 14: this used to compile to 1 node x 2 processes with 0 GPUs and exit 0
    app = bind(
        load("dist.ddp"), ["--script", "main.py", "--debug", "True", "-j", "2x8", "--gpu", "8"]
    )
    role = app.roles[0]
    assert (role.num_replicas, role.resource.gpu) == (2, 8)
    assert role.args[role.args.index("--nproc_per_node") + 1] == "8"
    assert role.env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert role.args[-1] == "main.py"  # no stray "True" for the script
    off = bind(load("dist.ddp"), ["--script", "main.py", "--debug", "False"]).roles[0]
    assert "TORCH_DISTRIBUTED_DEBUG" not in off.env
