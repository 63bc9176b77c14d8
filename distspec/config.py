"""Defaults for run options and component arguments, from files and the environment.

Also the rule for which values may be secrets (:func:`masked`), which ``distspec
config`` and the runner's debug log hide.

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

``.distspecconfig`` is INI, with ``;`` or ``#`` comments on their own lines or after a
value (after whitespace)::

    [distspec]
    scheduler = slurm        ; the default -s

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
from distspec.frozen import field, frozen
from distspec.schedulers._registry import BUILTIN_SCHEDULERS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["CONFIG_FILE", "MASK", "Config", "Layer", "Setting", "load_config", "masked"]

CONFIG_FILE = ".distspecconfig"
#: The largest config file distspec reads: a config is a few KiB; a path that names
#: a log, an image or a device by mistake is refused rather than read.
MAX_CONFIG_BYTES = 1 << 20
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_GENERAL_KEYS = ("scheduler", "session", "state_dir", "log_level")
_ENV_GENERAL = {f"DISTSPEC_{k.upper()}": k for k in _GENERAL_KEYS}

#: Every ``DISTSPEC_*`` variable distspec reads or sets, apart from the
#: ``DISTSPEC_<SCHEDULER>_<OPTION>`` family (checked against the scheduler's
#: options): the settings, the ``.torchxconfig`` switch, and what a job's processes
#: are given (a ``distspec`` command run inside a job sees those). A variable
#: that is none of these but close to one of them (``DISTSPEC_SCHEDULAR``) is a
#: ConfigError with a did-you-mean; tests/test_config.py checks this list against
#: every ``DISTSPEC_`` name in the code.
ENV_VARIABLES = (
    *_ENV_GENERAL,
    "DISTSPEC_TORCHXCONFIG",
    # Set in the job (schedulers/, runtime/, components/):
    "DISTSPEC_APP_ID",
    "DISTSPEC_ROLE_NAME",
    "DISTSPEC_REPLICA_ID",
    "DISTSPEC_RANK0_HOST",
    "DISTSPEC_NODES",  # the allocation's nodes, for an OCI container's node rank
    "DISTSPEC_WORKDIR",
    "DISTSPEC_JOB_DIR",
    "DISTSPEC_SNAPSHOT",
    "DISTSPEC_SNAPSHOT_PYTHONPATH",
    # A sweep point's index and its points file (its values: DISTSPEC_SWEEP_<name>).
    "DISTSPEC_SWEEP_INDEX",
    "DISTSPEC_SWEEP_FILE",
    "DISTSPEC_TASK",
    "DISTSPEC_DEGREES",
    "DISTSPEC_LAUNCHER",
    # Faults (specs/faults.py, runtime/resume.py, runtime/watchdog.py): the checkpoint
    # folder, local_cwd's restart count, the watchdog's period (heartbeats on).
    "DISTSPEC_CHECKPOINT_DIR",
    "DISTSPEC_ATTEMPT",
    "DISTSPEC_WATCHDOG",
    # distspec's worker Python for torchrun (submit_env), where metrics go, and where
    # else (TensorBoard, W&B, MLflow: runtime/sinks.py).
    "DISTSPEC_WORKER_EXEC",
    "DISTSPEC_METRICS",
    "DISTSPEC_METRICS_SINKS",
    "DISTSPEC_METRICS_SHIP_S",
    # env_to_local (schedulers/batch/envcopy.py): the node-local copy of the job's
    # Python environment, and how long the batch script waits for every node's copy.
    "DISTSPEC_ENV_LOCAL",
    "DISTSPEC_ENV_TIMEOUT",
)
#: Read by the test suite and scripts/ only, never by distspec; never flagged.
DEV_VARIABLES = (
    "DISTSPEC_TEST_NO_CLUSTERS",
    "DISTSPEC_TEST_SLOW_IMPORT",
    "DISTSPEC_TEST_MARK",
    "DISTSPEC_TEST_THIRDPARTY",
    "DISTSPEC_K8S_CACHE",
    "DISTSPEC_K8S_STATE",
    "DISTSPEC_K8S_API_PORT",
    "DISTSPEC_K8S_ETCD_PORT",
    "DISTSPEC_K8S_BUILD_LOG",
    "DISTSPEC_K8S_CRDS",
    "DISTSPEC_SLURM_CLUSTER",
    "DISTSPEC_SLURM_STATE",
    "DISTSPEC_SLURM_UP_TIMEOUT",
    "DISTSPEC_OPENPBS_CLUSTER",
    "DISTSPEC_OPENPBS_SOURCE",
    "DISTSPEC_PBS_CACHE",
    "DISTSPEC_PBS_STATE",
    "DISTSPEC_PBS_UP_TIMEOUT",
    "DISTSPEC_CONTAINER_TESTS",
    "DISTSPEC_CONTAINER_IMAGE",
    "DISTSPEC_CONTAINER_CACHE",
    "DISTSPEC_CONTAINER_STATE",
    "DISTSPEC_CONTAINER_TORCH",
    "DISTSPEC_OCI_CONF",
    "DISTSPEC_DEBIAN_MIRROR",
    "DISTSPEC_ENROOT_SOURCE",
    "DISTSPEC_PYXIS_SOURCE",
    "DISTSPEC_PYXIS_CACHE",
    "DISTSPEC_PYXIS_STATE",
    "DISTSPEC_PYXIS_PLUGSTACK",
    "DISTSPEC_PYXIS_TESTS",
)
#: The built-in schedulers, whose DISTSPEC_<NAME>_* variables are run options.
_SCHEDULERS = tuple(BUILTIN_SCHEDULERS)
#: The scheduler a run uses when no layer names one.
DEFAULT_SCHEDULER = "local_cwd"


@frozen
class Layer:
    """One source of settings: where it came from and what it says."""

    source: str
    general: Mapping[str, str] = field(default_factory=dict)
    schedulers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    components: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: ``"section key"`` -> line number in the file (sections as in the INI file:
    #: ``distspec``, ``scheduler:slurm``, ``component:dist.ddp``), where known.
    lines: Mapping[str, int] = field(default_factory=dict)

    def where(self, section: str, key: str) -> str:
        """``file:line`` of ``key`` in ``section`` (the source alone if unknown)."""
        if self.source.startswith("environment"):
            if section == "distspec":
                return f"DISTSPEC_{key.upper()}"
            kind, _, name = section.partition(":")
            if kind == "scheduler":
                return f"DISTSPEC_{name.upper()}_{key.upper()}"
            return self.source
        line = self.lines.get(f"{section} {key}")
        path = self.source.partition(" [tool.distspec]")[0]
        return f"{path}:{line}" if line else self.source


@frozen(kw_only=False)
class Setting:
    """One effective value and where it came from (``distspec config``)."""

    section: str
    key: str
    value: Any
    source: str


@frozen
class Config:
    """Every layer, lowest precedence first; ask it for merged values."""

    layers: tuple[Layer, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def general(self, key: str, default: str) -> str:
        """``key`` of the ``[distspec]`` section from the highest layer that sets it, else
        ``default``."""
        value = default
        for layer in self.layers:
            value = layer.general.get(key, value)
        return value

    @property
    def scheduler(self) -> str:
        """The default scheduler (``scheduler``), else :data:`DEFAULT_SCHEDULER`."""
        return self.general("scheduler", DEFAULT_SCHEDULER)

    @property
    def session(self) -> str:
        """The session name handles carry (``session``), else ``distspec``."""
        return self.general("session", "distspec")

    @property
    def log_level(self) -> str:
        """The level of distspec's own log (``log_level``), else ``WARNING``."""
        return self.general("log_level", "WARNING")

    @property
    def state_dir(self) -> str:
        """Where backends keep their records: ``state_dir``, else
        ``$XDG_STATE_HOME/distspec``, else ``~/.local/state/distspec``. A relative
        ``$XDG_STATE_HOME`` is ignored, as the XDG Base Directory spec says."""
        explicit = self.general("state_dir", "")
        if explicit:
            return os.path.expanduser(explicit)
        return os.path.join(xdg_dir(self.env, "XDG_STATE_HOME", ".local/state"), "distspec")

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
        """The defaults set for ``component``'s parameters, every layer merged, higher layers
        winning."""
        merged: dict[str, Any] = {}
        for layer in self.layers:
            merged.update(layer.components.get(component, {}))
        return merged

    def component_source(self, component: str, key: str) -> str:
        """``file:line`` of the default for ``key`` of ``component`` that takes effect."""
        found = ""
        for layer in self.layers:
            if key in layer.components.get(component, {}):
                found = layer.where(f"component:{component}", key)
        return found

    def where(self, source: str, section: str, key: str) -> str:
        """``file:line`` (or the variable) of ``key`` in ``section`` of the layer
        ``source`` names, for error messages."""
        if source.startswith("environment (DISTSPEC_") and section.startswith("scheduler:"):
            return f"DISTSPEC_{section.partition(':')[2].upper()}_{key.upper()}"
        for layer in self.layers:
            if layer.source == source:
                return layer.where(section, key)
        return source

    def settings(self) -> list[Setting]:
        """Every value set anywhere, as it takes effect, with where it came from; the
        general keys always (a built-in default says so)."""
        out: list[Setting] = []
        defaults = {
            "scheduler": DEFAULT_SCHEDULER,
            "session": "distspec",
            "log_level": "WARNING",
            "state_dir": self.state_dir,
        }
        for key in _GENERAL_KEYS:
            value, source = defaults[key], "default"
            if key == "state_dir" and not self.general("state_dir", ""):
                source = "default ($XDG_STATE_HOME/distspec or ~/.local/state/distspec)"
            for layer in self.layers:
                if key in layer.general:
                    value, source = layer.general[key], layer.where("distspec", key)
            out.append(Setting("distspec", key, value, source))
        sections: dict[str, dict[str, tuple[Any, str]]] = {}
        for layer in self.layers:
            for kind, groups in (("scheduler", layer.schedulers), ("component", layer.components)):
                for name, values in groups.items():
                    section = f"{kind}:{name}"
                    for key, value in values.items():
                        sections.setdefault(section, {})[key] = (value, layer.where(section, key))
        for section in sorted(
            {s for s in sections} | {f"scheduler:{n}" for n in self._env_scheds()}
        ):
            found = sections.get(section, {})
            if section.startswith("scheduler:"):
                name = section.partition(":")[2]
                prefix = f"DISTSPEC_{name.upper()}_"
                for k, v in self.env.items():
                    if k.startswith(prefix):
                        found[k[len(prefix) :].lower()] = (v, k)
            for key in sorted(found):
                value, source = found[key]
                out.append(Setting(section, key, value, source))
        return out

    def _env_scheds(self) -> set[str]:
        return {
            n for n in _SCHEDULERS if any(k.startswith(f"DISTSPEC_{n.upper()}_") for k in self.env)
        }


def xdg_dir(env: Mapping[str, str], name: str, default: str) -> str:
    """``$name`` (an XDG base directory variable), or ``$HOME/<default>`` when it is
    unset, empty or relative: the XDG Base Directory spec says a relative path
    there is invalid and must be ignored."""
    value = env.get(name) or ""
    if os.path.isabs(value):
        return value
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), default)


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
        os.path.exists(os.path.join(d, ".torchxconfig")) for d in (folder, home)
    )
    if torchx:
        from distspec.config_torchx import read_layers, torchx_files

        layers += read_layers(torchx_files(folder, str(home), env))
    # Found with exists(), not isfile(): a config path that is there but is not a
    # regular file (a FIFO, a directory, a link to /dev/zero) is an error that
    # read_text() names, not a file silently skipped.
    user = os.path.join(home, CONFIG_FILE)
    if os.path.exists(user):
        layers.append(_read_ini(user))
    project_ini, pyproject = _find_project_files(folder, user)
    if pyproject is not None:
        layer = _read_pyproject(pyproject)
        if layer is not None:
            layers.append(layer)
    if project_ini is not None:
        layers.append(_read_ini(project_ini))
    _check_env_names(env)
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
            if os.path.exists(path) and not _same_file(path, user):
                ini = path
        if pyproject is None:
            path = os.path.join(folder, "pyproject.toml")
            if os.path.exists(path):
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


def _check_general(
    general: dict[str, str], source: str, lines: Mapping[str, int] | None = None
) -> dict[str, str]:
    def where(key: str) -> str:
        line = (lines or {}).get(f"distspec {key}")
        return f"{source.partition(' [tool.distspec]')[0]}:{line}" if line else source

    for key in list(general):
        if key not in _GENERAL_KEYS:
            from distspec.specs.options import did_you_mean

            raise ConfigError(
                f"unknown key {key!r}{did_you_mean(key, _GENERAL_KEYS)}; "
                f"known: {', '.join(_GENERAL_KEYS)}",
                source=where(key),
            )
    if "session" in general:
        _check_session(general["session"], f"{where('session')}: session")
    if "state_dir" in general:
        _check_state_dir(general["state_dir"], f"{where('state_dir')}: state_dir")
    level = general.get("log_level")
    if level is not None:
        if level.upper() not in _LOG_LEVELS:
            raise ConfigError(
                f"log_level {level!r} is not one of {', '.join(_LOG_LEVELS)}",
                source=where("log_level"),
            )
        general["log_level"] = level.upper()
    return general


def _ini_lines(text: str) -> dict[str, int]:
    """``"section key"`` -> 1-based line of each ``key = value`` (or ``key: value``)
    line of an INI file; continuation lines and comments are skipped."""
    found: dict[str, int] = {}
    section = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;" or raw[0].isspace():
            continue
        if line.startswith("[") and "]" in line:
            section = line[1 : line.index("]")].strip()
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut > 0:
            found.setdefault(f"{section} {line[:cut].strip()}", number)
    return found


def _toml_lines(text: str) -> dict[str, int]:
    """The same for ``[tool.distspec...]`` tables of a pyproject.toml (plain tables and
    ``key = value`` lines; enough to point at a line)."""
    found: dict[str, int] = {}
    section: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("[") and not line.startswith("[["):
            name = line.strip("[]").strip().replace('"', "").replace("'", "")
            section = None
            if name == "tool.distspec":
                section = "distspec"
            for kind, plural in (("scheduler", "schedulers"), ("component", "components")):
                head = f"tool.distspec.{plural}."
                if name.startswith(head):
                    section = f"{kind}:{name[len(head) :]}"
            continue
        if section is not None and "=" in line and not line.startswith("#"):
            found.setdefault(f"{section} {line.split('=', 1)[0].strip()}", number)
    return found


def _read_ini(path: str) -> Layer:
    import configparser

    # Inline comments after whitespace (`partition = gpu   ; the big one`), as most
    # INI dialects allow; configparser needs to be told.
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    text = read_text(path)
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as e:
        line = getattr(e, "lineno", None)
        if line is None and isinstance(e, configparser.ParsingError) and e.errors:
            line = e.errors[0][0]
        where = f"{path}:{line}" if line else str(path)
        raise ConfigError(str(e).splitlines()[0], source=where) from None
    lines = _ini_lines(text)
    general: dict[str, str] = {}
    schedulers: dict[str, dict[str, Any]] = {}
    components: dict[str, dict[str, Any]] = {}

    def header(section: str) -> str:
        line = next(
            (i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() == f"[{section}]"),
            None,
        )
        return f"{path}:{line}" if line else str(path)

    for section in parser.sections():
        values = dict(parser.items(section))
        kind, _, name = section.partition(":")
        if section == "distspec":
            general = values
        elif kind in ("scheduler", "component") and not name.strip():
            raise ConfigError(
                f"section [{section}] names no {kind}; write [{kind}:NAME]",
                source=header(section),
            )
        elif kind == "scheduler":
            schedulers[name.strip()] = values
        elif kind == "component":
            components[name.strip()] = values
        else:
            raise ConfigError(
                f"unknown section [{section}]; use [distspec], [scheduler:NAME] or [component:NAME]",
                source=header(section),
            )
    return Layer(
        source=str(path),
        general=_check_general(general, str(path), lines),
        schedulers=schedulers,
        components=components,
        lines=lines,
    )


def _not_utf8(e: UnicodeDecodeError) -> str:
    return f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})"


def read_text(path: str) -> str:
    """The text of the config file ``path``, or a ConfigError (one line) naming it.

    Never blocks and never reads without bound: the file is opened ``O_NONBLOCK``
    (a FIFO does not wait for a writer), checked with ``fstat`` to be a regular
    file (not a directory, FIFO, socket or device such as ``/dev/zero``) of at most
    :data:`MAX_CONFIG_BYTES`, and read up to that size; it must be UTF-8.
    """
    import stat

    def not_regular(mode: int) -> ConfigError:
        kind = next(
            (
                name
                for test, name in (
                    (stat.S_ISDIR, "a directory"),
                    (stat.S_ISFIFO, "a FIFO"),
                    (stat.S_ISSOCK, "a socket"),
                    (stat.S_ISCHR, "a character device"),
                    (stat.S_ISBLK, "a block device"),
                )
                if test(mode)
            ),
            "something else",
        )
        return ConfigError(f"is {kind}, not a regular file; a config must be a file", source=path)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        try:
            mode = os.stat(path).st_mode  # a socket cannot be opened at all (ENXIO)
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise not_regular(mode) from None
        raise ConfigError(f"cannot read it: {e.strerror or e}", source=str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(mode)
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ConfigError(f"cannot read it: {e.strerror or e}", source=str(path)) from None
    finally:
        os.close(fd)
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"is larger than {MAX_CONFIG_BYTES // 1024} KiB; a config file is a few lines",
            source=str(path),
        )
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(_not_utf8(e), source=str(path)) from None


def _read_pyproject(path: str) -> Layer | None:
    text = read_text(path)
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
        # tomllib's message ends with "(at line L, column C)".
        line = str(e).rpartition("at line ")[2].split(",")[0]
        where = f"{path}:{line}" if line.isdigit() else str(path)
        raise ConfigError(f"invalid TOML: {e}", source=where) from None
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
    lines = _toml_lines(text)
    for plural, group in (("schedulers", schedulers), ("components", components)):
        for name, values in group.items():
            if not name.strip():
                raise ConfigError(f'{plural}."{name}" names no {plural[:-1]}', source=source)
            if not isinstance(values, dict):
                raise ConfigError(
                    f"{plural}.{name} must be a table, not {type(values).__name__}",
                    source=source,
                )
            for key, value in values.items():
                if _not_finite(value):
                    at = lines.get(f"{plural[:-1]}:{name} {key}")
                    raise ConfigError(
                        f"{plural}.{name}.{key} = {value}: not a finite number",
                        source=f"{path}:{at}" if at else source,
                    )
    for key, value in section.items():
        if key not in ("schedulers", "components") and isinstance(value, (dict, list)):
            raise ConfigError(
                f"{key} must be a string, not a {'table' if isinstance(value, dict) else 'list'}",
                source=source,
            )
    return Layer(
        source=source,
        general=_check_general(general, source, lines),
        schedulers=schedulers,
        components=components,
        lines=lines,
    )


def _not_finite(value: Any) -> bool:
    """A TOML ``nan`` or ``inf`` (also inside a list): never a valid option value."""
    if isinstance(value, float):
        import math

        return not math.isfinite(value)
    if isinstance(value, list):
        return any(_not_finite(v) for v in value)
    return False


def _check_env_names(env: Mapping[str, str]) -> None:
    """Refuse a ``DISTSPEC_*`` variable that is none of distspec's but looks like a
    misspelt one (``DISTSPEC_SCHEDULAR``): it would be ignored without a word. Names
    of the ``DISTSPEC_<SCHEDULER>_<OPTION>`` family are checked with the scheduler's
    options; anything not close to a known name (a plugin's, the user's own) is left
    alone. The value is never shown."""
    known = (*ENV_VARIABLES, *DEV_VARIABLES)
    families = tuple(f"DISTSPEC_{n.upper()}_" for n in _SCHEDULERS)
    for name in env:
        if not name.startswith("DISTSPEC_") or name in known or name.startswith(families):
            continue
        import difflib

        suffix = name[len("DISTSPEC_") :]
        close = difflib.get_close_matches(
            suffix, [k[len("DISTSPEC_") :] for k in ENV_VARIABLES], n=1, cutoff=0.8
        )
        if close:
            from distspec._text import quote

            raise ConfigError(
                f"{quote(name)[1:-1]} is not a distspec variable (did you mean "
                f"DISTSPEC_{close[0]}?); rename or unset it"
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
    if "session" in general:
        _check_session(general["session"], "DISTSPEC_SESSION")
    if "state_dir" in general:
        _check_state_dir(general["state_dir"], "DISTSPEC_STATE_DIR")
    return Layer(source=source, general=general)


def _check_session(value: str, what: str) -> None:
    """A session is one path-free word: it is part of ``scheduler://session/app_id``."""
    bad = [c for c in value if c == "/" or c.isspace() or not c.isprintable()]
    if not value or bad:
        raise ConfigError(
            f"{what}={value!r} is not a valid session: it must be non-empty, "
            "without '/', whitespace or control characters"
        )


def _check_state_dir(value: str, what: str) -> None:
    """The state directory must be absolute (after ``~``), outside /proc and /sys, and
    a directory if it exists (it is created on the first submit otherwise)."""
    path = os.path.expanduser(value)
    problem = ""
    if not value:
        problem = "is empty"
    elif not value.isprintable():
        problem = "contains control characters"
    elif not os.path.isabs(path):
        problem = "is not an absolute path"
    elif any(
        os.path.normpath(path) == top or os.path.normpath(path).startswith(top + "/")
        for top in ("/proc", "/sys", "/dev")
    ):
        problem = "is inside /proc, /sys or /dev"
    elif os.path.exists(path) and not os.path.isdir(path):
        problem = "exists and is not a directory"
    if problem:
        raise ConfigError(f"{what}={value!r} {problem}")


# -- what may be a secret (``distspec config``, the runner's debug log) ------------

#: What a hidden value is printed as.
MASK = "***"
_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential")
_FLAGS = ("true", "false", "yes", "no", "on", "off", "1", "0")


def _words(key: str) -> list[str]:
    return key.lower().replace("-", "_").replace(".", "_").split("_")


def _is_secret(key: str) -> bool:
    """``secret_env``, ``hf_token``, ``db_password``, ``api_key``, ``apikey``, ``keys``."""
    name = key.lower()
    if any(word in name for word in _SECRET_WORDS):
        return True
    return any(w.endswith("key") or w == "keys" for w in _words(key))


def _is_env(key: str) -> bool:
    """``env``, ``extra_env``, ``job_env``, ``pbs.env``: environment variables,
    ``NAME=VALUE``. A key only starting with one (``env_to_local``, a path) is not."""
    return _words(key)[-1].endswith("env")


def masked(key: str, value: Any) -> Any:
    """``value`` as ``distspec config`` may show it: unchanged, or with what may be a
    secret replaced by :data:`MASK` (see the module's docstring).

    A secret key's value is hidden whole, even when it reads ``NAME=...`` (a token
    can contain ``=``); only a table's keys stay (TOML ``secret_env = {HF_TOKEN =
    "..."}``). An environment key's ``NAME=VALUE`` items keep their NAME: there the
    first ``=`` ends the variable's name by definition.
    """
    if _is_secret(key):
        if isinstance(value, dict):
            return {str(k): MASK for k in value}
        if isinstance(value, (list, tuple)):
            return [MASK for _ in value]
        return MASK
    if not _is_env(key):
        return value
    if isinstance(value, dict):
        return {str(k): MASK for k in value}
    if isinstance(value, (list, tuple)):
        return [_mask_items(str(v)) for v in value]
    if isinstance(value, str):
        if "=" not in value and value.strip().lower() in _FLAGS:
            return value  # a switch (PBS's export_env = true), not a mapping
        return _mask_items(value)
    return value


def _mask_items(text: str) -> str:
    """``A=x,B=y`` → ``A=***,B=***``, read as ``--env`` reads a mapping: a comma
    starts a new pair only when ``NAME=`` follows it (``A=/a,/b`` is one value) and a
    backslash escapes a comma. Only the names of variables are kept."""
    out: list[str] = []
    piece: list[str] = []

    def flush() -> None:
        name, eq, _ = "".join(piece).partition("=")
        if eq and name.isidentifier():
            out.append(f"{name}={MASK}")
        elif not out:
            out.append(MASK)  # no NAME= first: not a mapping, hide it all
        # else: the rest of the previous value, already hidden
        piece.clear()

    escaped = False
    for c in text:
        if escaped:
            piece.append(c)
            escaped = False
        elif c == "\\":
            piece.append(c)
            escaped = True
        elif c == ",":
            flush()
        else:
            piece.append(c)
    flush()
    return ",".join(out)
