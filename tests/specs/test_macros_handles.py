from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.errors import HandleError
from distspec.specs import macros
from distspec.specs.handles import AppHandle
from distspec.specs.macros import Macro


def test_find_split_substitute() -> None:
    text = "--rdzv_endpoint=${rank0_host}:29500 ${HOME} ${replica_id}"
    assert macros.find(text) == {Macro.RANK0_HOST, Macro.REPLICA_ID}
    assert macros.split(text) == [
        "--rdzv_endpoint=",
        Macro.RANK0_HOST,
        ":29500 ${HOME} ",
        Macro.REPLICA_ID,
    ]
    assert (
        macros.substitute(text, {Macro.RANK0_HOST: "n0"})
        == "--rdzv_endpoint=n0:29500 ${HOME} ${replica_id}"
    )


@given(
    st.lists(
        st.one_of(st.text(alphabet="ab${}_ x", max_size=6), st.sampled_from(list(Macro))),
        max_size=8,
    )
)
def test_substitution_replaces_exactly_the_macros(parts: list[str | Macro]) -> None:
    text = "".join(p.token if isinstance(p, Macro) else p for p in parts)
    values = {m: f"<{m.value}>" for m in Macro}
    out = macros.substitute(text, values)
    expected = "".join(values[p] if isinstance(p, Macro) else p for p in macros.split(text))
    assert out == expected
    assert not macros.find(out)


# The grammar of a macro, as a regex: the scanner in macros.split must agree with it.
_MACRO = re.compile(r"\$\{(" + "|".join(m.value for m in Macro) + r")\}")


@given(
    st.lists(
        st.one_of(st.text(alphabet="a${}_", max_size=5), st.sampled_from(list(Macro))),
        max_size=8,
    ).map(lambda ps: "".join(p.token if isinstance(p, Macro) else p for p in ps))
)
def test_split_finds_what_the_regex_finds(text: str) -> None:
    expected = [Macro(m.group(1)) for m in _MACRO.finditer(text)]
    parts = macros.split(text)
    assert [p for p in parts if isinstance(p, Macro)] == expected
    assert "".join(p.token if isinstance(p, Macro) else p for p in parts) == text
    assert all(p for p in parts)  # no empty pieces
    assert macros.substitute(text, {}) == text


def test_handles() -> None:
    h = AppHandle.parse("slurm://distspec/1234")
    assert (h.scheduler, h.session, h.app_id) == ("slurm", "distspec", "1234")
    assert str(h) == "slurm://distspec/1234"
    assert AppHandle.parse("local_cwd:///abc").session == ""
    for bad in ("slurm:/x/1", "1234", "slurm://s/", "slurm://s/a/b"):
        with pytest.raises(HandleError, match="expected SCHEDULER://SESSION/APP_ID"):
            AppHandle.parse(bad)
