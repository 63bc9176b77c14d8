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
