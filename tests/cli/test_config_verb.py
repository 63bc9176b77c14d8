"""``distspec config`` / ``configure --show``, and logging through -v and DISTSPEC_LOG_LEVEL."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import distspec


def test_config_prints_values_and_their_sources(tmp_path: Path, state_dir: Path) -> None:
    cfg = tmp_path / ".distspecconfig"
    cfg.write_text("[distspec]\nscheduler = slurm   ; the default\n[scheduler:slurm]\nqos = high\n")
    env = {"DISTSPEC_SLURM_PARTITION": "gpu"}
    out = distspec("config", cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    lines = [
        ln.split(";")[0].strip() + " ; " + ln.split(";")[1].strip()
        for ln in out.stdout.splitlines()
        if ";" in ln and "=" in ln
    ]
    assert f"scheduler = slurm ; {cfg}:2" in lines
    assert f"qos = high ; {cfg}:4" in lines
    assert "partition = gpu ; DISTSPEC_SLURM_PARTITION" in lines
    assert "session = distspec ; default" in lines
    data = json.loads(distspec("config", "--json", cwd=tmp_path, env=env).stdout)
    assert data["files"] == [str(cfg)]
    assert {
        "section": "scheduler:slurm",
        "key": "qos",
        "value": "high",
        "source": f"{cfg}:4",
    } in data["settings"]
    assert distspec("configure", "--show", cwd=tmp_path, env=env).stdout == out.stdout


def test_verbose_and_log_level_log_to_stderr(tmp_path: Path, state_dir: Path) -> None:
    quiet = distspec("run", "--dryrun", "utils.echo", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == ""
    for args, env in (
        (["-v", "run", "--dryrun", "utils.echo"], {}),
        (["run", "-v", "--dryrun", "utils.echo"], {}),
        (["run", "--dryrun", "utils.echo"], {"DISTSPEC_LOG_LEVEL": "info"}),
    ):
        loud = distspec(*args, cwd=tmp_path, env=env)
        assert loud.returncode == 0, loud.stderr
        assert "distspec INFO distspec: compiled echo for local_cwd" in loud.stderr, args
        assert loud.stdout == quiet.stdout.replace(_app_id(quiet.stdout), _app_id(loud.stdout))
    debug = distspec("-vv", "run", "--dryrun", "utils.echo", cwd=tmp_path)
    assert "distspec DEBUG distspec: config: state dir" in debug.stderr


def _app_id(plan: str) -> str:
    return str(json.loads(plan)["app_id"])


def test_bad_component_default_names_file_and_line(tmp_path: Path, state_dir: Path) -> None:
    cfg = tmp_path / ".distspecconfig"
    cfg.write_text("[component:dist.ddp]\nj = 1x2\n\nnodez = 3\n")
    bad = distspec("run", "--dryrun", "dist.ddp", "--script", "x.py", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.startswith(f"distspec run: error: {cfg}:4: default 'nodez'"), bad.stderr
    cfg.write_text("[component:dist.ddp]\nj = 2x\n")
    bad = distspec("run", "--dryrun", "dist.ddp", "--script", "x.py", cwd=tmp_path)
    assert bad.stderr.startswith(f"distspec run: error: {cfg}:2: invalid -j '2x'"), bad.stderr
    # The command line's own mistake is not blamed on the file...
    own = distspec("run", "--dryrun", "dist.ddp", "--script", "x.py", "-j", "3y", cwd=tmp_path)
    assert own.returncode == 2 and str(cfg) not in own.stderr
    # ...and a flag that replaces the bad default works.
    ok = distspec("run", "--dryrun", "dist.ddp", "--script", "x.py", "-j", "1x1", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
