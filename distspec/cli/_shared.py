"""Small pieces several verbs use."""

from __future__ import annotations

import argparse
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.config import Config
    from distspec.runner import Runner


#: How many ``-v`` the command line had (set by :func:`distspec.cli.main.main`).
verbosity = 0


def make_runner(config: Config | None = None) -> Runner:
    """A Runner on the loaded config, with logging to stderr at ``DISTSPEC_LOG_LEVEL``
    (or ``log_level`` from a config file), or INFO for ``-v`` and DEBUG for ``-vv``,
    whichever says more."""
    from distspec.config import load_config
    from distspec.runner import Runner

    config = config or load_config()
    levels = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
    level = min(levels.get(config.log_level, 30), 30 - 10 * min(verbosity, 2))
    if level != 30:
        import logging

        logging.basicConfig(level=level, format="distspec %(levelname)s %(name)s: %(message)s")
        log = logging.getLogger("distspec")
        for layer in config.layers:
            log.info("config: read %s", layer.source)
        log.debug("config: state dir %s, session %s", config.state_dir, config.session)
    return Runner(config=config)


def add_scheduler(parser: argparse.ArgumentParser, help: str, default: str | None = None) -> None:
    """The ``-s/--scheduler`` option of a verb that works on one backend."""
    parser.add_argument("-s", "--scheduler", default=default, help=help)


def add_handle(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "handle", metavar="HANDLE", help="SCHEDULER://SESSION/APP_ID, as `run` printed it"
    )


def print_json(data: object) -> None:
    import json

    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
