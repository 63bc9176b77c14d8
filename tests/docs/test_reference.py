"""The generated reference pages (docs/reference/, written by scripts/gen-docs).

* The committed pages equal what the code generates now, and the check fails (naming
  the page) when one is stale or missing.
* The AppDef JSON schema is a valid draft 2020-12 schema, accepts real AppDefs (the
  ``app`` of ``distspec run --dryrun --json`` and the ``appdef.json`` it would write,
  for every builtin component that can compile here and for every backend) and
  rejects what ``AppDef.from_dict`` rejects.
* The exit-code table agrees with what the CLI does for the fixed codes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (the dev extra) not installed")

REPO = Path(__file__).resolve().parents[2]
GEN = REPO / "scripts" / "gen-docs"
REFERENCE = REPO / "docs" / "reference"
SCHEMA = REFERENCE / "appdef.schema.json"


def _env(home: Path) -> dict[str, str]:
    """This environment without the user's config: no DISTSPEC_* variables, HOME elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTSPEC_")}
    env["HOME"] = str(home)
    env["DISTSPEC_STATE_DIR"] = str(home / "state")
    return env


def gen_docs(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GEN), *args],
        capture_output=True,
        text=True,
        cwd=home,
        env=_env(home),
        timeout=120,
        check=False,
    )


def distspec(*args: str, home: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        capture_output=True,
        text=True,
        cwd=cwd or home,
        env=_env(home),
        timeout=60,
        check=False,
    )


# -- the pages are current -------------------------------------------------------------


def test_committed_reference_pages_are_current(tmp_path: Path) -> None:
    proc = gen_docs("--check", home=tmp_path)
    assert proc.returncode == 0, (
        "docs/reference is stale; run `.venv/bin/python scripts/gen-docs`:\n" + proc.stderr
    )
    assert proc.stderr == ""


def test_check_names_a_stale_or_missing_page_and_exits_1(tmp_path: Path) -> None:
    out = tmp_path / "reference"
    first = gen_docs("--out", str(out), home=tmp_path)
    assert first.returncode == 0, first.stderr
    pages = sorted(p.name for p in out.iterdir())
    assert pages == sorted(p.name for p in REFERENCE.iterdir() if p.name in pages)
    assert {"cli.md", "components.md", "runopts.md", "resources.md", "appdef.md"} <= set(pages)
    assert {"appdef.schema.json", "exit-codes.md"} <= set(pages)
    assert gen_docs("--check", "--out", str(out), home=tmp_path).returncode == 0

    # One flag's help edited by hand, one page deleted: both named, exit 1, nothing written.
    cli = out / "cli.md"
    edited = cli.read_text().replace("machine-readable output", "machine readable", 1)
    assert edited != cli.read_text()
    cli.write_text(edited)
    (out / "resources.md").unlink()
    proc = gen_docs("--check", "--out", str(out), home=tmp_path)
    assert proc.returncode == 1
    assert "cli.md" in proc.stderr and "resources.md" in proc.stderr
    assert "components.md" not in proc.stderr
    assert cli.read_text() == edited and not (out / "resources.md").exists()

    # Without --check the stale pages are rewritten, and the check passes again.
    assert gen_docs("--out", str(out), home=tmp_path).returncode == 0
    assert gen_docs("--check", "--out", str(out), home=tmp_path).returncode == 0


def test_pages_do_not_depend_on_the_users_config(tmp_path: Path) -> None:
    """A config file giving a component default and a DISTSPEC_ variable change nothing."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".distspecconfig").write_text("[component:dist.ddp]\nj = 4x4\n\n[slurm]\nqos = x\n")
    env = {**_env(home), "DISTSPEC_SLURM_PARTITION": "mine", "COLUMNS": "40"}
    out = tmp_path / "reference"
    proc = subprocess.run(
        [sys.executable, str(GEN), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=home,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    for page in out.iterdir():
        assert page.read_text() == (REFERENCE / page.name).read_text(), page.name


def test_cli_reference_lists_every_verb_and_flag() -> None:
    """Spot check against the parsers themselves (the generator reads the same ones)."""
    import argparse

    from distspec.cli.main import VERBS, build_parser

    text = (REFERENCE / "cli.md").read_text()
    for verb in VERBS:
        assert f"## distspec {verb}\n" in text
        parser = build_parser([verb])
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for action in sub.choices[verb]._actions:
            for flag in action.option_strings:
                assert f"`{flag}`" in text, (verb, flag)


# -- the AppDef schema -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


#: Dry runs that compile here, covering every builtin component, every backend and the
#: optional parts of the IR (resources with devices and capabilities, env, mounts,
#: elastic ranges, retries).
DRY_RUNS: tuple[str, ...] = (
    "dist.ddp -j 1x2 --script train.py",
    "-s slurm dist.ddp -j 2x8 --gpu 8 --script train.py -- --lr 1",
    "-s pbs dist.ddp -j 2x2 --cpu 4 --mem_mb 2048 --script t.py",
    "-s kubernetes -cfg flavor=volcano dist.ddp -j 1:4x8 -h aws_p4d.24xlarge --image repo/img:1"
    " --env A=1,B_2=x --max_retries 3 --mounts type=volume,src=data,dst=/data,readonly"
    " --script train.py",
    "-s kubernetes dist.spmd -j 2x8 -h gpu.xlarge --image i:1 --script t.py",
    "dist.torchrun -j 2 -h gpu.small -m pkg.train",
    "dist.fn -j 1x2 --fn os:getcwd",
    "utils.echo --msg hi --num_replicas 2",
    "utils.sh echo a b",
    "utils.python -c print(1)",
    "utils.touch --file /tmp/x",
    "utils.copy --src memory://a --dst memory://b",
)


def _dry_runs(home: Path) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    # A project folder of its own: Slurm and PBS snapshot the script's folder, and a
    # script directly in the home folder (HOME is home here) is refused.
    project = home / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    (project / "t.py").write_text("print('hi')\n")
    for line in DRY_RUNS:
        args = tuple(line.split())
        proc = distspec("run", "--dryrun", "--json", *args, home=home, cwd=project)
        assert proc.returncode == 0, (args, proc.stderr)
        yield args, json.loads(proc.stdout)


def test_real_dry_run_appdefs_validate(tmp_path: Path, validator: Any) -> None:
    from distspec.specs import AppDef

    seen_components = set()
    seen_schedulers = set()
    for args, out in _dry_runs(tmp_path):
        errors = [e.message for e in validator.iter_errors(out["app"])]
        assert not errors, (args, errors)
        # The AppDef a local run records, when the request writes one.
        if "appdef.json" in out.get("files", {}):
            recorded = json.loads(out["files"]["appdef.json"])
            assert not list(validator.iter_errors(recorded)), args
        # What validates reads back into an equal AppDef.
        assert AppDef.from_dict(out["app"]).to_dict() == out["app"]
        seen_components.add(next(a for a in args if "." in a and not a.startswith("-")))
        seen_schedulers.add(out["scheduler"])
    from distspec.components.loader import BUILTIN_COMPONENTS

    assert seen_components == set(BUILTIN_COMPONENTS)
    assert seen_schedulers == {"local_cwd", "slurm", "pbs", "kubernetes"}


def _role(**changes: Any) -> dict[str, Any]:
    role: dict[str, Any] = {
        "name": "trainer",
        "entrypoint": "torchrun",
        "args": ["train.py"],
        "image": "",
        "env": {"A": "1"},
        "num_replicas": 2,
        "min_replicas": None,
        "resource": {"cpu": None, "gpu": 0, "mem_mb": None, "capabilities": {}, "devices": {}},
        "port_map": {},
        "max_retries": 0,
        "retry_policy": "application",
        "mounts": [{"type": "bind", "src_path": "/d", "dst_path": "/d", "read_only": False}],
        "metadata": {},
    }
    role.update(changes)
    return role


BAD_APPS: dict[str, dict[str, Any]] = {
    "no roles": {"name": "a", "roles": []},
    "name starting with a dash": {"name": "-a", "roles": [_role()]},
    "name too long": {"name": "a" * 129, "roles": [_role()]},
    "zero replicas": {"name": "a", "roles": [_role(num_replicas=0)]},
    "negative gpu": {
        "name": "a",
        "roles": [_role(resource={"gpu": -1, "capabilities": {}, "devices": {}})],
    },
    "unknown retry policy": {"name": "a", "roles": [_role(retry_policy="node")]},
    "relative mount destination": {
        "name": "a",
        "roles": [_role(mounts=[{"type": "bind", "src_path": "/d", "dst_path": "d"}])],
    },
    "unknown mount type": {
        "name": "a",
        "roles": [_role(mounts=[{"type": "nfs", "src_path": "/d", "dst_path": "/d"}])],
    },
    "bad env name": {"name": "a", "roles": [_role(env={"1A": "x"})]},
    "unknown role field": {"name": "a", "roles": [_role(replicas=2)]},
    "empty entrypoint": {"name": "a", "roles": [_role(entrypoint="")]},
    "missing entrypoint": {
        "name": "a",
        "roles": [{k: v for k, v in _role().items() if k != "entrypoint"}],
    },
}


def test_schema_accepts_a_full_appdef(validator: Any) -> None:
    from distspec.specs import AppDef

    app = {"name": "a", "roles": [_role()], "metadata": {"k": "v"}}
    assert not list(validator.iter_errors(app))
    assert AppDef.from_dict(app).to_dict() == app


def test_every_appdef_the_ir_can_build_validates(validator: Any) -> None:
    """Property: the AppDefs of the IR's own JSON round-trip test (random roles, env,
    resources, ports, retry policies, every mount kind) all validate."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from distspec.specs import AppDef
    from tests.specs.test_app import _names, _roles

    @settings(max_examples=200, deadline=None)
    @given(_names, st.lists(_roles(), min_size=1, max_size=3, unique_by=lambda r: r.name))
    def check(name: str, roles: list[Any]) -> None:
        data = json.loads(json.dumps(AppDef(name=name, roles=tuple(roles)).to_dict()))
        errors = [e.message for e in validator.iter_errors(data)]
        assert not errors, errors

    check()


@pytest.mark.parametrize("case", sorted(BAD_APPS))
def test_schema_rejects_what_the_ir_rejects(case: str, validator: Any) -> None:
    from distspec.errors import SpecError
    from distspec.specs import AppDef

    app = BAD_APPS[case]
    assert list(validator.iter_errors(app)), f"schema accepted: {case}"
    with pytest.raises((SpecError, TypeError, KeyError, ValueError)):
        AppDef.from_dict(app)


# -- exit codes ------------------------------------------------------------------------------


def test_exit_code_table_matches_the_cli(tmp_path: Path) -> None:
    from distspec.cli.status import STATE_EXIT_CODES
    from distspec.errors import EXIT_CODES, EXIT_OK, EXIT_USAGE

    page = (REFERENCE / "exit-codes.md").read_text()
    for code, _, meaning in EXIT_CODES:
        assert f"| {code} |" in page or code.startswith("the"), code
        assert meaning.split()[0] in page
    for state in STATE_EXIT_CODES:
        assert f"`{state}`" in page

    assert distspec("run", "--dryrun", "utils.echo", home=tmp_path).returncode == EXIT_OK
    bad_topology = distspec("run", "--dryrun", "dist.ddp", "-j", "2y", "-m", "x", home=tmp_path)
    assert bad_topology.returncode == EXIT_USAGE
    assert len(bad_topology.stderr.strip().splitlines()) == 1
    unknown_app = distspec("status", "local_cwd://distspec/nope-12345678", home=tmp_path)
    assert unknown_app.returncode == EXIT_USAGE
    assert distspec("run", "--no-such-flag", "utils.echo", home=tmp_path).returncode == EXIT_USAGE
