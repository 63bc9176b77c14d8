from __future__ import annotations

from pathlib import Path

import pytest

from distspec.config import load_config
from distspec.errors import ConfigError


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    project = tmp_path / "work" / "project"
    (project / "sub").mkdir(parents=True)
    home.mkdir()
    return home, project


def test_precedence_env_over_project_over_user(tree: tuple[Path, Path]) -> None:
    home, project = tree
    _write(
        home / ".distspecconfig",
        "[distspec]\nscheduler = slurm\nsession = user\n[scheduler:slurm]\npartition = user\naccount = acct\n[component:dist.ddp]\nj = 1x1\n",
    )
    _write(
        project / "pyproject.toml",
        '[tool.distspec]\nsession = "pyproj"\n[tool.distspec.schedulers.slurm]\npartition = "pyproj"\nqos = "high"\n[tool.distspec.components."dist.ddp"]\nj = "2x2"\n',
    )
    _write(project / ".distspecconfig", "[scheduler:slurm]\npartition = project\n")
    env = {"HOME": str(home), "DISTSPEC_SLURM_PARTITION": "env"}
    cfg = load_config(cwd=project / "sub", env=env, home=home)
    assert cfg.scheduler == "slurm"  # user config: nothing higher sets it
    assert cfg.session == "pyproj"
    merged: dict[str, str] = {}
    for _, values in cfg.scheduler_layers("slurm"):
        merged.update(values)
    assert merged == {"partition": "env", "account": "acct", "qos": "high"}
    assert cfg.component_defaults("dist.ddp") == {"j": "2x2"}
    env_cfg = load_config(cwd=project, env={**env, "DISTSPEC_SCHEDULER": "kubernetes"}, home=home)
    assert env_cfg.scheduler == "kubernetes"


def test_defaults_and_state_dir(tree: tuple[Path, Path]) -> None:
    home, project = tree
    cfg = load_config(cwd=project, env={"HOME": str(home)}, home=home)
    assert cfg.scheduler == "local_cwd"
    assert cfg.state_dir == str(home / ".local" / "state" / "distspec")
    cfg = load_config(cwd=project, env={"HOME": str(home), "XDG_STATE_HOME": "/xdg"}, home=home)
    assert cfg.state_dir == "/xdg/distspec"
    cfg = load_config(cwd=project, env={"HOME": str(home), "DISTSPEC_STATE_DIR": "/s"}, home=home)
    assert cfg.state_dir == "/s"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[distspec]\nschedular = slurm\n", "unknown key 'schedular' (did you mean 'scheduler'?)"),
        ("[slurm]\npartition = x\n", "unknown section [slurm]"),
        ("[distspec]\nlog_level = LOUD\n", "log_level 'LOUD'"),
        ("not ini at all", "File contains no section headers"),
    ],
)
def test_bad_files_name_the_file(tree: tuple[Path, Path], text: str, message: str) -> None:
    home, project = tree
    path = _write(project / ".distspecconfig", text)
    with pytest.raises(ConfigError) as info:
        load_config(cwd=project, env={"HOME": str(home)}, home=home)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_bad_env_is_named(tree: tuple[Path, Path]) -> None:
    home, project = tree
    with pytest.raises(ConfigError, match="DISTSPEC_LOG_LEVEL='loud'"):
        load_config(cwd=project, env={"HOME": str(home), "DISTSPEC_LOG_LEVEL": "loud"}, home=home)
    assert (
        load_config(
            cwd=project, env={"HOME": str(home), "DISTSPEC_LOG_LEVEL": "debug"}, home=home
        ).log_level
        == "DEBUG"
    )


def test_bad_toml_is_named(tree: tuple[Path, Path]) -> None:
    home, project = tree
    path = _write(project / "pyproject.toml", "[tool.distspec\n")
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        load_config(cwd=project, env={"HOME": str(home)}, home=home)
    assert str(path) in str(info.value)
