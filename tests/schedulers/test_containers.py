"""``-cfg container=...`` on Slurm and PBS: image references told apart, what each
runtime accepts, goldens for every runtime, the scripts run under stand-in ``srun``,
``podman`` and ``apptainer`` binaries that record their argv, and bad input at the CLI.
No cluster and no container runtime are needed."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from distspec.errors import CompileError
from distspec.schedulers.batch.container import (
    Container,
    ImageKind,
    image_kind,
    runtime_image,
)
from distspec.schedulers.batch.folder import read_job_folder, replica_exit
from distspec.schedulers.pbs import PbsScheduler
from distspec.schedulers.slurm import SlurmScheduler
from distspec.specs import AppDef, Resource, Role
from distspec.specs.mounts import BindMount
from tests.schedulers.batch_apps import APP_ID, compile_text, trainer_role
from tests.schedulers.batch_apps import app as _app
from tests.schedulers.batch_apps import bash_n as _bash_n

# -- telling image references apart ----------------------------------------------------


@pytest.mark.parametrize(
    ("image", "kind"),
    [
        ("/opt/project", ImageKind.DIRECTORY),
        ("/shared/images/torch.sif", ImageKind.SIF),
        ("/shared/images/torch.sqsh", ImageKind.SQSH),
        ("/shared/images/torch.squashfs", ImageKind.SQSH),
        ("docker://ubuntu:22.04", ImageKind.DOCKER),
        ("oras://ghcr.io/me/torch:1", ImageKind.ORAS),
        ("podman://localhost/distspec-test:cpu", ImageKind.PODMAN),
        ("localhost/distspec-test:cpu", ImageKind.REGISTRY),
        ("nvcr.io/nvidia/pytorch:24.01-py3", ImageKind.REGISTRY),
        ("ubuntu", ImageKind.REGISTRY),
        ("python:3.11", ImageKind.REGISTRY),
        ("registry:5000/team/img@sha256:" + "a" * 64, ImageKind.REGISTRY),
        ("./torch.sif", ImageKind.RELATIVE),
        ("torch.sif", ImageKind.RELATIVE),
        ("~/x", ImageKind.RELATIVE),
        ("../dir", ImageKind.RELATIVE),
        ("Ubuntu Latest", ImageKind.UNKNOWN),
        ("http://example.org/x", ImageKind.UNKNOWN),
        ("docker://", ImageKind.UNKNOWN),
    ],
)
def test_image_kind(image: str, kind: ImageKind) -> None:
    assert image_kind(image) is kind


def _role(image: str) -> Role:
    return dataclasses.replace(trainer_role(1, 1), image=image)


@pytest.mark.parametrize(
    ("runtime", "image", "given"),
    [
        (Container.PODMAN, "localhost/distspec-test:cpu", "localhost/distspec-test:cpu"),
        (Container.PODMAN, "docker://ubuntu", "docker://ubuntu"),
        (Container.PODMAN, "podman://localhost/x:1", "localhost/x:1"),
        (Container.APPTAINER, "/i/torch.sif", "/i/torch.sif"),
        (Container.APPTAINER, "ubuntu:22.04", "docker://ubuntu:22.04"),
        (Container.APPTAINER, "oras://ghcr.io/me/t:1", "oras://ghcr.io/me/t:1"),
        (Container.SINGULARITY, "docker://ubuntu", "docker://ubuntu"),
        (Container.PYXIS, "nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
        (Container.PYXIS, "docker://ubuntu:22.04", "ubuntu:22.04"),
        (Container.PYXIS, "/i/torch.sqsh", "/i/torch.sqsh"),
        (Container.OCI, "/bundles/torch", "/bundles/torch"),
        (Container.NONE, "/opt/project", "/opt/project"),
    ],
)
def test_what_each_runtime_is_given(runtime: Container, image: str, given: str) -> None:
    assert runtime_image(_role(image), runtime, "slurm") == given


@pytest.mark.parametrize(
    ("runtime", "image"),
    [
        (Container.PODMAN, "/i/torch.sif"),
        (Container.PODMAN, "/opt/project"),
        (Container.PODMAN, "oras://ghcr.io/me/t:1"),
        (Container.APPTAINER, "/i/torch.sqsh"),
        (Container.APPTAINER, "/opt/project"),
        (Container.APPTAINER, "podman://localhost/x"),
        (Container.PYXIS, "/i/torch.sif"),
        (Container.PYXIS, "podman://localhost/x"),
        (Container.OCI, "ubuntu"),
        (Container.OCI, "/i/torch.sif"),
        (Container.NONE, "ubuntu"),
        (Container.PODMAN, "./x.sif"),
    ],
)
def test_what_a_runtime_cannot_run_is_one_line(runtime: Container, image: str) -> None:
    with pytest.raises(CompileError) as info:
        runtime_image(_role(image), runtime, "slurm")
    text = str(info.value)
    assert "\n" not in text and repr(image) in text
    if runtime is not Container.NONE:
        assert f"container={runtime.value} cannot run" in text and "it takes" in text


# -- goldens -----------------------------------------------------------------------------

_DATA = BindMount(src_path="/datasets/imagenet", dst_path="/data", read_only=True)
_SCRATCH = BindMount(src_path="/scratch/me", dst_path="/scratch/me")


def _trainer(nodes: int, nproc: int, *, image: str, gpu: int = 0, mounts: bool = False) -> Role:
    role = trainer_role(nodes, nproc, gpu=gpu, node_rank=True)
    env = {**role.env, "HF_HOME": "/scratch/me/hf"}
    return dataclasses.replace(
        role, image=image, env=env, mounts=(_DATA, _SCRATCH) if mounts else ()
    )


_REGISTRY = "nvcr.io/nvidia/pytorch:24.01-py3"
_LOCAL = "localhost/distspec-test:cpu"


def _slurm(role: Role, **opts: Any) -> str:
    return compile_text(SlurmScheduler, _app(role), **opts)


def _pbs(role: Role, **opts: Any) -> str:
    return compile_text(PbsScheduler, _app(role), **opts)


SLURM_CASES: dict[str, Callable[[], str]] = {
    "podman_1node": lambda: _slurm(_trainer(1, 2, image=_LOCAL), container="podman"),
    "podman_2x2": lambda: _slurm(_trainer(2, 2, image=_LOCAL), container="podman"),
    "podman_2x8_gpu_mounts_env": lambda: _slurm(
        _trainer(2, 8, image=_REGISTRY, gpu=8, mounts=True),
        container="podman",
        container_env="HF_TOKEN;WANDB_*",
    ),
    "podman_pull": lambda: _slurm(_trainer(2, 2, image=_LOCAL), container="podman", pull="true"),
    "podman_direct": lambda: _slurm(
        _trainer(2, 4, image=_REGISTRY, gpu=4), container="podman", workers="direct"
    ),
    "podman_retries": lambda: _slurm(
        dataclasses.replace(_trainer(2, 2, image=_LOCAL), max_retries=2), container="podman"
    ),
    "apptainer_1node": lambda: _slurm(
        _trainer(1, 2, image="/shared/images/torch.sif"), container="apptainer"
    ),
    "apptainer_2x8_gpu_mounts_env": lambda: _slurm(
        _trainer(2, 8, image=_REGISTRY, gpu=8, mounts=True), container="apptainer"
    ),
    "apptainer_pull": lambda: _slurm(
        _trainer(2, 2, image=_REGISTRY), container="apptainer", pull="true"
    ),
    "singularity_2x2": lambda: _slurm(
        _trainer(2, 2, image="/shared/images/torch.sif"), container="singularity"
    ),
    "pyxis_1node": lambda: _slurm(_trainer(1, 2, image=_REGISTRY), container="pyxis"),
    "pyxis_2x8_gpu_mounts_env": lambda: _slurm(
        _trainer(2, 8, image=_REGISTRY, gpu=8, mounts=True),
        container="pyxis",
        container_path="/opt/venv/bin",
    ),
    "pyxis_pull": lambda: _slurm(_trainer(2, 2, image=_REGISTRY), container="pyxis", pull="true"),
    "oci_1node": lambda: _slurm(_trainer(1, 2, image="/shared/bundles/torch"), container="oci"),
    "oci_2x8_gpu": lambda: _slurm(
        _trainer(2, 8, image="/shared/bundles/torch", gpu=8),
        container="oci",
        container_path="/opt/venv/bin",
    ),
}

PBS_CASES: dict[str, Callable[[], str]] = {
    "podman_1node": lambda: _pbs(_trainer(1, 2, image=_LOCAL), container="podman"),
    "podman_2x8_gpu_mounts_env": lambda: _pbs(
        _trainer(2, 8, image=_REGISTRY, gpu=8, mounts=True),
        container="podman",
        container_env="HF_TOKEN",
    ),
    "podman_pull": lambda: _pbs(_trainer(2, 2, image=_LOCAL), container="podman", pull="true"),
    "podman_direct": lambda: _pbs(
        _trainer(2, 4, image=_REGISTRY, gpu=4), container="podman", workers="direct"
    ),
    "podman_retries": lambda: _pbs(
        dataclasses.replace(_trainer(2, 2, image=_LOCAL), max_retries=1), container="podman"
    ),
    "apptainer_1node": lambda: _pbs(
        _trainer(1, 2, image="/shared/images/torch.sif"), container="apptainer"
    ),
    "apptainer_2x8_gpu_mounts_env": lambda: _pbs(
        _trainer(2, 8, image=_REGISTRY, gpu=8, mounts=True), container="apptainer", pull="true"
    ),
}


@pytest.mark.parametrize("case", sorted(SLURM_CASES))
def test_slurm_goldens(case: str, golden: Callable[[str, str], None]) -> None:
    text = SLURM_CASES[case]()
    golden(f"slurm/container_{case}.sbatch", text)
    _bash_n(text)


@pytest.mark.parametrize("case", sorted(PBS_CASES))
def test_pbs_goldens(case: str, golden: Callable[[str, str], None]) -> None:
    text = PBS_CASES[case]()
    golden(f"pbs/container_{case}.pbs", text)
    _bash_n(text)


def test_no_value_of_the_environment_is_written_for_podman() -> None:
    text = SLURM_CASES["podman_2x8_gpu_mounts_env"]()
    assert "--env HF_TOKEN " in text and '--env "WANDB_*"' in text
    assert "--env HF_HOME " in text and "--env LOGLEVEL " in text  # the role's own, by name
    assert "HF_TOKEN=" not in text


def test_container_none_output_is_unchanged_by_the_new_options() -> None:
    role = trainer_role(2, 8, gpu=8)
    assert _slurm(role) == _slurm(role, container="none", pull="false")
    assert _pbs(role) == _pbs(role, container="none", pull="false")
    # The batch goldens of container=none are the ones from before the option.


def test_img_root_is_the_working_directory_in_a_container() -> None:
    role = dataclasses.replace(
        _trainer(1, 1, image=_LOCAL), args=("--nnodes", "1", "${img_root}/train.py")
    )
    assert '"$SLURM_SUBMIT_DIR"/train.py' in _slurm(role, container="podman")
    assert '"$DISTSPEC_WORKDIR"/train.py' in _pbs(role, container="podman")


# -- the scripts run under stand-in binaries ------------------------------------------

FAKE_SRUN = r"""#!/bin/bash
# Stand-in srun: runs the command once per node (one task each), flags skipped.
out=/dev/null
while [[ $1 == --* ]]; do
  case $1 in --output=*) out=${1#--output=};; esac
  shift
done
rc=0
for ((i = 0; i < ${FAKE_NODES:-2}; i++)); do
  SLURM_NODEID=$i SLURM_PROCID=$i SLURMD_NODENAME=n$i "$@" >> "${out//%t/$i}" 2>&1 || rc=$?
done
exit $rc
"""

FAKE_SCONTROL = r"""#!/bin/bash
echo n0; echo n1
"""

#: Records its argv (JSON, one call a line) and the values of RECORD_ENV's names; `run`
#: and `exec` print a line and exit with FAKE_RUN_EXIT (sleep FAKE_RUN_SLEEP first),
#: `pull` fails with FAKE_PULL_EXIT when set.
FAKE_RUNTIME = r"""#!/usr/bin/env python3
import json, os, sys, time
env = {k: os.environ.get(k) for k in os.environ.get("RECORD_ENV", "").split(",") if k}
with open(os.environ["FAKE_RECORD"], "a") as f:
    f.write(json.dumps({"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]], "env": env,
                        "ppid": os.getppid()}) + "\n")
cmd = sys.argv[1] if len(sys.argv) > 1 else ""
if cmd == "pull" and os.environ.get("FAKE_PULL_EXIT"):
    print("Trying to pull ...\nError: initializing source: image not known")
    sys.exit(int(os.environ["FAKE_PULL_EXIT"]))
if cmd in ("run", "exec"):
    print("ran in the container")
    time.sleep(float(os.environ.get("FAKE_RUN_SLEEP", "0")))
    sys.exit(int(os.environ.get("FAKE_RUN_EXIT", "0")))
"""


def _bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (
        ("srun", FAKE_SRUN),
        ("scontrol", FAKE_SCONTROL),
        ("podman", FAKE_RUNTIME),
        ("apptainer", FAKE_RUNTIME),
    ):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _bash(script: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script)],
        check=False,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _records(tmp_path: Path, verb: str | None = None) -> list[dict[str, Any]]:
    """The stand-ins' calls, in order; only ``podman VERB``/``apptainer VERB`` ones with ``verb``."""
    path = tmp_path / "record.jsonl"
    if not path.exists():
        return []
    calls = [json.loads(line) for line in path.read_text().splitlines()]
    return [c for c in calls if verb is None or c["argv"][1:2] == [verb]]


def _slurm_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": f"{_bin(tmp_path)}:/usr/bin:/bin",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "n[0-1]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "FAKE_RECORD": str(tmp_path / "record.jsonl"),
        **extra,
    }


def _job_app(image: str, nodes: int = 2, **role: Any) -> AppDef:
    return AppDef(
        name="job",
        roles=(
            Role(
                name="r",
                entrypoint="torchrun",
                args=("--nnodes", str(nodes), "--nproc_per_node", "1", "t.py", "--x", "a b"),
                env={"TOKENISH": "${replica_id}"},
                num_replicas=nodes,
                image=image,
                **role,
            ),
        ),
    )


def _slurm_script(app: AppDef, tmp_path: Path, **opts: Any) -> Path:
    sched = SlurmScheduler(state_dir=tmp_path / "state")
    options = sched.parse_options({"job_dir": str(tmp_path / "jobs"), **opts})
    script = tmp_path / "job.sbatch"
    script.write_text(sched.compile(app, options, app_id=APP_ID).render())
    return script


def test_podman_gets_exactly_this_command_on_each_node(tmp_path: Path) -> None:
    mount = BindMount(src_path="/datasets", dst_path="/data", read_only=True)
    script = _slurm_script(_job_app(_LOCAL, mounts=(mount,)), tmp_path, container="podman")
    env = _slurm_env(tmp_path, RECORD_ENV="TOKENISH,SLURM_NODEID", SECRET_TOKEN="s3cr3t")
    proc = _bash(script, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    runs = _records(tmp_path, "run")
    assert [r["env"] for r in runs] == [
        {"TOKENISH": "0", "SLURM_NODEID": "0"},
        {"TOKENISH": "1", "SLURM_NODEID": "1"},
    ]
    jobs = f"{tmp_path}/jobs"
    assert runs[1]["argv"] == [
        "podman",
        "run",
        "--rm",
        "--replace",
        "--name",
        "distspec-job-42-r-1",
        "--network",
        "host",
        "--ipc",
        "host",
        "--env",
        "DISTSPEC_*",
        "--env",
        "SLURM_*",
        "--env",
        "PYTHONUNBUFFERED",
        "--env",
        "TOKENISH",
        "--volume",
        f"{jobs}:{jobs}",
        "--volume",
        f"{tmp_path}:{tmp_path}",
        "--volume",
        "/datasets:/data:ro",
        "--workdir",
        str(tmp_path),
        _LOCAL,
        "torchrun",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "1",
        "t.py",
        "--x",
        "a b",
    ]
    folder = tmp_path / "jobs" / "job-42"
    assert (folder / "r-1.exit").read_text() == "0\n"
    assert "ran in the container" in (folder / "r-0.log").read_text()
    assert "s3cr3t" not in script.read_text()
    # After the step: one task per node lists what a killed task may have left behind.
    assert [r["argv"] for r in _records(tmp_path, "ps")] == [
        ["podman", "ps", "-aq", "--filter", "name=^distspec-job-42-r-"]
    ] * 2


def test_apptainer_gets_exactly_this_command(tmp_path: Path) -> None:
    script = _slurm_script(
        _job_app("docker://ubuntu:22.04", resource=Resource(gpu=1)),
        tmp_path,
        container="apptainer",
    )
    proc = _bash(script, _slurm_env(tmp_path, FAKE_RUN_EXIT="3"), tmp_path)
    assert proc.returncode == 3
    runs = _records(tmp_path)
    jobs = f"{tmp_path}/jobs"
    assert runs[0]["argv"] == [
        "apptainer",
        "exec",
        "--nv",
        "--bind",
        f"{jobs}:{jobs}",
        "--bind",
        f"{tmp_path}:{tmp_path}",
        "--pwd",
        str(tmp_path),
        "docker://ubuntu:22.04",
        "torchrun",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "1",
        "t.py",
        "--x",
        "a b",
    ]
    assert (tmp_path / "jobs" / "job-42" / "r-0.exit").read_text() == "3\n"


def test_a_failed_pull_is_the_replicas_cause(tmp_path: Path) -> None:
    script = _slurm_script(_job_app(_LOCAL), tmp_path, container="podman", pull="true")
    proc = _bash(script, _slurm_env(tmp_path, FAKE_PULL_EXIT="125"), tmp_path)
    assert proc.returncode == 125
    assert [r["argv"][:2] for r in _records(tmp_path)] == [["podman", "pull"]] * 2
    folder = tmp_path / "jobs" / "job-42"
    files = read_job_folder(folder)
    code, reason = replica_exit(folder, files, "r", 1)
    assert code == 125
    assert reason == (
        f"image {_LOCAL} could not be pulled on node n1: "
        "Error: initializing source: image not known"
    )


def test_pbs_one_node_apptainer_pull_then_exec(tmp_path: Path) -> None:
    sched = PbsScheduler(state_dir=tmp_path / "state")
    options = sched.parse_options(
        {"job_dir": str(tmp_path / "jobs"), "container": "apptainer", "pull": "true"}
    )
    script = tmp_path / "job.pbs"
    script.write_text(sched.compile(_job_app(_REGISTRY, nodes=1), options, app_id="j1").render())
    env = {
        "PATH": f"{_bin(tmp_path)}:/usr/bin:/bin",
        "PBS_JOBID": "7.server",
        "PBS_O_WORKDIR": str(tmp_path),
        "FAKE_RECORD": str(tmp_path / "record.jsonl"),
    }
    proc = _bash(script, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "jobs" / "j1"
    pull, run = (r["argv"] for r in _records(tmp_path))
    assert pull == ["apptainer", "pull", "--force", f"{folder}/r.sif", f"docker://{_REGISTRY}"]
    assert run[:2] == ["apptainer", "exec"] and f"{folder}/r.sif" in run
    assert (folder / "r-0.exit").read_text() == "0\n"


def test_term_removes_the_podman_container(tmp_path: Path) -> None:
    """scancel's SIGTERM to the task: its trap removes the container by name (conmon
    keeps a container running after its client is killed)."""
    script = _slurm_script(_job_app(_LOCAL, nodes=1), tmp_path, container="podman")
    env = _slurm_env(tmp_path, FAKE_NODES="1", FAKE_RUN_SLEEP="30", SLURM_JOB_NUM_NODES="1")
    proc = subprocess.Popen(["bash", str(script)], env=env, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not _records(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        task = _records(tmp_path)[0]["ppid"]  # the task's bash, waiting on podman run
        os.kill(task, signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    calls = [r["argv"] for r in _records(tmp_path)]
    assert ["podman", "rm", "-f", "-t", "2", "distspec-job-42-r-0"] in calls
    assert not (tmp_path / "jobs" / "job-42" / "r-0.exit").exists()  # stopped, not failed


# -- bad input at the CLI: one line, exit 2, nothing submitted --------------------------


@pytest.mark.parametrize(
    ("scheduler", "cfg", "args", "expected"),
    [
        ("slurm", "container=docker", ["--image", _LOCAL], "option container='docker'"),
        ("slurm", "container=podman", ["--image", "/i/torch.sif"], "cannot run"),
        ("slurm", "container=podman", ["--image", "/opt/project"], "a directory is where"),
        ("slurm", "container=apptainer", ["--image", "/i/t.sqsh"], "cannot run"),
        ("pbs", "container=pyxis", ["--image", _REGISTRY], "PBS does not have"),
        ("pbs", "container=oci", ["--image", "/bundles/t"], "PBS does not have"),
        (
            "slurm",
            "container=podman",
            ["--image", _LOCAL, "--mounts", "type=bind,src=data,dst=/data"],
            "must be an absolute path",
        ),
        (
            "pbs",
            "container=podman",
            ["--image", _LOCAL, "--mounts", "type=bind,src=../data,dst=/data"],
            "must be an absolute path",
        ),
        (
            "slurm",
            "container=podman",
            ["--image", _LOCAL, "--mounts", "type=bind,src=/no/such/dir,dst=/data"],
            "bind mount source '/no/such/dir' does not exist",
        ),
        ("slurm", "", ["--image", _LOCAL], "-cfg container="),
        ("slurm", "", ["--mounts", "type=bind,src=/tmp,dst=/data"], "needs a container runtime"),
        ("slurm", "container=podman", [], "give one with --image"),
        ("pbs", "pull=true", [], "need a container runtime"),
        ("slurm", "container_env=HF_TOKEN", [], "need a container runtime"),
        ("slurm", "container=podman,env_to_local=/tmp", ["--image", _LOCAL], "drop one of them"),
        (
            "slurm",
            "container=pyxis,srun_args=--container-name=x",
            ["--image", _LOCAL],
            "container_args",
        ),
    ],
)
def test_cli_bad_input(
    scheduler: str,
    cfg: str,
    args: list[str],
    expected: str,
    tmp_path: Path,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from distspec.cli.main import main

    bin_dir = tmp_path / "submit-bin"
    bin_dir.mkdir()
    for name in ("sbatch", "qsub"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho called > {tmp_path}/submitted\necho 1\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    argv = ["run", "-s", scheduler, *(["-cfg", cfg] if cfg else [])]
    assert main([*argv, "dist.ddp", "--script", "t.py", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "submitted").exists()


def test_a_site_sets_the_runtime_once(
    tmp_path: Path,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A run option's site default (here from the environment; a ``[scheduler:slurm]``
    section of a config file works the same), overridden per run by -cfg."""
    from distspec.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    monkeypatch.setenv("DISTSPEC_SLURM_CONTAINER", "apptainer")
    argv = ["run", "-s", "slurm", "--dryrun", "dist.ddp", "--script", "t.py", "--image", "ubuntu"]
    assert main(argv) == 0
    assert "apptainer exec" in capsys.readouterr().out
    assert main([*argv[:3], "-cfg", "container=podman", *argv[3:]]) == 0
    assert "podman run" in capsys.readouterr().out


def test_direct_launch_in_podman_keeps_the_rank_prefix_and_code(tmp_path: Path) -> None:
    script = _slurm_script(_job_app(_LOCAL), tmp_path, container="podman", workers="direct")
    proc = _bash(script, _slurm_env(tmp_path, FAKE_RUN_EXIT="4"), tmp_path)
    assert proc.returncode == 4
    run = _records(tmp_path, "run")[1]["argv"]
    assert run[run.index(_LOCAL) :] == [
        _LOCAL,
        *("python", "-m", "distspec.runtime.torchrun_env", "python", "-u", "t.py"),
        *("--x", "a b"),
    ]
    assert "--env" in run and "MASTER_ADDR" in run and "MASTER_PORT" in run
    folder = tmp_path / "jobs" / "job-42"
    deadline = time.monotonic() + 5  # the prefixing sed may write after podman ended
    while "[rank1]:" not in (folder / "r-1.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "[rank1]:ran in the container" in (folder / "r-1.log").read_text()
    assert (folder / "r-1.exit").read_text() == "4\n"


def test_status_names_the_pull_as_the_first_failure(tmp_path: Path) -> None:
    """What status and run --wait's summary blame: the replica whose node could not
    pull, with the cause the script wrote, not the one that recorded nothing."""
    from distspec.schedulers.slurm.status import status_from_files

    folder = tmp_path / "job-42"
    folder.mkdir()
    (folder / "r-1.exit").write_text("125\n")
    cause = f"image {_LOCAL} could not be pulled on node n1: Error: image not known"
    (folder / "r-1.reason").write_text(cause + "\n")
    status = status_from_files("42", [("r", 2)], read_job_folder(folder), 0, str(folder))
    failed = status.first_failure()
    assert failed is not None and failed.id == 1
    assert failed.exit_code == 125 and failed.reason == cause
