"""The parts of a job the TorchX migration corpus compares, from a distspec AppDef.

Shared by the corpus test (distspec's side) and ``torchx_side.py`` (TorchX's side,
run with the TorchX venv's Python: TorchX's AppDef is first converted with
:func:`distspec.components.torchx_compat.from_torchx`). Pure Python, no imports
beyond the standard library, so both interpreters can load it.

A role becomes::

    {"nodes": N, "min_nodes": N, "cpu": C, "gpu": G, "mem_mb": M,
     "devices": {"vpc.amazonaws.com/efa": 4}, "capabilities": {...},
     "env": {user variables}, "debug": bool,
     "torchrun": {"nnodes": "1:2", "nproc_per_node": 4, "rdzv_backend": "c10d",
                  "rdzv_conf": "...", "tee": "3", "program": ["train.py", "--lr", "1"]}
     | "command": ["echo", "hello"]}

``env`` leaves out each tool's own bookkeeping (TorchX's ``LOGLEVEL`` and
``TORCHX_TRACKING_*``, the rank-0 host variable) and both tools' ``--debug``
variables, which are reported as ``debug`` (``TORCH_DISTRIBUTED_DEBUG=DETAIL``,
set by both).
"""

from __future__ import annotations

import shlex
from typing import Any

__all__ = ["normalize"]

#: Variables that one tool sets for itself; not part of the user's job.
BOOKKEEPING = frozenset(
    {
        "LOGLEVEL",
        "TORCHX_TRACKING_EXPERIMENT_NAME",
        "TORCHX_TRACKING_RUN_NAME",
        "TORCHX_RANK0_HOST",
    }
)
#: What each tool's --debug adds (TorchX: _TORCH_DEBUG_FLAGS; distspec: dist.DEBUG_ENV).
DEBUG_VARS = frozenset(
    {
        "CUDA_LAUNCH_BLOCKING",
        "NCCL_DESYNC_DEBUG",
        "TORCH_DISTRIBUTED_DEBUG",
        "TORCH_SHOW_CPP_STACKTRACES",
        "NCCL_DEBUG",
        "TORCH_CPP_LOG_LEVEL",
        "PYTHONFAULTHANDLER",
    }
)
_VALUE_FLAGS = frozenset(
    {
        "--nnodes",
        "--nproc_per_node",
        "--nproc-per-node",
        "--rdzv_backend",
        "--rdzv-backend",
        "--rdzv_endpoint",
        "--rdzv-endpoint",
        "--rdzv_id",
        "--rdzv-id",
        "--rdzv_conf",
        "--rdzv-conf",
        "--tee",
        "--role",
        "--max_restarts",
        "--max-restarts",
        "--node_rank",
        "--node-rank",
        "--master_port",
        "--log_dir",
        "--log-dir",
        "--redirects",
        "--local_addr",
        "--local-addr",
    }
)


def _torchrun(words: list[str]) -> dict[str, Any]:
    flags: dict[str, str] = {}
    i = 1
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        word = words[i]
        name, eq, value = word.partition("=")
        if eq:
            flags[name.replace("-", "_").lstrip("_")] = value
            i += 1
        elif word in _VALUE_FLAGS:
            flags[word.replace("-", "_").lstrip("_")] = words[i + 1]
            i += 2
        else:
            flags[word.replace("-", "_").lstrip("_")] = ""
            i += 1
    out: dict[str, Any] = {
        "nnodes": flags.get("nnodes", "1"),
        "nproc_per_node": int(flags.get("nproc_per_node", "1")),
        "rdzv_backend": flags.get("rdzv_backend", "c10d"),
        "tee": flags.get("tee", ""),
        "program": words[i:],
    }
    if "rdzv_conf" in flags:
        out["rdzv_conf"] = flags["rdzv_conf"]
    return out


def _command(role: Any) -> list[str]:
    words = [role.entrypoint, *role.args]
    # TorchX wraps torchrun in `bash -c '...'`; distspec runs it directly.
    if words[0] in ("bash", "sh", "/bin/bash", "/bin/sh") and words[1:2] == ["-c"]:
        inner = shlex.split(words[2]) if len(words) > 2 else []
        if inner[:1] == ["torchrun"]:
            return inner
    return words


def normalize(app: Any) -> list[dict[str, Any]]:
    """One dict per role of ``app`` (a distspec AppDef); see the module docstring."""
    roles = []
    for role in app.roles:
        env = dict(role.env)
        words = _command(role)
        entry: dict[str, Any] = {
            "nodes": role.num_replicas,
            "min_nodes": role.min_replicas if role.min_replicas is not None else role.num_replicas,
            "cpu": role.resource.cpu,
            "gpu": role.resource.gpu,
            "mem_mb": role.resource.mem_mb,
            "devices": dict(sorted(role.resource.devices.items())),
            "capabilities": dict(sorted(role.resource.capabilities.items())),
            "env": {k: v for k, v in sorted(env.items()) if k not in BOOKKEEPING | DEBUG_VARS},
            "debug": env.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL",
        }
        if words[0].rsplit("/", 1)[-1] == "torchrun" or words[:3] == [
            words[0],
            "-m",
            "torch.distributed.run",
        ]:
            if words[0] != "torchrun" and words[1:3] == ["-m", "torch.distributed.run"]:
                words = ["torchrun", *words[3:]]
            entry["torchrun"] = _torchrun(words)
        else:
            entry["command"] = words
        roles.append(entry)
    return roles
