"""The callables wire protocol (distspec.runtime.call_protocol), shared by the
submitter and the worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from distspec.runtime.call_protocol import (
    ERROR_KEYS,
    PROTOCOL_VERSION,
    is_record,
    payload,
    result_record,
)

ROOT = Path(__file__).resolve().parents[2]


def test_records_the_worker_writes_are_records_the_submitter_reads() -> None:
    ok = result_record(3, ok=True, value=42)
    assert list(ok) == ["version", "rank", "host", "pid", "time", "ok", "value"]
    assert ok["version"] == PROTOCOL_VERSION and ok["rank"] == 3 and is_record(ok)
    failed = result_record(
        1, ok=False, phase="call", type="ValueError", message="m", traceback="t", exception=None
    )
    assert set(ERROR_KEYS) <= set(failed) and is_record(failed)
    assert not is_record({"ok": False, "type": "ValueError"})
    assert not is_record({"ok": True})
    assert not is_record(["ok", "value"])


def test_payload() -> None:
    assert payload(print, [1], {"a": 2}) == {
        "version": PROTOCOL_VERSION,
        "fn": print,
        "args": (1,),
        "kwargs": {"a": 2},
    }


def test_imports_neither_the_cli_nor_a_backend_nor_cloudpickle() -> None:
    code = (
        "import sys\n"
        "import distspec.runtime.call_protocol\n"
        "print(sorted(m for m in sys.modules if m.startswith(('distspec.cli', "
        "'distspec.schedulers', 'distspec.components', 'cloudpickle', 'fsspec', 'torch'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
