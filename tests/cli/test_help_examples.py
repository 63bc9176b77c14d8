"""Every example in every ``--help`` runs.

The help texts: ``distspec --help``, each verb's ``--help`` and each builtin
component's ``distspec run COMPONENT --help``. An example is an indented line that
starts with ``distspec `` (or ``Example: distspec ``); what follows two spaces or a
``#`` is its comment. Each runs with bash in a fresh directory holding the files it
names (``train.py``, ``hosts.txt``, a ``mypkg`` package with ``train`` and ``probe``)
and a private state dir and HOME, made harmless first: ``run`` and ``launch`` get
``--dryrun``, ``prune`` gets ``--dry-run``. A verb that takes an app handle cannot
know one in advance: its example must parse and name the app as unknown (exit 2,
"no app"/"unknown"), not fail as a usage mistake.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from functools import cache
from pathlib import Path

import pytest

from distspec.cli.main import VERBS, main

BIN = Path(sys.executable).parent
HANDLE_VERBS = {"status", "describe", "log", "metrics", "plot", "report", "cancel", "rerun"}


def _env(root: Path) -> dict[str, str]:
    return {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "DISTSPEC_STATE_DIR": str(root / "state"),
        "DISTSPEC_TORCHXCONFIG": "off",
        "LC_ALL": "C.UTF-8",
    }


def _help(*argv: str) -> str:
    """``distspec ARGV --help``, in-process: collecting runs it ~25 times, and a
    subprocess each would cost a second apiece."""
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        try:
            code: object = main([*argv, "--help"])
        except SystemExit as e:
            code = e.code
    assert code in (0, None), (argv, code, out.getvalue())
    return out.getvalue()


@cache
def _components() -> tuple[str, ...]:
    from distspec.components.loader import builtin_names

    return tuple(builtin_names())


_EXAMPLE = re.compile(r"^\s+(?:Example: )?(distspec .*)$")


def examples(text: str) -> list[str]:
    """The example command lines of a help text, comments cut off."""
    out = []
    for line in text.splitlines():
        match = _EXAMPLE.match(line)
        if match is None:
            continue
        command = re.split(r"\s{2,}|\s#", match.group(1))[0].strip()
        out.append(command)
    return out


def _all_examples() -> list[tuple[str, str]]:
    found = [("distspec --help", e) for e in examples(_help())]
    for verb in VERBS:
        found += [(f"distspec {verb} --help", e) for e in examples(_help(verb))]
    for component in _components():
        found += [
            (f"distspec run {component} --help", e) for e in examples(_help("run", component))
        ]
    return found


def _harmless(command: str) -> str:
    """``command`` (shell syntax kept as written) with its dry-run flag."""
    match = re.match(r"distspec ((?:-\S+ )*)([a-z]+)", command)
    assert match is not None, command
    verb = match.group(2)
    flag = {"run": "--dryrun", "launch": "--dryrun", "prune": "--dry-run"}.get(verb)
    if flag is None or flag in command.split():
        return command
    return command[: match.end()] + f" {flag}" + command[match.end() :]


def _workdir(root: Path) -> Path:
    work = root / "work"
    (work / "mypkg").mkdir(parents=True)
    (root / "home").mkdir()
    for name in ("train.py", "hosts.txt", "mypkg/__init__.py"):
        (work / name).write_text("")
    (work / "hosts.txt").write_text("localhost\n")
    (work / "mypkg" / "train.py").write_text("def main():\n    pass\n")
    (work / "mypkg" / "probe.py").write_text("def allreduce():\n    pass\n")
    return work


def test_every_help_has_examples() -> None:
    """The extraction finds the examples (so the test below cannot pass vacuously)."""
    found = _all_examples()
    sources = {source for source, _ in found}
    assert "distspec run --help" in sources
    assert "distspec run dist.ddp --help" in sources
    assert len(found) >= 20, found


@pytest.mark.parametrize(("source", "command"), _all_examples())
def test_example_runs(source: str, command: str, tmp_path: Path) -> None:
    work = _workdir(tmp_path)
    verb = next(w for w in command.split()[1:] if not w.startswith("-"))
    line = _harmless(command)
    proc = subprocess.run(
        ["bash", "-c", line],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
        env=_env(tmp_path),
        timeout=120,
    )
    why = f"{source}: {command!r} ran as {line!r}: exit {proc.returncode}\n{proc.stderr}"
    if verb in HANDLE_VERBS and proc.returncode == 2:
        assert "see --help" not in proc.stderr, why
        assert re.search(r"no app|unknown|not found|no such", proc.stderr, re.I), why
        return
    assert proc.returncode == 0, why
