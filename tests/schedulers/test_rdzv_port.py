"""Each multi-node job's own rendezvous port (``${rdzv_port}``), as every backend fills it in.

The Slurm and PBS scripts compute the port when the job runs, from its job id; the
shell expressions are evaluated here by real bash and must agree with
``job_rdzv_port``, which local_cwd uses at compile time. Two real jobs sharing a
first node are run on the local cluster in test_slurm_cluster.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from distspec.components.dist import ddp
from distspec.schedulers.kubernetes import KubernetesScheduler
from distspec.schedulers.local_cwd import LocalScheduler
from distspec.schedulers.pbs import PbsScheduler
from distspec.schedulers.slurm import SlurmScheduler
from distspec.torchrun import DEFAULT_RDZV_PORT, RDZV_PORT_SPAN, job_rdzv_port, torchrun_args
from tests.schedulers.batch_apps import compile_text


def _endpoint(text: str) -> str:
    """The word after ``--rdzv_endpoint`` in a rendered script or request."""
    match = re.search(r'--rdzv_endpoint\s+("[^"]*":"\$\(\([^"]*\)\)"|\S+)', text)
    assert match, text
    return match.group(1)


def _bash(word: str, env: dict[str, str]) -> str:
    """What ``word`` (as written in a generated script) expands to in bash with ``env``."""
    out = subprocess.run(
        ["bash", "-c", f"printf '%s' {word}"], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout


@pytest.mark.parametrize(
    ("job_id", "port"),
    [
        ("12345", DEFAULT_RDZV_PORT + 345),
        ("12345.pbs01", DEFAULT_RDZV_PORT + 345),  # PBS: the number the id starts with
        ("1999", DEFAULT_RDZV_PORT + 1999),
        ("2000", DEFAULT_RDZV_PORT),
        ("007", DEFAULT_RDZV_PORT + 7),  # not octal
    ],
)
def test_job_port_from_a_numeric_id(job_id: str, port: int) -> None:
    assert job_rdzv_port(job_id) == port


def test_job_port_of_any_id_is_in_the_span_and_stable() -> None:
    ports = {job_rdzv_port(f"train-{i:04x}") for i in range(200)}
    assert all(DEFAULT_RDZV_PORT <= p < DEFAULT_RDZV_PORT + RDZV_PORT_SPAN for p in ports)
    assert len(ports) > 150  # spread out, not one port
    assert job_rdzv_port("train-abc") == job_rdzv_port("train-abc")
    assert DEFAULT_RDZV_PORT + RDZV_PORT_SPAN <= 32768  # below Linux's ephemeral ports


def test_the_default_endpoint_uses_the_macro_and_a_given_port_is_kept() -> None:
    from distspec.specs.topology import Topology

    two = Topology.parse("2x1")
    assert "${rank0_host}:${rdzv_port}" in torchrun_args(two, script="s.py")
    assert "${rank0_host}:29500" in torchrun_args(two, script="s.py", rdzv_port=29500)
    one = Topology.parse("1x2")  # one node: a free local port, no macro
    assert "localhost:0" in torchrun_args(one, script="s.py")


def _app(**kwargs: Any) -> Any:
    return ddp(script="train.py", j="2x2", **kwargs)


@pytest.mark.parametrize("job_id", ["7", "12345", "4001999"])
def test_slurm_computes_the_jobs_port(job_id: str) -> None:
    word = _endpoint(compile_text(SlurmScheduler, _app()))
    host_port = _bash(word, {"DISTSPEC_RANK0_HOST": "n0", "SLURM_JOB_ID": job_id})
    assert host_port == f"n0:{job_rdzv_port(job_id)}"


@pytest.mark.parametrize("job_id", ["7.server", "12345.pbs01", "4001999", "0042.x"])
@pytest.mark.parametrize("nodes", ["1", "2"])
def test_pbs_computes_the_jobs_port(job_id: str, nodes: str) -> None:
    text = compile_text(PbsScheduler, ddp(script="train.py", j=f"{nodes}x2"))
    if nodes == "1":
        assert "rdzv_port" not in text and "% 2000" not in text  # one node: no port
        return
    word = _endpoint(text)
    host_port = _bash(word, {"DISTSPEC_RANK0_HOST": "h0", "DISTSPEC_APP_ID": job_id})
    assert host_port == f"h0:{job_rdzv_port(job_id)}"


def test_local_fills_in_the_apps_own_port(tmp_path: Path) -> None:
    sched = LocalScheduler(state_dir=tmp_path)
    ports = set()
    for app_id in ("train-a1", "train-b2"):
        text = sched.compile(_app(), sched.parse_options({}), app_id=app_id).render()
        assert f"localhost:{job_rdzv_port(app_id)}" in text, text
        ports.add(job_rdzv_port(app_id))
    assert len(ports) == 2


def test_kubernetes_uses_its_rdzv_port_option(tmp_path: Path) -> None:
    sched = KubernetesScheduler(state_dir=tmp_path)
    for options, port in (({}, 29500), ({"rdzv_port": "31000"}, 31000)):
        request = sched.compile(_app(image="img:1"), sched.parse_options(options), app_id="train-x")
        text = request.render()
        assert f".train-x:{port}" in text or f"train-x:{port}" in text, text
        assert f"containerPort: {port}" in text, text


def test_an_explicit_port_is_used_everywhere(tmp_path: Path) -> None:
    app = _app(rdzv_port=29999)
    assert '"$DISTSPEC_RANK0_HOST":29999' in compile_text(SlurmScheduler, app)
    assert '"$DISTSPEC_RANK0_HOST":29999' in compile_text(PbsScheduler, app)
    local = LocalScheduler(state_dir=tmp_path)
    text = local.compile(app, local.parse_options({}), app_id="train-a1").render()
    assert "localhost:29999" in text
