"""The old home of ``local_cwd``'s scheduler, kept so that the import string
``distspec.schedulers.local_cwd:LocalScheduler`` (a plugin's or a user's) still works.
The backend lives in :mod:`distspec.schedulers.local`.
"""

from __future__ import annotations

from distspec.schedulers.local.scheduler import LocalOptions, LocalScheduler

__all__ = ["LocalOptions", "LocalScheduler"]
