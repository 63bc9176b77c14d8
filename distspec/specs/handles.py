"""``scheduler://session/app_id``: the one string that finds a submitted app."""

from __future__ import annotations

import re

from distspec.errors import HandleError
from distspec.frozen import frozen

__all__ = ["AppHandle"]

_MAX_APP_ID = 253

_HANDLE = re.compile(r"^(?P<scheduler>[A-Za-z0-9_.-]+)://(?P<session>[^/]*)/(?P<app_id>[^/\s]+)$")


@frozen
class AppHandle:
    """Which scheduler, which session, which app."""

    scheduler: str
    session: str
    app_id: str

    @classmethod
    def parse(cls, text: str) -> AppHandle:
        """Parse ``scheduler://session/app_id`` (the session may be empty)."""
        match = _HANDLE.match(text.strip())
        if match is None:
            raise HandleError(
                f"invalid app handle {text[:120]!r}: expected SCHEDULER://SESSION/APP_ID, "
                "e.g. local_cwd://distspec/ddp-1a2b3c"
            )
        if len(match["app_id"]) > _MAX_APP_ID:
            # No backend makes ids this long (a local run dir name is at most 255
            # bytes, a Kubernetes name 253); looking one up would only fail obscurely.
            raise HandleError(
                f"invalid app handle {text[:60]!r}...: the app id is {len(match['app_id'])} "
                f"characters; no scheduler makes ids longer than {_MAX_APP_ID}"
            )
        return cls(**match.groupdict())

    def format(self) -> str:
        """The handle as text, ``scheduler://session/app_id`` (what :meth:`parse` reads)."""
        return f"{self.scheduler}://{self.session}/{self.app_id}"

    def __str__(self) -> str:
        return self.format()
