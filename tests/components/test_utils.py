"""utils.echo, sh, python, touch, copy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distspec.components.binder import bind
from distspec.components.loader import load
from distspec.components.utils import _main, copy_file
from distspec.errors import ComponentError
from distspec.specs import AppDef

REPO = Path(__file__).resolve().parents[2]


def run(name: str, *argv: str) -> AppDef:
    return bind(load(name), list(argv))


def test_echo() -> None:
    role = run("utils.echo", "--msg", "hi ${replica_id}", "--num_replicas", "3").roles[0]
    assert (role.entrypoint, role.args, role.num_replicas) == ("echo", ("hi ${replica_id}",), 3)
    assert run("utils.echo").roles[0].args == ("hello",)


def test_sh_joins_words() -> None:
    role = run("utils.sh", "echo", "$HOSTNAME", "&&", "true").roles[0]
    assert (role.entrypoint, role.args) == ("sh", ("-c", "echo $HOSTNAME && true"))
    role = run("utils.sh", "--env", "A=1", "-h", "cpu.small", "--", "ls", "-la").roles[0]
    assert role.args == ("-c", "ls -la")
    assert dict(role.env) == {"A": "1"} and role.resource.cpu == 1  # TorchX's cpu.small
    with pytest.raises(ComponentError, match="needs a command"):
        run("utils.sh")


def test_python_forms() -> None:
    assert run("utils.python", "-m", "pkg.tool", "x").roles[0].args == ("-m", "pkg.tool", "x")
    assert run("utils.python", "-m", "pkg.tool").name == "tool"
    assert run("utils.python", "-c", "print(1)").roles[0].args == ("-c", "print(1)")
    app = run("utils.python", "--script", "s/run.py", "--name", "job", "--", "-v")
    assert (app.name, app.roles[0].name, app.roles[0].args) == ("job", "run", ("s/run.py", "-v"))
    assert app.roles[0].entrypoint == "python"
    for argv in ([], ["-m", "a", "-c", "b"]):
        with pytest.raises(ComponentError, match="exactly one of -m, -c and --script"):
            run("utils.python", *argv)


def test_touch() -> None:
    role = run("utils.touch", "--file", "/tmp/x").roles[0]
    assert (role.entrypoint, role.args) == ("touch", ("/tmp/x",))
    with pytest.raises(ComponentError, match="required: --file"):
        run("utils.touch")


def test_copy_role() -> None:
    role = run("utils.copy", "--src", "s3://b/k", "--dst", "/tmp/out/").roles[0]
    assert role.entrypoint == "python"
    assert role.args == ("-m", "distspec.components.utils", "copy", "s3://b/k", "/tmp/out/")


def test_copy_file_between_fsspec_urls(tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    data = bytes(range(256)) * 9000
    src.write_bytes(data)
    copy_file(str(src), "memory://distspec-test/a/in.bin")
    out = copy_file("memory://distspec-test/a/in.bin", f"file://{tmp_path}/deep/dir/")
    assert out.endswith("/deep/dir/in.bin")
    assert (tmp_path / "deep" / "dir" / "in.bin").read_bytes() == data


def test_copy_main_as_the_job_runs_it(tmp_path: Path) -> None:
    src = tmp_path / "a.txt"
    src.write_text("payload")
    app = run("utils.copy", "--src", str(src), "--dst", str(tmp_path / "b.txt"))
    role = app.roles[0]
    proc = subprocess.run(
        [sys.executable, *role.args], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b.txt").read_text() == "payload"


def test_copy_main_usage() -> None:
    assert _main(["copy", "only-one"]) == 2
