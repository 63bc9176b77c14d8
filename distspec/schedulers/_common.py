"""What every backend needs, written once: macro mapping, shell quoting, capability
checks, log file names and log-line filtering. Backends never import each other.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from distspec.errors import CompileError
from distspec.frozen import frozen, frozendict, replace
from distspec.schedulers.api import Capabilities
from distspec.specs import macros
from distspec.specs.app import AppDef, Role
from distspec.specs.macros import Macro
from distspec.torchrun_output import RANK_PREFIX_ENV, RANK_PREFIX_TEMPLATE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from distspec.specs.mounts import Mount
    from distspec.specs.state import AppStatus

__all__ = [
    "MacroValues",
    "ShellExpr",
    "check_capabilities",
    "filter_lines",
    "log_file_name",
    "read_log_lines",
    "shell_join",
    "shell_word",
    "submit_env",
    "substitute_role",
    "with_location",
]


@frozen(kw_only=False)
class ShellExpr:
    """A value only known when the job runs: a shell expression that is safe inside
    double quotes, such as ``$SLURM_NODEID`` or ``$(hostname)``."""

    expr: str


#: Per backend: each macro to a literal string or to a runtime shell expression.
MacroValues = Mapping[Macro, "str | ShellExpr"]


def shell_word(text: str, values: MacroValues) -> str:
    """``text`` as one shell word: literal parts single-quoted, runtime macros double-quoted.

    Any string survives: quotes, ``$``, backticks, newlines, unicode, the empty string.
    """
    pieces: list[str] = []
    literal = ""
    for part in macros.split(text):
        value = values.get(part, part.token) if isinstance(part, Macro) else part
        if isinstance(value, ShellExpr):
            if literal:
                pieces.append(shlex.quote(literal))
                literal = ""
            pieces.append(f'"{value.expr}"')
        else:
            literal += value
    if literal or not pieces:
        pieces.append(shlex.quote(literal))
    return "".join(pieces)


def shell_join(argv: Sequence[str], values: MacroValues) -> str:
    """A command line whose words come back byte-identical through ``bash -c``."""
    return " ".join(shell_word(arg, values) for arg in argv)


def substitute_role(role: Role, values: Mapping[Macro, str]) -> Role:
    """``role`` with every macro in args and env replaced by a literal value."""
    return replace(
        role,
        args=tuple(macros.substitute(a, values) for a in role.args),
        env=frozendict({k: macros.substitute(v, values) for k, v in role.env.items()}),
    )


def used_macros(role: Role) -> set[Macro]:
    found: set[Macro] = set()
    for text in (role.entrypoint, *role.args, *role.env.values()):
        found |= macros.find(text)
    return found


def check_capabilities(app: AppDef, caps: Capabilities, scheduler: str) -> None:
    """Raise CompileError for anything in ``app`` that ``caps`` says the backend cannot do."""
    if len(app.roles) > 1 and not caps.multi_role:
        raise CompileError(
            scheduler, f"app {app.name!r} has {len(app.roles)} roles; this backend runs one"
        )
    for role in app.roles:
        missing = used_macros(role) - caps.macros
        if missing:
            names = ", ".join(sorted(m.token for m in missing))
            raise CompileError(
                scheduler, f"role {role.name!r} uses {names}, which this backend cannot provide"
            )
        if role.elastic and not caps.elastic:
            raise CompileError(
                scheduler,
                f"role {role.name!r} is elastic ({role.min_replicas}:{role.num_replicas}); "
                "this backend needs a fixed node count",
            )
        if caps.needs_image and not role.image:
            raise CompileError(scheduler, f"role {role.name!r} needs an image (--image)")
        for mount in role.mounts:
            kind = _mount_kind(mount)
            if kind not in caps.mount_kinds:
                raise CompileError(
                    scheduler, f"role {role.name!r}: {kind} mounts are not supported here"
                )


def _mount_kind(mount: Mount) -> str:
    from distspec.specs.mounts import BindMount, VolumeMount

    if isinstance(mount, BindMount):
        return "bind"
    if isinstance(mount, VolumeMount):
        return "volume"
    return "device"


def log_file_name(role: str, replica: int | str, stream: str = "log") -> str:
    """The one naming rule for per-replica log files: ``<role>-<replica>.<stream>``."""
    return f"{role}-{replica}.{stream}"


def filter_lines(
    lines: Iterable[str],
    *,
    regex: str | None = None,
    tail: int | None = None,
) -> Iterator[str]:
    """Keep lines matching ``regex`` (searched anywhere), then only the last ``tail`` of them.

    With ``tail`` the input must end (no following); without it lines stream through.
    """
    pattern = re.compile(regex) if regex else None
    selected = (line for line in lines if pattern is None or pattern.search(line))
    if tail is None:
        yield from selected
        return
    if tail <= 0:
        return
    from collections import deque

    yield from deque(selected, maxlen=tail)


def with_location(status: AppStatus, folder: str | None, native_id: str) -> AppStatus:
    """``status`` with the job folder, the scheduler's own id and each replica's log
    path (``<folder>/<role>-<replica>.log``) filled in, for the batch backends."""
    import os

    if not folder:
        return replace(status, native_id=native_id)
    roles = tuple(
        replace(
            role,
            replicas=tuple(
                replace(r, log=os.path.join(folder, log_file_name(r.role, r.id)))
                for r in role.replicas
            ),
        )
        for role in status.roles
    )
    return replace(status, roles=roles, location=str(folder), native_id=native_id)


def submit_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` (the submitter's environment) with the running Python's bin directory
    appended to ``PATH``, so a job that inherits it finds the ``torchrun`` of distspec's
    virtual environment even when that environment is not activated; a ``torchrun``
    earlier on ``PATH`` still wins. ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` is set to
    :data:`RANK_PREFIX_TEMPLATE` unless ``base`` sets it, so the job's logs say which
    global rank wrote each line."""
    import os
    import sys

    env = dict(base)
    env.setdefault(RANK_PREFIX_ENV, RANK_PREFIX_TEMPLATE)
    bin_dir = os.path.dirname(sys.executable)
    path = env.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        env["PATH"] = f"{path}{os.pathsep}{bin_dir}" if path else bin_dir
    return env


def read_log_lines(
    path: Path, *, follow: bool, ended: Callable[[], bool], poll: float = 0.5
) -> Iterator[str]:
    """The lines of a log file the job writes (without newlines).

    Without ``follow``: what is there now (nothing if the file does not exist yet).
    With ``follow``: wait for the file, then keep reading until ``ended()`` returns
    True, with one last pass for what was written before the end.
    """
    import time

    if not follow:
        if not path.exists():
            return
        with path.open(errors="replace") as f:
            for line in f:
                yield line.rstrip("\n")
        return
    while not path.exists():
        if ended():
            if path.exists():
                break
            return
        time.sleep(poll)
    with path.open(errors="replace") as f:
        partial = ""
        done = False
        while True:
            chunk = f.readline()
            if chunk:
                partial += chunk
                if partial.endswith("\n"):
                    yield partial.rstrip("\n")
                    partial = ""
                continue
            if done:
                if partial:
                    yield partial
                return
            if ended():
                done = True
                continue
            time.sleep(poll)
