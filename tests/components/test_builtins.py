"""Every builtin component makes a valid CLI from its signature and docstring."""

from __future__ import annotations

import inspect

import docstring_parser
import pytest

from distspec.components.binder import Kind, help_text, params
from distspec.components.loader import BUILTIN_COMPONENTS, load


@pytest.mark.parametrize("name", sorted(BUILTIN_COMPONENTS))
def test_builtin_cli_and_help(name: str) -> None:
    comp = load(name)
    ps = params(comp)  # raises on any unsupported type
    text = help_text(comp)
    assert text.startswith(f"usage: distspec run {name} ")
    assert "--help" in text
    doc = docstring_parser.parse(inspect.getdoc(comp.fn) or "")
    assert doc.short_description
    documented = {p.arg_name.lstrip("*") for p in doc.params}
    for p in ps:
        assert p.name in documented, f"{name}: {p.name} is not in the Args: section"
        described = next(d.description for d in doc.params if d.arg_name.lstrip("*") == p.name)
        assert described and described.split()[0] in text
        if p.kind is Kind.ARGS:
            assert p.name.upper() in text
        else:
            assert p.flags[0] in text
    assert "(undocumented)" not in text


@pytest.mark.parametrize("name", sorted(BUILTIN_COMPONENTS))
def test_no_builtin_uses_dash_h_for_help(name: str) -> None:
    for p in params(load(name)):
        assert "--help" not in p.flags
