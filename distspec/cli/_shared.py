"""Small pieces several verbs use."""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.config import Config
    from distspec.runner import Runner


def make_runner(config: Config | None = None) -> Runner:
    from distspec.config import load_config
    from distspec.runner import Runner

    config = config or load_config()
    if config.log_level != "WARNING":
        import logging

        logging.basicConfig(level=config.log_level, format="%(levelname)s %(name)s: %(message)s")
    return Runner(config=config)


def add_handle(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "handle", metavar="HANDLE", help="SCHEDULER://SESSION/APP_ID, as `run` printed it"
    )


def print_json(data: object) -> None:
    import json

    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
