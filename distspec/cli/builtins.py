"""``distspec builtins``: every component and scheduler, built in or from a plugin, with
where it comes from. Lists names without importing any backend or component."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.metadata import EntryPoint


def add_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """Add the arguments of ``distspec builtins`` to ``parser``."""
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _plugin(ep: EntryPoint, name: str) -> dict[str, str]:
    dist = getattr(ep, "dist", None)
    package = f"{dist.name} {dist.version}" if dist is not None else "unknown package"
    return {"name": name, "origin": "plugin", "target": ep.value, "package": package}


def collect() -> tuple[list[dict[str, str]], list[dict[str, str]], list[str]]:
    """(components, schedulers, problems): each entry has name, origin (``builtin`` or
    ``plugin``), target (the import string) and, for plugins, the package. A broken
    or clashing plugin is a problem line; the rest is still listed."""
    from importlib.metadata import entry_points

    from distspec.components.loader import BUILTIN_COMPONENTS
    from distspec.components.loader import ENTRY_POINT_GROUP as COMPONENTS_GROUP
    from distspec.schedulers._registry import BUILTIN_SCHEDULERS
    from distspec.schedulers._registry import ENTRY_POINT_GROUP as SCHEDULERS_GROUP

    problems: list[str] = []
    components = [
        {"name": n, "origin": "builtin", "target": t, "package": "distspec"}
        for n, t in sorted(BUILTIN_COMPONENTS.items())
    ]
    for ep in sorted(entry_points(group=COMPONENTS_GROUP), key=lambda e: e.name):
        name = ep.name if ep.attr else f"{ep.name}.*"
        clash = ep.name in BUILTIN_COMPONENTS or any(
            b.startswith(ep.name + ".") for b in BUILTIN_COMPONENTS if not ep.attr
        )
        if clash:
            problems.append(
                f"component plugin {name} ({ep.value}) clashes with a builtin and is not used"
            )
            continue
        components.append(_plugin(ep, name))
    schedulers = [
        {"name": n, "origin": "builtin", "target": t, "package": "distspec"}
        for n, t in BUILTIN_SCHEDULERS.items()
    ]
    for ep in sorted(entry_points(group=SCHEDULERS_GROUP), key=lambda e: e.name):
        if ep.name in BUILTIN_SCHEDULERS:
            problems.append(
                f"scheduler plugin {ep.name} ({ep.value}) clashes with the builtin {ep.name}"
            )
            continue
        schedulers.append(_plugin(ep, ep.name))
    return components, schedulers, problems


def main(args: argparse.Namespace) -> int:
    """Run ``distspec builtins`` with the parsed ``args``; returns the exit code."""
    import sys

    from distspec.cli._shared import print_json

    components, schedulers, problems = collect()
    if args.json:
        print_json({"components": components, "schedulers": schedulers, "problems": problems})
        return 0
    for title, items in (("components", components), ("schedulers", schedulers)):
        print(f"{title}:")
        width = max(len(i["name"]) for i in items)
        for item in items:
            origin = (
                "builtin"
                if item["origin"] == "builtin"
                else f"plugin from {item['package']} ({item['target']})"
            )
            print(f"  {item['name']:<{width}}  {origin}")
    for problem in problems:
        print(f"distspec builtins: {problem}", file=sys.stderr)
    print("\n`distspec run COMPONENT --help` shows a component's parameters;")
    print("`distspec runopts SCHED` a scheduler's options.")
    return 0
