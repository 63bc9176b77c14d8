"""TorchX's Template macros rewritten into distspec's (pure functions; no torchx needed).

The conversion of real ``torchx.specs.AppDef`` objects is tested with TorchX itself
in test_torchx_components.py and the corpus (test_torchx_corpus.py).
"""

from __future__ import annotations

from pathlib import Path
from string import Template

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.components import torchx_compat as tc
from distspec.specs import macros
from distspec.specs.macros import Macro


@pytest.mark.parametrize(
    ("torchx_text", "distspec_text", "rank0"),
    [
        ("--id ${app_id}", "--id ${app_id}", False),
        ("--id $app_id", "--id ${app_id}", False),  # Template's unbraced form
        ("$replica_id/${img_root}", "${replica_id}/${img_root}", False),
        ("$${${rank0_env}:=localhost}:29500", "${TORCHX_RANK0_HOST:=localhost}:29500", True),
        ("cost $$5 ${HOME} $USER $app_idx", "cost $5 ${HOME} $USER $app_idx", False),
        ("trailing $", "trailing $", False),
        ("${unclosed", "${unclosed", False),
    ],
)
def test_template_text(torchx_text: str, distspec_text: str, rank0: bool) -> None:
    used = [False]
    assert tc._text(torchx_text, "args[0]", used) == distspec_text
    assert used[0] is rank0


@pytest.mark.parametrize("text", ["$${app_id}", "${num_replicas}", "x ${rank0_host} y"])
def test_literal_distspec_macro_is_refused(text: str) -> None:
    with pytest.raises(tc._Refusal, match=r"args\[0\] holds \$\{"):
        tc._text(text, "args[0]", [False])


def test_foreign_types_are_named_and_not_taken_for_torchx() -> None:
    class AppDef:  # a user's own class of the same name
        pass

    assert not tc.is_torchx_appdef(AppDef())
    assert tc.type_label("x") == "str"
    assert tc.type_label(AppDef()).endswith("AppDef")


def test_return_annotation_check_imports_nothing() -> None:
    def plain() -> str:
        return ""

    assert not tc.returns_torchx_appdef(plain)

    def by_string() -> None:
        pass

    by_string.__annotations__["return"] = "specs.AppDef"  # no `specs` in this module
    assert not tc.returns_torchx_appdef(by_string)


def test_base_img_root_is_refused_with_the_equivalent() -> None:
    with pytest.raises(tc._Refusal, match=r"env\['X'\] uses \$\{base_img_root\}.*\$\{img_root\}"):
        tc._text("${base_img_root}/bin", "env['X']", [False])


def test_a_foreign_appdef_is_named_in_the_error(tmp_path: Path) -> None:
    from distspec.components.binder import bind
    from distspec.components.loader import load
    from distspec.errors import ComponentError

    (tmp_path / "other.py").write_text(
        "class AppDef:\n    pass\n\n\ndef make() -> AppDef:\n    '''A foreign AppDef.'''\n"
        "    return AppDef()\n"
    )
    with pytest.raises(
        ComponentError,
        match=r"returned _distspec_component_other_\w+\.AppDef, not an AppDef \(distspec\.specs\.AppDef\)",
    ):
        bind(load(f"{tmp_path}/other.py:make"), [])


_PIECES = ["$", "$$", "{", "}", "a", " ", ":=", "app_id", "replica_id", "img_root", "rank0_env"]
_PIECES += ["${app_id}", "$app_id", "${replica_id}", "${img_root}", "${rank0_env}", "${HOME}", "$X"]


@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
def test_rewrite_then_distspec_substitution_equals_torchx_template(text: str) -> None:
    """What TorchX's string.Template makes of a text equals what distspec's macros make
    of its rewrite (or the rewrite is refused, naming why)."""
    values = {"app_id": "APP", "replica_id": "7", "img_root": "/img"}
    torchx = Template(text).safe_substitute(**values, rank0_env=tc.RANK0_ENV)
    try:
        rewritten = tc._text(text, "args[0]", [False])
    except tc._Refusal as e:
        assert "holds ${" in str(e)
        return
    ours = macros.substitute(
        rewritten,
        {Macro.APP_ID: "APP", Macro.REPLICA_ID: "7", Macro.IMG_ROOT: "/img"},
    )
    assert ours == torchx
