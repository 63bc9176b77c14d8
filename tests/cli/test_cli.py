"""The CLI as a user meets it: real subprocesses, exit codes, one-line errors, import hygiene."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "kubernetes", "yaml", "fsspec", "docstring_parser", "pyre_extensions", "numpy")


def buffered_env() -> dict[str, str]:
    """This environment without PYTHONUNBUFFERED (this machine sets it): stdout into a
    pipe is then block-buffered, as for most users, and only an exit flushes it."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def distspec(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, buffered: bool = False
) -> subprocess.CompletedProcess[str]:
    full_env = {**(buffered_env() if buffered else os.environ), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "distspec", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=full_env,
        timeout=60,
        check=False,
    )


def loaded_modules(*args: str, cwd: Path | None = None) -> tuple[set[str], str]:
    """Run the CLI in-process in a fresh interpreter and report sys.modules at exit."""
    code = (
        "import sys, json, atexit\n"
        "atexit.register(lambda: sys.__stderr__.write('\\nMODULES=' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
        "from distspec.cli.main import main\n"
        f"code = main({list(args)!r})\n"
        "sys.stdout.flush()\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stderr.splitlines() if line.startswith("MODULES="))
    return set(json.loads(line[len("MODULES=") :])), proc.stdout


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def _home(scheduler: str) -> str:
    """The module or package below distspec.schedulers that the registry loads."""
    from distspec.schedulers._registry import BUILTIN_SCHEDULERS

    return BUILTIN_SCHEDULERS[scheduler].partition(":")[0].split(".")[2]


def backends(modules: set[str]) -> set[str]:
    """The builtin backends (their packages, or the local_cwd alias) among ``modules``;
    what they share (api, shell, logs, batch, ...) is not a backend."""
    from distspec.schedulers._registry import BUILTIN_SCHEDULERS

    homes = {_home(name) for name in BUILTIN_SCHEDULERS} | set(BUILTIN_SCHEDULERS)
    return {
        m.split(".")[2]
        for m in modules
        if m.startswith("distspec.schedulers.") and m.split(".")[2] in homes
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--dryrun", "dist.ddp", "-j", "2x", "--script", "main.py"], "accepted forms: NxM"),
        (
            ["run", "--dryrun", "dist.ddp", "-j", "0x1", "--script", "main.py"],
            "number of nodes must be at least 1",
        ),
        (
            ["run", "--dryrun", "-s", "slrum", "dist.ddp", "--script", "main.py"],
            "did you mean 'slurm'",
        ),
        (
            [
                "run",
                "--dryrun",
                "-s",
                "slurm",
                "-cfg",
                "partiton=gpu",
                "dist.ddp",
                "--script",
                "m.py",
            ],
            "did you mean 'partition'",
        ),
        (
            ["run", "--dryrun", "-cfg", "novalue", "dist.ddp", "--script", "m.py"],
            "malformed -cfg item",
        ),
        (["run", "--dryrun", "dist.dpp", "--script", "m.py"], "dist.ddp"),
        (["run", "--dryrun", "dist.ddp", "--script", "a.py", "-m", "pkg"], "--script"),
        (["run", "--dryrun", "dist.ddp", "--cpu", "many", "--script", "a.py"], "cpu"),
        (["run", "-o", "out", "dist.ddp", "--script", "a.py"], "add --dryrun"),
        (["status", "not-a-handle"], "expected SCHEDULER://SESSION/APP_ID"),
        (["status", "local_cwd://distspec/nope-00000000"], "no such app"),
        (["log", "local_cwd://distspec/x", "--since", "yesterday"], "--since"),
        (["bogus"], "invalid choice"),
    ],
)
def test_usage_mistakes_exit_2_with_one_line(
    args: list[str], message: str, state_dir: Path
) -> None:
    proc = distspec(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_help_is_fast_to_import() -> None:
    modules, out = loaded_modules("--help")
    assert "run" in out and "describe" in out
    assert heavy(modules) == []
    assert backends(modules) == set()
    assert "distspec.components.loader" not in modules


def test_builtins_imports_no_backend_or_component() -> None:
    modules, out = loaded_modules("builtins")
    assert "dist.ddp" in out and "slurm" in out
    assert heavy(modules) == []
    assert backends(modules) == set()
    assert "distspec.components.dist" not in modules


@pytest.mark.parametrize(
    ("scheduler", "extra"),
    [("local_cwd", []), ("slurm", []), ("kubernetes", ["--image", "repo/img:1"])],
)
def test_dry_run_imports_only_its_backend(scheduler: str, extra: list[str]) -> None:
    if scheduler == "kubernetes" and not (REPO / "distspec" / "schedulers" / "kubernetes").is_dir():
        pytest.skip("kubernetes backend not present")
    modules, out = loaded_modules(
        "run", "--dryrun", "-s", scheduler, "dist.ddp", "-j", "2x2", "--script", "main.py", *extra
    )
    assert out.strip()
    own = {scheduler, f"{scheduler}_manifest", f"{scheduler}_script", _home(scheduler)}
    assert backends(modules) <= own, backends(modules)
    assert heavy(modules) == [], heavy(modules)


#: Standard-library modules a dry run has no use for, with what each costs at start-up
#: on this machine kind (docs/contributing/performance.md): inspect (with dataclasses) ~8 ms,
#: typing ~4, pathlib ~4, tomllib ~9, configparser ~2, subprocess ~9,
#: importlib.metadata ~32.
SLOW_STDLIB = (
    "inspect",
    "dataclasses",
    "typing",
    "pathlib",
    "tomllib",
    "configparser",
    "subprocess",
    "importlib.metadata",
)


@pytest.mark.parametrize(
    ("scheduler", "extra"),
    [
        ("local_cwd", []),
        ("slurm", []),
        ("pbs", []),
        ("kubernetes", ["--image", "repo/img:1"]),
    ],
)
def test_dry_run_imports_no_slow_stdlib_module(
    scheduler: str, extra: list[str], tmp_path: Path
) -> None:
    # -S: no site, so nothing a .pth file imports (an editable install's finder
    # imports pathlib) hides what distspec itself imports. A pyproject.toml without
    # [tool.distspec], as most projects have, must not be parsed.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "trainer"\n')
    code = (
        "import sys\n"
        "from distspec.cli.main import main\n"
        f"code = main({['run', '--dryrun', '-s', scheduler, 'dist.ddp', '-j', '2x2', '--script', 'main.py', *extra]!r})\n"
        "sys.stdout.flush()\n"
        "print('MODULES=' + ','.join(sorted(sys.modules)), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stderr.splitlines() if line.startswith("MODULES="))
    modules = set(line[len("MODULES=") :].split(","))
    assert "distspec.schedulers." + _home(scheduler) in modules
    assert sorted(modules & set(SLOW_STDLIB)) == []


def test_component_help_lists_every_parameter() -> None:
    proc = distspec("run", "dist.ddp", "--help")
    assert proc.returncode == 0, proc.stderr
    for flag in (
        "-j",
        "--script",
        "-m",
        "-h",
        "--env",
        "--max_retries",
        "--mounts",
        "--debug",
        "--tee",
        "--rdzv_port",
    ):
        assert flag in proc.stdout, flag
    assert "default" in proc.stdout.lower()


def test_dry_run_local_prints_what_would_run(state_dir: Path) -> None:
    proc = distspec(
        "run", "--dryrun", "-s", "local_cwd", "dist.ddp", "-j", "1x2", "--script", "main.py"
    )
    assert proc.returncode == 0, proc.stderr
    assert "torchrun" in proc.stdout and "main.py" in proc.stdout
    assert "--nproc_per_node" in proc.stdout or "--nproc-per-node" in proc.stdout
    assert not state_dir.exists() or not any(state_dir.iterdir()), "a dry run must write nothing"


def test_dry_run_output_dir_and_json(tmp_path: Path, state_dir: Path) -> None:
    out = tmp_path / "out"
    proc = distspec(
        "run",
        "--dryrun",
        "-o",
        str(out),
        "-s",
        "slurm",
        "dist.ddp",
        "-j",
        "2x2",
        "--script",
        "main.py",
    )
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in out.iterdir())
    assert "submit.sh" in written and len(written) >= 2
    check = subprocess.run(
        ["bash", "-n", str(out / "submit.sh")], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr
    proc = distspec(
        "run", "--dryrun", "--json", "-s", "slurm", "dist.ddp", "-j", "2x2", "--script", "main.py"
    )
    data = json.loads(proc.stdout)
    assert (
        data["scheduler"] == "slurm"
        and data["files"]
        and data["app"]["roles"][0]["num_replicas"] == 2
    )


def test_user_component_in_a_file(tmp_path: Path, state_dir: Path) -> None:
    comp = tmp_path / "mycomp.py"
    comp.write_text(
        '''
from distspec.specs import AppDef, Role


def greet(who: str = "world", times: int = 1) -> AppDef:
    """Say hello.

    Args:
        who: whom to greet
        times: how many replicas greet
    """
    return AppDef(name="greet", roles=(Role(name="greeter", entrypoint="echo", args=(f"hello {who}",), num_replicas=times),))
'''
    )
    proc = distspec("run", f"{comp}:greet", "--help")
    assert proc.returncode == 0 and "whom to greet" in proc.stdout and "--times" in proc.stdout
    proc = distspec("run", "--dryrun", f"{comp}:greet", "--who", "you")
    assert proc.returncode == 0, proc.stderr
    assert "hello you" in proc.stdout
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from distspec.specs import AppDef\n\n\ndef broken(x: set[int]) -> AppDef:\n    '''Doc.\n\n    Args:\n        x: a set\n    '''\n    raise NotImplementedError\n"
    )
    proc = distspec("run", "--dryrun", f"{bad}:broken")
    assert proc.returncode == 2
    assert f"{bad}:4" in proc.stderr and "set[int]" in proc.stderr


def test_runopts_and_configure(tmp_path: Path, state_dir: Path) -> None:
    proc = distspec("runopts", "slurm")
    assert proc.returncode == 0 and "partition" in proc.stdout
    proc = distspec("configure", "-s", "slurm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / ".distspecconfig").read_text()
    assert "[scheduler:slurm]" in text and "# partition =" in text
    again = distspec("configure", "-s", "slurm", cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
    # the file we wrote is valid config: uncomment one option and a dry run uses it
    (tmp_path / ".distspecconfig").write_text(text.replace("# partition = ", "partition = debugq"))
    proc = distspec("run", "--dryrun", "-s", "slurm", "dist.ddp", "--script", "m.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "debugq" in proc.stdout


def test_config_error_names_its_source(tmp_path: Path, state_dir: Path) -> None:
    (tmp_path / ".distspecconfig").write_text("[scheduler:slurm]\npartiton = x\n")
    proc = distspec("run", "--dryrun", "-s", "slurm", "dist.ddp", "--script", "m.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert (
        str(tmp_path / ".distspecconfig") in proc.stderr
        and "did you mean 'partition'" in proc.stderr
    )


def test_module_component_from_the_working_directory(tmp_path: Path, state_dir: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "comps.py").write_text(
        "from distspec.specs import AppDef, Role\n\n\n"
        "def hello(who: str = 'x') -> AppDef:\n"
        "    '''Say hello.\n\n    Args:\n        who: whom\n    '''\n"
        "    return AppDef(name='hello', roles=(Role(name='r', entrypoint='echo', args=('hi ' + who,)),))\n"
    )
    proc = distspec("run", "--dryrun", "mypkg.comps:hello", "--who", "bob", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hi bob" in proc.stdout
    missing = distspec("run", "--dryrun", "nopkg.comps:hello", cwd=tmp_path)
    assert missing.returncode == 2 and "cannot import module 'nopkg.comps'" in missing.stderr


def test_fast_exit_loses_no_output() -> None:
    # ~200 KB of script: more than a pipe holds, so the end of it is still in
    # distspec's buffer when main() returns; the fast exit must flush it.
    script_args = [f"--arg{i}=value-{i}" for i in range(8000)]
    proc = distspec(
        "run", "--dryrun", "-s", "slurm", "dist.ddp", "-j", "2x2", "--script", "main.py",
        "--", *script_args,
        buffered=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) > 150_000
    assert "--arg7999=value-7999" in proc.stdout
    assert proc.stdout.endswith("\n")


def test_fast_exit_flushes_buffered_output() -> None:
    # Into a pipe, stdout is block-buffered: a short listing sits in the buffer
    # until the exit flushes it.
    proc = distspec("builtins", buffered=True)
    assert proc.returncode == 0, proc.stderr
    assert "dist.ddp" in proc.stdout and "slurm" in proc.stdout


def test_fast_exit_keeps_exit_codes() -> None:
    assert (
        distspec("run", "--dryrun", "-s", "nosuch", "dist.ddp", "--script", "m.py").returncode == 2
    )
    assert distspec("builtins").returncode == 0


def _dryrun_a_component_that_first_runs(
    code: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """``run --dryrun`` of a dist.ddp component whose file runs ``code`` when imported."""
    component = tmp_path / "comp.py"
    component.write_text(
        code + "from distspec.components.dist import ddp\n"
        "def job(script: str) -> object:\n"
        '    """A job.\n\n    Args:\n        script: the script.\n    """\n'
        "    return ddp(script=script)\n"
    )
    return distspec("run", "--dryrun", f"{component}:job", "--script", "m.py", cwd=tmp_path)


def test_exit_runs_atexit_handlers_a_component_registers(tmp_path: Path) -> None:
    marker = tmp_path / "atexit-ran"
    proc = _dryrun_a_component_that_first_runs(
        "import atexit, pathlib\n"
        f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')\n",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "yes"


def test_exit_waits_for_a_thread_a_component_started(tmp_path: Path) -> None:
    # A non-daemon thread still running when the command ends is waited for, as
    # Python's own exit does; a daemon thread (blocked for good here) is not.
    marker = tmp_path / "thread-ran"
    proc = _dryrun_a_component_that_first_runs(
        "import pathlib, threading, time\n"
        "def later():\n"
        "    time.sleep(0.5)\n"
        f"    pathlib.Path({str(marker)!r}).write_text('yes')\n"
        "threading.Thread(target=later).start()\n"
        "threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text() == "yes"


def test_output_to_a_closed_pipe_is_dropped_quietly() -> None:
    # `distspec builtins | true`: the reader is gone before distspec flushes.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "distspec", "builtins"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=buffered_env(),
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    assert "BrokenPipeError" not in proc.stderr
