"""A TorchX user's ``.torchxconfig``, read as distspec's lowest config layer.

:func:`distspec.config.load_config` calls :func:`torchx_files` (a few ``stat`` calls)
and imports this module's readers only when there is a file to read, so a project
without ``.torchxconfig`` pays nothing for it.

Which files, as TorchX finds them: the file named by ``$TORCHXCONFIG`` alone when that
variable is set; otherwise ``./.torchxconfig`` (the working directory only, not its
parents) with ``$HOME/.torchxconfig`` on top of it. Both sit below every distspec
layer (``~/.distspecconfig``, the project's ``.distspecconfig`` or
``[tool.distspec]``, ``DISTSPEC_*``, the command line).

What is read:

==========================  ====================================================
``.torchxconfig``           distspec
==========================  ====================================================
``[SCHEDULER]`` (``[slurm]``)  ``[scheduler:SCHEDULER]``; ``mail-user`` and other
                            dashed keys become ``mail_user``. An option distspec's
                            backend does not have is an error naming the file
                            when that scheduler is used (TorchX skips it silently).
                            ``[kubernetes] queue`` means what ``-cfg queue`` means
                            (Kueue's queue unless ``flavor = volcano``); the
                            conversion adds TorchX's ``flavor = volcano``
``[component:NAME]``        ``[component:NAME]``; TorchX's ``memMB`` is ``mem_mb``
``[cli:run] scheduler``     ``[distspec] scheduler``
``[cli:run] component``,    not read: distspec has no default component or
``workspace`` and any       workspace; named in the warning
other ``[cli:*]`` key
==========================  ====================================================

Whenever a value from ``.torchxconfig`` is used (no distspec layer sets the same
key), :func:`warn_if_used` logs one warning line naming the file and the keys.
``distspec configure --from-torchx`` (:func:`convert`) writes the equivalent
``.distspecconfig`` sections, which silences it; ``DISTSPEC_TORCHXCONFIG=off``
ignores ``.torchxconfig`` altogether.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from distspec.config import Config, Layer
from distspec.errors import ConfigError
from distspec.schedulers._registry import BUILTIN_SCHEDULERS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "FILE_NAME",
    "SOURCE_TAG",
    "convert",
    "read_layers",
    "torchx_files",
    "used_keys",
    "warn_if_used",
]

FILE_NAME = ".torchxconfig"

#: Every layer read from a ``.torchxconfig`` has a source ending with this tag.
SOURCE_TAG = " (TorchX)"

_OFF = {"0", "off", "false", "no"}

#: ``[cli:*]`` keys of each file read that distspec has no use for, by layer source.
_UNREAD: dict[str, tuple[str, ...]] = {}


def torchx_files(cwd: str, home: str, env: Mapping[str, str]) -> list[str]:
    """The ``.torchxconfig`` files to read, lowest precedence first (``stat`` only).

    Raises:
        ConfigError: ``$TORCHXCONFIG`` names a file that does not exist.
    """
    if env.get("DISTSPEC_TORCHXCONFIG", "").strip().lower() in _OFF:
        return []
    named = env.get("TORCHXCONFIG")
    if named:
        if not os.path.isfile(named):
            raise ConfigError(f"TORCHXCONFIG={named!r} is not a file")
        return [named]
    found = [os.path.join(cwd, FILE_NAME), os.path.join(home, FILE_NAME)]
    out: list[str] = []
    for path in found:
        # exists(), not isfile(): one that is not a regular file is refused when read.
        if os.path.exists(path) and not any(_same(path, p) for p in out):
            out.append(path)
    return out


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def read_layers(paths: list[str]) -> list[Layer]:
    """One :class:`~distspec.config.Layer` per file, in the order given.

    Raises:
        ConfigError: a file that is not valid INI.
    """
    return [_read(path) for path in paths]


def _read(path: str) -> Layer:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    from distspec.config import read_text

    # read_text, not parser.read: that skips a file it cannot open without a word,
    # waits on a FIFO and raises UnicodeDecodeError on a file that is not UTF-8.
    text = read_text(path)
    try:
        parser.read_string(text, source=path)
    except configparser.Error as e:
        raise ConfigError(str(e).splitlines()[0], source=path) from None
    general: dict[str, str] = {}
    schedulers: dict[str, dict[str, Any]] = {}
    components: dict[str, dict[str, Any]] = {}
    unread: list[str] = []
    for section in parser.sections():
        values = dict(parser.items(section))
        if section.startswith("component:"):
            components[section.partition(":")[2].strip()] = _component_keys(values)
        elif section.startswith("cli:"):
            for key, value in values.items():
                if section == "cli:run" and key == "scheduler":
                    general["scheduler"] = value
                else:
                    unread.append(f"[{section}] {key}")
        else:
            name = section.strip()
            options = {k.replace("-", "_"): v for k, v in values.items()}
            # [kubernetes] queue means what -cfg queue means (the flavor's queue: Kueue
            # for job/jobset, Volcano for volcano); the flavor is not changed behind the
            # user's back. `configure --from-torchx` writes TorchX's flavor = volcano.
            schedulers[name] = options
    layer = Layer(
        source=path + SOURCE_TAG,
        general=general,
        schedulers=schedulers,
        components=components,
    )
    _UNREAD[layer.source] = tuple(unread)  # for the warning only
    return layer


def _component_keys(values: dict[str, str]) -> dict[str, str]:
    """TorchX's spellings of component parameters (``memMB``) as distspec's (``mem_mb``)."""
    from distspec.components.binder import ALIASES

    spelled = {flag.lstrip("-"): name for name, flags in ALIASES.items() for flag in flags}
    return {spelled.get(key, key): value for key, value in values.items()}


def _unread(layer: Layer) -> tuple[str, ...]:
    return _UNREAD.get(layer.source, ())


def used_keys(config: Config) -> dict[str, list[str]]:
    """For each ``.torchxconfig`` file of ``config``: the keys whose value distspec will
    use (no distspec layer or ``DISTSPEC_*`` variable sets the same key), as
    ``[section] key``, and, while there is no distspec config file yet, the keys it
    does not read (``... (not read)``, ``... (no such distspec scheduler)``): once
    the user has a ``.distspecconfig`` (``distspec configure --from-torchx`` lists
    those keys in it) they no longer keep the warning alive."""
    ours = [l for l in config.layers if not l.source.endswith(SOURCE_TAG)]
    migrated = any(not l.source.startswith("environment") for l in ours)
    ignored: list[str] = []
    out: dict[str, list[str]] = {}
    for layer in config.layers:
        if not layer.source.endswith(SOURCE_TAG):
            continue
        keys: list[str] = []
        if "scheduler" in layer.general and not any("scheduler" in l.general for l in ours):
            keys.append("[cli:run] scheduler")
        for sched, values in layer.schedulers.items():
            prefix = f"DISTSPEC_{sched.upper()}_"
            if sched not in BUILTIN_SCHEDULERS:
                ignored += [f"[{sched}] {key} (no such distspec scheduler)" for key in values]
                continue
            for key in values:
                if any(key in l.schedulers.get(sched, {}) for l in ours):
                    continue
                if prefix + key.upper() in config.env:
                    continue
                keys.append(f"[{sched}] {key}")
        for comp, values in layer.components.items():
            for key in values:
                if not any(key in l.components.get(comp, {}) for l in ours):
                    keys.append(f"[component:{comp}] {key}")
        ignored += [f"{k} (not read)" for k in _unread(layer)]
        if not migrated:
            keys += ignored
        ignored = []
        if keys:
            out[layer.source[: -len(SOURCE_TAG)]] = keys
    return out


def warn_if_used(config: Config) -> None:
    """Log one warning line when any ``.torchxconfig`` value is used or left unread."""
    used = used_keys(config)
    if not used:
        return
    import logging

    from distspec._text import escape

    parts = []
    for path, keys in used.items():
        shown = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
        parts.append(escape(f"{path}: {shown}"))
    logging.getLogger("distspec.config").warning(
        "distspec: warning: using TorchX settings as the lowest config layer (%s); "
        "convert them with `distspec configure --from-torchx`, or set "
        "DISTSPEC_TORCHXCONFIG=off to ignore the file",
        "; ".join(parts),
    )


def convert(cwd: str, home: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """``.distspecconfig`` text saying what the ``.torchxconfig`` files say, and its
    section headers (for ``distspec configure --from-torchx``). Reads the files even
    when ``DISTSPEC_TORCHXCONFIG=off``: converting is an explicit request.

    Raises:
        ConfigError: no ``.torchxconfig`` was found, or one is not valid INI.
    """
    env = {k: v for k, v in env.items() if k != "DISTSPEC_TORCHXCONFIG"}
    paths = torchx_files(cwd, home, env)
    if not paths:
        raise ConfigError(
            f"no {FILE_NAME} to convert: looked for $TORCHXCONFIG, "
            f"{os.path.join(cwd, FILE_NAME)} and {os.path.join(home, FILE_NAME)}"
        )
    general: dict[str, str] = {}
    schedulers: dict[str, dict[str, Any]] = {}
    components: dict[str, dict[str, Any]] = {}
    unread: list[str] = []
    for layer in read_layers(paths):  # lowest first: later files win, as when read
        general.update(layer.general)
        for name, values in layer.schedulers.items():
            schedulers.setdefault(name, {}).update(values)
        for name, values in layer.components.items():
            components.setdefault(name, {}).update(values)
        unread += _unread(layer)
    lines = [f"# converted from {', '.join(paths)} by `distspec configure --from-torchx`"]
    headers: list[str] = []

    def section(header: str, values: Mapping[str, Any]) -> None:
        headers.append(header)
        lines.extend(["", header])
        lines.extend(f"{key} = {value}" for key, value in values.items())

    if general:
        section("[distspec]", general)
    for name, values in schedulers.items():
        if name == "kubernetes" and "queue" in values and "flavor" not in values:
            # TorchX's Kubernetes scheduler always submits a Volcano Job in `queue`.
            values = {**values, "flavor": "volcano"}
        if name in BUILTIN_SCHEDULERS:
            section(f"[scheduler:{name}]", values)
        else:
            lines += ["", f"# [{name}]: distspec has no {name} scheduler; not converted:"]
            lines += [f"#   {key} = {value}" for key, value in values.items()]
    for name, values in components.items():
        section(f"[component:{name}]", values)
    if unread:
        lines += ["", "# not converted (distspec has no equivalent):"]
        lines += [f"#   {key}" for key in unread]
    return "\n".join(lines) + "\n", headers
