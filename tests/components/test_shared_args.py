"""dist.ddp, dist.spmd, dist.torchrun and dist.fn: one role builder, one parameter help.

The help of the parameters they share is written once (``dist._SHARED_ARGS``) and
``dist._shared_args`` completes each one's docstring from it; these tests keep the four
from drifting apart again.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import docstring_parser
import pytest

from distspec.components import dist
from distspec.components import fn as fn_module
from distspec.components.binder import bind, help_text, params
from distspec.components.loader import Component, load
from distspec.specs import AppDef

COMPONENTS: dict[str, Callable[..., AppDef]] = {
    "dist.ddp": dist.ddp,
    "dist.spmd": dist.spmd,
    "dist.torchrun": dist.torchrun,
    "dist.fn": fn_module.fn,
}

#: The parameters whose help a component writes itself: ``-j`` (each reads a bare
#: ``-j N`` its own way), spmd's --gpu (its processes per node), and what only dist.fn
#: has or means differently (its name and rendezvous default follow the function).
OWN = {
    "dist.ddp": {"j"},
    "dist.spmd": {"j", "gpu"},
    "dist.torchrun": {"j"},
    "dist.fn": {
        *("fn_args", "fn", "j", "name", "rdzv_backend"),
        *("seed", "seed_per_rank", "groups", "backend", "timeout"),
    },
}


def _docs(text: str) -> dict[str, str]:
    doc = docstring_parser.parse(inspect.cleandoc(text))
    return {p.arg_name: p.description or "" for p in doc.params}


SHARED = _docs(
    "The shared help.\n\nArgs:\n"
    + "\n".join(f"    {line}" for line in dist._SHARED_ARGS.strip().splitlines())
)


@pytest.mark.parametrize("name", COMPONENTS)
def test_every_parameter_is_documented_in_the_order_of_the_signature(name: str) -> None:
    component = COMPONENTS[name]
    docs = _docs(component.__doc__ or "")
    assert list(docs) == list(inspect.signature(component).parameters)
    assert all(docs.values())


@pytest.mark.parametrize("name", COMPONENTS)
def test_a_shared_parameter_has_the_shared_help(name: str) -> None:
    docs = _docs(COMPONENTS[name].__doc__ or "")
    for param, text in docs.items():
        if param not in OWN[name]:
            assert text == SHARED[param], f"{name} --{param}"
        else:
            assert text != SHARED.get(param), f"{name} --{param}: the shared help, written again"


def test_every_shared_entry_is_used() -> None:
    used = {
        param
        for name, component in COMPONENTS.items()
        for param in inspect.signature(component).parameters
        if param not in OWN[name]
    }
    assert set(SHARED) == used


@pytest.mark.parametrize("name", COMPONENTS)
def test_help_shows_every_parameters_help(name: str) -> None:
    text = " ".join(help_text(load(name)).split())
    docs = _docs(COMPONENTS[name].__doc__ or "")
    for p in params(load(name)):
        first_words = " ".join(docs[p.name].replace("``", "").split()[:6])
        assert first_words in text, f"{name} --{p.name}"
    assert "(undocumented)" not in text


def test_ddp_spmd_and_torchrun_are_one_job_when_j_is_nxm() -> None:
    argv = [
        *("-j", "2x4", "--gpu", "4", "--cpu", "8", "--mem_mb", "1000", "--name", "e/r"),
        *("--env", "A=1", "--max_retries", "1", "--max_restarts", "2", "--rdzv_port", "1234"),
        *("--rdzv_conf", "timeout=5", "--mounts", "type=bind,src=/a,dst=/b", "--debug"),
        *("--tee", "1", "--tp", "2", "--image", "img", "-m", "pkg.train", "--", "--lr", "1"),
    ]
    apps = [bind(load(name), argv) for name in ("dist.ddp", "dist.spmd", "dist.torchrun")]
    assert apps[0] == apps[1] == apps[2]


def _component(*script_args: str, tee: int = 3, extra: int = 0) -> AppDef:
    """Summary.

    Args:
        extra: its own help.
    """
    raise NotImplementedError


def test_shared_args_completes_the_docstring_and_keeps_the_function() -> None:
    component = dist._shared_args(_component)
    assert component is _component and not hasattr(component, "__wrapped__")
    docs = _docs(component.__doc__ or "")
    assert docs == {
        "script_args": SHARED["script_args"],
        "tee": SHARED["tee"],
        "extra": "its own help.",
    }
    assert dist._shared_args(component).__doc__ == component.__doc__  # idempotent
    # the binder reads it as any component: its --help shows every parameter's help
    text = help_text(Component.of("c", component))
    assert "its own help." in text and "torchrun's --tee" in text


def test_shared_args_adds_an_args_section() -> None:
    def component(tee: int = 3) -> AppDef:
        """Summary."""
        raise NotImplementedError

    def described(tee: int = 3) -> AppDef:
        """Summary.

        Description.
        """
        raise NotImplementedError

    for fn in (component, described):
        doc = dist._shared_args(fn).__doc__ or ""
        assert _docs(doc) == {"tee": SHARED["tee"]}
        assert help_text(Component.of("c", fn)).count("torchrun's --tee") == 1
    assert "Description." in (described.__doc__ or "")


def test_a_parameter_without_help_or_help_without_a_parameter_is_refused() -> None:
    def undocumented(*, tee: int = 3, zzz: int = 0) -> AppDef:
        """Summary."""
        raise NotImplementedError

    def stale(*, tee: int = 3) -> AppDef:
        """Summary.

        Args:
            gone: a parameter that is no more.
        """
        raise NotImplementedError

    with pytest.raises(TypeError, match=r"undocumented: no help for \['zzz'\]"):
        dist._shared_args(undocumented)
    with pytest.raises(TypeError, match=r"stale: the docstring documents no parameter \['gone'\]"):
        dist._shared_args(stale)
