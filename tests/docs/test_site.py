"""The documentation site builds with ``mkdocs build --strict``: no warning at all.

A broken link between pages, a page missing from the navigation, an unknown anchor or a
docstring mkdocstrings cannot render is a warning, and ``--strict`` turns any warning
into a failed build. The second test shows the repository's configuration does fail on
each of those, on a small site that inherits it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="mkdocs not installed: pip install -e '.[docs]'")
pytest.importorskip("material", reason="mkdocs-material not installed: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings", reason="mkdocstrings not installed: pip install -e '.[docs]'")

REPO = Path(__file__).resolve().parents[2]


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life banner
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        cwd=config.parent,
        env=env,
        timeout=280,
        check=False,
    )


@pytest.mark.slow
def test_site_builds_strict_without_warnings(tmp_path: Path) -> None:
    proc = mkdocs_build(REPO / "mkdocs.yml", tmp_path / "site")
    output = proc.stdout + proc.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line or "ERROR" in line]
    assert proc.returncode == 0 and not warnings, output[-4000:]
    site = tmp_path / "site"
    for page in ("index.html", "reference/cli/index.html", "reference/api/index.html"):
        assert (site / page).is_file(), page
    # The Python API page really rendered the docstrings (mkdocstrings ran).
    api = (site / "reference/api/index.html").read_text()
    assert "distspec.runner.Runner" in api and "run_component" in api


def _small_site(tmp_path: Path, index: str, extra: dict[str, str] | None = None) -> Path:
    """A site that inherits the repository's mkdocs.yml, with its own pages and nav."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(index)
    nav = ["  - index.md"]
    for name, text in (extra or {}).items():
        (docs / name).write_text(text)
    (docs / "other.md").write_text("# Other\n\n## A section\n\nText.\n")
    nav.append("  - other.md")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        # hooks: the site's pictures hook draws docs/data, which the small site has not.
        f"INHERIT: {REPO / 'mkdocs.yml'}\nsite_name: small\ndocs_dir: docs\nhooks: []\nnav:\n"
        + "\n".join(nav)
        + "\n"
    )
    return config


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "index", "extra", "expected"),
    [
        ("good", "# Home\n\n[other](other.md#a-section)\n", None, None),
        ("broken link", "# Home\n\n[gone](missing.md)\n", None, "missing.md"),
        ("unknown anchor", "# Home\n\n[other](other.md#no-such)\n", None, "no-such"),
        ("page not in nav", "# Home\n\n[other](other.md)\n", {"orphan.md": "# O\n"}, "orphan.md"),
    ],
)
def test_strict_build_fails_on_each_kind_of_mistake(
    tmp_path: Path, case: str, index: str, extra: dict[str, str] | None, expected: str | None
) -> None:
    proc = mkdocs_build(_small_site(tmp_path, index, extra), tmp_path / "site")
    output = proc.stdout + proc.stderr
    if expected is None:
        assert proc.returncode == 0, output[-3000:]
        assert "WARNING" not in output
    else:
        assert proc.returncode != 0, f"{case}: the strict build passed\n{output[-3000:]}"
        assert expected in output, output[-3000:]
