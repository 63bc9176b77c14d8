"""``distspec config``: the effective configuration and where each value came from.

Values that may be secrets are printed as ``***`` (their source is still shown):
the whole value of a key whose name says secret, token, password/passwd,
credential or key (``secret_env``, ``hf_token``, ``api_key``), and the values of
environment variables given through the config (a key named ``env`` or ``*_env``:
``env = HF_TOKEN=***,OMP_NUM_THREADS=***``: the variables' names stay visible).
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MASK", "add_arguments", "main", "masked", "show"]

#: What a hidden value is printed as.
MASK = "***"
_SECRET_WORDS = ("secret", "token", "password", "passwd", "credential")
_FLAGS = ("true", "false", "yes", "no", "on", "off", "1", "0")


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    return show(as_json=args.json)


def show(*, as_json: bool = False) -> int:
    """Print every setting in effect, INI-style, each with its source as a comment:
    ``file:line``, the environment variable, or ``default``."""
    from distspec.cli._shared import print_json
    from distspec.config import load_config

    config = load_config()
    settings = config.settings()
    sources = [layer.source for layer in config.layers if not layer.source.startswith("env")]
    if as_json:
        print_json(
            {
                "files": sources,
                "settings": [
                    {
                        "section": s.section,
                        "key": s.key,
                        "value": masked(s.key, s.value),
                        "source": s.source,
                    }
                    for s in settings
                ],
            }
        )
        return 0
    print("# files read, lowest precedence first: " + (", ".join(sources) or "none"))
    section = None
    for s in settings:
        if s.section != section:
            print(f"\n[{s.section}]")
            section = s.section
        print(f"{f'{s.key} = {masked(s.key, s.value)}':<40}  ; {s.source}")
    return 0


def _words(key: str) -> list[str]:
    return key.lower().replace("-", "_").replace(".", "_").split("_")


def _is_secret(key: str) -> bool:
    """``secret_env``, ``hf_token``, ``db_password``, ``api_key``, ``apikey``, ``keys``."""
    name = key.lower()
    if any(word in name for word in _SECRET_WORDS):
        return True
    return any(w.endswith("key") or w == "keys" for w in _words(key))


def _is_env(key: str) -> bool:
    """``env``, ``extra_env``, ``job_env``: environment variables, ``NAME=VALUE``."""
    return any(w == "env" or w.endswith("env") for w in _words(key))


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
