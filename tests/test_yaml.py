from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from distspec._yaml import dump, dump_all

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    _text,
    st.sampled_from(
        [
            "yes",
            "No",
            "on",
            "null",
            "~",
            "1.5",
            ".5",
            ".inf",
            "0x1f",
            "1e3",
            "1:20",
            "a: b",
            "- x",
            "#c",
            "&a",
            "*a",
            "!t",
            "",
            " ",
            "10Gi",
            "2001-12-14",
            "=",
            "a\nb",
            "\x85",
            "\u2028",
        ]
    ),
)
_docs = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_text, _docs, max_size=5))
def test_round_trips_through_a_real_yaml_parser(doc: dict[str, Any]) -> None:
    assert yaml.safe_load(dump(doc)) == (doc or {})


def test_several_documents_and_shapes() -> None:
    docs = [{"a": [{"b": 1, "c": ["x", {"d": None}]}, [1, [2]]], "e": {}, "f": []}, {"g": "true"}]
    text = dump_all(docs)
    assert list(yaml.safe_load_all(text)) == docs
    assert text.startswith("---\na:\n- b: 1\n")
    assert 'g: "true"' in text


def test_rejects_what_manifests_never_hold() -> None:
    with pytest.raises(TypeError):
        dump({"a": object()})
    with pytest.raises(TypeError):
        dump({1: "x"})  # type: ignore[dict-item]


def test_goldens_parse() -> None:
    for path in sorted((Path(__file__).parent / "golden" / "kubernetes").glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert yaml.safe_load_all(dump_all(docs)) is not None
        assert [d for d in yaml.safe_load_all(dump_all(docs)) if d] == docs, path


def test_colons_inside_plain_scalars() -> None:
    doc = {"a:1": "repo/img:1", "k": "x:", "url": "http://h:80/p", "t": "a: b"}
    assert yaml.safe_load(dump(doc)) == doc
