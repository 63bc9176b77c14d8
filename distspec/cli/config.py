"""``distspec config``: the effective configuration and where each value came from.

Values that may be secrets are printed as ``***`` (their source is still shown):
the whole value of a key whose name says secret, token, password/passwd,
credential or key (``secret_env``, ``hf_token``, ``api_key``), and the values of
environment variables given through the config (a key named ``env`` or ``*_env``:
``env = HF_TOKEN=***,OMP_NUM_THREADS=***``: the variables' names stay visible).
"""

from __future__ import annotations

import argparse

# The masking rules live in distspec.config, beside what they hide (the runner's
# debug log uses them too); `distspec config` prints with them.
from distspec.config import MASK, masked

__all__ = ["MASK", "add_arguments", "main", "masked", "show"]


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec config`` to ``parser``."""
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    """Run ``distspec config`` with the parsed ``args``; returns the exit code."""
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
