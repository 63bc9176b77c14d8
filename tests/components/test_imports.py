"""The loader and binder stay light: heavy modules only when asked for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ["docstring_parser", "fsspec", "pyre_extensions", "torch", "yaml", "importlib.metadata"]

PROBE = """
import json, sys
import distspec.components.loader as loader, distspec.components.binder as binder
{body}
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def loaded_after(body: str) -> list[str]:
    code = PROBE.format(body=body, heavy=HEAVY)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_import_and_bind_ddp_stay_light() -> None:
    body = (
        "loader.builtin_names()\n"
        "app = binder.bind(loader.load('dist.ddp'), "
        "['-h', 'gpu.large', '-j', '2', '--script', 't.py', '--env', 'A=1', '--debug', 'true'])\n"
        "assert app.roles[0].num_replicas == 1\n"
        "binder.bind(loader.load('utils.copy'), ['--src', 'a', '--dst', 'b'])\n"
    )
    assert loaded_after(body) == []


def test_help_imports_docstring_parser() -> None:
    # the probe can see an import: --help is the one path that parses docstrings
    body = "binder.help_text(loader.load('dist.ddp'))\n"
    assert loaded_after(body) == ["docstring_parser"]
