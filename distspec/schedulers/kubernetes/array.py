"""Sweeps on Kubernetes: the points of a sweep as the indexes of one Indexed Job.

A sweep whose every point is one pod (one role, one replica, flavour ``job``) goes
out as one ConfigMap and one Indexed Job (:func:`build_array`); anything else is
refused here (the Runner then submits one Job per point):

- the ConfigMap ``<id>-points`` holds the points file (:func:`points_text`): line
  ``k + 1`` for index ``k``, ``DISTSPEC_SWEEP_INDEX=<sweep-wide index>`` and
  ``DISTSPEC_SWEEP_<name>=<value>`` shell words; every pod sees it at
  ``$DISTSPEC_SWEEP_FILE``;
- the Job has ``completions`` = the point count and ``parallelism`` =
  ``--max-parallel`` (or the point count); each pod's command is a POSIX ``sh -c``
  script (:func:`script`) that picks its line by ``$JOB_COMPLETION_INDEX``,
  ``export``-s it, and ``exec``-s the role's command, each ``{{name}}`` read from
  ``"$DISTSPEC_SWEEP_<name>"``;
- in point ``k``, ``${replica_id}`` is 0, ``${num_replicas}`` 1, ``${rank0_host}``
  ``localhost`` (the pod is its own rank 0) and ``${app_id}`` ``<id>-<k>``, so the
  points' ``$DISTSPEC_JOB_DIR`` folders (``<job_dir>/<id>-<k>``) differ.

Point ``k``'s app id is ``<namespace>:<id>:<k>`` (:func:`.names.point_id`).
Kubernetes cannot stop one index of a Job, so cancelling a point marks its line
cancelled (:func:`cancel_line`) and deletes its pod: the pod that replaces it reads
the mark and exits 2 at once, which fails that index alone (``FailIndex``).

Pure: no client, no I/O.
"""

from __future__ import annotations

import re
import shlex

from distspec.errors import ArrayTooLarge, CompileError
from distspec.schedulers.kubernetes.expansion import k8s_escape
from distspec.schedulers.kubernetes.manifest import POINTS_FILE_ENV, sweep_manifests
from distspec.schedulers.kubernetes.names import NAME, k8s_id
from distspec.schedulers.kubernetes.options import Flavor, KubernetesOptions
from distspec.schedulers.shell import ShellExpr, shell_join, shell_word
from distspec.specs import macros, placeholders
from distspec.specs.macros import Macro
from distspec.specs.placeholders import Var

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.schedulers.api import Points
    from distspec.specs.app import AppDef, Role

__all__ = [
    "CANCELLED",
    "CANCELLED_MESSAGE",
    "MAX_POINTS",
    "MAX_POINTS_TEXT",
    "SWEEP_PREFIX",
    "build_array",
    "cancel_line",
    "check_array",
    "points_text",
    "script",
]

#: A sweep variable ``name`` reaches a point as ``$DISTSPEC_SWEEP_<name>``;
#: ``$DISTSPEC_SWEEP_INDEX`` is the point's sweep-wide index.
SWEEP_PREFIX = "DISTSPEC_SWEEP_"
#: The start of a cancelled point's line (:func:`cancel_line`).
CANCELLED = f"{SWEEP_PREFIX}CANCELLED=1 "
#: What the pod of a cancelled point says as it exits (its termination message).
CANCELLED_MESSAGE = "was cancelled"
#: The API server's limit on the indexes of a Job with a per-index backoff limit
#: (above it, parallelism and maxFailedIndexes are capped at 10,000).
MAX_POINTS = 100_000
#: A ConfigMap holds at most 1 MiB of data; what is left is for its metadata.
MAX_POINTS_TEXT = 1_000_000

_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_LOCALHOST = "localhost"


def _fail(message: str) -> CompileError:
    return CompileError(NAME, message)


def check_array(app: AppDef, opts: KubernetesOptions) -> Role:
    """The app's one role, when its points can be the indexes of one Indexed Job.

    Raises:
        CompileError: flavour jobset/volcano, several roles, or several pods per point.
    """
    why = ""
    if opts.flavor is not Flavor.JOB:
        why = f"flavor={opts.flavor.value} runs each point as a {opts.flavor.value} of its own"
    elif len(app.roles) != 1:
        why = f"app {app.name!r} has {len(app.roles)} roles"
    else:
        (role,) = app.roles
        if role.num_replicas != 1 or role.min_replicas not in (None, 1):
            nodes = f"{role.min_replicas}:{role.num_replicas}" if role.elastic else ""
            why = f"role {role.name!r} runs {nodes or role.num_replicas} pods per point"
    if why:
        raise _fail(
            f"one Indexed Job runs sweep points of one pod each, and {why}: "
            "a sweep of multi-pod points runs as one Job per point"
        )
    return app.roles[0]


def points_text(points: Points) -> str:
    r"""The points file: line ``k + 1`` for point ``points.first + k``, a series of
    ``NAME=value`` shell words (``DISTSPEC_SWEEP_INDEX``, then ``DISTSPEC_SWEEP_<name>``
    per variable) that :func:`script` evaluates as ``export`` words. A value may hold
    anything but a NUL byte; a line break is written as ``"$nl"`` (the script's
    variable holding one), since every point is one line.

    Raises:
        CompileError: no points, a variable name that is no environment variable name,
            a point with the wrong number of values, a NUL byte, or a text over
            :data:`MAX_POINTS_TEXT` bytes.
    """
    if not points.values:
        raise _fail("a sweep array needs at least one point")
    for name in points.names:
        if not re.fullmatch(_ENV_NAME, name):
            raise _fail(f"sweep variable {name!r} is not a valid name")
    lines = []
    for k, values in enumerate(points.values):
        if len(values) != len(points.names):
            raise _fail(
                f"sweep point {points.first + k} has {len(values)} values for "
                f"{len(points.names)} variables"
            )
        words = [f"{SWEEP_PREFIX}INDEX={points.first + k}"]
        words += [
            f"{SWEEP_PREFIX}{name}={_value_word(value)}"
            for name, value in zip(points.names, values, strict=True)
        ]
        lines.append(" ".join(words) + "\n")
    text = "".join(lines)
    size = len(text.encode())
    if size > MAX_POINTS_TEXT:
        raise ArrayTooLarge(
            NAME,
            f"the points of this array take {size:,} bytes, and a ConfigMap holds at most "
            f"{MAX_POINTS_TEXT:,}: use fewer points per array or shorter values",
        )
    return text


def _value_word(value: str) -> str:
    """``value`` as one shell word on one line (see :func:`points_text`)."""
    if "\x00" in value:
        raise _fail(f"sweep value {value!r}: an environment variable cannot hold a NUL byte")
    return '"$nl"'.join(shlex.quote(piece) for piece in value.split("\n"))


def cancel_line(text: str, index: int) -> str | None:
    """The points file ``text`` with index ``index``'s line marked cancelled, or None
    when it is already marked (or has no such line)."""
    lines = text.split("\n")
    if not 0 <= index < len(lines) - 1 or lines[index].startswith(CANCELLED):
        return None
    lines[index] = CANCELLED + lines[index]
    return "\n".join(lines)


def script(role: Role, kid: str, opts: KubernetesOptions, names: tuple[str, ...]) -> str:
    """The ``sh -c`` text of a point's container: pick line ``$JOB_COMPLETION_INDEX + 1``
    of ``$DISTSPEC_SWEEP_FILE``, ``export`` it, export the role's env values that need
    the point (a ``{{name}}`` or ``${app_id}`` in them), and ``exec`` the role's
    command. A missing or cancelled line ends the pod with exit code 2 (a command
    error, which fails the index without retries) and says why. POSIX ``sh``, no
    other program; escaped for Kubernetes' ``$(VAR)`` expansion."""
    values: dict[Macro | Var, str | ShellExpr] = {
        key: value for key, value in _macro_values(kid, opts).items()
    }
    values[Macro.APP_ID] = ShellExpr(f"{kid}-$JOB_COMPLETION_INDEX")
    values.update({Var(n): ShellExpr(f"${SWEEP_PREFIX}{n}") for n in names})
    lines = [
        "nl='\n'",
        'k=0; line=""',
        'while IFS= read -r line; do [ "$k" = "$JOB_COMPLETION_INDEX" ] && break; '
        f'k=$((k + 1)); line=""; done < "${POINTS_FILE_ENV}"',
        'case "$line" in',
        '"") echo "distspec: no sweep point for index $JOB_COMPLETION_INDEX in '
        f'${POINTS_FILE_ENV}" >&2; exit 2 ;;',
        f'{CANCELLED.strip()}*) echo "distspec: sweep point $JOB_COMPLETION_INDEX '
        f'{CANCELLED_MESSAGE}" >&2; exit 2 ;;',
        "esac",
        'eval "export $line"',
    ]
    lines += [f"export {k}={shell_word(v, values)}" for k, v in _point_env(role, kid, opts)]
    lines.append("exec " + shell_join([role.entrypoint, *role.args], values))
    return k8s_escape("\n".join(lines))


def _macro_values(kid: str, opts: KubernetesOptions) -> dict[Macro, str]:
    """Each macro in a point's pod: one pod, its own rank 0 (``${app_id}`` is set apart)."""
    return {
        Macro.APP_ID: kid,
        Macro.REPLICA_ID: "0",
        Macro.NUM_REPLICAS: "1",
        Macro.RANK0_HOST: _LOCALHOST,
        Macro.RDZV_PORT: str(opts.rdzv_port),
        Macro.IMG_ROOT: "",
    }


def _point_env(role: Role, kid: str, opts: KubernetesOptions) -> list[tuple[str, str]]:
    """The env values that differ between points (a ``{{name}}`` or ``${app_id}`` in
    them), which the script exports: Kubernetes sets the others."""
    env = dict(role.env)
    if opts.job_dir:
        env["DISTSPEC_JOB_DIR"] = opts.job_dir.rstrip("/") + "/" + Macro.APP_ID.token
    moved = [
        (k, v) for k, v in env.items() if placeholders.find(v) or Macro.APP_ID in macros.find(v)
    ]
    for k, _ in moved:
        if not re.fullmatch(_ENV_NAME, k):
            raise _fail(
                f"role {role.name!r}: env {k!r} holds a sweep variable or ${{app_id}}, which "
                "a sweep array sets from sh, and sh cannot set that name"
            )
    return moved


def build_array(
    app: AppDef, opts: KubernetesOptions, *, app_id: str, points: Points
) -> list[dict[str, Any]]:
    """The ConfigMap and the Indexed Job that run every point of ``points`` (see the
    module's docstring); ``app`` keeps its ``{{name}}`` placeholders.

    Raises:
        CompileError: what :func:`check_array` and :func:`points_text` refuse, more
            than :data:`MAX_POINTS` points, or a ``{{name}}`` that ``points`` does not
            define.
    """
    role = check_array(app, opts)
    used: set[str] = set()
    for text in (role.entrypoint, *role.args, *role.env.values()):
        used |= placeholders.find(text)
    missing = sorted(used - set(points.names))
    if missing:
        raise _fail(
            f"role {role.name!r} uses {', '.join('{{' + n + '}}' for n in missing)}, "
            "which the sweep does not define"
        )
    n = len(points.values)
    if points.max_parallel is not None and points.max_parallel < 1:
        raise _fail(f"max_parallel {points.max_parallel}: at least 1 point must run at a time")
    if n > MAX_POINTS:
        raise _fail(
            f"{n:,} points in one Indexed Job, and Kubernetes allows {MAX_POINTS:,}: "
            f"split the sweep into arrays of at most {MAX_POINTS:,}"
        )
    text = points_text(points)
    kid = k8s_id(app_id)
    docs = sweep_manifests(
        app,
        opts,
        app_id=app_id,
        values=_macro_values(kid, opts),
        points=text,
        completions=n,
        parallelism=min(points.max_parallel or n, n),
    )
    moved = {k for k, _ in _point_env(role, kid, opts)}
    (container,) = docs[1]["spec"]["template"]["spec"]["containers"]
    container["env"] = [e for e in container["env"] if e["name"] not in moved]
    container["command"] = ["sh", "-c", script(role, kid, opts, points.names)]
    container.pop("args", None)
    return docs
