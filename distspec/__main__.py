"""``python -m distspec``."""

from __future__ import annotations

from distspec.cli.main import run

run()
