"""The loader: builtin | path/file.py:fn | pkg.module:fn | entry point."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from distspec.components import loader
from distspec.components.binder import bind, help_text
from distspec.components.loader import (
    BUILTIN_COMPONENTS,
    ENTRY_POINT_GROUP,
    Component,
    ComponentLoader,
    builtin_names,
    load,
)
from distspec.errors import ComponentError

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "examples" / "components" / "trainer.py"
STYLES = "tests.components.sample_styles"


def test_builtin_names() -> None:
    assert builtin_names() == [
        "dist.ddp",
        "dist.fn",
        "dist.spmd",
        "dist.torchrun",
        "utils.copy",
        "utils.echo",
        "utils.python",
        "utils.sh",
        "utils.touch",
    ]


@pytest.mark.parametrize("name", sorted(BUILTIN_COMPONENTS))
def test_builtins_load(name: str) -> None:
    comp = load(name)
    assert isinstance(comp, Component)
    assert comp.name == name
    assert comp.fn.__name__ == name.split(".")[1]
    path, _, line = comp.source.rpartition(":")
    module = BUILTIN_COMPONENTS[name].partition(":")[0]
    assert path.endswith(module.replace(".", "/") + ".py")
    assert int(line) > 1


def test_component_is_frozen() -> None:
    comp = load("utils.echo")
    with pytest.raises(AttributeError):
        comp.name = "x"  # type: ignore[misc]


def test_user_component_by_path_binds_and_helps(monkeypatch: pytest.MonkeyPatch) -> None:
    path_before = list(sys.path)
    monkeypatch.chdir(REPO)
    comp = load("examples/components/trainer.py:trainer")
    assert sys.path == path_before
    assert comp.source == f"{TRAINER}:25"
    app = bind(
        comp, ["--data", "/d", "--precision", "fp32", "--tags", "a,b", "-j", "2x4", "--", "--x"]
    )
    role = app.roles[0]
    assert app.name == "trainer"
    assert role.num_replicas == 2
    tail = role.args[role.args.index("examples/components/train.py") + 1 :]
    assert tail == ("--data", "/d", "--epochs", "1", "--lr", "0.1", "--precision", "fp32",
                    "--tag", "a", "--tag", "b", "--x")  # fmt: skip
    text = help_text(comp)
    for word in ("--data", "--precision {fp32,bf16}", "--compile, --no-compile", "--checkpoint",
                 "a checkpoint to resume from.", "Train the example model with DDP."):  # fmt: skip
        assert word in text


def test_absolute_path_works_too() -> None:
    assert load(f"{TRAINER}:trainer").fn.__name__ == "trainer"


def test_missing_file() -> None:
    with pytest.raises(ComponentError, match="component file 'nope/x.py' does not exist"):
        load("nope/x.py:fn")


def test_missing_function_suggests() -> None:
    with pytest.raises(
        ComponentError, match=r"has no function 'trainr' \(did you mean 'trainer'\?\)"
    ):
        load(f"{TRAINER}:trainr")


def test_file_that_does_not_import(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("def f(:\n")
    with pytest.raises(ComponentError, match="cannot import component file .*SyntaxError"):
        load(f"{bad}:f")
    missing = tmp_path / "missing_dep.py"
    missing.write_text("import no_such_module_distspec\n")
    with pytest.raises(ComponentError, match="ModuleNotFoundError"):
        load(f"{missing}:f")


def test_module_form() -> None:
    comp = load(f"{STYLES}:google_style")
    assert comp.fn.__module__ == STYLES
    with pytest.raises(ComponentError, match="cannot import module 'no_such_pkg_x.mod'"):
        load("no_such_pkg_x.mod:fn")


def test_not_a_function() -> None:
    with pytest.raises(ComponentError, match="is not a function"):
        load("distspec.specs:AppDef")


def test_malformed_name() -> None:
    with pytest.raises(ComponentError, match="malformed component"):
        load("pkg.mod:")


# -- entry points -----------------------------------------------------------------


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, **eps: str) -> None:
    """Replace the one seam the loader uses to scan plugins."""
    points = [
        importlib.metadata.EntryPoint(name=k, value=v, group=ENTRY_POINT_GROUP)
        for k, v in eps.items()
    ]

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return points if group == ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_function_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, **{"acme.train": f"{STYLES}:google_style"})
    comp = load("acme.train")
    assert comp.name == "acme.train" and comp.fn.__name__ == "google_style"
    assert ComponentLoader().plugin_names() == ["acme.train"]


def test_module_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, styles=STYLES)
    assert load("styles.rest_style").fn.__name__ == "rest_style"
    assert ComponentLoader().plugin_names() == ["styles.*"]
    with pytest.raises(ComponentError, match="names a module"):
        load("styles")
    with pytest.raises(ComponentError, match="has no function 'nope'"):
        load("styles.nope")


def test_plugin_clash_with_builtin_names_both(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, **{"dist.ddp": f"{STYLES}:google_style"})
    # the builtin is never hidden
    assert load("dist.ddp").fn.__module__ == "distspec.components.dist"
    for attempt in (lambda: load("other.thing"), lambda: ComponentLoader().names()):
        with pytest.raises(ComponentError) as info:
            attempt()
        text = str(info.value)
        assert f"{STYLES}:google_style" in text
        assert "distspec.components.dist:ddp" in text
        assert "clashes with builtin component 'dist.ddp'" in text


def test_module_entry_point_shadowing_a_builtin_group_clashes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_entry_points(monkeypatch, utils=STYLES)
    with pytest.raises(ComponentError, match="clashes with builtin component 'utils.copy'"):
        load("utils.whatever")


def test_broken_plugin_is_reported_and_others_work(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, broken="no_such_pkg_y.mod:fn", good=f"{STYLES}:numpy_style")
    with pytest.raises(
        ComponentError, match="entry point 'broken' = 'no_such_pkg_y.mod:fn' failed to import"
    ):
        load("broken")
    assert load("good").fn.__name__ == "numpy_style"


def test_unknown_name_suggests_and_points_to_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch)
    with pytest.raises(ComponentError) as info:
        load("dist.dpp")
    text = str(info.value)
    assert "unknown component 'dist.dpp' (did you mean 'dist.ddp'?)" in text
    assert "distspec builtins" in text


def test_builtins_do_not_scan_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(**_: object) -> None:
        raise AssertionError("entry points scanned for a builtin")

    monkeypatch.setattr(importlib.metadata, "entry_points", explode)
    load("dist.ddp")
    load(f"{STYLES}:google_style")
    load(f"{TRAINER}:trainer")
    assert loader.builtin_names()


def test_loader_with_custom_builtins() -> None:
    custom = ComponentLoader({"mine": f"{STYLES}:google_style"})
    assert custom.builtin_names() == ["mine"]
    assert custom.load("mine").fn.__name__ == "google_style"
