"""Run option ``env_to_local`` of Slurm and PBS: the job's Python environment on each
node's local disk. The options, their compile-time checks and the script lines.

The batch script, before it starts the launchers, runs the environment's own Python
on :mod:`distspec.runtime.envcopy` (which this module never imports): fingerprint
the environment, check the local directory on every node, pack it once into
``<job_dir>/envs/<hash>.tar`` (reused by later jobs until it changes), broadcast it
(Slurm: ``sbcast``; PBS: each node reads the one tar from the shared folder, started
with ``pbsdsh`` or ``mpiexec``), unpack and fix it up on each node, then put
``<dir>/distspec-env-<job id>/bin`` first on ``PATH``, so ``torchrun`` and
``python`` are the copy's and so are the workers' ``sys.prefix``. Slurm: a keeper
step (unpack, then wait) removes the copies on SIGUSR1 from the EXIT trap or on
scancel's SIGTERM; PBS: the EXIT trap removes them.

Compile reads nothing but :data:`sys.prefix` (when ``env_prefix`` is unset) and asks
the file system two questions (is there a ``pyvenv.cfg``, a ``conda-meta``); the
environment is never walked here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from distspec.errors import CompileError
from distspec.frozen import frozen
from distspec.schedulers.shell import shell_word
from distspec.specs.faults import FaultOptions
from distspec.specs.options import option

__all__ = ["EnvCopyOptions", "env_prefix", "pbs_lines", "slurm_lines", "task_path_line"]

#: Characters ``env_to_local`` may have: it is written unquoted and removed with rm -rf.
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-+")


@frozen
class EnvCopyOptions(FaultOptions):
    """The ``env_to_local`` options of the batch backends (see docs/env-to-local.md)."""

    env_to_local: str | None = option(
        None,
        "Absolute node-local directory (it must exist on every node), e.g. /tmp: the job "
        "packs its Python environment once (cached in <job_dir>/envs), copies it there "
        "on every node and runs from the copy; removed at the job's end.",
    )
    env_prefix: str | None = option(
        None,
        "The environment env_to_local copies (a venv); the default is the submitting "
        "Python's (sys.prefix).",
    )


def _bad(scheduler: str, message: str) -> CompileError:
    return CompileError(scheduler, message)


def env_prefix(opts: EnvCopyOptions, scheduler: str) -> str | None:
    """The environment to copy (None without ``env_to_local``), after checking that it
    can be relocated: a venv (``pyvenv.cfg``). Two ``stat`` calls; nothing is walked.

    Raises:
        CompileError: a relative or odd ``env_to_local``, a conda environment, the
            system Python.
    """
    local = opts.env_to_local
    if local is None:
        if opts.env_prefix is not None:
            raise _bad(scheduler, "env_prefix is set without env_to_local=DIR")
        return None
    if not local.startswith("/") or not set(local) <= _PLAIN or "/../" in f"{local}/":
        raise _bad(
            scheduler,
            f"env_to_local={local!r}: expected an absolute node-local directory of letters, "
            "digits and _./-+ (e.g. /tmp)",
        )
    prefix = opts.env_prefix or sys.prefix
    if not prefix.startswith("/"):
        raise _bad(scheduler, f"env_prefix={prefix!r}: expected an absolute path")
    if os.path.isfile(os.path.join(prefix, "pyvenv.cfg")):
        return prefix.rstrip("/") or "/"
    if os.path.isdir(os.path.join(prefix, "conda-meta")):
        raise _bad(
            scheduler,
            f"env_to_local: {prefix} is a conda environment, which env_to_local cannot "
            "relocate; use a venv (python -m venv), or pack it with conda-pack yourself",
        )
    raise _bad(
        scheduler,
        f"env_to_local: {prefix} is not a virtual environment (no pyvenv.cfg), so it "
        "cannot be copied and run elsewhere; run distspec from a venv (python -m venv) "
        "or name one with -cfg env_prefix=/path/to/venv",
    )


def _header(prefix: str, local: str, cache: str, how: str) -> list[str]:
    python = shell_word(f"{prefix}/bin/python", {})
    return [
        f"# env_to_local: run from a copy of the Python environment {prefix} on each node's",
        f"# {local}: packed once into {cache} (reused until the environment changes), {how},",
        "# unpacked and fixed up there; removed at the end. A node that cannot take it fails",
        "# the job here, before anything is copied (exit code 2).",
        f"distspec_env_python={python}",
    ]


def _steps(
    prefix: str,
    cache: str,
    *,
    each: str,
    local: str,
    broadcast: list[str],
    unpack: Callable[[str], list[str]] | None = None,
) -> list[str]:
    """The lines after the header; ``each`` is the command that runs the arguments after
    it once on every node and fails when one of them does; ``unpack`` writes the lines
    that run the unpack command it is given on every node (default: ``each``)."""
    env = '"$distspec_env_python" -m distspec.runtime.envcopy'
    word = shell_word(prefix, {})
    timeline = '--timeline "$DISTSPEC_JOB_DIR/timeline.jsonl"'
    command = (
        f'{env} unpack "$distspec_env_tar_local" "$DISTSPEC_ENV_LOCAL" {word} {timeline} '
        '--source "$distspec_env_tar"'
    )
    return [
        f"distspec_env=($({env} fingerprint {word})) || exit 2  # hash, bytes",
        f'{each} {env} check {local} "${{distspec_env[1]}}" || exit 2',
        f"distspec_env_tar=$({env} pack {word} {shell_word(cache, {})} "
        f'"${{distspec_env[0]}}" {timeline}) || exit 2',
        *broadcast,
        *(unpack(command) if unpack else [f"{each} {command} || exit 2"]),
        'export PATH="$DISTSPEC_ENV_LOCAL/bin:$PATH" VIRTUAL_ENV="$DISTSPEC_ENV_LOCAL"',
        "",
    ]


#: Seconds the Slurm script waits for every node's copy (the keeper's ``.ok``), unless
#: the job's environment sets ``DISTSPEC_ENV_TIMEOUT``.
ENV_TIMEOUT = 1800

#: The keeper task (``bash -c``; arguments: the ready folder, then the unpack command):
#: unpack, mark this node ready (or failed), wait; SIGTERM (scancel: Slurm signals every
#: step's tasks) or SIGUSR1 (the EXIT trap, through srun, which forwards it; srun turns
#: its own SIGTERM into SIGKILL) removes the copy: renamed away first (instant), then
#: deleted; a removal cut short by Slurm's SIGKILL (KillWait) is finished by the next
#: job's ``check`` on that node.
_KEEPER = [
    "ready=$1; shift; gone=$DISTSPEC_ENV_LOCAL.removing",
    '  clean() { kill "${idle:-}" 2> /dev/null; mv -T "$DISTSPEC_ENV_LOCAL" "$gone" 2> /dev/null',
    '    rm -rf "$gone" "$DISTSPEC_ENV_LOCAL.tar"; exit "${1:-0}"; }',
    "  trap clean TERM USR1",
    '  "$@" || { touch "$ready/$SLURMD_NODENAME.failed"; clean 2; }',
    '  touch "$ready/$SLURMD_NODENAME.ok"; sleep infinity & idle=$!; wait; clean',
]


def _slurm_keeper(command: str) -> list[str]:
    """The Slurm lines that start the keeper step (one task per node, in the background)
    running ``command`` (the unpack) and wait until every node is ready."""
    ready = "$distspec_env_ready"
    nodes = '"$SLURM_JOB_NUM_NODES"'
    srun = (
        f"srun --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=0 --overlap "
        "--cpus-per-task=1 --job-name=distspec-env"
    )
    return [
        "# The keeper step: one task per node unpacks, marks the node ready and waits; on",
        "# scancel (SIGTERM) or from the EXIT trap (SIGUSR1) it removes the copy. It runs",
        "# while the job is being cancelled, when no new step (no srun rm) can start.",
        "# --overlap, one CPU: the job's own steps still get all the node's resources.",
        'distspec_env_ready=$DISTSPEC_JOB_DIR/env.ready; rm -rf "$distspec_env_ready"',
        f'mkdir -p "{ready}" || exit 2',
        f"{srun} bash -c '{_KEEPER[0]}",
        *_KEEPER[1:-1],
        f"{_KEEPER[-1]}' \\",
        f'  distspec-env "{ready}" {command} &',
        "distspec_env_keeper=$!",
        'trap \'kill -USR1 "$distspec_env_keeper" 2> /dev/null; wait "$distspec_env_keeper"\' EXIT',
        f"distspec_env_timeout=$((SECONDS + ${{DISTSPEC_ENV_TIMEOUT:-{ENV_TIMEOUT}}}))",
        f'until (( $(compgen -G "{ready}/*.ok" | wc -l) >= {nodes} )); do',
        f'  distspec_env_bad=$(compgen -G "{ready}/*.failed" | sed "s|.*/||; s|\\.failed$||")',
        '  [[ -z $distspec_env_bad ]] || { echo "distspec: env_to_local: the copy failed on"'
        " $distspec_env_bad >&2; exit 2; }",
        '  distspec_env_why="the keeper step ended"; kill -0 "$distspec_env_keeper" 2> /dev/null &&',
        '    distspec_env_why="timed out (DISTSPEC_ENV_TIMEOUT)" && (( SECONDS < distspec_env_timeout )) ||',
        '  { echo "distspec: env_to_local: $distspec_env_why; no copy ready on:" $(scontrol show'
        ' hostnames "$SLURM_JOB_NODELIST" | while read -r n; do [[ -e'
        f' {ready}/$n.ok ]] || echo "$n"; done) >&2; exit 2; }}',
        "  sleep 1",
        "done",
    ]


def slurm_lines(opts: EnvCopyOptions, scheduler: str, *, job_dir: str, roles: int) -> list[str]:
    """The Slurm script's lines (none without ``env_to_local``), to run after
    ``DISTSPEC_JOB_DIR`` is made and before the first launcher: ``sbcast`` broadcasts the
    tar, one srun task per node checks, unpacks and, from the EXIT trap, removes.
    A heterogeneous job (``roles`` > 1) is refused: its components would each need
    their own sbcast and srun (not written yet)."""
    prefix = env_prefix(opts, scheduler)
    if prefix is None or opts.env_to_local is None:
        return []
    if roles > 1:
        raise _bad(
            scheduler, "env_to_local: a job of several roles is not supported yet; use one role"
        )
    local = opts.env_to_local.rstrip("/") or "/"
    cache = f"{job_dir}/envs"
    each = 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=0'
    return [
        *_header(prefix, local, cache, "broadcast with sbcast"),
        f'export DISTSPEC_ENV_LOCAL={local}/distspec-env-"$SLURM_JOB_ID"',
        "distspec_env_tar_local=$DISTSPEC_ENV_LOCAL.tar",
        "# Until the keeper step below runs: removes what sbcast left.",
        f'trap \'{each} --overlap rm -rf "$DISTSPEC_ENV_LOCAL" "$distspec_env_tar_local"\' EXIT',
        *_steps(
            prefix,
            cache,
            each=each,
            local=local,
            broadcast=['sbcast --force "$distspec_env_tar" "$distspec_env_tar_local" || exit 2'],
            unpack=_slurm_keeper,
        ),
    ]


def pbs_lines(
    opts: EnvCopyOptions,
    scheduler: str,
    *,
    job_dir: str,
    nodes: int,
    vnodes: str,
    mpiexec: Sequence[str] | None,
) -> list[str]:
    """The PBS script's lines (none without ``env_to_local``), to run once the hosts are
    known (``vnodes``: the name of the bash array of the distinct hosts' ``pbsdsh -n``
    indices) and before the first launcher. There is no broadcast tool: every host
    reads the cached tar from the shared folder itself (one sequential read each),
    started by ``pbsdsh -n`` per host, or by one ``mpiexec -n N`` followed by
    ``mpiexec`` (the arguments that place one process per host; None: pbsdsh), or
    run here for a one-node job. ``distspec_env_clean`` removes the copies: the
    script's own EXIT trap calls it."""
    prefix = env_prefix(opts, scheduler)
    if prefix is None or opts.env_to_local is None:
        return []
    local = opts.env_to_local.rstrip("/") or "/"
    cache = f"{job_dir}/envs"
    if mpiexec is not None:
        extra = "".join(" " + shell_word(a, {}) for a in mpiexec)
        fanout = (
            f"mpiexec -n {nodes}{extra} "
            '/bin/bash -c \'"$@" || touch "$0"\' "$failed" "$@" < /dev/null'
        )
    else:
        fanout = (
            f'for ((i = 0; i < {nodes}; i++)); do pbsdsh -n "${{{vnodes}[i]}}" -- '
            '/bin/bash -c \'"$@" || touch "$0"\' "$failed" "$@" < /dev/null & done; wait'
        )
    return [
        *_header(prefix, local, cache, "read from there by every host"),
        f'export DISTSPEC_ENV_LOCAL={local}/distspec-env-"${{PBS_JOBID%%.*}}"',
        # pbsdsh and mpiexec do not return each task's exit code: a failed task leaves a file.
        "distspec_env_each() {  # runs its arguments on every host; 2 when one failed",
        '  local i failed=$DISTSPEC_JOB_DIR/env.failed; rm -f "$failed"',
        f"  {fanout}" if nodes > 1 else '  "$@" || touch "$failed"  # one host: this one',
        "  [[ ! -e $failed ]] || return 2",
        "}",
        'distspec_env_clean() { distspec_env_each rm -rf "$DISTSPEC_ENV_LOCAL"; }',
        *_steps(
            prefix,
            cache,
            each="distspec_env_each",
            local=local,
            broadcast=[
                "distspec_env_tar_local=$distspec_env_tar  # every host reads the shared tar",
            ],
        ),
    ]


def task_path_line() -> str:
    """The line a PBS task (``task.sh``, started by pbsdsh or mpiexec, which do not pass
    the batch script's environment on) runs to use the copy, when there is one."""
    return (
        '[[ -n ${DISTSPEC_ENV_LOCAL:-} ]] && export PATH="$DISTSPEC_ENV_LOCAL/bin:$PATH" '
        'VIRTUAL_ENV="$DISTSPEC_ENV_LOCAL"'
    )
