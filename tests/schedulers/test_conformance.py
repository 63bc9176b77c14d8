"""One suite every built-in backend runs: what the Scheduler interface promises."""

from __future__ import annotations

import builtins
import dataclasses
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from distspec.errors import CompileError, OptionError
from distspec.schedulers._registry import BUILTIN_SCHEDULERS, SchedulerRegistry
from distspec.schedulers.api import Scheduler
from distspec.specs import AppDef, Resource, Role
from distspec.specs.macros import Macro
from distspec.specs.options import options_to_strings


def _backend(name: str) -> type[Scheduler[Any]]:
    # Every built-in must import without its optional client libraries: no skip here.
    return SchedulerRegistry(use_entry_points=False).get(name)


@pytest.fixture(params=sorted(BUILTIN_SCHEDULERS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Scheduler[Any]:
    cls = _backend(request.param)
    return cls("conformance", state_dir=tmp_path / "state")


def _app(
    *,
    macros: frozenset[Macro] = frozenset(),
    replicas: int = 2,
    min_replicas: int | None = None,
    roles: int = 1,
) -> AppDef:
    args = ["--x"] + [m.token for m in sorted(macros, key=lambda m: m.value)]
    return AppDef(
        name="conf",
        roles=tuple(
            Role(
                name=f"role{i}",
                entrypoint="python",
                args=tuple(args),
                # An absolute directory: Slurm and PBS run the role there and refuse a
                # container reference; Kubernetes takes it as the image's name.
                image="/srv/conformance-img",
                env={"K": "v,w=1"},
                num_replicas=replicas,
                min_replicas=min_replicas,
                resource=Resource(cpu=2, mem_mb=2048),
            )
            for i in range(roles)
        ),
    )


def _defaults(backend: Scheduler[Any]) -> Any:
    return backend.parse_options({})


def test_compile_is_deterministic(backend: Scheduler[Any]) -> None:
    app = _app(macros=backend.capabilities.macros)
    one = backend.compile(app, _defaults(backend), app_id="conf-0000abcd")
    two = backend.compile(app, _defaults(backend), app_id="conf-0000abcd")
    assert one == two
    assert one.render() == two.render()
    assert one.render() == one.files[one.main_file]


def test_compile_touches_nothing(backend: Scheduler[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*a: Any, **k: Any) -> Any:
        raise AssertionError("compile must be pure")

    real_open = builtins.open

    def read_only_open(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        if any(c in mode for c in "wax+"):
            raise AssertionError(f"compile opened {file} for writing")
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(subprocess, "Popen", forbidden)
    monkeypatch.setattr(socket, "socket", forbidden)
    monkeypatch.setattr(builtins, "open", read_only_open)
    backend.compile(_app(), _defaults(backend), app_id="conf-0000abcd")


def test_options_round_trip_from_strings(backend: Scheduler[Any]) -> None:
    opts = _defaults(backend)
    assert backend.parse_options(options_to_strings(opts)) == opts
    for spec in backend.run_opts():
        assert spec.help, f"{backend.name}: option {spec.name} has no help text"


def test_unknown_option_is_an_error_with_a_suggestion(backend: Scheduler[Any]) -> None:
    first = backend.run_opts()[0].name
    typo = first[:-1] + ("x" if first[-1] != "x" else "y")
    with pytest.raises(OptionError, match="did you mean"):
        backend.parse_options({typo: "1"})


def test_every_supported_macro_is_mapped(backend: Scheduler[Any]) -> None:
    supported = backend.capabilities.macros
    request = backend.compile(_app(macros=supported), _defaults(backend), app_id="conf-0000abcd")
    text = request.render()  # what the scheduler is handed (other files may keep the raw AppDef)
    for macro in Macro:
        assert macro.token not in text, f"{backend.name} left {macro.token} unexpanded"
    for macro in set(Macro) - supported:
        with pytest.raises(CompileError):
            backend.compile(
                _app(macros=frozenset({macro})), _defaults(backend), app_id="conf-0000abcd"
            )


def test_capabilities_are_honest(backend: Scheduler[Any]) -> None:
    caps = backend.capabilities
    elastic = _app(replicas=4, min_replicas=2)
    if caps.elastic:
        backend.compile(elastic, _defaults(backend), app_id="conf-0000abcd")
    else:
        with pytest.raises(CompileError, match="elastic"):
            backend.compile(elastic, _defaults(backend), app_id="conf-0000abcd")
    two_roles = _app(roles=2)
    if caps.multi_role:
        backend.compile(two_roles, _defaults(backend), app_id="conf-0000abcd")
    else:
        with pytest.raises(CompileError):
            backend.compile(two_roles, _defaults(backend), app_id="conf-0000abcd")
    if caps.needs_image:
        no_image = dataclasses.replace(
            _app(), roles=tuple(dataclasses.replace(r, image="") for r in _app().roles)
        )
        with pytest.raises(CompileError, match="image"):
            backend.compile(no_image, _defaults(backend), app_id="conf-0000abcd")


def test_request_size_does_not_grow_with_nodes(backend: Scheduler[Any]) -> None:
    small = backend.compile(
        _app(macros=backend.capabilities.macros, replicas=2),
        _defaults(backend),
        app_id="conf-0000abcd",
    )
    large = backend.compile(
        _app(macros=backend.capabilities.macros, replicas=1024),
        _defaults(backend),
        app_id="conf-0000abcd",
    )
    if backend.name == "local_cwd":
        pytest.skip(
            "local_cwd runs every replica on this machine: its plan lists each replica by design"
        )
    size = lambda r: sum(len(t) for t in r.files.values())  # noqa: E731
    assert size(large) <= size(small) * 1.05 + 16


# -- the contract that owns a job's files ---------------------------------------


def test_the_folder_submit_creates_is_the_one_the_job_writes_to(
    backend: Scheduler[Any],
) -> None:
    """``Request.job_dir`` (created by submit and by ``-o DIR``'s submit.sh) is the
    folder the compiled request really uses, or None where submit creates none."""
    request = backend.compile(_app(), _defaults(backend), app_id="conf-0000abcd")
    if request.job_dir is None:
        return
    assert Path(request.job_dir).is_absolute(), request.job_dir
    assert request.job_dir in request.render()


def test_an_image_is_a_container_or_a_directory(backend: Scheduler[Any]) -> None:
    caps = backend.capabilities
    assert caps.image in ("container", "directory")
    if caps.image == "container":
        request = backend.compile(_app(), _defaults(backend), app_id="conf-0000abcd")
        assert "/srv/conformance-img" in request.render()


def test_only_a_prunable_backend_prunes(backend: Scheduler[Any]) -> None:
    if backend.capabilities.prunable:
        assert backend.prune(dry_run=True) == ()
    else:
        with pytest.raises(NotImplementedError, match="no runs to prune"):
            backend.prune(dry_run=True)


def test_job_paths_name_a_replica_log_only_where_logs_are_files() -> None:
    from distspec.schedulers.api import JobPaths

    assert JobPaths(folder="/j/1/").replica_log("trainer", 3) == "/j/1/trainer-3.log"
    assert JobPaths(folder="/j", log_pattern="logs/{role}.{replica}").replica_log("a", 0) == (
        "/j/logs/a.0"
    )
    assert JobPaths(folder="s3://b/j", log_pattern=None).replica_log("a", 0) is None
