"""``python -m distspec``."""

from __future__ import annotations

import distspec

# As for the console script: a Ctrl-C while the CLI imports is one line, exit 130.
distspec._quiet_startup_interrupts()

from distspec.cli.main import run  # noqa: E402

run()
