from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distspec.errors import CompileError
from distspec.schedulers.api import Capabilities, check_capabilities
from distspec.schedulers.logs import filter_lines
from distspec.schedulers.shell import ShellExpr, shell_join, shell_word
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


# -- torchrun's root-cause report (shared by every backend) ---------------------

_REPORT = [
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-11-23_12:00:00",
    "  host      : n0",
    "  rank      : 3 (local_rank: 1)",
    "  exitcode  : {code} (pid: 4242)",
    "  error_file: <N/A>",
]


def _torchrun_log(code: int, *said: str) -> list[str]:
    return [
        "[rank2]:hello from 2",
        *(f"[rank3]:{line}" for line in said),
        "[rank2]:UserWarning: rank 2 warns last",
        *(line.format(code=code) for line in _REPORT),
    ]


def test_root_cause_gives_the_workers_code_and_its_exception_line() -> None:
    from distspec.torchrun_output import torchrun_root_cause

    lines = _torchrun_log(
        7,
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "ValueError: the real error",
        "UserWarning: printed after the traceback",
    )
    code, reason = torchrun_root_cause(lines) or (None, "")
    assert code == 7
    assert reason == (
        "torchrun: rank 3 (local_rank 1) exited with 7, pid 4242; "
        "its last line: ValueError: the real error"
    )


def test_root_cause_names_a_signal_and_quotes_the_last_line_without_a_traceback() -> None:
    from distspec.torchrun_output import torchrun_root_cause

    code, reason = torchrun_root_cause(_torchrun_log(-11, "step 5", "", "   ")) or (None, "")
    assert code == 139
    assert "rank 3 (local_rank 1) was killed by SIGSEGV" in reason
    assert reason.endswith("its last line: step 5")


def test_root_cause_reads_the_default_tee_prefix_too() -> None:
    from distspec.torchrun_output import torchrun_root_cause

    lines = ["[trainer1]:oops", *(line.format(code=2) for line in _REPORT)]
    assert torchrun_root_cause(lines, "trainer") == (
        2,
        "torchrun: rank 3 (local_rank 1) exited with 2, pid 4242; its last line: oops",
    )
    assert torchrun_root_cause(["no report here"]) is None


def test_replica_exit_prefers_the_report_in_the_log(tmp_path: Path) -> None:
    from distspec.schedulers.batch.folder import replica_exit

    (tmp_path / "trainer-0.log").write_text("\n".join(_torchrun_log(-9, "step 1")) + "\n")
    files = {"trainer-0.exit": "1", "trainer-1.exit": "143", "trainer-2.exit": "0"}
    code, reason = replica_exit(str(tmp_path), files, "trainer", 0)
    assert code == 137
    assert "was killed by SIGKILL" in reason
    assert reason.endswith("; torchrun exited with 1")
    # No log or no report: the recorded code, a signal named.
    assert replica_exit(str(tmp_path), files, "trainer", 1) == (143, "killed by SIGTERM")
    assert replica_exit(None, {"t-0.exit": "5"}, "t", 0) == (5, "exited with 5")
    assert replica_exit(str(tmp_path), files, "trainer", 2) == (0, "")
    assert replica_exit(str(tmp_path), files, "trainer", 3) == (None, "")
