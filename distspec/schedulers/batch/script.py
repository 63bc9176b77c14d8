"""The script fragments Slurm's and PBS's batch scripts share: pure text.

Each fragment writes part of the job folder (see :mod:`distspec.schedulers.batch`):
``distspec_task`` runs one replica and records its host and exit code, the attempt
loop reruns a failed attempt and writes ``attempt``, and the wait and kill functions
stop the other launchers when one fails. Besides those, the checks and names both
backends' compile steps use. Nothing here runs a command or reads the environment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from distspec.errors import CompileError
from distspec.schedulers.shell import MacroValues, ShellExpr, shell_join, shell_word
from distspec.specs.app import NAME_CHARS, Role
from distspec.specs.faults import launcher
from distspec.specs.placeholders import Var
from distspec.torchrun import TORCHRUN
from distspec.torchrun_output import worker_exec_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.schedulers.api import Points

__all__ = [
    "KILL_FUNCTION",
    "START",
    "STAY",
    "SWEEP_PREFIX",
    "WAIT_FUNCTIONS",
    "attempt_loop",
    "check_job_dir",
    "check_rank0_host",
    "cpus_per_node",
    "point_exports",
    "points_file",
    "rank0_host_word",
    "role_function",
    "safe_app_id",
    "sweep_values",
    "task_function",
]


def safe_app_id(app_id: str) -> str:
    """``app_id`` as used in file names: anything but ``[A-Za-z0-9_.-]`` becomes ``_``."""
    return "".join(c if c in NAME_CHARS else "_" for c in app_id)


def check_job_dir(job_dir: str, scheduler: str) -> None:
    """Raise CompileError unless ``job_dir`` is absolute (logs are read from any cwd)."""
    if not job_dir.startswith("/"):
        raise CompileError(
            scheduler, f"job_dir={job_dir!r} must be an absolute path (logs are read from any cwd)"
        )


def cpus_per_node(role: Role) -> int | None:
    """The CPUs to request per node: the role's own (``--cpu``, ``-h``), else, for a
    torchrun role without GPUs, one per process it starts (``-j NxM``: M). Without it
    the cluster's default applies, often one CPU per task, and where cores are
    confined (task/affinity, cgroups) all M processes would share that one core.
    None: request nothing."""
    res = role.resource
    if res.cpu:
        return res.cpu
    if res.gpu:
        return None
    from distspec.torchrun import nproc_per_node

    return nproc_per_node(role.entrypoint, role.args)


def check_rank0_host(template: str, scheduler: str) -> None:
    """Raise CompileError unless the ``rank0_host`` option holds ``{host}`` exactly once."""
    if template.count("{host}") != 1:
        raise CompileError(
            scheduler, f"rank0_host={template!r}: the template must contain {{host}} once"
        )


def rank0_host_word(template: str, host: str) -> str:
    """The rendezvous host as one shell word: ``template`` (see :func:`check_rank0_host`)
    with ``{host}`` replaced by ``host``, a runtime expression already in double quotes."""
    prefix, _, suffix = template.partition("{host}")
    return (
        (shell_word(prefix, {}) if prefix else "")
        + host
        + (shell_word(suffix, {}) if suffix else "")
    )


#: Set in a role's env when it runs from a code snapshot (:mod:`distspec.snapshot.policy`).
_SNAPSHOT_ENV = "DISTSPEC_SNAPSHOT"


def env_exports(role: Role, values: MacroValues) -> list[str]:
    """``export KEY=VALUE`` for the role's env; when it runs from a code snapshot, then a
    check that this node sees it (one clear line and exit 2 where the snapshot store is
    on a disk only the submitting machine has). No single quote: the lines may go into
    a single-quoted ``bash -c`` word. Before a torchrun command, the line that starts
    its workers with their stderr joined to their stdout
    (:func:`~distspec.torchrun_output.worker_exec_line`)."""
    lines = [f"export {key}={shell_word(value, values)}" for key, value in role.env.items()]
    if _SNAPSHOT_ENV in role.env:
        lines.append(
            f'[ -d "${_SNAPSHOT_ENV}" ] || {{ echo "distspec: the code snapshot '
            f"${_SNAPSHOT_ENV} is not on $(hostname): keep the snapshot store (the state "
            'dir, or -cfg job_dir) on a file system every node mounts" >&2; exit 2; }'
        )
    if launcher(role) == TORCHRUN and "PYTHON_EXEC" not in role.env:
        lines.append(worker_exec_line())
    return lines


def role_function(
    func: str,
    role: Role,
    values: MacroValues,
    contained: Callable[[list[str], str], list[str]] | None = None,
) -> str:
    """A shell function ``func`` that exports the role's env and runs its command, with
    each macro mapped through ``values``. ``contained``, given the env lines and the
    command, returns the lines that run it in a container instead."""
    lines = [f"{func}() {{  # role {role.name}"]
    env = env_exports(role, values)
    command = shell_join([role.entrypoint, *role.args], values)
    body = contained(env, command) if contained is not None else [*env, command]
    lines.extend(f"  {line}" for line in body)
    lines.append("}")
    return "\n".join(lines) + "\n"


def task_function(
    *,
    base: str,
    host: str,
    run: Sequence[str],
    setup: Sequence[str] = (),
    attempts: bool = True,
) -> str:
    """``distspec_task``: runs one replica and writes its ``.host`` and ``.exit`` files.

    Args:
        base: shell expression of ``<folder>/<role>-<i>`` (without suffix).
        host: command that prints the host's name.
        run: lines that run the replica; the last one's status is its exit code.
        setup: lines before anything is written (they may ``return`` early).
        attempts: whether the script retries (:func:`attempt_loop`): then a task of
            a stopped attempt must not write into the next attempt's files.
    """
    body = [
        *setup,
        f"local base={base}",
        STAY,
        *(['local attempt=$(< "$DISTSPEC_JOB_DIR/attempt")'] if attempts else []),
        START,
        f'{host} > "$base.host"',
        *run,
        "local code=$?",
    ]
    if attempts:
        body += [
            "# A task of a stopped attempt that outlived its launcher (pbsdsh leaves the",
            "# remote ones running) must not write into the next attempt's files.",
            '[[ $(< "$DISTSPEC_JOB_DIR/attempt") == "$attempt" ]] && echo "$code" > "$base.exit"',
        ]
    else:
        body.append('echo "$code" > "$base.exit"')
    body.append('return "$code"')
    return "distspec_task() {\n" + "".join(f"  {line}\n" for line in body) + "}\n"


STAY = 'trap "exit 143" TERM  # after the launcher ends: proctrack/linuxproc loses orphans'
"""The line a replica's shell runs first. On SIGTERM (scancel, --kill-on-bad-exit, a
stopped attempt) a shell without a trap dies at once, and the launcher it waits on
(torchrun, which can sit up to 300 s in its exit barrier, deaf to signals) is
re-parented to init, where ``proctrack/linuxproc`` no longer sees it: it outlives the
job and keeps the rendezvous port. A trapped signal waits for the foreground command,
so the shell stays its parent and the step's SIGKILL reaches both; then it exits 143
without recording an exit code, as before (a stopped replica is not a failed one). No
single quote in it: it goes inside single-quoted task bodies."""

START = 'stat -c %s "$base.log" > "$base.start" 2> /dev/null  # where this run starts in the log'
"""The line a replica runs first: its log's size, so that what is read back about the
replica (torchrun's report) is this attempt's, not an earlier one's in the same log."""

KILL_FUNCTION = """\
# distspec_kill PID...: SIGTERM to each launcher's process group (job control is on
# while the launchers start, so each leads one), which holds what it started on this
# host; to the launcher alone where it leads none.
distspec_kill() {
  local pid
  for pid in "$@"; do
    kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null
  done
}
"""
"""Shell function ``distspec_kill``, which the scripts' TERM traps use too."""

WAIT_FUNCTIONS = (
    """\
# distspec_wait PID...: waits for the launchers started in the background and returns
# 0, or the first failure's exit code after stopping the others. Each status comes from
# `wait PID`, which bash keeps even after it reaped the process. `wait -n` only wakes
# the loop (a child ended, or a trapped signal came): its own status may be that of a
# launcher of an earlier attempt, since `wait` with no operand does not consume a
# finished job, and counting that one would end the wait before this attempt's tasks.
distspec_wait() {
  local -a left=("$@") running
  local i pid code woke
  while (( ${#left[@]} > 0 )); do
    wait -n
    woke=$?
    running=()
    for ((i = 0; i < ${#left[@]}; i++)); do
      pid=${left[i]}
      # kill -0 fails once bash has reaped the launcher; 127: bash has no child left.
      if (( woke != 127 )) && kill -0 "$pid" 2> /dev/null; then
        running+=("$pid")
        continue
      fi
      wait "$pid"
      code=$?
      if (( code != 0 )); then
        distspec_stop "${running[@]}" "${left[@]:i+1}"
        return "$code"
      fi
    done
    left=("${running[@]}")
  done
  return 0
}
"""
    + "\n"
    + KILL_FUNCTION
    + "\n"
    + """\
# distspec_stop PID...: kills the launchers and waits for each, so that none is left
# over, to write into the next attempt's files or to be counted by its wait.
distspec_stop() {
  distspec_kill "$@"
  local pid
  for pid in "$@"; do
    wait "$pid" 2> /dev/null
  done
}
"""
)
"""Shell functions ``distspec_wait``, ``distspec_kill`` and ``distspec_stop`` that
:func:`attempt_loop` needs; a script defines them before the loop."""


def attempt_loop(
    launch: Sequence[str],
    retries: int,
    *,
    check: Sequence[str] = (),
    spent: str = "distspec_attempt",
) -> list[str]:
    """The script's end: a loop of attempts, then ``exit`` with the last one's code.

    Each attempt clears the previous attempt's ``.exit`` and ``.host`` files, writes
    its number to ``attempt``, runs ``launch`` with job control on (each background
    launcher gets a process group of its own, so that stopping it stops what it
    started on this host), waits for the launchers with ``distspec_wait`` (see
    :data:`WAIT_FUNCTIONS`: the first failure stops the others) and runs ``check``.
    A failure is retried ``retries`` times; before each retry the loop writes
    ``restart_reason`` (``hang`` when the hang watchdog's ``hang/hung`` is newer than
    the attempt's ``attempt`` file, else ``failed-rank``) for
    :func:`distspec.runtime.resume.restart_reason`.

    Args:
        launch: lines that start the launchers in the background, each followed by
            ``distspec_pids+=($!)``; job control leaves their stdin alone, so each
            one reads ``< /dev/null``.
        retries: how often a failed attempt is rerun.
        check: lines after the wait, which may change ``distspec_code``, the
            attempt's exit code.
        spent: the arithmetic expression of the retries spent so far (Slurm's runs
            on spare nodes are attempts that are not retries).

    All lines are indented by two.
    """
    return [
        "distspec_attempt=0",
        "while :; do",
        '  rm -f "$DISTSPEC_JOB_DIR"/*.{exit,host,start}',
        '  echo "$distspec_attempt" > "$DISTSPEC_JOB_DIR/attempt"',
        "  distspec_pids=()",
        "  set -m",
        *launch,
        "  set +m",
        '  distspec_wait "${distspec_pids[@]}"',
        "  distspec_code=$?",
        *check,
        f"  (( distspec_code == 0 || {spent} >= {retries} )) && break",
        "  distspec_attempt=$((distspec_attempt + 1))",
        "  # Why the next attempt runs (distspec.runtime's restart_reason): the hang watchdog's",
        "  # mark, if it ended this attempt, else a failed rank.",
        '  if [[ "$DISTSPEC_JOB_DIR/hang/hung" -nt "$DISTSPEC_JOB_DIR/attempt" ]]; then',
        '    echo hang > "$DISTSPEC_JOB_DIR/restart_reason"',
        "  else",
        '    echo failed-rank > "$DISTSPEC_JOB_DIR/restart_reason"',
        "  fi",
        f'  echo "distspec: attempt failed (exit code $distspec_code); retry $(({spent})) of {retries}" >&2'
        if spent != "distspec_attempt"
        else f'  echo "distspec: attempt failed (exit code $distspec_code); retry $distspec_attempt of {retries}" >&2',
        "done",
        'exit "$distspec_code"',
    ]


# -- job arrays: the points file -------------------------------------------------------

#: A sweep variable ``name`` reaches an array task as ``$DISTSPEC_SWEEP_<name>``;
#: ``$DISTSPEC_SWEEP_INDEX`` is the point's sweep-wide index.
SWEEP_PREFIX = "DISTSPEC_SWEEP_"

_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: Characters ``$'...'`` writes as an escape.
_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _value_word(value: str, scheduler: str) -> str:
    """``value`` as one shell word on one line: ``shlex`` quoting, or ``$'...'`` (bash's
    C-style quoting) where it holds a line break or another control character."""
    import shlex

    if "\x00" in value:
        raise CompileError(
            scheduler, f"sweep value {value!r}: an environment variable cannot hold a NUL byte"
        )
    if not any(c < " " or c == "\x7f" for c in value):
        return shlex.quote(value)
    out = []
    for c in value:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif c < " " or c == "\x7f":
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def points_file(points: Points, scheduler: str) -> str:
    r"""The points file of an array job: line ``k + 1`` for array task ``k``, each a
    series of ``NAME=value`` shell words (``DISTSPEC_SWEEP_INDEX``, then
    ``DISTSPEC_SWEEP_<name>`` per variable), which the script ``export``s
    (:func:`point_exports`). A value may hold anything but a NUL byte: quotes, ``$``,
    spaces, line breaks (written as ``$'\n'``).

    Raises:
        CompileError: a variable name that is no environment variable name, a point
            with the wrong number of values, or a NUL byte.
    """
    for name in points.names:
        if not re.fullmatch(_ENV_NAME, name):
            raise CompileError(scheduler, f"sweep variable {name!r} is not a valid name")
    lines = []
    for k, values in enumerate(points.values):
        if len(values) != len(points.names):
            raise CompileError(
                scheduler,
                f"sweep point {points.first + k} has {len(values)} values for "
                f"{len(points.names)} variables",
            )
        words = [f"{SWEEP_PREFIX}INDEX={points.first + k}"]
        words += [
            f"{SWEEP_PREFIX}{name}={_value_word(value, scheduler)}"
            for name, value in zip(points.names, values, strict=True)
        ]
        lines.append(" ".join(words) + "\n")
    return "".join(lines)


def point_exports(path: str, task: str) -> list[str]:
    """Script lines that export this array task's point: line ``task + 1`` of the
    points file ``path`` (read with bash's ``mapfile``, no other program), ``eval``-ed
    as ``export`` words (our own quoting, :func:`points_file`). ``task`` is the
    shell variable of the array task index (``SLURM_ARRAY_TASK_ID``); a task without
    a line ends the job with exit code 2 and says why."""
    file = shell_word(path, {})
    return [
        f"# This array task's sweep point: line ${task} + 1 of the points file, as",
        f"# {SWEEP_PREFIX}* variables (exported: every process the job starts inherits them).",
        f'mapfile -t -s "${task}" -n 1 distspec_point < {file}',
        "[[ -n ${distspec_point[0]:-} ]] || {",
        f'  echo "distspec: no sweep point for array task ${task} in "{file} >&2',
        "  exit 2",
        "}",
        'eval "export ${distspec_point[0]}"',
    ]


def sweep_values(points: Points | None) -> MacroValues:
    """Each sweep variable of ``points`` to the runtime value an array task reads:
    ``{{name}}`` becomes ``"$DISTSPEC_SWEEP_<name>"``. Empty without points."""
    if points is None:
        return {}
    return {Var(name): ShellExpr(f"${SWEEP_PREFIX}{name}") for name in points.names}
