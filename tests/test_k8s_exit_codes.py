"""A failed Kubernetes worker's exit code, signal and rank, as `run --wait`,
`status` and `describe` report them, against a real API server (1.20.2).

No kubelet runs here, so no container ever runs: the test writes the pod status a
kubelet would have written (``pods/status``: phase Failed, the container's
``state.terminated`` with its exit code, reason and termination message). That is
the honest stand-in. What it writes is real where it can be: the termination
message is the output of a real ``torchrun`` whose worker failed (exit 7, or
killed by SIGKILL), cut as the kubelet cuts a failed container's log under
``terminationMessagePolicy: FallbackToLogsOnError`` (the last 80 lines, at most
2048 bytes). The job controller (real) then fails the Job; distspec (a real CLI
process) reads it all back through the API.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s_apiserver import require_apiserver

pytestmark = pytest.mark.k8s_apiserver

kubernetes = pytest.importorskip("kubernetes", reason="pip install 'kubernetes>=30,<38'")

BIN = Path(sys.executable).parent

FAILING = """\
import os, signal, sys, time
rank = int(os.environ["RANK"])
if rank == 1:
    print(f"rank {rank}: about to fail", flush=True)
    if sys.argv[1] == "exit":
        raise SystemExit(7)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
"""


def kubelet_message(output: str) -> str:
    """What the kubelet keeps of a failed container's log as its termination message
    (FallbackToLogsOnError): the last 80 lines, then at most the last 2048 bytes."""
    tail = "\n".join(output.splitlines()[-80:])
    return tail.encode()[-2048:].decode("utf-8", "replace")


@pytest.fixture(scope="module")
def torchrun_output(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], str]:
    """``output(how)``: the merged output of a real torchrun (2 workers) whose rank 1
    exits 7 (``exit``) or is killed by SIGKILL (``kill``); run on first use."""
    folder = tmp_path_factory.mktemp("torchrun")
    script = folder / "fail.py"
    script.write_text(FAILING)

    @functools.cache
    def output(how: str) -> str:
        proc = subprocess.run(
            [
                str(BIN / "torchrun"),
                "--standalone",
                "--nproc_per_node",
                "2",
                "--max_restarts",
                "0",
                str(script),
                how,
            ],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=240,
            check=False,
        )
        assert proc.returncode == 1, proc.stdout  # torchrun's own code whatever the worker's
        assert "Root Cause" in proc.stdout, proc.stdout
        return proc.stdout

    return output


class Cluster:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.ns = f"distspec-exit-{uuid.uuid4().hex[:8]}"
        self.api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        self.core = kubernetes.client.CoreV1Api(self.api)

    def pods(self, kid: str) -> list[Any]:
        items: list[Any] = self.core.list_namespaced_pod(
            self.ns, label_selector=f"distspec.io/app-id={kid}"
        ).items
        return sorted(items, key=lambda p: p.metadata.name)

    def kubelet_writes(self, pod: Any, terminated: dict[str, Any]) -> None:
        """The pod status a kubelet writes when the pod's only container has ended."""
        name = pod.spec.containers[0].name
        self.core.patch_namespaced_pod_status(
            pod.metadata.name,
            self.ns,
            {
                "status": {
                    "phase": "Failed",
                    "containerStatuses": [
                        {
                            "name": name,
                            "image": pod.spec.containers[0].image,
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": terminated},
                        }
                    ],
                }
            },
        )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(require_apiserver())
    c.core.create_namespace({"metadata": {"name": c.ns}})
    try:
        yield c
    finally:
        c.core.delete_namespace(c.ns)
        c.api.close()


def distspec(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "distspec"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def wait_for(probe: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)
    return result


@pytest.mark.parametrize(
    ("case", "code", "says"),
    [
        ("torchrun-exit", 7, r"rank 1 \(local_rank 1\) exited with 7.*; torchrun exited with 1"),
        (
            "torchrun-kill",
            137,
            r"rank 1 \(local_rank 1\) was killed by SIGKILL.*; torchrun exited with 1",
        ),
        ("oomkilled", 137, r"OOMKilled: killed by SIGKILL"),
    ],
)
def test_run_wait_status_describe_report_the_worker(
    cluster: Cluster,
    state_dir: Path,
    tmp_path: Path,
    torchrun_output: Callable[[str], str],
    case: str,
    code: int,
    says: str,
) -> None:
    proc = subprocess.Popen(
        [
            str(BIN / "distspec"),
            "run",
            "-s",
            "kubernetes",
            "-cfg",
            f"namespace={cluster.ns},kubeconfig={cluster.kubeconfig}",
            "--wait",
            "--no-log",
            "utils.sh",
            "--num_replicas",
            "2",
            "--image",
            "example.invalid/train:1",
            "--",
            "torchrun --standalone --nproc_per_node 2 fail.py",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        handle = proc.stdout.readline().strip()
        assert handle.startswith("kubernetes://"), handle
        kid = handle.rpartition(":")[2]
        pods = wait_for(lambda: len(p := cluster.pods(kid)) == 2 and p, "the job's 2 pods")
        if case == "oomkilled":
            # The kernel killed the whole container: no report, the kubelet's reason.
            terminated = {"exitCode": 137, "reason": "OOMKilled"}
        else:
            output = torchrun_output("exit" if case == "torchrun-exit" else "kill")
            terminated = {"exitCode": 1, "reason": "Error", "message": kubelet_message(output)}
        cluster.kubelet_writes(pods[1], terminated)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    (first,) = [ln for ln in err.splitlines() if ln.startswith("distspec: ")]
    assert re.search(r"FAILED after \S+: sh/\d (was killed by SIGKILL|exited with)", first), err
    assert f"(exit code {code})" in first if code > 128 else f"exited with {code}" in first
    assert re.search(says, err), err
    assert "could not read its log" not in err, err
    assert re.search(r"^  logs: +pod/sh-\S+ \(namespace distspec-exit-\w+\)", err, re.M), err

    status = distspec("status", "--exit-status", handle, cwd=tmp_path)
    assert status.returncode == 1 and status.stdout.startswith("FAILED"), status
    described = distspec("describe", handle, cwd=tmp_path)
    assert described.returncode == 0, described.stderr
    failed = [ln for ln in described.stdout.splitlines() if "FAILED" in ln and "sh/" in ln]
    assert len(failed) == 1 and f"exit={code}" in failed[0], described.stdout
    assert re.search(says, failed[0]), failed[0]
    assert pods[1].metadata.name in described.stdout
    as_json = distspec("describe", "--json", handle, cwd=tmp_path)
    replicas = [r for role in json.loads(as_json.stdout)["roles"] for r in role["replicas"]]
    failed_json = [r for r in replicas if r["state"] == "FAILED"]
    assert [r["exit_code"] for r in failed_json] == [code]
    distspec("cancel", handle, cwd=tmp_path)
