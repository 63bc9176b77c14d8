"""A replaced Kubernetes pod can join the job it was replaced in.

With ``--max_retries`` a plain Job (``flavor=job``) replaces a failed pod alone
(``podReplacementPolicy: Failed``, ``backoffLimit``); the other pods keep running.
torchrun's static rendezvous cannot take the new pod in (it has no notion of a node
waiting to join), so ``--rdzv_backend auto`` now picks c10d for a job with retries:
the agents of the pods that kept running see the new pod waiting (a membership
change, not counted against ``--max_restarts``), restart their workers and meet
it in a new round. And since torch 2.13 does not republish the workers' store
address in that round when it shares the rendezvous store (the new pod waits for
it until the rendezvous times out), the pods of such a Job run with
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``.

The test takes the pod command from the generated manifest and runs it here with
torchrun as two "pods" (``JOB_COMPLETION_INDEX`` 0 and 1, the rank-0 pod's DNS
name replaced by 127.0.0.1), kills pod 1 with its whole process group while pod
0's worker is busy (as a GPU worker blocked in a collective is when a peer dies),
starts the replacement with the same command, and expects both to finish with the
replacement in the world. The same test with the static rendezvous that auto chose
before leaves pod 0 waiting until the timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from distspec.components.binder import bind
from distspec.components.loader import load
from distspec.schedulers.kubernetes import KubernetesScheduler

pytestmark = pytest.mark.torch

BIN = Path(sys.executable).parent

WORKER = """\
import os, pathlib, time
import torch, torch.distributed as dist
d = pathlib.Path(os.environ["T_DIR"])
pod = os.environ["T_POD"]
first = not (d / f"started-{pod}").exists()
(d / f"started-{pod}").touch()
dist.init_process_group("gloo")
if first and pod in ("0", "1"):
    # The first round: busy (not in a collective), until pod 1 is killed and pod 0's
    # agent restarts this worker for the replacement.
    (d / f"ready-{pod}").touch()
    time.sleep(600)
t = torch.ones(1)
dist.all_reduce(t)
print(f"pod {pod} world {dist.get_world_size()} sum {t.item():.0f}", flush=True)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pod_command(port: int, *argv: str) -> tuple[list[str], str, dict[str, str]]:
    """The container's command + args of a 2-pod dist.ddp Job with one retry (its env
    is checked: torch's shared rendezvous store is off), and the rank-0 pod's host
    name in it."""
    app = bind(
        load("dist.ddp"),
        ["-j", "2x1", "--max_retries", "1", "--image", "img:1", *argv, "--script", "w.py"],
    )
    sched = KubernetesScheduler("test")
    request = sched.compile(app, sched.parse_options({"rdzv_port": str(port)}), app_id="w-1")
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(request.render()) if d]
    (job,) = [d for d in docs if d["kind"] == "Job"]
    assert job["spec"]["backoffLimit"] == 1
    assert job["spec"]["podReplacementPolicy"] == "Failed"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") == "1", env
    argv_ = [*container["command"], *container["args"]]
    endpoint = argv_[argv_.index("--rdzv_endpoint") + 1]
    return argv_, endpoint.rpartition(":")[0], env


def _start(
    argv: list[str], host: str, pod_env: dict[str, str], pod: str, work: Path
) -> subprocess.Popen[str]:
    cmd = [a.replace(host, "127.0.0.1") for a in argv]
    cmd[0] = str(BIN / cmd[0])
    env = {
        **os.environ,
        **pod_env,
        "JOB_COMPLETION_INDEX": pod.split("-", maxsplit=1)[0],
        "T_POD": pod,
        "T_DIR": str(work),
    }
    return subprocess.Popen(
        cmd,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a pod: killed with everything in it
    )


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"no {path.name} after {timeout} s"
        time.sleep(0.2)


def _kill(proc: subprocess.Popen[str]) -> str:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.communicate()[0]


def test_auto_picks_c10d_for_a_job_with_retries() -> None:
    argv, _, _ = pod_command(29500)
    assert argv[argv.index("--rdzv_backend") + 1] == "c10d"
    assert "--node_rank" not in argv


def test_a_replacement_pod_joins_the_pods_that_kept_running(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text(WORKER)
    argv, host, env = pod_command(_free_port())
    pods = {"0": _start(argv, host, env, "0", tmp_path)}
    try:
        time.sleep(1)  # pod 0 hosts the store, as the rank-0 pod does
        pods["1"] = _start(argv, host, env, "1", tmp_path)
        _wait_for(tmp_path / "ready-0", pods["0"], 120)
        _wait_for(tmp_path / "ready-1", pods["1"], 120)
        _kill(pods.pop("1"))  # the pod fails; the Job controller makes a new one
        pods["1-replacement"] = _start(argv, host, env, "1-replacement", tmp_path)
        out = {name: proc.communicate(timeout=180)[0] for name, proc in pods.items()}
    finally:
        left = {name: _kill(proc) for name, proc in pods.items() if proc.poll() is None}
    assert not left, left
    for name, proc in pods.items():
        assert proc.returncode == 0, f"pod {name}:\n{out[name]}"
    assert "pod 1-replacement world 2 sum 2" in out["1-replacement"], out
    assert "pod 0 world 2 sum 2" in out["0"], out


def test_static_with_retries_on_a_plain_job_is_refused(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text("")
    argv = ["run", "--dryrun", "-s", "kubernetes", "dist.ddp", "-j", "2x1", "--image", "img:1"]
    argv += ["--max_retries", "1", "--rdzv_backend", "static", "--script", "w.py"]
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "DISTSPEC_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.run(
        [str(BIN / "distspec"), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "static rendezvous cannot take the new pod in" in proc.stderr
    ok = subprocess.run(
        [str(BIN / "distspec"), *argv[:4], "-cfg", "flavor=jobset", *argv[4:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
