"""The layout's rules, checked on the source: nothing outside ``distspec/schedulers/``
names a builtin backend or reaches into one.

Code outside the backends asks the Scheduler interface (capabilities, ``job_paths``,
``Request.job_dir``) instead of comparing backend names or calling a backend's private
members; a new backend then needs no change anywhere else. Each allowance below says
why the literal there is not a backend decision.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from distspec.schedulers._registry import BUILTIN_SCHEDULERS

PACKAGE = Path(__file__).resolve().parents[1] / "distspec"
SCHEDULERS = PACKAGE / "schedulers"

#: (file relative to distspec/, literal) -> why that literal is allowed there.
ALLOWED_NAMES = {
    ("config.py", "local_cwd"): "the default scheduler of the config layers",
    ("config_torchx.py", "kubernetes"): (
        "the name of a section in TorchX's .torchxconfig (TorchX's vocabulary, read as an "
        "external format)"
    ),
    ("components/torchx_compat.py", "local_cwd"): (
        "TorchX's own scheduler of that name, whose ${img_root} is the working directory "
        "(TorchX's vocabulary)"
    ),
    **{
        (path, name): (
            "inside the job: what started this process (env.Launcher) or which allocation "
            "launch runs in (launch.Where), the launcher's name, not a backend's"
        )
        for path in ("runtime/env.py", "runtime/launch.py")
        for name in ("slurm", "pbs")
    },
}


def _sources(outside: Path = SCHEDULERS) -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if outside not in p.parents)


def _backend_names_used(path: Path) -> list[tuple[int, str]]:
    """(line, literal) for every string constant equal to a builtin backend's name,
    docstrings and other prose aside (a literal is a name only when it is exactly one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in BUILTIN_SCHEDULERS
    ]


def _private_members_of_schedulers() -> set[str]:
    """Every ``_name`` a class under schedulers/ defines (a method, or ``self._name = ...``)."""
    names: set[str] = set()
    for path in SCHEDULERS.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = node.name
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    name = node.attr
                else:
                    continue
                if name.startswith("_") and not name.startswith("__"):
                    names.add(name)
    return names


def _own_private_members(tree: ast.Module) -> set[str]:
    """The ``_name`` members the file's own classes define (those it may use freely)."""
    own: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
    return own


def _reaches_in(path: Path, private: set[str]) -> list[tuple[int, str]]:
    """(line, code) for ``getattr(x, "_name")`` and ``x._name`` on a scheduler's private
    member, ``self``/``cls`` and the file's own classes aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    own = _own_private_members(tree)
    return [
        (node.lineno, ast.unparse(node))
        for node in ast.walk(tree)
        if _getattr_of(node, private)
        or (
            isinstance(node, ast.Attribute)
            and node.attr in private
            and node.attr not in own
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        )
    ]


def _getattr_of(node: ast.AST, names: set[str]) -> bool:
    """``getattr(x, "_name")`` or ``hasattr(x, "_name")`` for one of ``names``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value in names
    )


def test_nothing_outside_schedulers_names_a_builtin_backend() -> None:
    """A backend-specific decision outside schedulers/ is a capability or a job_paths
    question asked of the backend, never ``if scheduler == "slurm"``."""
    used = {
        f"{path.relative_to(PACKAGE)}:{line}: {value!r}"
        for path in _sources()
        for line, value in _backend_names_used(path)
        if (str(path.relative_to(PACKAGE)), value) not in ALLOWED_NAMES
    }
    assert not used, "backend names outside distspec/schedulers/:\n" + "\n".join(sorted(used))


def test_nothing_outside_schedulers_touches_a_private_scheduler_member() -> None:
    private = _private_members_of_schedulers()
    assert {"_job_dir", "_record"} <= private  # the check looks where the old reach-ins went
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {code}"
        for path in _sources()
        for line, code in _reaches_in(path, private)
    ]
    assert not found, "private scheduler members used outside schedulers/:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'if request.scheduler == "slurm":\n    pass\n',
        'SCHEDS = ("local_cwd", "pbs")\n',
    ],
)
def test_the_name_check_catches_a_comparison(tmp_path: Path, source: str) -> None:
    """Not a vacuous check: the finder sees the patterns the rule forbids."""
    path = tmp_path / "caller.py"
    path.write_text(source)
    assert _backend_names_used(path)


@pytest.mark.parametrize(
    "source",
    [
        'folder = getattr(sched, "_job_dir")(opts)\n',
        "rec = sched._record(app_id)\n",
    ],
)
def test_the_reach_in_check_catches_a_private_call(tmp_path: Path, source: str) -> None:
    path = tmp_path / "caller.py"
    path.write_text(source)
    assert _reaches_in(path, {"_job_dir", "_record"})


def test_a_files_own_private_members_are_its_own(tmp_path: Path) -> None:
    """Not a hostile class: a class using its own ``_record`` is not reaching in."""
    path = tmp_path / "job.py"
    path.write_text(
        "class Job:\n    def __init__(self):\n        self._record = {}\n\n"
        "def f(job: Job):\n    return job._record\n"
    )
    assert not _reaches_in(path, {"_record"})
