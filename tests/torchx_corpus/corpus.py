"""Reading the corpus file and splitting ``torchx run`` words (standard library + PyYAML)."""

from __future__ import annotations

from typing import Any

__all__ = ["load_entries", "split_run_args"]

_RUN_VALUE_OPTIONS = {"-s", "--scheduler", "-cfg", "--scheduler_args", "--workspace"}
_RUN_FLAGS = {"--dryrun", "--wait", "--log"}


def load_entries(path: str) -> list[dict[str, Any]]:
    import yaml

    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    return list(data["entries"])


def split_run_args(words: list[str]) -> tuple[str, dict[str, str], str, list[str]]:
    """``torchx run`` words -> (scheduler, cfg, component, component args)."""
    scheduler, cfg = "local_cwd", {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        if word in _RUN_FLAGS:
            i += 1
            continue
        if word not in _RUN_VALUE_OPTIONS:
            raise ValueError(f"unknown torchx run option {word!r}")
        value = words[i + 1]
        if word in ("-s", "--scheduler"):
            scheduler = value
        elif word in ("-cfg", "--scheduler_args"):
            for pair in value.split(","):
                key, _, val = pair.partition("=")
                cfg[key] = val
        i += 2
    return scheduler, cfg, words[i], list(words[i + 1 :])
