from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distspec.errors import SpecError
from distspec.specs import (
    AppDef,
    BindMount,
    DeviceMount,
    FrozenDict,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
)
from distspec.specs.mounts import parse_mounts


def _role(**kw: object) -> Role:
    base: dict[str, object] = {"name": "trainer", "entrypoint": "python"}
    base.update(kw)
    return Role(**base)  # type: ignore[arg-type]


def test_appdef_is_frozen_and_normalised() -> None:
    role = _role(args=["-c", "pass"], env={"A": "1"})
    assert role.args == ("-c", "pass")
    assert isinstance(role.env, FrozenDict)
    app = AppDef(name="app", roles=[role])
    with pytest.raises(dataclasses.FrozenInstanceError):
        app.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        role.env["B"] = "2"  # type: ignore[index]
    assert hash(app) == hash(AppDef(name="app", roles=(role,)))


def test_values_survive_pickle_deepcopy_and_asdict() -> None:
    app = AppDef(
        name="a", roles=(_role(env={"K": "v"}, mounts=(BindMount(src_path="/d", dst_path="/d"),)),)
    )
    assert pickle.loads(pickle.dumps(app)) == app
    assert copy.deepcopy(app) == app
    assert dataclasses.asdict(app)["roles"][0]["name"] == "trainer"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "bad name"}, "role name"),
        ({"entrypoint": ""}, "empty entrypoint"),
        ({"num_replicas": 0}, "num_replicas"),
        ({"num_replicas": 2, "min_replicas": 3}, "min_replicas"),
        ({"max_retries": -1}, "max_retries"),
        ({"env": {"1BAD": "x"}}, "bad env entry"),
    ],
)
def test_invalid_roles_cannot_exist(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _role(**kwargs)


def test_invalid_apps_cannot_exist() -> None:
    with pytest.raises(SpecError, match="no roles"):
        AppDef(name="a", roles=())
    with pytest.raises(SpecError, match="duplicate role names: trainer"):
        AppDef(name="a", roles=(_role(), _role()))
    with pytest.raises(SpecError, match="app name"):
        AppDef(name="", roles=(_role(),))
    with pytest.raises(SpecError, match="non-negative"):
        Resource(cpu=-1)
    with pytest.raises(SpecError, match="gpu must be a non-negative integer"):
        Resource(gpu=None)  # type: ignore[arg-type]


def test_unspecified_cpu_and_memory_are_none_and_survive_json() -> None:
    res = Resource(gpu=8)
    assert (res.cpu, res.mem_mb) == (None, None)
    data = json.loads(json.dumps(res.to_dict()))
    assert data["cpu"] is None and data["mem_mb"] is None
    assert Resource.from_dict(data) == res


def test_mount_strings() -> None:
    mounts = parse_mounts(
        [
            "type=bind,src=/data,dst=/mnt/data,readonly",
            "type=volume,src=pvc1,dst=/ckpt",
            "type=device,src=/dev/fuse",
        ]
    )
    assert mounts == (
        BindMount(src_path="/data", dst_path="/mnt/data", read_only=True),
        VolumeMount(src="pvc1", dst_path="/ckpt"),
        DeviceMount(src_path="/dev/fuse", dst_path="/dev/fuse"),
    )
    with pytest.raises(SpecError, match="unknown mount key"):
        parse_mounts(["src=/a,colour=red"])
    with pytest.raises(SpecError, match="absolute"):
        parse_mounts(["src=/a,dst=rel"])


_text = st.text(max_size=20)
_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,10}", fullmatch=True)
_env_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@st.composite
def _roles(draw: st.DrawFn) -> Role:
    n = draw(st.integers(1, 64))
    return Role(
        name=draw(_names),
        entrypoint=draw(_text.filter(bool)),
        args=tuple(draw(st.lists(_text, max_size=5))),
        image=draw(_text),
        env=draw(st.dictionaries(_env_keys, _text, max_size=4)),
        num_replicas=n,
        min_replicas=draw(st.one_of(st.none(), st.integers(1, n))),
        resource=Resource(
            cpu=draw(st.integers(0, 64)),
            gpu=draw(st.integers(0, 8)),
            mem_mb=draw(st.integers(0, 10**6)),
        ),
        port_map=draw(st.dictionaries(_env_keys, st.integers(1, 65535), max_size=2)),
        max_retries=draw(st.integers(0, 5)),
        retry_policy=draw(st.sampled_from(list(RetryPolicy))),
        mounts=tuple(
            draw(
                st.lists(
                    st.one_of(
                        st.builds(
                            BindMount,
                            src_path=_text,
                            dst_path=st.just("/x"),
                            read_only=st.booleans(),
                        ),
                        st.builds(VolumeMount, src=_names, dst_path=st.just("/v")),
                        st.builds(DeviceMount, src_path=_text, dst_path=st.just("/dev/x")),
                    ),
                    max_size=3,
                )
            )
        ),
        metadata=draw(st.dictionaries(_names, _text, max_size=2)),
    )


@given(_names, st.lists(_roles(), min_size=1, max_size=3, unique_by=lambda r: r.name))
def test_json_round_trip(name: str, roles: list[Role]) -> None:
    app = AppDef(name=name, roles=tuple(roles), metadata={"k": "v"})
    data = json.loads(json.dumps(app.to_dict()))
    assert AppDef.from_dict(data) == app
