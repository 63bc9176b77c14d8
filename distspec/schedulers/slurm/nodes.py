"""Bad nodes left behind: the Slurm script's lines that exclude a failed node from
the job's next attempt (``-cfg exclude_failed_nodes``, on with ``requeue=true``).

The rule (docs/fault-tolerance.md, facts in docs/schedulers/slurm.md): an attempt
failed because of a node when its step ended with a non-zero code and, right
after, ``scontrol show node`` has that node of the allocation DOWN,
NOT_RESPONDING, DRAIN(ING/ED) or FAIL(ING). A replica killed by a signal on a
node that Slurm still has up (the OOM killer, a ``kill -9``) is an ordinary
failure: the node is not excluded.

What happens then, as seen on Slurm 22.05:

- Slurm itself requeues a ``--requeue`` job when one of its nodes fails: it
  SIGTERMs the batch script (SIGKILL KillWait seconds later) and the job is
  pending again. The script traps TERM, so that these lines still run.
- A running job's ``ExcNodeList`` cannot change ("Job is no longer pending
  execution"); a requeued one's can, while its old script finishes. So the lines
  requeue the job themselves if it is still running (a drained node), then set
  ``ExcNodeList`` to the job's own exclusions plus every node in
  ``$DISTSPEC_JOB_DIR/bad_nodes``, which accumulates across requeues, and write
  ``node-failure`` to ``$DISTSPEC_JOB_DIR/restart_reason`` (again at the next
  attempt's start, after the requeue trap's lines, from ``node_failure``).

A job that was cancelled (its ``Restarts`` did not grow, its state is not
RUNNING) is left alone. When the dead node is the batch host, the script dies
with it and nothing after the step runs: Slurm still requeues the job, and the
next attempt's first lines find the bad node among the last attempt's (the
``nodes`` file each attempt writes) when the requeue trap knew no reason for the
restart. An attempt given a node in ``bad_nodes`` (one that came back) requeues
the job without it before its step starts.

Each function returns lines of bash; nothing here runs a command.
"""

from __future__ import annotations

from distspec.schedulers.slurm.options import SlurmOptions

__all__ = [
    "after_attempt",
    "after_step",
    "enabled",
    "prologue_lines",
    "spare_check",
    "spare_guard",
    "spare_pick",
]

#: Node states (``scontrol show node``'s ``State=A+B``) that make a node bad.
BAD_STATES = ("DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING")

_TRAP = """\
# exclude_failed_nodes: a node that fails the job is left behind by its next attempts.
# Slurm SIGTERMs this script when it requeues the job (a failed node, scontrol requeue):
# note it, so that the lines after the step still run (Slurm SIGKILLs KillWait s later).
distspec_term=0
trap 'distspec_term=1' TERM
"""

_FAILED = """\
# The nodes of hostlist $1 that slurmctld has {states}.
distspec_failed_nodes() {{
  scontrol show node -o "$1" 2> /dev/null | awk '{{
    name = ""; bad = 0
    for (i = 1; i <= NF; i++) {{
      if ($i ~ /^NodeName=/) name = substr($i, 10)
      if ($i ~ /^State=/) {{
        n = split(substr($i, 7), s, "+")
        for (j = 1; j <= n; j++) if (s[j] ~ /^({regex})\\*?$/) bad = 1
      }}
    }}
    if (bad && name != "") print name
  }}'
}}
# The bad nodes of hostlist $1 join bad_nodes, and the log says so ($2: whose nodes).
# Returns 1 when none is bad.
distspec_add_bad_nodes() {{
  local bad
  bad=$(distspec_failed_nodes "$1")
  [[ -n $bad ]] || return 1
  printf '%s\\n' $bad >> "$DISTSPEC_JOB_DIR/bad_nodes"
  echo "distspec: node(s) $(echo $bad) $2failed" >&2
}}
"""

_REQUEUE = """\
# After a failed step: if a node of the allocation is bad, add it to bad_nodes and requeue
# the job without it. Returns 1 when none is bad (or the job was cancelled).
distspec_leave_bad_nodes() {{
  distspec_add_bad_nodes "$SLURM_JOB_NODELIST" "" && distspec_requeue_without_bad_nodes
}}
# Make the next attempt exclude every node in bad_nodes (ExcNodeList, which only a job
# that is not running takes: requeue the job first if Slurm has not).
distspec_requeue_without_bad_nodes() {{
  local job state restarts excl
  job=$(scontrol show job -o "$SLURM_JOB_ID" 2> /dev/null)
  state=$(sed -n 's/.* JobState=\\([^ ]*\\).*/\\1/p' <<< "$job")
  restarts=$(sed -n 's/.* Restarts=\\([0-9]*\\).*/\\1/p' <<< "$job")
  if (( ${{restarts:-0}} <= ${{SLURM_RESTART_COUNT:-0}} )); then
    # Not requeued by Slurm: requeue it here if it still runs; a cancelled job stays so.
    [[ $state == RUNNING ]] || return 1
    scontrol requeue "$SLURM_JOB_ID" || return 1
  fi
  echo node-failure > "$DISTSPEC_JOB_DIR/restart_reason"
  touch "$DISTSPEC_JOB_DIR/node_failure"
  excl=$(sed -n 's/.* ExcNodeList=\\([^ ]*\\).*/\\1/p' <<< "$job")
  [[ $excl == "(null)" ]] && excl=
  excl=$({{ [[ -z $excl ]] || scontrol show hostnames "$excl"; cat "$DISTSPEC_JOB_DIR/bad_nodes"; }} | sort -u | paste -sd, -)
  echo "distspec: job $SLURM_JOB_ID requeued without $excl" >&2
  scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$excl"
}}
# Why this attempt runs: the last one left a node behind (node_failure). Or, requeued for
# no known reason, it died with its batch host, which took that script with it: a node it
# had (nodes) is bad now.
if [[ -e "$DISTSPEC_JOB_DIR/node_failure" ]]; then
  echo node-failure > "$DISTSPEC_JOB_DIR/restart_reason"
  rm -f "$DISTSPEC_JOB_DIR/node_failure"
elif [[ $(cat "$DISTSPEC_JOB_DIR/restart_reason" 2> /dev/null) == unknown && -s "$DISTSPEC_JOB_DIR/nodes" ]]; then
  if distspec_add_bad_nodes "$(paste -sd, - < "$DISTSPEC_JOB_DIR/nodes")" "of the last attempt "; then
    echo node-failure > "$DISTSPEC_JOB_DIR/restart_reason"
  fi
fi
scontrol show hostnames "$SLURM_JOB_NODELIST" > "$DISTSPEC_JOB_DIR/nodes"
# Given a node left behind earlier (it came back): requeue at once without it.
if [[ -s "$DISTSPEC_JOB_DIR/bad_nodes" ]] && grep -qxFf "$DISTSPEC_JOB_DIR/bad_nodes" "$DISTSPEC_JOB_DIR/nodes"; then
  echo "distspec: this attempt has node(s) left behind earlier" >&2
  distspec_requeue_without_bad_nodes && exit 0
fi
"""


def enabled(opts: SlurmOptions) -> bool:
    """Whether the script leaves failed nodes behind: ``exclude_failed_nodes`` with
    ``requeue`` (without requeue there is no next attempt to exclude them from)."""
    return opts.requeue and opts.exclude_failed_nodes


_SPARES = """\
# spares={spares}: the allocation has {spares} node(s) more than the step's {n}, and --no-kill keeps it
# when one dies. Each attempt's step runs on the first {n} nodes of the allocation that are
# neither in bad_nodes nor bad now (distspec_step_nodes); the rendezvous host is the first.
distspec_spared=0
distspec_pick_nodes() {{
  local bad
  bad=$(cat "$DISTSPEC_JOB_DIR/bad_nodes" 2> /dev/null; distspec_failed_nodes "$SLURM_JOB_NODELIST")
  distspec_step_nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | awk -v bad=" $(echo $bad) " \\
    'index(bad, " " $0 " ") == 0 && k < {n} {{ print; k++ }}' | paste -sd, -)
  [[ $(tr , '\\n' <<< "$distspec_step_nodes" | grep -c .) == {n} ]]
}}
# After a failed step: if a node of the step is bad now, add it to bad_nodes and, when {n}
# healthy nodes remain, run the step again on them at once (restart_reason node-failure).
# Returns 1 when no node of the step is bad, or too few remain.
distspec_spare_step() {{
  distspec_add_bad_nodes "$distspec_step_nodes" "of the step " || return 1
  if ! distspec_pick_nodes; then
    echo "distspec: fewer than {n} healthy nodes left in the allocation: no spare to run on" >&2
    return 1
  fi
  echo node-failure > "$DISTSPEC_JOB_DIR/restart_reason"
  echo "distspec: running the step again on $distspec_step_nodes, in the same allocation" >&2
}}
"""


_GUARD = """\
# The batch host's guard (spares): under --no-kill a dead batch host takes this script with
# it, and slurmctld keeps the job RUNNING on its other nodes, with no script, until its time
# limit. So a one-task step on another node watches this host; once slurmctld has it bad,
# the guard {action}.
distspec_guard() {{
  trap '' TERM
  while sleep 5; do
    [[ -n $(distspec_failed_nodes "$1") ]] || continue
    echo "$1" >> "$DISTSPEC_JOB_DIR/bad_nodes"
    {{ echo "distspec: the batch host $1 failed"; {run}; }} >> "$DISTSPEC_JOB_DIR.out" 2>&1
    return
  done
}}
distspec_batch_host=${{SLURMD_NODENAME:-$(hostname -s)}}
distspec_guard_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | grep -vxF "$distspec_batch_host" | tail -n1)
# It writes to this script's log itself (what the step's --output holds may be lost).
srun --overlap --nodes=1 --ntasks=1 --nodelist="$distspec_guard_node" --kill-on-bad-exit=0 \\
  --output=/dev/null \\
  bash -c "$(declare -f {functions})"'; distspec_guard "$1"' \\
  distspec-guard "$distspec_batch_host" < /dev/null &
"""


def spare_guard(opts: SlurmOptions) -> list[str]:
    """With ``spares``, the step that guards the batch host (:data:`_GUARD`), started in
    the background before the first attempt; it ends with the job."""
    if not opts.spares:
        return []
    functions = ["distspec_failed_nodes", "distspec_guard"]
    if enabled(opts):
        functions.insert(1, "distspec_requeue_without_bad_nodes")
        action = "requeues the job without it (as exclude_failed_nodes does), or cancels it"
        run = 'distspec_requeue_without_bad_nodes || scancel "$SLURM_JOB_ID"'
    else:
        action = "cancels the job (requeue=true requeues it without the host instead)"
        run = 'scancel "$SLURM_JOB_ID"'
    text = _GUARD.format(action=action, run=run, functions=" ".join(functions))
    return text.splitlines()


def prologue_lines(opts: SlurmOptions, *, nodes: int = 0) -> list[str]:
    """The TERM trap and the functions, before the first step; nothing when off.
    With ``spares``, the functions that choose the step's ``nodes`` nodes and run it
    again on spare nodes (:func:`spare_pick`, :func:`spare_check`)."""
    states = {"states": ", ".join(BAD_STATES), "regex": "|".join(BAD_STATES)}
    text = ""
    if enabled(opts):
        text = _TRAP + _FAILED.format(**states) + _REQUEUE.format()
    elif opts.spares:
        text = _FAILED.format(**states)
    if opts.spares:
        text += _SPARES.format(spares=opts.spares, n=nodes)
    return text.splitlines()


def spare_pick(opts: SlurmOptions, *, nodes: int, host: str) -> list[str]:
    """An attempt's first lines with ``spares`` (indented by two): choose the step's
    nodes and export the rendezvous host, ``host`` with ``"$distspec_host"`` standing for
    the first of them (see :func:`distspec.schedulers.batch.script.rank0_host_word`)."""
    if not opts.spares:
        return []
    return [
        "  distspec_pick_nodes || {",
        f'    echo "distspec: fewer than {nodes} healthy nodes in the allocation" >&2',
        '    exit "${distspec_code:-1}"',
        "  }",
        "  distspec_host=${distspec_step_nodes%%,*}",
        f"  export DISTSPEC_RANK0_HOST={host}",
        '  echo "distspec: attempt $distspec_attempt runs on $distspec_step_nodes" >&2',
    ]


def spare_check(opts: SlurmOptions) -> list[str]:
    """``check`` lines of the attempt loop with ``spares``, before :func:`after_attempt`'s:
    after a failed step with a bad node, the next attempt at once on spare nodes (it
    does not count as a retry: ``distspec_spared``)."""
    if not opts.spares:
        return []
    return [
        "  if (( distspec_code != 0 && ! ${distspec_term:-0} )) && distspec_spare_step; then",
        "    distspec_attempt=$((distspec_attempt + 1)) distspec_spared=$((distspec_spared + 1))",
        "    continue",
        "  fi",
    ]


def after_step(opts: SlurmOptions, code: str = "distspec_code") -> list[str]:
    """After a single-role job's step, which set ``$code``: leave the bad nodes behind
    when it failed. The script then exits with the step's code, as before."""
    if not enabled(opts):
        return []
    return [f"(( {code} == 0 )) || distspec_leave_bad_nodes"]


def after_attempt(opts: SlurmOptions) -> list[str]:
    """``check`` lines of the attempt loop (indented by two): after a failed attempt, no
    retry inside the allocation when a node was left behind (the job is requeued) or
    when the script was told to stop (SIGTERM: cancelled or requeued)."""
    if not enabled(opts):
        return []
    return [
        "  if (( distspec_code != 0 )) && { distspec_leave_bad_nodes || (( distspec_term )); }; then",
        '    exit "$distspec_code"',
        "  fi",
    ]
