from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distspec.errors import CompileError
from distspec.schedulers._common import (
    ShellExpr,
    check_capabilities,
    filter_lines,
    shell_join,
    shell_word,
)
from distspec.schedulers.api import Capabilities
from distspec.specs import AppDef, Role
from distspec.specs.macros import Macro

# Arbitrary argv: quotes, $, backticks, newlines, unicode, empty strings (no NUL: argv cannot hold it).
_arg = st.text(
    alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=30
)


def _echo_args(command: str, env: dict[str, str] | None = None) -> list[str]:
    script = f'for a in {command}; do printf "%s\\0" "$a"; done'
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True, env=env).stdout
    return out.decode().split("\0")[:-1]


@settings(max_examples=60, deadline=None)
@given(st.lists(_arg, max_size=6))
def test_any_argv_survives_bash_byte_identical(argv: list[str]) -> None:
    assert _echo_args(shell_join(argv, {})) == argv


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(_arg, st.just("${replica_id}"), st.just("x${rank0_host}:29500")), max_size=5)
)
def test_runtime_macros_expand_and_literals_do_not(argv: list[str]) -> None:
    values = {Macro.REPLICA_ID: ShellExpr("$NODE"), Macro.RANK0_HOST: "n0"}
    got = _echo_args(shell_join(argv, values), env={"NODE": "7", "PATH": "/usr/bin:/bin"})
    expected = [a.replace("${replica_id}", "7").replace("${rank0_host}", "n0") for a in argv]
    assert got == expected


def test_shell_word_shapes() -> None:
    assert shell_word("", {}) == "''"
    assert (
        shell_word("--node_rank=${replica_id}", {Macro.REPLICA_ID: ShellExpr("$SLURM_NODEID")})
        == '--node_rank="$SLURM_NODEID"'
    )
    assert shell_word("a b", {}) == "'a b'"


def test_filter_lines() -> None:
    lines = [f"line {i}" for i in range(10)]
    assert list(filter_lines(lines, tail=2)) == ["line 8", "line 9"]
    assert list(filter_lines(lines, regex=r"[13]$")) == ["line 1", "line 3"]
    assert list(filter_lines(lines, regex=r"[13579]$", tail=2)) == ["line 7", "line 9"]
    assert list(filter_lines(lines, tail=0)) == []


def test_capabilities_are_enforced() -> None:
    app = AppDef(
        name="a",
        roles=(
            Role(name="r", entrypoint="x", args=("${rank0_host}",), num_replicas=2, min_replicas=1),
        ),
    )
    with pytest.raises(CompileError, match=r"uses \$\{rank0_host\}"):
        check_capabilities(app, Capabilities(macros=frozenset({Macro.APP_ID})), "toy")
    with pytest.raises(CompileError, match="elastic"):
        check_capabilities(app, Capabilities(elastic=False), "toy")
    with pytest.raises(CompileError, match="needs an image"):
        check_capabilities(app, Capabilities(needs_image=True), "toy")
    two = AppDef(name="a", roles=(Role(name="r", entrypoint="x"), Role(name="s", entrypoint="y")))
    with pytest.raises(CompileError, match="2 roles"):
        check_capabilities(two, Capabilities(multi_role=False), "toy")
    check_capabilities(app, Capabilities(), "toy")
