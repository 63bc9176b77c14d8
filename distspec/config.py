"""Defaults for run options and component arguments, from files and the environment.

Precedence, highest first:

1. the command line (``-s``, ``-cfg``, component flags);
2. environment variables: ``DISTSPEC_SCHEDULER``, ``DISTSPEC_SESSION``,
   ``DISTSPEC_STATE_DIR``, ``DISTSPEC_LOG_LEVEL``, and ``DISTSPEC_<SCHED>_<OPTION>``
   for any run option (``DISTSPEC_SLURM_PARTITION=gpu``);
3. the project config: the nearest ``.distspecconfig`` from the working directory
   upward, then ``[tool.distspec]`` of the nearest ``pyproject.toml``;
4. the user config: ``$HOME/.distspecconfig``;
5. a TorchX user's ``.torchxconfig`` (:mod:`distspec.config_torchx`), with a warning;
6. built-in defaults.

``.distspecconfig`` is INI::

    [distspec]
    scheduler = slurm

    [scheduler:slurm]
    partition = gpu

    [component:dist.ddp]
    j = 2x8

``pyproject.toml`` says the same with ``schedulers`` and ``components`` tables::

    [tool.distspec]
    scheduler = "slurm"
    [tool.distspec.schedulers.slurm]
    partition = "gpu"
    [tool.distspec.components."dist.ddp"]
    j = "2x8"
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from distspec.errors import ConfigError
from distspec.specs.frozen import field, frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["CONFIG_FILE", "Config", "Layer", "load_config"]

CONFIG_FILE = ".distspecconfig"
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_GENERAL_KEYS = ("scheduler", "session", "state_dir", "log_level")
_ENV_GENERAL = {f"DISTSPEC_{k.upper()}": k for k in _GENERAL_KEYS}


@frozen
class Layer:
    """One source of settings: where it came from and what it says."""

    source: str
    general: Mapping[str, str] = field(default_factory=dict)
    schedulers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    components: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@frozen
class Config:
    """Every layer, lowest precedence first; ask it for merged values."""

    layers: tuple[Layer, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def general(self, key: str, default: str) -> str:
        value = default
        for layer in self.layers:
            value = layer.general.get(key, value)
        return value

    @property
    def scheduler(self) -> str:
        return self.general("scheduler", "local_cwd")

    @property
    def session(self) -> str:
        return self.general("session", "distspec")

    @property
    def log_level(self) -> str:
        return self.general("log_level", "WARNING")

    @property
    def state_dir(self) -> str:
        """Where backends keep their records: ``state_dir``, else
        ``$XDG_STATE_HOME/distspec``, else ``~/.local/state/distspec``."""
        explicit = self.general("state_dir", "")
        if explicit:
            return os.path.expanduser(explicit)
        base = self.env.get("XDG_STATE_HOME") or os.path.join(
            self.env.get("HOME") or os.path.expanduser("~"), ".local", "state"
        )
        return os.path.join(base, "distspec")

    def scheduler_layers(self, scheduler: str) -> list[tuple[str, Mapping[str, Any]]]:
        """(source, options) for ``scheduler``, lowest precedence first."""
        found = [
            (l.source, l.schedulers[scheduler]) for l in self.layers if scheduler in l.schedulers
        ]
        prefix = f"DISTSPEC_{scheduler.upper()}_"
        from_env = {
            k[len(prefix) :].lower(): v for k, v in self.env.items() if k.startswith(prefix)
        }
        if from_env:
            found.append((f"environment ({prefix}*)", from_env))
        return found

    def component_defaults(self, component: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for layer in self.layers:
            merged.update(layer.components.get(component, {}))
        return merged


def load_config(
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
) -> Config:
    """Read every layer. Files that do not exist are skipped; malformed ones are errors."""
    env = dict(os.environ if env is None else env)
    folder = os.path.abspath(os.getcwd() if cwd is None else cwd)
    if home is None:
        home = env.get("HOME") or os.path.expanduser("~")
    layers: list[Layer] = []
    # A TorchX user's .torchxconfig is the lowest layer; its reader (config_torchx.py)
    # is imported only when there is one to read.
    torchx = bool(env.get("TORCHXCONFIG")) or any(
        os.path.isfile(os.path.join(d, ".torchxconfig")) for d in (folder, home)
    )
    if torchx:
        from distspec.config_torchx import read_layers, torchx_files

        layers += read_layers(torchx_files(folder, str(home), env))
    user = os.path.join(home, CONFIG_FILE)
    if os.path.isfile(user):
        layers.append(_read_ini(user))
    project_ini, pyproject = _find_project_files(folder, user)
    if pyproject is not None:
        layer = _read_pyproject(pyproject)
        if layer is not None:
            layers.append(layer)
    if project_ini is not None:
        layers.append(_read_ini(project_ini))
    layers.append(_read_env(env))
    config = Config(layers=tuple(layers), env=env)
    if torchx:
        from distspec.config_torchx import warn_if_used

        warn_if_used(config)
    return config


def _find_project_files(folder: str, user: str) -> tuple[str | None, str | None]:
    """The nearest ``.distspecconfig`` (not the user's own) and ``pyproject.toml`` from
    ``folder`` (absolute) upward."""
    ini: str | None = None
    pyproject: str | None = None
    while True:
        if ini is None:
            path = os.path.join(folder, CONFIG_FILE)
            if os.path.isfile(path) and not _same_file(path, user):
                ini = path
        if pyproject is None:
            path = os.path.join(folder, "pyproject.toml")
            if os.path.isfile(path):
                pyproject = path
        parent = os.path.dirname(folder)
        if (ini is not None and pyproject is not None) or parent == folder:
            return ini, pyproject
        folder = parent


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_general(general: dict[str, str], source: str) -> dict[str, str]:
    for key in list(general):
        if key not in _GENERAL_KEYS:
            from distspec.specs.options import did_you_mean

            raise ConfigError(
                f"unknown key {key!r}{did_you_mean(key, _GENERAL_KEYS)}; "
                f"known: {', '.join(_GENERAL_KEYS)}",
                source=source,
            )
    level = general.get("log_level")
    if level is not None:
        if level.upper() not in _LOG_LEVELS:
            raise ConfigError(
                f"log_level {level!r} is not one of {', '.join(_LOG_LEVELS)}", source=source
            )
        general["log_level"] = level.upper()
    return general


def _read_ini(path: str) -> Layer:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error as e:
        raise ConfigError(str(e).splitlines()[0], source=str(path)) from None
    general: dict[str, str] = {}
    schedulers: dict[str, dict[str, Any]] = {}
    components: dict[str, dict[str, Any]] = {}
    for section in parser.sections():
        values = dict(parser.items(section))
        if section == "distspec":
            general = values
        elif section.startswith("scheduler:"):
            schedulers[section.partition(":")[2].strip()] = values
        elif section.startswith("component:"):
            components[section.partition(":")[2].strip()] = values
        else:
            raise ConfigError(
                f"unknown section [{section}]; use [distspec], [scheduler:NAME] or [component:NAME]",
                source=str(path),
            )
    return Layer(
        source=str(path),
        general=_check_general(general, str(path)),
        schedulers=schedulers,
        components=components,
    )


def _read_pyproject(path: str) -> Layer | None:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if "distspec" not in text:
        # No [tool.distspec] can be in a file that never says "distspec"; most
        # projects' pyproject.toml don't, and parsing TOML costs ~9 ms of start-up.
        return None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"invalid TOML: {e}", source=str(path)) from None
    section = data.get("tool", {}).get("distspec")
    if section is None:
        return None
    source = f"{path} [tool.distspec]"
    if not isinstance(section, dict):
        raise ConfigError("[tool.distspec] must be a table", source=source)
    schedulers = section.get("schedulers", {})
    components = section.get("components", {})
    general = {k: str(v) for k, v in section.items() if k not in ("schedulers", "components")}
    if not isinstance(schedulers, dict) or not isinstance(components, dict):
        raise ConfigError("schedulers.* and components.* must be tables", source=source)
    return Layer(
        source=source,
        general=_check_general(general, source),
        schedulers=schedulers,
        components=components,
    )


def _read_env(env: Mapping[str, str]) -> Layer:
    general = {_ENV_GENERAL[k]: v for k, v in env.items() if k in _ENV_GENERAL}
    source = "environment (DISTSPEC_*)"
    if "log_level" in general:
        level = general["log_level"].upper()
        if level not in _LOG_LEVELS:
            raise ConfigError(
                f"DISTSPEC_LOG_LEVEL={general['log_level']!r} is not one of {', '.join(_LOG_LEVELS)}"
            )
        general["log_level"] = level
    if "scheduler" in general and not general["scheduler"].strip():
        raise ConfigError("DISTSPEC_SCHEDULER is set but empty")
    return Layer(source=source, general=general)
