"""``distspec prune`` reports only what it really deleted: a run directory it could
not remove is named on stderr with the reason, left out of the count, and the exit
code is 1 (it was counted as deleted, and left behind, before)."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from distspec.cli.main import main
from tests.cli.test_list_prune import make_runs, run


@pytest.fixture
def ended_runs(state_dir: Path, tmp_path: Path) -> list[str]:
    """Three ended local runs (one real run and two copies of it), newest first."""
    real = run(tmp_path, "--wait", "--no-log", "utils.echo", "--msg", "hi")
    template = tmp_path / "template"
    ignore = shutil.ignore_patterns("alive.fifo")
    shutil.copytree(state_dir / "local_cwd" / real.rsplit("/", 1)[1], template, ignore=ignore)
    shutil.rmtree(state_dir / "local_cwd")
    return make_runs(state_dir, template, 3, old=0)


def _refuse(monkeypatch: pytest.MonkeyPatch, victim: Path) -> None:
    """rmtree fails on ``victim`` (as it does on a file the user cannot delete) and
    leaves it in place, whether or not it was told to ignore errors."""
    real_rmtree = shutil.rmtree

    def rmtree(path: Any, ignore_errors: bool = False, *args: Any, **kwargs: Any) -> None:
        if Path(path) == victim:
            if ignore_errors:
                return
            raise PermissionError(errno.EACCES, "Permission denied", str(victim / "logs"))
        real_rmtree(path, ignore_errors, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)


def test_a_run_that_cannot_be_deleted_is_reported_not_counted(
    ended_runs: list[str],
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    victim = state_dir / "local_cwd" / ended_runs[1]
    _refuse(monkeypatch, victim)
    assert main(["prune"]) == 1
    out, err = capfd.readouterr()
    assert out.splitlines()[-1] == "deleted 2 run(s); 1 could not be deleted (see above)"
    assert ended_runs[1] not in out
    assert err.count("\n") == 1 and ended_runs[1] in err and "Permission denied" in err
    assert sorted(p.name for p in (state_dir / "local_cwd").iterdir()) == [ended_runs[1]]


def test_json_lists_the_failures(
    ended_runs: list[str],
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    _refuse(monkeypatch, state_dir / "local_cwd" / ended_runs[0])
    assert main(["prune", "--json"]) == 1
    report = json.loads(capfd.readouterr().out)
    assert [h.rsplit("/", 1)[1] for h in report["pruned"]] == ended_runs[1:]
    assert [f["handle"].rsplit("/", 1)[1] for f in report["failed"]] == ended_runs[:1]
    assert "Permission denied" in report["failed"][0]["error"]


def test_everything_deleted_exits_zero(
    ended_runs: list[str], state_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["prune"]) == 0
    assert capfd.readouterr().out.splitlines()[-1] == "deleted 3 run(s)"
    assert not any((state_dir / "local_cwd").iterdir())
