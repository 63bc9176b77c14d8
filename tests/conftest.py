"""Shared fixtures: golden files, an isolated state dir and config, a recording command runner."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from distspec.schedulers.api import CommandResult

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite tests/golden/ from the current output instead of comparing",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """``golden("slurm/2x8.sbatch", text)``: compare with the file, or rewrite it with --update-goldens."""
    update = request.config.getoption("--update-goldens")

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"missing golden {path}; run pytest with --update-goldens to create it")
        assert text == path.read_text(), (
            f"output differs from {path} (--update-goldens rewrites it)"
        )

    return check


#: The variables that steer the test harness itself (not distspec): kept by state_dir,
#: so that DISTSPEC_SLURM_CLUSTER=0 still skips the cluster tests.
_HARNESS = frozenset({"DISTSPEC_STATE_DIR", "DISTSPEC_SLURM_CLUSTER", "DISTSPEC_TEST_THIRDPARTY"})


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private DISTSPEC_STATE_DIR and HOME, so tests never see the user's config or jobs."""
    state = tmp_path / "state"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DISTSPEC_STATE_DIR", str(state))
    monkeypatch.setenv("HOME", str(home))
    for key in list(os.environ):
        if key.startswith("DISTSPEC_") and key not in _HARNESS:
            monkeypatch.delenv(key)
    return state


class FakeCommands:
    """A scripted command runner that records every call.

    ``fake.on("sbatch", stdout="123\\n")`` answers the next matching call;
    unmatched calls fail the test.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.inputs: list[str | None] = []
        self._script: list[
            tuple[
                Callable[[Sequence[str]], bool],
                CommandResult | Callable[[Sequence[str]], CommandResult],
            ]
        ] = []

    def on(
        self,
        program: str,
        *,
        stdout: str = "",
        stderr: str = "",
        returncode: int = 0,
        match: Callable[[Sequence[str]], bool] | None = None,
    ) -> None:
        def matcher(argv: Sequence[str]) -> bool:
            return argv[0] == program and (match is None or match(argv))

        self._script.append(
            (
                matcher,
                CommandResult(argv=(program,), returncode=returncode, stdout=stdout, stderr=stderr),
            )
        )

    def __call__(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        self.calls.append(tuple(argv))
        self.inputs.append(input)
        for i, (matcher, result) in enumerate(self._script):
            if matcher(argv):
                del self._script[i]
                res = result(argv) if callable(result) else result
                return CommandResult(
                    argv=tuple(argv),
                    returncode=res.returncode,
                    stdout=res.stdout,
                    stderr=res.stderr,
                )
        raise AssertionError(f"unexpected command: {list(argv)}")


@pytest.fixture
def fake_commands() -> Iterator[FakeCommands]:
    yield FakeCommands()
