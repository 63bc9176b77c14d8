"""``python -m distspec``."""

from __future__ import annotations

import sys

from distspec.cli.main import main

sys.exit(main())
