"""TorchX component files, unchanged, through distspec.

TorchX is not a distspec dependency: these tests run distspec with the Python of
the separate TorchX venv (``.bench/torchx-venv``, see scripts/bench) and the
checkout on ``PYTHONPATH``, which is also what docs/migrating-from-torchx.md
tells a TorchX user to do (or ``pip install distspec`` into the TorchX venv).
Without that venv they skip, saying so. The jobs run for real on local_cwd:
``echo`` and a 1x2 torchrun of a gloo all-reduce.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCHX_PY = ROOT / ".bench" / "torchx-venv" / "bin" / "python"


def _venv_problem() -> str | None:
    """Why the TorchX venv cannot run distspec from this checkout, or None."""
    if not TORCHX_PY.exists():
        return "no .bench/torchx-venv with torchx (scripts/bench --cases 1 builds it)"
    probe = subprocess.run(
        [str(TORCHX_PY), "-c", "import torchx, hostlist, cloudpickle, pyre_extensions"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if probe.returncode:
        return (
            ".bench/torchx-venv lacks torchx or distspec's dependencies "
            f"({probe.stderr.strip().splitlines()[-1]}); scripts/bench --cases 1 rebuilds it"
        )
    return None


_PROBLEM = _venv_problem()
pytestmark = pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or "")

# TorchX's documented custom component (docs: "Custom Components" / quick start),
# as a TorchX user writes it: no Args: section, TorchX's image default.
COMPONENTS = '''\
import torchx.specs as specs
from torchx.components import dist


def greet(name: str, image: str = "ghcr.io/pytorch/torchx:0.7.0") -> specs.AppDef:
    return specs.AppDef(
        name="echo",
        roles=[
            specs.Role(
                name="greeter",
                image=image,
                entrypoint="echo",
                args=[f"hello {name}", specs.macros.app_id],
            )
        ],
    )


def trainer(script: str = "train.py", j: str = "1x2") -> specs.AppDef:
    """A wrapper around dist.ddp, as TorchX's docs suggest for project defaults.

    Args:
        script: the training script
        j: the topology
    """
    return dist.ddp(script=script, j=j, env={"TRAINER": "1"}, rdzv_conf="join_timeout=60")


def hello(user: str, image: str = "my_app:latest") -> specs.AppDef:
    # the shape of TorchX's "Custom Components" guide: python -m my_app --user USER
    return specs.AppDef(
        name="hello_world",
        roles=[
            specs.Role(
                name="greeter",
                image=image,
                entrypoint="python",
                args=["-m", "my_app", "--user", user],
            )
        ],
    )


def with_workspace() -> specs.AppDef:
    return specs.AppDef(
        name="ws",
        roles=[
            specs.Role(
                name="r",
                image="img",
                entrypoint="echo",
                workspace=specs.Workspace(projects={".": ""}),
            )
        ],
    )
'''

MY_APP = """\
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--user", required=True)
print(f"Hello, {parser.parse_args().user}!")
"""

TRAIN = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} sum {int(t.item())} "
      f"trainer={os.environ.get('TRAINER')}", flush=True)
dist.destroy_process_group()
"""


def _distspec(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "TORCHX"))}
    env.update(
        PYTHONPATH=str(ROOT),
        HOME=str(tmp_path),
        XDG_STATE_HOME=str(tmp_path / "state"),
        PATH=f"{TORCHX_PY.parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return subprocess.run(
        [str(TORCHX_PY), "-m", "distspec", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "my_component.py").write_text(COMPONENTS)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "my_app.py").write_text(MY_APP)
    return tmp_path


def test_custom_components_guide_runs_on_local_cwd(project: Path) -> None:
    """TorchX's guide runs `torchx run --scheduler local_cwd my_component.py:greet --user ...`;
    its image ("my_app:latest") is ignored there, as TorchX's local_cwd ignores it."""
    run = _distspec(
        project, "run", "-s", "local_cwd", "--wait", "my_component.py:hello", "--user", "Leia"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    handle = next(l for l in run.stdout.splitlines() if l.startswith("local_cwd://"))
    log = _distspec(project, "log", handle)
    assert "Hello, Leia!" in log.stdout, log.stdout
    k8s = _distspec(
        project, "run", "--dryrun", "-s", "kubernetes", "my_component.py:hello", "--user", "Leia"
    )
    assert k8s.returncode == 0, k8s.stderr
    assert "image: my_app:latest" in k8s.stdout  # kept where TorchX uses it


def test_greet_dry_run_and_run_on_local_cwd(project: Path) -> None:
    dry = _distspec(project, "run", "--dryrun", "--json", "my_component.py:greet", "--name", "Luke")
    assert dry.returncode == 0, dry.stderr
    assert '"torchx.image": "ghcr.io/pytorch/torchx:0.7.0"' in dry.stdout  # dropped, kept aside
    run = _distspec(project, "run", "--wait", "my_component.py:greet", "--name", "Luke")
    assert run.returncode == 0, run.stderr
    handle = next(l for l in run.stdout.splitlines() if l.startswith("local_cwd://"))
    app_id = handle.rsplit("/", 1)[1]
    log = _distspec(project, "log", handle)
    assert log.returncode == 0, log.stderr
    assert f"hello Luke {app_id}" in log.stdout  # ${app_id} filled in, as TorchX does


def test_ddp_wrapper_dry_run_and_run_on_local_cwd(project: Path) -> None:
    dry = _distspec(
        project, "run", "--dryrun", "-s", "slurm", "my_component.py:trainer", "-j", "2x2"
    )
    assert dry.returncode == 0, dry.stderr
    assert "--rdzv_conf join_timeout=60" in dry.stdout
    assert 'export TORCHX_RANK0_HOST="$DISTSPEC_RANK0_HOST"' in dry.stdout
    assert "#SBATCH --nodes=2" in dry.stdout
    run = _distspec(project, "run", "--wait", "my_component.py:trainer", timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    handle = next(l for l in run.stdout.splitlines() if l.startswith("local_cwd://"))
    log = _distspec(project, "log", handle)
    assert "rank 0 of 2 sum 3 trainer=1" in log.stdout, log.stdout
    assert "rank 1 of 2 sum 3 trainer=1" in log.stdout, log.stdout


def test_unconvertible_field_exits_2_naming_it(project: Path) -> None:
    proc = _distspec(project, "run", "--dryrun", "my_component.py:with_workspace")
    assert proc.returncode == 2
    assert "torchx.specs.AppDef" in proc.stderr
    assert "roles[0].workspace" in proc.stderr and "--image" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


CONVERSIONS = """
import json, warnings
warnings.simplefilter("ignore")
import torchx.specs as specs
from distspec.components.torchx_compat import from_torchx
from distspec.errors import ComponentError

def role(**kw):
    kw.setdefault("name", "r"); kw.setdefault("image", "/img"); kw.setdefault("entrypoint", "echo")
    return specs.Role(**kw)

def convert(r, scheduler="kubernetes"):
    try:
        return from_torchx(specs.AppDef(name="a", roles=[r]), scheduler=scheduler).to_dict()["roles"][0]
    except ComponentError as e:
        return {"error": str(e)}

out = {
    "null": convert(role()),
    "overrides": convert(role(args=["plain"], overrides={"args": lambda: ["over"]})),
    "mounts": convert(role(mounts=[
        specs.BindMount(src_path="/a", dst_path="/b", read_only=True),
        specs.VolumeMount(src="pvc", dst_path="/data"),
        specs.DeviceMount(src_path="/dev/fuse", dst_path="/dev/fuse", permissions="rw"),
    ])),
    "policy": convert(role(retry_policy=specs.RetryPolicy.REPLICA, max_retries=2, num_replicas=3, min_replicas=1)),
    "resource": convert(role(resource=specs.Resource(cpu=4, gpu=1, memMB=2048,
        capabilities={"node.kubernetes.io/instance-type": "p3.2xlarge", "count": 2},
        devices={"vpc.amazonaws.com/efa": 1}, tags={"t": object()}))),
    "rank0": convert(role(args=["$${" + specs.macros.rank0_env + ":=localhost}"], env={"R": specs.macros.replica_id})),
    "bad_metadata": convert(role(metadata={"k": 1})),
    "img_root_slurm": convert(role(args=[specs.macros.img_root]), scheduler="slurm"),
    "missing_entrypoint": convert(specs.Role(name="r", image="i")),
}
print(json.dumps(out))
"""


def test_conversion_of_real_torchx_objects(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "TORCHX"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [str(TORCHX_PY), "-c", CONVERSIONS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["null"]["resource"] == {
        "cpu": None,
        "gpu": 0,
        "mem_mb": None,
        "capabilities": {},
        "devices": {},
    }
    assert out["null"]["image"] == "/img"  # kept on Kubernetes
    assert out["overrides"]["args"] == ["over"]
    assert out["mounts"]["mounts"] == [
        {"type": "bind", "src_path": "/a", "dst_path": "/b", "read_only": True},
        {"type": "volume", "src": "pvc", "dst_path": "/data", "read_only": False},
        {"type": "device", "src_path": "/dev/fuse", "dst_path": "/dev/fuse", "permissions": "rw"},
    ]
    policy = out["policy"]
    assert (policy["retry_policy"], policy["max_retries"]) == ("replica", 2)
    assert (policy["num_replicas"], policy["min_replicas"]) == (3, 1)
    assert out["resource"]["resource"] == {
        "cpu": 4,
        "gpu": 1,
        "mem_mb": 2048,
        "capabilities": {"node.kubernetes.io/instance-type": "p3.2xlarge", "count": "2"},
        "devices": {"vpc.amazonaws.com/efa": 1},
    }
    assert out["rank0"]["args"] == ["${TORCHX_RANK0_HOST:=localhost}"]
    assert out["rank0"]["env"] == {"R": "${replica_id}", "TORCHX_RANK0_HOST": "${rank0_host}"}
    assert "roles[0].metadata['k'] is of type int" in out["bad_metadata"]["error"]
    assert "${img_root}" in out["img_root_slurm"]["error"]
    assert "roles[0].entrypoint is missing" in out["missing_entrypoint"]["error"]
