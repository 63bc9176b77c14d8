"""Secrets stay private: ``distspec config`` masks them, dry runs print references.

Tokens sit in a ``.distspecconfig``, in ``[tool.distspec]`` of a pyproject.toml, in
the user's ``~/.distspecconfig`` and in ``DISTSPEC_<SCHED>_<OPTION>`` variables; the
real console script runs, and every byte of its stdout and stderr is searched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from distspec.cli.config import MASK, masked
from tests.cli.test_cli import distspec

TOKENS = {
    "ini_secret_env": "hf_IniSecretEnvToken0001",
    "ini_env": "hf_IniEnvToken0002",
    "ini_token": "ghp_IniToken0003",
    "ini_password": "IniPassword0004",
    "ini_api_key": "sk-IniApiKey0005",
    "toml_env": "hf_TomlEnvToken0006",
    "toml_secret_env": "hf_TomlSecretEnv0007",
    "home_token": "hf_HomeToken0008",
    "env_secret_env": "hf_EnvSecretEnv0009",
    "env_env_path": "/secret/path/part0010",
}


@pytest.fixture
def project(tmp_path: Path, state_dir: Path) -> tuple[Path, dict[str, str]]:
    """A project with a token in every kind of place; the environment to run it with."""
    t = TOKENS
    (tmp_path / ".distspecconfig").write_text(
        "[distspec]\n"
        "scheduler = slurm\n"
        "[scheduler:kubernetes]\n"
        f"secret_env = HF_TOKEN={t['ini_secret_env']}   ; pasted in place of SECRET:KEY\n"
        "namespace = ml\n"
        "[scheduler:slurm]\n"
        "partition = gpu\n"
        "[component:dist.ddp]\n"
        f"env = HF_TOKEN={t['ini_env']},OMP_NUM_THREADS=4\n"
        "j = 2x8\n"
        "[component:my.train]\n"
        f"hf_token = {t['ini_token']}\n"
        f"db_password = {t['ini_password']}\n"
        f"api_key = {t['ini_api_key']}\n"
    )
    (tmp_path / "pyproject.toml").write_text(
        '[tool.distspec.components."dist.spmd"]\n'
        f'env = "WANDB_API_KEY={t["toml_env"]}"\n'
        "[tool.distspec.schedulers.kubernetes]\n"
        f'secret_env = {{ HF_TOKEN = "{t["toml_secret_env"]}" }}\n'
    )
    home = state_dir.parent / "home"
    (home / ".distspecconfig").write_text(
        f"[component:my.other]\naccess_token = {t['home_token']}\n"
    )
    env = {
        "DISTSPEC_KUBERNETES_SECRET_ENV": f"HF_TOKEN={t['env_secret_env']}",
        "DISTSPEC_PBS_EXPORT_ENV": "true",
        "HOME": str(home),
    }
    return tmp_path, env


def _assert_no_token(*texts: str) -> None:
    for name, token in TOKENS.items():
        for text in texts:
            assert token not in text, f"{name} leaked: {text}"
            # no part of one either (a prefix before an '=', the rest after a comma)
            assert token[4:] not in text, f"part of {name} leaked: {text}"


def test_config_masks_every_secret_and_keeps_its_source(
    project: tuple[Path, dict[str, str]],
) -> None:
    cwd, env = project
    out = distspec("config", cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr
    _assert_no_token(out.stdout, out.stderr)
    rows = {
        (line.split("=", 1)[0].strip(), line.split(";")[-1].strip()): line.split("=", 1)[1]
        for line in out.stdout.splitlines()
        if " = " in line and ";" in line
    }
    cfg, home = cwd / ".distspecconfig", Path(env["HOME"]) / ".distspecconfig"

    def value(key: str, source: str) -> str:
        return rows[(key, source)].rpartition(";")[0].strip()

    # The winner for kubernetes' secret_env is the environment; the file's is hidden under it.
    assert value("secret_env", "DISTSPEC_KUBERNETES_SECRET_ENV") == MASK
    assert value("env", f"{cfg}:9") == "HF_TOKEN=***,OMP_NUM_THREADS=***"
    assert value("hf_token", f"{cfg}:12") == MASK
    assert value("db_password", f"{cfg}:13") == MASK
    assert value("api_key", f"{cfg}:14") == MASK
    assert value("access_token", f"{home}:2") == MASK
    # What is not a secret is shown as before.
    assert value("partition", f"{cfg}:7") == "gpu"
    assert value("namespace", f"{cfg}:5") == "ml"
    assert value("j", f"{cfg}:10") == "2x8"
    assert value("export_env", "DISTSPEC_PBS_EXPORT_ENV") == "true"

    data = distspec("config", "--json", cwd=cwd, env=env)
    assert data.returncode == 0, data.stderr
    _assert_no_token(data.stdout, data.stderr)
    settings = {
        (s["section"], s["key"]): (s["value"], s["source"])
        for s in json.loads(data.stdout)["settings"]
    }
    assert settings[("component:dist.spmd", "env")][0] == "WANDB_API_KEY=***"
    assert "pyproject.toml" in settings[("component:dist.spmd", "env")][1]
    assert settings[("component:my.train", "hf_token")] == (MASK, f"{cfg}:12")
    assert settings[("scheduler:slurm", "partition")] == ("gpu", f"{cfg}:7")

    show = distspec("configure", "--show", cwd=cwd, env=env)
    assert show.stdout == out.stdout
    _assert_no_token(show.stderr)


def test_the_toml_table_of_secret_env_keeps_its_names(
    project: tuple[Path, dict[str, str]],
) -> None:
    cwd, env = project
    del env["DISTSPEC_KUBERNETES_SECRET_ENV"]
    (cwd / ".distspecconfig").write_text("[scheduler:slurm]\npartition = gpu\n")
    data = distspec("config", "--json", cwd=cwd, env=env)
    assert data.returncode == 0, data.stderr
    _assert_no_token(data.stdout, data.stderr)
    settings = {(s["section"], s["key"]): s["value"] for s in json.loads(data.stdout)["settings"]}
    assert settings[("scheduler:kubernetes", "secret_env")] == {"HF_TOKEN": MASK}


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("secret_env", "HF_TOKEN=hf-secret:token;B=s:k", MASK),
        ("secret_env", "dG9rZW4=", MASK),  # a base64 token's '=' is no name
        ("hf_token", "a=b", MASK),
        ("apikey", 12345, MASK),
        ("keys", ["a", "b=c"], [MASK, MASK]),
        ("env", "A=1,B=x\\,y=2", "A=***,B=***"),
        ("env", "PATHS=/a,/b,MODE=x", "PATHS=***,MODE=***"),  # /b is PATHS' value
        ("env", "hf_pasted_without_a_name", MASK),
        ("env", {"A": "1"}, {"A": MASK}),
        ("extra_env", ["A=1", "/x"], ["A=***", MASK]),
        ("export_env", "true", "true"),
        ("partition", "gpu", "gpu"),
        ("kubeconfig", "/home/me/.kube/config", "/home/me/.kube/config"),
        ("mem", 1024, 1024),
    ],
)
def test_masked(key: str, value: Any, shown: Any) -> None:
    assert masked(key, value) == shown


def test_dry_run_prints_references_from_a_config_file_never_values(
    project: tuple[Path, dict[str, str]],
) -> None:
    """secret_env from a config file or the environment reaches the manifest as a
    secretKeyRef; a token pasted in its place is refused without being echoed."""
    cwd, env = project
    argv = ["run", "--dryrun", "-s", "kubernetes", "utils.echo", "--image", "img:1"]
    # The pasted tokens (file and environment) are refused, not printed.
    bad = distspec(*argv, cwd=cwd, env=env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "Traceback" not in bad.stderr and "secret_env" in bad.stderr
    _assert_no_token(bad.stdout, bad.stderr)
    # Proper references, from the file, then from the environment over it.
    text = (cwd / ".distspecconfig").read_text()
    (cwd / ".distspecconfig").write_text(
        text.replace(f"HF_TOKEN={TOKENS['ini_secret_env']}", "HF_TOKEN=hf-file:token")
    )
    for extra, secret in (
        ({}, "hf-file"),
        ({"DISTSPEC_KUBERNETES_SECRET_ENV": "HF_TOKEN=hf-env:tok"}, "hf-env"),
    ):
        run_env = {k: v for k, v in env.items() if k != "DISTSPEC_KUBERNETES_SECRET_ENV"}
        run_env.update(extra)
        ok = distspec(*argv, cwd=cwd, env=run_env)
        assert ok.returncode == 0, ok.stderr
        _assert_no_token(ok.stdout, ok.stderr)
        block = ok.stdout[ok.stdout.index("- name: HF_TOKEN") :][:200]
        assert "valueFrom" in block and "secretKeyRef" in block and secret in block, block
        assert "value:" not in block.split("valueFrom")[0], block
