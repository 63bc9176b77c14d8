"""``--rdzv_backend auto`` and ``--rdzv_conf``: no key is silently dropped.

torchrun's static rendezvous reads one key of ``--rdzv_conf`` (``timeout``; ``rank``
comes from ``--node_rank``), so a TorchX command such as ``dist.ddp -j 2x2
--rdzv_conf join_timeout=600`` would have lost its join timeout under the static
rendezvous auto chose. Now auto picks c10d for keys only c10d reads, an explicit
``static`` refuses them (one line, exit 2), and retries pick c10d too, which lets a
replacement node (a Kubernetes pod) join.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distspec.components.binder import bind
from distspec.components.loader import load
from distspec.errors import ComponentError
from distspec.specs import Role
from distspec.torchrun import STATIC_RDZV_CONF_KEYS


def role(*argv: str) -> Role:
    return bind(load("dist.ddp"), ["--script", "t.py", *argv]).roles[0]


def backend(r: Role) -> str:
    return r.args[r.args.index("--rdzv_backend") + 1]


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ("timeout=900", "static"),
        ("join_timeout=600", "c10d"),
        ("join_timeout=600,close_timeout=600,timeout=600", "c10d"),
        ("last_call_timeout=5", "c10d"),
    ],
)
def test_auto_picks_the_backend_that_reads_every_key(conf: str, expected: str) -> None:
    r = role("-j", "2x2", "--rdzv_conf", conf)
    assert backend(r) == expected
    assert r.args[r.args.index("--rdzv_conf") + 1] == conf


def test_retries_pick_c10d() -> None:
    assert backend(role("-j", "2x2")) == "static"
    assert backend(role("-j", "2x2", "--max_retries", "1")) == "c10d"


def test_static_refuses_keys_it_would_ignore() -> None:
    with pytest.raises(ComponentError, match=r"join_timeout: the static rendezvous reads only"):
        role("-j", "2x2", "--rdzv_backend", "static", "--rdzv_conf", "join_timeout=60")
    r = role("-j", "2x2", "--rdzv_backend", "static", "--rdzv_conf", "timeout=60")
    assert backend(r) == "static"


def test_cli_refusal_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "distspec", "run", "--dryrun", "dist.ddp", "-j", "2x2"),
            *("--rdzv_backend", "static", "--rdzv_conf", "join_timeout=60", "--script", "t.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"DISTSPEC_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "join_timeout" in proc.stderr and "--rdzv_backend c10d" in proc.stderr


@pytest.mark.torch
def test_torch_static_handler_reads_only_these_keys() -> None:
    """If a torch upgrade makes the static handler read more keys, widen the set."""
    from torch.distributed.elastic.rendezvous import static_tcp_rendezvous

    source = inspect.getsource(static_tcp_rendezvous.create_rdzv_handler)
    read = set(re.findall(r"params\.config(?:\.get\()?\[?\s*\(?\"(\w+)\"", source))
    read |= set(re.findall(r"\"(\w+)\" (?:not )?in params\.config", source))
    assert read - {"rank"} == set(STATIC_RDZV_CONF_KEYS)
