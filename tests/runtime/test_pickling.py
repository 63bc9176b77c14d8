"""Functions pickled by value keep their file name, so a worker's traceback names the
user's file, line and source with every cloudpickle the package accepts (3.1.3 writes
``<dynamic-code>`` by default)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import cloudpickle
import pytest

from distspec.runtime.pickling import dumps

SOURCE = textwrap.dedent(
    """
    def outer(x):
        def inner():
            raise ValueError(f"bad {x}")  # the line the traceback shows

        return inner()

    boom = lambda: 1 / 0
    """
)


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    path = tmp_path / "usermod_pickling.py"
    path.write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("usermod_pickling")
    cloudpickle.register_pickle_by_value(module)
    yield module
    cloudpickle.unregister_pickle_by_value(module)
    sys.modules.pop("usermod_pickling", None)


def _traceback_in_fresh_process(data: bytes, call: str) -> str:
    """Unpickle ``data`` in a new interpreter that cannot import the user's module
    (as on a worker) and return the traceback of ``call``."""
    code = textwrap.dedent(
        f"""
        import sys, traceback, cloudpickle
        obj = cloudpickle.loads(sys.stdin.buffer.read())
        try:
            {call}
        except Exception:
            print(traceback.format_exc())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, check=True, timeout=60
    )
    return done.stdout.decode()


def test_nested_function_traceback_names_file_line_and_source(user_module: object) -> None:
    file = user_module.__file__  # type: ignore[attr-defined]
    text = _traceback_in_fresh_process(dumps(user_module.outer), "obj(7)")  # type: ignore[attr-defined]
    assert f'File "{file}", line 4, in inner' in text
    assert f'File "{file}", line 6, in outer' in text
    assert 'raise ValueError(f"bad {x}")' in text
    assert "<dynamic-code>" not in text


def test_lambda_keeps_its_file(user_module: object) -> None:
    file = user_module.__file__  # type: ignore[attr-defined]
    text = _traceback_in_fresh_process(dumps(user_module.boom), "obj()")  # type: ignore[attr-defined]
    assert f'File "{file}", line 8' in text
    assert "ZeroDivisionError" in text


def test_same_result_as_cloudpickle_otherwise(user_module: object) -> None:
    payload = {"fn": user_module.outer, "args": (1, [2, 3]), "kwargs": {"k": "v"}}  # type: ignore[attr-defined]
    ours = cloudpickle.loads(dumps(payload))
    theirs = cloudpickle.loads(cloudpickle.dumps(payload))
    assert ours["args"] == theirs["args"] and ours["kwargs"] == theirs["kwargs"]
    with pytest.raises(ValueError, match="bad 5") as info:
        ours["fn"](5)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].filename == user_module.__file__  # type: ignore[attr-defined]
