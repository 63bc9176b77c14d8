"""``local_cwd``: run every replica on this machine, as a process group, under a
detached supervisor, in the current directory (the default backend).

The CLI's side:

- :mod:`.options`: :class:`LocalOptions` and the default state directory;
- :mod:`.plan`: the pure compile step, AppDef + options -> ``plan.json``;
- :mod:`.scheduler`: :class:`LocalScheduler` (submit, describe, wait, log, cancel,
  list, prune), with :mod:`.launch` (submit's start of a supervisor), :mod:`.status`
  (a record as an AppStatus) and :mod:`.logs` (reading a replica's log);
- :mod:`.records`: the declared shape of ``state.json`` and its validating reader.

The supervisor's side, standard library only (it runs under ``python -I -S``):

- :mod:`.supervisor`: the detached supervisor of one run, and its entry point;
- :mod:`.keeper`: one replica attempt; :mod:`.replica`: one replica's state;
- :mod:`.dependencies`: ``run --after``, waiting for other runs to end;
- :mod:`.files`, :mod:`.processes`, :mod:`.exits`: the run directory's files, the
  run's processes, how a command ended.

Run directory (``<state dir>/local_cwd/<app id>/``, ``$DISTSPEC_JOB_DIR`` in every
replica)::

    appdef.json      the AppDef as submitted
    plan.json        the compiled request (``distspec run --dryrun`` prints it)
    state.json       the supervisor's view, replaced atomically on every change
    supervisor.log   the supervisor's own stdout/stderr (empty unless it crashed)
    alive.fifo       held open by the supervisor until the state is final (``wait``)
    .reserve         space set aside until the final state is written (a full disk)
    logs/<role>-<replica>.stdout / .stderr   what the replica wrote, byte for byte
    logs/<role>-<replica>.log                both streams, one line per record:
                                             ``<unix time> <O|E|D> <text>``

The names below are imported on first use (PEP 562), so importing the package costs
nothing (the supervisor imports it too); ``distspec.schedulers.local:LocalScheduler``
is the registry's string.
"""

from __future__ import annotations

from distspec._lazy import lazy_getattr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.schedulers.local.options import LocalOptions
    from distspec.schedulers.local.scheduler import LocalScheduler

__all__ = ["LocalOptions", "LocalScheduler"]

__getattr__ = lazy_getattr(__name__, {"LocalOptions": "options", "LocalScheduler": "scheduler"})
