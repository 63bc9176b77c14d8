"""What the batch-script backends (Slurm, PBS) share: the job folder, written and read.

Both submit one script per app. The script runs every replica through a wrapper,
``distspec_task``, and keeps its bookkeeping beside the replicas' logs::

    <folder>/<role>-<i>.log    its stdout and stderr
    <folder>/<role>-<i>.host   the host it runs on, written by the wrapper at start
    <folder>/<role>-<i>.exit   its exit code, written by the wrapper when it exits
    <folder>/<role>-<i>.start  the size of its log when this attempt started
    <folder>/attempt           the in-script attempt (0 first), from the retry loop
    <folder>/requeues          Slurm only: how often the job was requeued
    <folder>/exit, signal      PBS only: the script's exit code; present after SIGTERM

since neither scheduler reports an exit code per replica. ``submit`` also writes a
record per job, ``<state dir>/<scheduler>/jobs/<job id>.json``, so that describe and
log find the folder from any working directory.

Backends never import each other; what Slurm and PBS share is here:

- :mod:`~distspec.schedulers.batch.script`: the script fragments that write those
  files (pure text, used by both backends' compile step);
- :mod:`~distspec.schedulers.batch.folder`: reading the folder back (exit codes,
  hosts, torchrun's report at the end of a log);
- :mod:`~distspec.schedulers.batch.scheduler`: :class:`BatchScheduler`, the effectful
  glue (the job_dir, writing the script and the record, finding the folder, logs).
"""
