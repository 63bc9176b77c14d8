"""``distspec rerun`` and pruning snapshots, through the CLI, on local runs of real git
repositories (the Slurm half is in test_snapshot_cluster.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ._repo import make_repo

TRAIN = 'import sys\nimport helper\nprint("VERSION", helper.V, *sys.argv[1:])\n'


def distspec(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=180,
        check=False,
    )


def versions(out: str) -> list[str]:
    return [line.split("| ", 1)[1] for line in out.splitlines() if "| VERSION" in line]


@pytest.fixture
def repo(tmp_path: Path, state_dir: Path) -> Path:
    return make_repo(tmp_path / "repo", {"train.py": TRAIN, "helper.py": "V = 1\n"})


def _first_run(repo: Path, *extra: str) -> str:
    proc = distspec(
        "run",
        "-cfg",
        "snapshot=on",
        "--wait",
        *extra,
        "dist.ddp",
        "-j",
        "1x1",
        "--script",
        "train.py",
        "--",
        "a",
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr
    assert versions(proc.stdout) == ["VERSION 1 a"]
    return proc.stdout.splitlines()[0]


def test_rerun_runs_the_submitted_code_after_the_tree_changed(repo: Path, tmp_path: Path) -> None:
    handle = _first_run(repo)
    (repo / "helper.py").write_text("V = 2\n")
    (repo / "train.py").unlink()  # even a script deleted since
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = distspec("rerun", handle, "--wait", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert versions(proc.stdout) == ["VERSION 1 a"]
    assert f"rerunning {handle} from {repo}" in proc.stderr
    again = proc.stdout.splitlines()[0]
    described = json.loads(distspec("describe", "--json", again, cwd=repo).stdout)
    assert described["provenance"]["rerun_of"] == handle
    assert described["provenance"]["snapshot"]["id"] in described["provenance"]["snapshot"]["path"]
    # The git state recorded is the first run's (clean), not the working tree's now.
    assert described["provenance"]["git"]["dirty"] is False


def test_rerun_with_new_script_arguments(repo: Path) -> None:
    handle = _first_run(repo)
    proc = distspec("rerun", handle, "--wait", "--", "b", "c", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert versions(proc.stdout) == ["VERSION 1 b c"]


def test_rerun_dry_run_shows_the_snapshot_s_script(repo: Path) -> None:
    handle = _first_run(repo)
    proc = distspec("rerun", handle, "--dryrun", "-s", "slurm", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert "/snapshots/trees/" in proc.stdout and "/train.py a" in proc.stdout


def test_rerun_refuses_what_it_cannot_reproduce(repo: Path, state_dir: Path) -> None:
    plain = distspec("run", "--wait", "dist.ddp", "-j", "1x1", "--script", "train.py", cwd=repo)
    assert plain.returncode == 0, plain.stderr
    cases = {
        "local_cwd://distspec/nosuch-12345678": "no such app",
        plain.stdout.splitlines()[0]: "ran without a snapshot",
    }
    handle = _first_run(repo)
    record = json.loads(distspec("describe", "--json", handle, cwd=repo).stdout)["provenance"]
    shutil.rmtree(record["snapshot"]["path"])  # as pruning would
    cases[handle] = "no longer in"
    for h, why in cases.items():
        before = sorted(os.listdir(state_dir / "local_cwd"))
        proc = distspec("rerun", h, cwd=repo)
        assert proc.returncode == 2, (h, proc.stderr)
        assert why in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert sorted(os.listdir(state_dir / "local_cwd")) == before  # nothing submitted


def test_a_masked_secret_comes_from_the_environment_or_the_rerun_is_refused(repo: Path) -> None:
    (repo / "train.py").write_text('import os\nprint("VERSION", os.environ["HF_TOKEN"])\n')
    from tests.snapshot._repo import git

    git(repo, "commit", "-qam", "token")
    proc = distspec(
        "run",
        "-cfg",
        "snapshot=on",
        "--wait",
        "dist.ddp",
        "-j",
        "1x1",
        "--env",
        "HF_TOKEN=s3cret",
        "--script",
        "train.py",
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr
    handle = proc.stdout.splitlines()[0]
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    refused = subprocess.run(
        [sys.executable, "-m", "distspec", "rerun", handle],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert refused.returncode == 2 and "set HF_TOKEN in this environment" in refused.stderr
    proc = distspec("rerun", handle, "--wait", cwd=repo, env={"HF_TOKEN": "again"})
    assert proc.returncode == 0, proc.stderr
    assert versions(proc.stdout) == ["VERSION again"]


def test_prune_deletes_the_snapshots_no_kept_run_uses(
    repo: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _first_run(repo)
    (repo / "helper.py").write_text("V = 2\n")
    proc = distspec(
        "run",
        "-cfg",
        "snapshot=on,snapshot_dirty=allow",
        "--wait",
        "dist.ddp",
        "-j",
        "1x1",
        "--script",
        "train.py",
        cwd=repo,
    )
    assert proc.returncode == 0
    second = proc.stdout.splitlines()[0]
    trees = state_dir / "snapshots" / "trees"
    assert len([n for n in os.listdir(trees) if not n.startswith(".")]) == 2
    from distspec.cli import prune

    monkeypatch.setattr(prune, "SNAPSHOT_GRACE", 0.0)
    # Delete the first run's folder by hand: its tree is no longer recorded by any run.
    shutil.rmtree(state_dir / "local_cwd" / first.rsplit("/", 1)[1])
    removed, freed = prune.collect_snapshots(str(state_dir))
    assert len(removed) == 1 and freed > 0
    left = [n for n in os.listdir(trees) if not n.startswith(".")]
    record = json.loads(distspec("describe", "--json", second, cwd=repo).stdout)["provenance"]
    assert left == [record["snapshot"]["id"]]


def test_dry_run_files_for_submitting_by_hand_come_with_their_snapshot(
    repo: Path, tmp_path: Path, state_dir: Path
) -> None:
    out = tmp_path / "out"
    proc = distspec(
        "run",
        "-s",
        "slurm",
        "--dryrun",
        "-o",
        str(out),
        "dist.ddp",
        "--script",
        "train.py",
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr
    trees = [n for n in os.listdir(state_dir / "snapshots" / "trees") if not n.startswith(".")]
    assert (
        len(trees) == 1 and f"code snapshot {state_dir}/snapshots/trees/{trees[0]}" in proc.stderr
    )
    script = next(out.glob("*.sbatch")).read_text()
    assert f"/snapshots/trees/{trees[0]}/train.py" in script
    assert (state_dir / "snapshots" / "trees" / trees[0] / "train.py").read_text() == TRAIN
