"""A real (Kubernetes 1.20.2) API server for tests, run by scripts/k8s-apiserver.

`require_apiserver()` returns the path of a kubeconfig for the official Python
client, starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1
first if needed. It skips the calling test when the binaries have not been
built (`scripts/k8s-apiserver build`, 8+ min once). A control plane this
process started is stopped when the process exits; one that was already
running is left alone.

What 1.20 cannot do (see docs/contributing/kubernetes-test-cluster.md): it silently drops
`completionMode`, `podFailurePolicy` and `podReplacementPolicy`, and there is
no kubelet, so pods stay Pending until a test patches `pods/status`.
"""

from __future__ import annotations

import atexit
import functools
import subprocess
from pathlib import Path

__all__ = ["SCRIPT", "require_apiserver"]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "k8s-apiserver"


def _run(verb: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), verb], capture_output=True, text=True, timeout=timeout, check=False
    )


@functools.cache
def _start() -> str:
    import pytest

    check = _run("check", timeout=30)
    if check.returncode != 0:
        pytest.skip((check.stdout + check.stderr).strip() or "scripts/k8s-apiserver check failed")
    already_up = _run("status", timeout=30).returncode == 0
    up = _run("up", timeout=180)
    if up.returncode != 0:
        # Built but broken is a failure, not a reason to skip.
        pytest.fail(f"scripts/k8s-apiserver up failed:\n{up.stderr}", pytrace=False)
    if not already_up:
        atexit.register(_run, "down", 60)
    kubeconfig = up.stdout.strip().splitlines()[-1]
    if not Path(kubeconfig).is_file():
        pytest.fail(f"scripts/k8s-apiserver up printed no kubeconfig path: {up.stdout!r}")
    return kubeconfig


def require_apiserver() -> str:
    """Ensure the local API server is up and return its kubeconfig path.

    Skips the calling test (`pytest.skip`) with the reason
    "kube-apiserver not built: run scripts/k8s-apiserver build" when the
    binaries are missing, or with the one-line reason `scripts/k8s-apiserver
    check` gives for anything else that is missing. Fails the test if `up`
    fails. The first call in a process does the work; later calls return the
    same path.
    """
    return _start()
