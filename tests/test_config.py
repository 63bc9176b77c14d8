from __future__ import annotations

import re
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


DOCS_EXAMPLE = """\
[distspec]
scheduler = slurm            ; default -s
session = distspec           ; the SESSION part of handles
state_dir = ~/.local/state/distspec
log_level = WARNING

[scheduler:slurm]
partition = gpu              # a hash starts a comment too
time = 2:00:00

[component:dist.ddp]
j = 2x8
"""


def test_inline_comments_of_the_docs_example(tree: tuple[Path, Path]) -> None:
    home, project = tree
    docs = (Path(__file__).parents[1] / "docs" / "config.md").read_text()
    blocks = re.findall(r"```ini[^\n]*\n(.*?)```", docs, re.S)
    ini = next(b for b in blocks if "[distspec]" in b)
    for text in (ini, DOCS_EXAMPLE):
        _write(project / ".distspecconfig", text)
        cfg = load_config(cwd=project, env={"HOME": str(home)}, home=home)
        assert (cfg.scheduler, cfg.session, cfg.log_level) == ("slurm", "distspec", "WARNING")
        merged: dict[str, str] = {}
        for _, values in cfg.scheduler_layers("slurm"):
            merged.update(values)
        assert merged["partition"] == "gpu"
        assert cfg.component_defaults("dist.ddp") == {"j": "2x8"}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("[distspec]\nscheduler = slurm\n\nschedular = x\n", 4, "unknown key 'schedular'"),
        ("[distspec]\nlog_level = loud\n", 2, "log_level 'loud'"),
        ("[distspec]\nscheduler = a\n[oops]\nx = 1\n", 3, "unknown section [oops]"),
        ("[distspec]\nscheduler = a\nscheduler = b\n", 3, "option 'scheduler'"),
        ("[distspec]\nscheduler = a\n  what\n[x\n", 4, "contains parsing errors"),
    ],
)
def test_errors_name_file_and_line(
    tree: tuple[Path, Path], text: str, line: int, message: str
) -> None:
    home, project = tree
    path = _write(project / ".distspecconfig", text)
    with pytest.raises(ConfigError) as info:
        load_config(cwd=project, env={"HOME": str(home)}, home=home)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert message in str(info.value)


def test_bad_run_option_names_file_and_line(tree: tuple[Path, Path]) -> None:
    from distspec.runner import Runner

    home, project = tree
    path = _write(project / ".distspecconfig", "[scheduler:slurm]\npartition = gpu\nnodez = 2\n")
    runner = Runner(config=load_config(cwd=project, env={"HOME": str(home)}, home=home))
    with pytest.raises(ConfigError, match=rf"^{path}:3: .*unknown option 'nodez'"):
        runner.options("slurm")
    toml = _write(
        project / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.distspec.schedulers.slurm]\nqos = "high"\nnodez = 5\n',
    )
    (project / ".distspecconfig").unlink()
    runner = Runner(config=load_config(cwd=project, env={"HOME": str(home)}, home=home))
    with pytest.raises(ConfigError, match=rf"^{toml}:6: "):
        runner.options("slurm", {})
    env = {"HOME": str(home), "DISTSPEC_SLURM_NODEZ": "1"}
    toml.unlink()
    runner = Runner(config=load_config(cwd=project, env=env, home=home))
    with pytest.raises(ConfigError, match="^DISTSPEC_SLURM_NODEZ: "):
        runner.options("slurm")


def test_toml_syntax_error_names_the_line(tree: tuple[Path, Path]) -> None:
    home, project = tree
    path = _write(project / "pyproject.toml", '[tool.distspec]\nscheduler = "slurm"\nx = \n')
    with pytest.raises(ConfigError, match=rf"^{path}:3: invalid TOML"):
        load_config(cwd=project, env={"HOME": str(home)}, home=home)


def test_settings_say_where_each_value_came_from(tree: tuple[Path, Path]) -> None:
    home, project = tree
    user = _write(home / ".distspecconfig", "[scheduler:slurm]\npartition = user\nqos = q\n")
    proj = _write(project / ".distspecconfig", "[distspec]\n\nscheduler = slurm ; here\n")
    env = {"HOME": str(home), "DISTSPEC_SESSION": "me", "DISTSPEC_SLURM_PARTITION": "env"}
    cfg = load_config(cwd=project, env=env, home=home)
    got = {(s.section, s.key): (s.value, s.source) for s in cfg.settings()}
    assert got[("distspec", "scheduler")] == ("slurm", f"{proj}:3")
    assert got[("distspec", "session")] == ("me", "DISTSPEC_SESSION")
    assert got[("distspec", "log_level")] == ("WARNING", "default")
    assert got[("scheduler:slurm", "partition")] == ("env", "DISTSPEC_SLURM_PARTITION")
    assert got[("scheduler:slurm", "qos")] == ("q", f"{user}:3")


def test_every_distspec_variable_in_the_code_is_known() -> None:
    """The names config.ENV_VARIABLES / DEV_VARIABLES list (never flagged as misspelt)
    are every DISTSPEC_* name the package, its scripts, tests and docs use, apart
    from the DISTSPEC_<SCHEDULER>_<OPTION> family."""
    from distspec.config import _SCHEDULERS, DEV_VARIABLES, ENV_VARIABLES

    root = Path(__file__).resolve().parent.parent
    files = [
        p
        for top in ("distspec", "scripts", "tests", "docs")
        for p in (root / top).rglob("*")
        if p.is_file() and p.suffix in ("", ".py", ".md", ".sh", ".toml", ".yaml")
    ]
    used: set[str] = set()
    for path in files:
        used |= set(re.findall(r"\bDISTSPEC_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="ignore")))
    families = tuple(f"DISTSPEC_{n.upper()}_" for n in _SCHEDULERS)
    # A Python constant in scripts/bench_callables, and names tests use on purpose
    # to show that an unknown or misspelt variable is refused.
    not_variables = {"DISTSPEC_CASE"}
    misspelt_on_purpose = {n for n in used if n.startswith("DISTSPEC_") and _is_typo_example(n)}
    unknown = used - set(ENV_VARIABLES) - set(DEV_VARIABLES) - not_variables - misspelt_on_purpose
    assert sorted(n for n in unknown if not n.startswith(families)) == []


def _is_typo_example(name: str) -> bool:
    return name in {
        "DISTSPEC_SCHEDULAR",
        "DISTSPEC_SCHEDULERS",
        "DISTSPEC_SHEDULER",
        "DISTSPEC_SESION",
        "DISTSPEC_SESSIONS",
        "DISTSPEC_STATEDIR",
        "DISTSPEC_STATE_DIRS",
        "DISTSPEC_LOGLEVEL",
        "DISTSPEC_LOG_LEVL",
        "DISTSPEC_TORCHX_CONFIG",
        "DISTSPEC_MYPLUGIN_QUEUE",
        "DISTSPEC_X",
        "DISTSPEC_JOB",
    }
