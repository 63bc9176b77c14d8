"""``--image`` on Slurm and PBS is a directory (srun --chdir / cd), never a container."""

from __future__ import annotations

from pathlib import Path

import pytest

from distspec.components.binder import bind
from distspec.components.loader import load
from distspec.errors import CompileError
from distspec.schedulers.pbs import PbsScheduler
from distspec.schedulers.slurm import SlurmScheduler


def _compile(cls: type, image: str, tmp_path: Path) -> str:
    backend = cls("t", state_dir=tmp_path / "state")
    app = bind(load("dist.ddp"), ["--script", "t.py", "--image", image])
    request = backend.compile(app, backend.parse_options({}), app_id="t-0000abcd")
    return str(request.render())


@pytest.mark.parametrize(("cls", "what"), [(SlurmScheduler, "srun --chdir"), (PbsScheduler, "cd")])
@pytest.mark.parametrize(
    "image", ["ghcr.io/pytorch/torchx:0.7.0", "python:3.11", "relative/dir", "docker://x/y", "~/x"]
)
def test_a_non_absolute_image_is_refused(cls: type, what: str, image: str, tmp_path: Path) -> None:
    with pytest.raises(CompileError) as info:
        _compile(cls, image, tmp_path)
    text = str(info.value)
    assert f"--image {image!r} is not an absolute directory" in text
    assert f"({what})" in text and "\n" not in text


@pytest.mark.parametrize("cls", [SlurmScheduler, PbsScheduler])
def test_an_absolute_directory_is_where_the_job_runs(cls: type, tmp_path: Path) -> None:
    # compile is pure: the directory need not exist here
    script = _compile(cls, "/nonexistent/project dir", tmp_path)
    assert "'/nonexistent/project dir'" in script


def test_cli_refuses_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from distspec.cli.main import main

    argv = ["run", "--dryrun", "-s", "slurm", "dist.ddp", "--image", "ghcr.io/pytorch/torchx:0.7.0"]
    assert main([*argv, "--script", "t.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("distspec run: error: slurm: role 't': --image")
