"""Code snapshots and provenance: a job runs the code it was submitted with, and says
what that was.

- :mod:`distspec.snapshot.files` lists what a snapshot takes (git's files, or a plain
  folder's with sensible excludes) and checks it (size cap, unreadable files, links);
- :mod:`distspec.snapshot.store` keeps file contents once, by hash, and each snapshot as
  a tree of hard links to them;
- :mod:`distspec.snapshot.policy` decides whether a run takes one and rewrites the job to
  run from it;
- :mod:`distspec.snapshot.provenance` writes and reads the record of what ran;
- :mod:`distspec.snapshot.options` declares the run options every backend inherits.

Nothing is imported here: a dry run that takes no snapshot imports only ``options``.
"""
