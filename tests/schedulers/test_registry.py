from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import distspec.schedulers._registry as registry_mod
from distspec.errors import SchedulerError, SchedulerNotFound
from distspec.schedulers._registry import SchedulerRegistry


class _EP:
    def __init__(self, name: str, value: str, loader: Any = None) -> None:
        self.name, self.value, self._loader = name, value, loader

    def load(self) -> Any:
        if self._loader is None:
            raise ImportError("no module named broken_plugin")
        return self._loader


def _fake_eps(monkeypatch: pytest.MonkeyPatch, eps: list[_EP]) -> None:
    import importlib.metadata

    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda group: eps if group == registry_mod.ENTRY_POINT_GROUP else [],
    )


def test_listing_imports_no_backend() -> None:
    code = (
        "import sys; from distspec.schedulers._registry import SchedulerRegistry as R; "
        "print(R(use_entry_points=False).names()); "
        "print([m for m in sys.modules if m.startswith('distspec.schedulers.') and m not in "
        "('distspec.schedulers._registry',)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    names, loaded = out.splitlines()
    assert "slurm" in names and "local_cwd" in names
    assert loaded == "[]"


def test_unknown_name_suggests(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_eps(monkeypatch, [])
    with pytest.raises(
        SchedulerNotFound, match=r"unknown scheduler 'slrum' \(did you mean 'slurm'\?\)"
    ):
        SchedulerRegistry().get("slrum")


def test_plugins_never_hide_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_eps(monkeypatch, [_EP("slurm", "evil.mod:Sched", object)])
    with pytest.raises(
        SchedulerError,
        match=r"plugin scheduler 'slurm' \(evil.mod:Sched\) clashes with the built-in",
    ):
        SchedulerRegistry().names()


def test_plugin_loading_and_broken_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = type("Toy", (), {})
    _fake_eps(monkeypatch, [_EP("toy", "toy.mod:Toy", sentinel), _EP("broken", "broken.mod:X")])
    reg = SchedulerRegistry()
    assert reg.get("toy") is sentinel
    assert reg.names()[-2:] == ["broken", "toy"]
    with pytest.raises(SchedulerError, match="plugin scheduler 'broken' .* failed to import"):
        reg.get("broken")
