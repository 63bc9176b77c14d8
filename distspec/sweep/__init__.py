"""Sweeps: one job run at many points, each a set of ``{{name}}`` values.

:mod:`distspec.sweep.spec` parses what the user wrote (``--sweep NAME=VALUES``,
``--sweep-file FILE``) into a :class:`~distspec.sweep.spec.Sweep` (variable names and
each point's values as strings), and checks it against the component's text (every
``{{name}}`` defined, every variable used) and a size ceiling. Pure: no I/O beyond
reading the sweep file; nothing is imported here, so ``distspec`` stays fast to start.
"""
