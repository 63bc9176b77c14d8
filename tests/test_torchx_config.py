"""A TorchX user's .torchxconfig: read as the lowest layer, with one warning line."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distspec.config import load_config
from distspec.errors import ConfigError

TORCHX_INI = """\
[slurm]
partition = debug
mail-user = me@example.com

[component:dist.ddp]
j = 1x3

[cli:run]
scheduler = slurm
component = dist.ddp
"""


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    return home, project


def _merged(cfg: object, scheduler: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for _, values in cfg.scheduler_layers(scheduler):  # type: ignore[attr-defined]
        out.update(values)
    return out


def test_torchxconfig_is_the_lowest_layer_and_warns_once(
    dirs: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text(TORCHX_INI)
    with caplog.at_level(logging.WARNING, logger="distspec.config"):
        cfg = load_config(cwd=project, env={"HOME": str(home)}, home=home)
    assert cfg.scheduler == "slurm"
    assert _merged(cfg, "slurm") == {"partition": "debug", "mail_user": "me@example.com"}
    assert cfg.component_defaults("dist.ddp") == {"j": "1x3"}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert str(project / ".torchxconfig") in lines[0]
    assert "[slurm] partition" in lines[0]
    assert "[cli:run] component (not read)" in lines[0]


def test_distspec_settings_win_and_silence_the_warning(
    dirs: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text("[slurm]\npartition = debug\n")
    (project / ".distspecconfig").write_text("[scheduler:slurm]\npartition = gpu\n")
    with caplog.at_level(logging.WARNING, logger="distspec.config"):
        cfg = load_config(cwd=project, env={"HOME": str(home)}, home=home)
    assert _merged(cfg, "slurm") == {"partition": "gpu"}
    assert caplog.records == []
    # a DISTSPEC_* variable counts as a distspec setting too
    with caplog.at_level(logging.WARNING, logger="distspec.config"):
        cfg = load_config(
            cwd=home, env={"HOME": str(project), "DISTSPEC_SLURM_PARTITION": "env"}, home=project
        )
    assert _merged(cfg, "slurm")["partition"] == "env"


def test_home_file_overlays_the_project_file_as_in_torchx(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text("[slurm]\npartition = project\nqos = high\n")
    (home / ".torchxconfig").write_text("[slurm]\npartition = home\n")
    cfg = load_config(cwd=project, env={"HOME": str(home)}, home=home)
    assert _merged(cfg, "slurm") == {"partition": "home", "qos": "high"}


def test_torchxconfig_variable_names_the_only_file(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text("[slurm]\npartition = project\n")
    named = tmp_path / "elsewhere.ini"
    named.write_text("[slurm]\naccount = acct\n")
    cfg = load_config(cwd=project, env={"HOME": str(home), "TORCHXCONFIG": str(named)}, home=home)
    assert _merged(cfg, "slurm") == {"account": "acct"}
    with pytest.raises(ConfigError, match="TORCHXCONFIG"):
        load_config(cwd=project, env={"TORCHXCONFIG": str(tmp_path / "nope")}, home=home)


def test_off_switch_ignores_the_file(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text(TORCHX_INI)
    cfg = load_config(
        cwd=project, env={"HOME": str(home), "DISTSPEC_TORCHXCONFIG": "off"}, home=home
    )
    assert cfg.scheduler == "local_cwd"
    assert _merged(cfg, "slurm") == {}


def _cli(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "TORCHX"))}
    env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )


def test_cli_slurm_partition_from_torchxconfig_reaches_sbatch(dirs: tuple[Path, Path]) -> None:
    """The issue's case: `[slurm] partition=...` was silently ignored."""
    home, project = dirs
    (project / ".torchxconfig").write_text(TORCHX_INI)
    (project / "train.py").write_text("")
    proc = _cli(project, home, "run", "--dryrun", "dist.ddp", "--script", "train.py")
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --partition=debug" in proc.stdout
    assert "#SBATCH --mail-user=me@example.com" in proc.stdout
    assert "--nproc_per_node 3" in proc.stdout
    warnings = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(warnings) == 1 and ".torchxconfig" in warnings[0], proc.stderr


def test_cli_unknown_torchx_option_is_refused_naming_the_file(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text("[slurm]\npartiton = debug\n")
    (project / "train.py").write_text("")
    proc = _cli(project, home, "run", "--dryrun", "-s", "slurm", "dist.ddp", "--script", "train.py")
    assert proc.returncode == 2, proc.stdout
    assert "partiton" in proc.stderr and ".torchxconfig" in proc.stderr


def test_no_torchxconfig_imports_nothing_more(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    code = (
        "import sys; from distspec.config import load_config; load_config(); "
        "print('distspec.config_torchx' in sys.modules, 'configparser' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "TORCHX"))}
    env["HOME"] = str(home)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.stdout.split() == ["False", "False"], out.stderr
    (project / ".torchxconfig").write_text("[slurm]\npartition = debug\n")
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.stdout.split() == ["True", "True"], out.stderr


def test_kubernetes_queue_is_read_as_is_and_unknown_schedulers_are_named(
    dirs: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text(
        "[kubernetes]\nqueue = default\nnamespace = ml\n\n[aws_batch]\nqueue = torchx\n"
    )
    with caplog.at_level(logging.WARNING, logger="distspec.config"):
        cfg = load_config(cwd=project, env={"HOME": str(home)}, home=home)
    # No flavor slipped in: queue means what -cfg queue means.
    assert _merged(cfg, "kubernetes") == {"queue": "default", "namespace": "ml"}
    (line,) = [r.getMessage() for r in caplog.records]
    assert "[aws_batch] queue (no such distspec scheduler)" in line


K8S_DRYRUN = ("run", "--dryrun", "-s", "kubernetes", "dist.ddp", "-j", "2x1")
K8S_DRYRUN += ("--image", "repo/img:1", "--script", "train.py")


def _kind(manifest: str) -> tuple[str, str]:
    """(apiVersion, kind) of the job object of a dry-run manifest."""
    docs = [d for d in manifest.split("\n---\n") if "\nkind: Service" not in "\n" + d]
    head = docs[-1].splitlines()
    api = next(line.split(": ", 1)[1] for line in head if line.startswith("apiVersion: "))
    kind = next(line.split(": ", 1)[1] for line in head if line.startswith("kind: "))
    return api, kind


def test_kubernetes_queue_builds_the_same_job_from_either_source(dirs: tuple[Path, Path]) -> None:
    """``queue`` has one meaning: from .torchxconfig as from -cfg (it used to make a
    Volcano Job from the file and a Kueue-labelled Job from the command line)."""
    home, project = dirs
    (project / "train.py").write_text("")
    cli = _cli(project, home, *K8S_DRYRUN[:4], "-cfg", "queue=team-a", *K8S_DRYRUN[4:])
    assert cli.returncode == 0, cli.stderr
    (project / ".torchxconfig").write_text("[kubernetes]\nqueue = team-a\n")
    from_file = _cli(project, home, *K8S_DRYRUN)
    assert from_file.returncode == 0, from_file.stderr
    ids = re.compile(r"train-[0-9a-f]{8}")  # each dry run has an app id of its own
    assert ids.sub("ID", from_file.stdout) == ids.sub("ID", cli.stdout)
    assert _kind(cli.stdout) == ("batch/v1", "Job")
    assert "kueue.x-k8s.io/queue-name: team-a" in cli.stdout
    # TorchX's Volcano Job: flavor=volcano, which the conversion writes.
    converted = _cli(project, home, "configure", "--from-torchx", "-o", "-")
    assert "[scheduler:kubernetes]\nqueue = team-a\nflavor = volcano\n" in converted.stdout


def test_component_defaults_in_torchx_spelling(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text("[component:dist.ddp]\nmemMB = 2048\ndebug = True\n")
    (project / "train.py").write_text("")
    proc = _cli(project, home, "run", "--dryrun", "--json", "dist.ddp", "--script", "train.py")
    assert proc.returncode == 0, proc.stderr
    role = json.loads(proc.stdout)["app"]["roles"][0]
    assert role["resource"]["mem_mb"] == 2048
    assert role["env"]["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"


def test_configure_from_torchx_converts_and_silences(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    (project / ".torchxconfig").write_text(TORCHX_INI + "\n[aws_batch]\nqueue = q\n")
    (project / "train.py").write_text("")
    printed = _cli(project, home, "configure", "--from-torchx", "-o", "-")
    assert printed.returncode == 0, printed.stderr
    assert "[scheduler:slurm]\npartition = debug\nmail_user = me@example.com\n" in printed.stdout
    assert "[component:dist.ddp]\nj = 1x3\n" in printed.stdout
    assert "#   queue = q" in printed.stdout  # aws_batch: listed, not converted
    assert "#   [cli:run] component" in printed.stdout
    assert not (project / ".distspecconfig").exists()

    wrote = _cli(project, home, "configure", "--from-torchx")
    assert wrote.returncode == 0, wrote.stderr
    assert "[distspec]\nscheduler = slurm\n" in (project / ".distspecconfig").read_text()
    again = _cli(project, home, "configure", "--from-torchx")
    assert again.returncode == 2 and "--force" in again.stderr
    assert _cli(project, home, "configure", "--from-torchx", "--force").returncode == 0

    run = _cli(project, home, "run", "--dryrun", "dist.ddp", "--script", "train.py")
    assert run.returncode == 0, run.stderr
    assert "#SBATCH --partition=debug" in run.stdout
    assert run.stderr.strip() == "", run.stderr  # every value now comes from .distspecconfig


def test_configure_from_torchx_without_a_file(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    proc = _cli(project, home, "configure", "--from-torchx")
    assert proc.returncode == 2
    assert "no .torchxconfig to convert" in proc.stderr
