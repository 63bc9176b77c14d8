"""The TorchX migration corpus: TorchX's own invocations, each the same job or refused.

``tests/torchx_corpus/corpus.yaml`` holds TorchX invocations taken from TorchX's docs,
docstrings and tests, each with its source and the expected distspec outcome: the
job (nodes, processes per node, GPUs, CPUs, memory, torchrun flags, the program and
its arguments, env; see ``torchx_corpus/normalize.py``) or a refusal whose message
must match. The expected jobs are data, checked against TorchX (nightly 2026.10.26)
by ``torchx_corpus/torchx_side.py``; TorchX is not a test dependency.
``test_corpus_agrees_with_torchx`` re-checks that data against TorchX when
``.bench/torchx-venv`` exists and skips (saying so) when it does not.

Each entry is bound in-process with distspec's loader and binder, then compiled
(``Runner.dryrun``) for the entry's scheduler: a refusal at either step counts.
Entries marked ``pending`` wait for another change (issue 14 part 1) and are
strict xfails: they fail the suite once that change lands, so the marker goes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from distspec.components.binder import bind
from distspec.components.loader import load
from distspec.config import Config
from distspec.errors import UsageError
from distspec.runner import Runner

HERE = Path(__file__).parent / "torchx_corpus"
sys.path.insert(0, str(HERE))
from corpus import load_entries, split_run_args  # noqa: E402
from normalize import normalize  # noqa: E402

sys.path.remove(str(HERE))

CORPUS = HERE / "corpus.yaml"
ENTRIES = load_entries(str(CORPUS))
ROOT = Path(__file__).resolve().parents[1]
TORCHX_PY = ROOT / ".bench" / "torchx-venv" / "bin" / "python"


def _param(entry: dict[str, Any]) -> Any:
    marks = []
    if entry.get("pending"):
        marks.append(pytest.mark.xfail(strict=True, reason=f"pending: {entry['pending']}"))
    return pytest.param(entry, id=entry["id"], marks=marks)


def outcome(entry: dict[str, Any], state_dir: Path) -> dict[str, Any]:
    """``{"roles": [...]}`` for a job distspec builds and compiles, else ``{"refused": msg}``."""
    scheduler, cfg, component, args = split_run_args(entry.get("distspec", entry["torchx"]))
    runner = Runner(config=Config(env={"XDG_STATE_HOME": str(state_dir)}))
    try:
        app = bind(load(component), args, scheduler=scheduler, prog=f"distspec run {component}")
        runner.dryrun(app, scheduler, cfg)
    except UsageError as e:
        return {"refused": str(e)}
    return {"roles": normalize(app)}


def test_corpus_is_large_and_sourced() -> None:
    assert len(ENTRIES) >= 60
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids))
    for e in ENTRIES:
        assert e.get("source"), e["id"]
        assert ("roles" in e["expect"]) != ("refuse" in e["expect"]), e["id"]
        if "refuse" in e["expect"]:
            assert e["expect"].get("reason"), f"{e['id']}: a refusal states its reason"


@pytest.mark.parametrize("entry", [_param(e) for e in ENTRIES])
def test_entry(entry: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # component files, scripts: nothing of the checkout's
    for name in ("main.py", "foo.py", "dist_app.py", "my_app.py"):
        (tmp_path / name).write_text("")
    got = outcome(entry, tmp_path / "state")
    expect = entry["expect"]
    if "refuse" in expect:
        assert "refused" in got, f"built a job instead of refusing: {got['roles']}"
        assert re.search(expect["refuse"], got["refused"]), got["refused"]
    else:
        assert "refused" not in got, got.get("refused")
        assert _unset_as_expected(entry, got["roles"], expect["roles"]) == expect["roles"]


_EXPLICIT = {"cpu": ("--cpu", "-h"), "mem_mb": ("--memMB", "--mem_mb", "-h")}


def _unset_as_expected(
    entry: dict[str, Any], got: list[dict[str, Any]], expect: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """distspec leaves cpu/mem_mb unset (None: the scheduler's default) where the user
    asked for none; that stands for TorchX's component default. Asked-for values
    must match exactly."""
    words = set(entry["torchx"])
    out = []
    for mine, theirs in zip(got, expect, strict=False):
        mine = dict(mine)
        for key, flags in _EXPLICIT.items():
            if mine[key] is None and not words.intersection(flags):
                mine[key] = theirs[key]
        out.append(mine)
    return out


@pytest.mark.skipif(
    not TORCHX_PY.exists(),
    reason="no .bench/torchx-venv (build it: python3 -m venv .bench/torchx-venv && "
    ".bench/torchx-venv/bin/pip install torchx); the corpus data stands alone without it",
)
def test_corpus_agrees_with_torchx() -> None:
    """Every entry expecting a job expects what TorchX itself builds (or what the entry's
    ``torchx_differs`` says on purpose); TorchX runs in its own venv."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [str(TORCHX_PY), str(HERE / "torchx_side.py"), str(CORPUS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    torchx = json.loads(proc.stdout)
    for entry in ENTRIES:
        expect, got = entry["expect"], torchx[entry["id"]]
        differs = entry.get("torchx_differs")
        if differs is not None:
            assert got == differs["torchx"], entry["id"]
        elif "roles" in expect:
            assert got == expect["roles"], entry["id"]
        else:
            # refused by distspec: TorchX refuses too unless the entry says why not
            assert "error" in got or entry["expect"].get("torchx_builds"), entry["id"]


CLI_SAMPLE = [
    "docs-torchrun-local-2x4",
    "issue-ddp-debug-True-then-flags",
    "slurm-echo-3-replicas",
    "k8s-ddp-image-2x2",
    "dist-spmd-h-gpu.large-j2",
    "slurm-ddp-image-container",
    "utils-binary",
]


@pytest.mark.parametrize(
    "entry", [e for e in ENTRIES if e["id"] in CLI_SAMPLE], ids=lambda e: e["id"]
)
def test_entry_through_the_cli(entry: dict[str, Any], tmp_path: Path) -> None:
    """A sample of the corpus through `distspec run --dryrun --json WORDS` (a subprocess):
    the CLI's own parsing (-s, --scheduler_args, -cfg) gives the in-process outcome."""
    from distspec.specs.app import AppDef

    (tmp_path / "main.py").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "TORCHX"))}
    env.update(HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    words = entry.get("distspec", entry["torchx"])
    proc = subprocess.run(
        [sys.executable, "-m", "distspec", "run", "--dryrun", "--json", *words],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    expect = entry["expect"]
    if "refuse" in expect:
        assert proc.returncode == 2, proc.stdout
        assert re.search(expect["refuse"], proc.stderr), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr
        app = AppDef.from_dict(json.loads(proc.stdout)["app"])
        got = _unset_as_expected(entry, normalize(app), expect["roles"])
        assert got == expect["roles"]
