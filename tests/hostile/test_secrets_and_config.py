"""Hostile secrets and config sources: a planted token never reaches a message; a config source that is not a small regular file is one line, never a hang.

A token is planted where users put secrets: ``--env`` values (also on components
that have no ``--env``), ``env`` defaults and ``secret_env`` entries in config files,
``DISTSPEC_*`` variables. Many failing and succeeding dry runs and verbs then run,
and every stdout and stderr line, and every file a dry run writes with ``-o DIR``,
is searched for it.

Where a secret may appear, by decision (docs/cli.md, "Secrets"): an ``--env`` value
(or a config ``env`` default) is part of the job, so the job script or manifest a
dry run prints (stdout) or writes (``-o DIR``) contains it, byte for byte what
``submit`` would hand the scheduler; the files are then 0600 (0700 for scripts) in
a folder created 0700. Nothing else: never a message, never ``distspec config``,
and a Kubernetes ``secret_env`` value (a Secret's name and key) is never the token.

Config sources: a ``.distspecconfig``, ``pyproject.toml`` or ``.torchxconfig`` that
is a FIFO, a directory, a link to ``/dev/zero``, or larger than 1 MiB is one line
(exit 2) in a subprocess under a timeout; ``DISTSPEC_*`` names close to a known one
get a did-you-mean, and every name distspec or its tests use is never flagged.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distspec.cli.main import main
from distspec.config import DEV_VARIABLES, ENV_VARIABLES, load_config
from distspec.errors import ConfigError

pytestmark = pytest.mark.timeout(300)

TOKEN = "tok_Zq9s3cretV4lue"
DDP = ["dist.ddp", "-j", "1x1", "--script", "train.py"]
K8S = ["dist.ddp", "-j", "1x1", "--image", "img:1", "--script", "train.py"]
SCHEDS = ("local_cwd", "slurm", "pbs", "kubernetes")


def _args(sched: str) -> list[str]:
    return ["-s", sched, *(K8S if sched == "kubernetes" else DDP)]


# (id, argv, environment, files in the working directory, where the token may show:
# "out" = the dry run's stdout, "files" = the files it writes with -o DIR)
Case = tuple[str, list[str], dict[str, str], dict[str, str], frozenset[str]]
NOWHERE: frozenset[str] = frozenset()
OUT = frozenset({"out"})
FILES = frozenset({"files"})

CONFIG_ENV = {".distspecconfig": f"[component:dist.ddp]\nenv = HF_TOKEN={TOKEN}\n"}
CONFIG_SECRET = {
    ".distspecconfig": f"[scheduler:kubernetes]\nsecret_env = HF_TOKEN={TOKEN}\n"
    f"[component:dist.ddp]\nenv = HF_TOKEN={TOKEN},B=1\n"
}
PYPROJECT_SECRET = {
    "pyproject.toml": "[tool.distspec.schedulers.kubernetes]\n"
    f'secret_env = "HF_TOKEN={TOKEN}"\n'
    '[tool.distspec.components."dist.ddp"]\n'
    f'env = "HF_TOKEN={TOKEN}"\n'
}


def _cases() -> list[Case]:
    cases: list[Case] = []
    env = f"HF_TOKEN={TOKEN}"
    for sched in SCHEDS:
        # Succeeding dry runs: the job's own script carries the value (by design).
        cases.append(
            (f"dryrun-env-{sched}", ["run", "--dryrun", *_args(sched), "--env", env], {}, {}, OUT)
        )
        cases.append(
            (
                f"dryrun-env-o-{sched}",
                ["run", "--dryrun", "-o", "out", *_args(sched), "--env", env],
                {},
                {},
                FILES,
            )
        )
        cases.append(
            (
                f"dryrun-json-{sched}",
                ["run", "--dryrun", "--json", *_args(sched), "--env", env],
                {},
                {},
                OUT,
            )
        )
        cases.append(
            (f"dryrun-config-env-{sched}", ["run", "--dryrun", *_args(sched)], {}, CONFIG_ENV, OUT)
        )
        # Failing runs: the value is never in the message.
        for extra, why in (
            (["-j", "0x1"], "bad -j"),
            (["--bogus", "1"], "unknown flag"),
            (["--env", f"1BAD={TOKEN}"], "bad key"),
            (["--env", f"={TOKEN}"], "empty key"),
            (["--env", TOKEN], "no ="),
            (["--mounts", "type=bind,src=/d,readonly=maybe"], "bad mount"),
        ):
            cases.append(
                (
                    f"fail-{why}-{sched}",
                    ["run", "--dryrun", *_args(sched), "--env", env, *extra],
                    {},
                    {},
                    NOWHERE,
                )
            )
        cases.append(
            (
                f"fail-cfg-{sched}",
                [
                    "run",
                    "--dryrun",
                    "-s",
                    sched,
                    "-cfg",
                    "nope=1",
                    *DDP[:-2],
                    "--env",
                    env,
                    "--script",
                    "t.py",
                ],
                {},
                {},
                NOWHERE,
            )
        )
        cases.append(
            (
                f"submit-with-o-{sched}",
                ["run", "-o", "out", *_args(sched), "--env", env],
                {},
                {},
                NOWHERE,
            )
        )
    for comp in (["utils.echo"], ["utils.echo", "--msg", "hi"], ["utils.touch", "--file", "f"]):
        name = "-".join(comp)
        cases.append(
            (f"no-env-param-{name}", ["run", "--dryrun", *comp, "--env", env], {}, {}, NOWHERE)
        )
        cases.append(
            (f"no-env-param-eq-{name}", ["run", "--dryrun", *comp, f"--env={env}"], {}, {}, NOWHERE)
        )
        cases.append(
            (
                f"no-env-param-bare-{name}",
                ["run", "--dryrun", *comp, "--env", TOKEN],
                {},
                {},
                NOWHERE,
            )
        )
        cases.append(
            (
                f"no-env-param-secret-{name}",
                ["run", "--dryrun", *comp, "--secret", TOKEN, "x"],
                {},
                {},
                NOWHERE,
            )
        )
    for argv in (
        ["status", "local_cwd://s/x", "--env", env],
        ["list", f"--token={TOKEN}"],
        ["list", "--token", TOKEN],
        ["run", "--env", env, "--dryrun", *DDP],
        [f"--env={env}"],
        ["launch", "--bogus", TOKEN, "--", "true"],
    ):
        cases.append((f"verb-{'-'.join(argv[:2])[:20]}", argv, {}, {}, NOWHERE))
    for cfg in (
        f"secret_env=HF_TOKEN={TOKEN}",
        f"secret_env={TOKEN}",
        f"secret_env=HF_TOKEN={TOKEN}:key",
        f"secret_env=HF_TOKEN=s:{TOKEN}/x",
        f"secrt_env=HF_TOKEN={TOKEN}",
        f"secret_env=1BAD={TOKEN}",
    ):
        cases.append(
            (
                f"k8s-{cfg[:18]}",
                ["run", "--dryrun", "-s", "kubernetes", "-cfg", cfg, *K8S],
                {},
                {},
                NOWHERE,
            )
        )
    cases.append(
        (
            "k8s-secret-ref-ok",
            [
                "run",
                "--dryrun",
                "-s",
                "kubernetes",
                "-cfg",
                "secret_env=HF_TOKEN=hf-secret:token",
                *K8S,
            ],
            {},
            {},
            NOWHERE,
        )
    )
    # Config files and variables holding the token, with every verb that reads them.
    sources: list[tuple[str, dict[str, str], dict[str, str]]] = [
        ("ini", {}, CONFIG_SECRET),
        ("toml", {}, PYPROJECT_SECRET),
        ("env", {"DISTSPEC_KUBERNETES_SECRET_ENV": f"HF_TOKEN={TOKEN}"}, {}),
        ("env-misspelt", {"DISTSPEC_SCHEDULAR": TOKEN}, {}),
        ("env-torchx-misspelt", {"DISTSPEC_TORCHX_CONFIG": TOKEN}, {}),
    ]
    verbs: list[tuple[str, list[str]]] = [
        ("config", ["config"]),
        ("config-json", ["config", "--json"]),
        ("run-k8s", ["run", "--dryrun", "-s", "kubernetes", *K8S]),
        ("runopts", ["runopts", "kubernetes"]),
        ("builtins", ["builtins"]),
        ("list", ["list"]),
        ("status", ["status", "local_cwd://distspec/nope-00000000"]),
        ("log", ["log", "local_cwd://distspec/nope-00000000", "--rank", "-1"]),
        ("resources", ["resources", "--gpus", "-1"]),
        ("configure", ["configure", "-s", "kubernetes"]),
        ("prune", ["prune", "--dry-run"]),
    ]
    for src, environ, files in sources:
        for verb, argv in verbs:
            cases.append((f"{src}-{verb}", argv, environ, files, NOWHERE))
    return cases


CASES = _cases()


@pytest.mark.parametrize(
    ("argv", "environ", "files", "allowed"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_planted_secrets(
    argv: list[str],
    environ: dict[str, str],
    files: dict[str, str],
    allowed: frozenset[str],
    tmp_path: Path,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Secret values planted in --env, config env/secret entries and DISTSPEC_* variables."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name, text in files.items():
        (cwd / name).write_text(text)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DISTSPEC_TORCHXCONFIG", "off")
    monkeypatch.chdir(cwd)
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    out, err = capfd.readouterr()
    assert TOKEN not in err, err
    if "out" in allowed:
        assert code == 0, err
        assert TOKEN in out  # the case plants it where it must show: the test can fail
    else:
        assert TOKEN not in out, out
    written = [p for p in (cwd / "out").rglob("*")] if (cwd / "out").exists() else []
    holding = [p for p in written if p.is_file() and TOKEN in p.read_text()]
    if "files" in allowed:
        assert code == 0, err
        assert holding, "the dry run's files should hold the job's --env value"
        assert stat.S_IMODE((cwd / "out").stat().st_mode) == 0o700
        for path in written:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode in (0o600, 0o700), (path, oct(mode))
    else:
        assert not holding, holding
    # Nothing but the planted sources and the dry run's output folder holds it.
    for path in cwd.rglob("*"):
        if path.is_file() and path.name not in files and "out" not in path.parts:
            assert TOKEN not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("sched", SCHEDS)
def test_dry_run_files_are_private(
    sched: str,
    tmp_path: Path,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Files written by --dryrun -o DIR: 0600 (scripts 0700) in a folder created 0700,
    also over files that were there world-readable; a DIR that existed keeps its mode."""
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)
    try:
        assert main(["run", "--dryrun", "-o", "new/dir", *_args(sched), "--env", "A=1"]) == 0
        listed = [Path(p) for p in capfd.readouterr().out.split()]
        assert len(listed) >= 2
        assert stat.S_IMODE((tmp_path / "new" / "dir").stat().st_mode) == 0o700
        for path in listed:
            assert stat.S_IMODE(path.stat().st_mode) in (0o600, 0o700), path
        # Over a world-readable submit.sh, in a DIR that exists (its mode stays).
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o755)
        (shared / "submit.sh").write_text("old")
        (shared / "submit.sh").chmod(0o644)
        assert main(["run", "--dryrun", "-o", "shared", *_args(sched), "--env", "A=1"]) == 0
        again = [Path(p) for p in capfd.readouterr().out.split()]
        assert "submit.sh" in {p.name for p in again}
        for path in again:
            assert stat.S_IMODE(path.stat().st_mode) in (0o600, 0o700), path
        assert (shared / "submit.sh").read_text() != "old"
        assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    finally:
        os.umask(old)


_CONTROL = st.sampled_from(
    # (no NUL: a command line cannot carry one)
    ["\x1b[2J", "\x1b]0;x\x07", "\r", "\x01", "\x7f", "\x9b", "\u202e", "\u202d", "\u2066",
     "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c"]
)  # fmt: skip
_WORD = st.text(st.characters(min_codepoint=0x61, max_codepoint=0x7A), min_size=1, max_size=6)
_UNSAFE = set(
    "\x1b\r\x01\x7f\x9b\x07\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
)
_PLACES = [
    lambda v: ["run", "--dryrun", f"--{v}", *DDP],
    lambda v: ["run", "--dryrun", "-s", v, *DDP],
    lambda v: ["run", "--dryrun", f"{v}.py:f"],
    lambda v: ["run", "--dryrun", v],
    lambda v: ["run", "--dryrun", *DDP, f"--{v}", "1"],
    lambda v: ["run", "--dryrun", "-cfg", f"{v}=1", *DDP],
    lambda v: ["run", "--dryrun", "-s", "slurm", "-cfg", f"time={v}", *DDP],
    lambda v: [
        "run",
        "--dryrun",
        *K8S,
        "-s",
        "kubernetes",
        "--mounts",
        f"type=bind,src={v},dst=/d",
    ],
    lambda v: [
        "run",
        "--dryrun",
        *K8S,
        "-s",
        "kubernetes",
        "--mounts",
        f"type=volume,src={v},dst=/d",
    ],
    lambda v: ["run", "--dryrun", *DDP, "--env", f"{v}=x"],
    lambda v: ["run", "--dryrun", *DDP, "-j", v],
    lambda v: ["status", f"local_cwd://s/{v}"],
    lambda v: ["status", v],
    lambda v: ["log", "local_cwd://s/x", v],
    lambda v: ["log", "local_cwd://s/x", "--since", v],
    lambda v: ["resources", v],
    lambda v: ["runopts", v],
    lambda v: ["list", "-s", v],
    lambda v: [v],
]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    place=st.integers(0, len(_PLACES) - 1),
    value=st.tuples(_WORD, _CONTROL, _WORD).map("".join),
)
def test_control_characters_in_any_message(
    place: int, value: str, state_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Control characters and bidi overrides in user input, escaped in every message.

    Hypothesis: 150 examples, each a word with one control character or bidi
    override in it, typed in one of 19 places (verb, flag, component, scheduler,
    option, mount, env key, handle, log filter, ...)."""
    try:
        code = main(_PLACES[place](value))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    out, err = capfd.readouterr()
    assert code == 2, (value, out, err)
    assert not _UNSAFE & set(err), repr(err)
    assert len(err.strip("\n").splitlines()) == 1, err


def _config_cli(cwd: Path, home: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "TORCHX"))}
    environ.update(HOME=str(home), DISTSPEC_STATE_DIR=str(home / "state"), **env)
    return subprocess.run(
        [sys.executable, "-m", "distspec", *argv],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _make(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "urandom":
        path.symlink_to("/dev/urandom")
    elif kind == "huge":
        with open(path, "wb") as f:
            f.write(b"[distspec]\n" + b"# padding\n" * 120_000)
    else:  # a socket: bound, nobody listening
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()


@pytest.mark.parametrize("kind", ["fifo", "dir", "zero", "urandom", "huge", "socket"])
@pytest.mark.parametrize(
    "where",
    [
        ".distspecconfig",
        "pyproject.toml",
        ".torchxconfig",
        "~/.distspecconfig",
        "../pyproject.toml",
    ],
)
def test_config_paths_that_are_not_regular_files(kind: str, where: str, tmp_path: Path) -> None:
    """Config files that are FIFOs, directories, devices, sockets or huge: one line, exit 2, never a hang."""
    home = tmp_path / "home"
    cwd = tmp_path / "a" / "project"
    home.mkdir()
    cwd.mkdir(parents=True)
    path = home / where[2:] if where.startswith("~/") else cwd / where
    if kind == "socket" and len(str(path)) > 100:
        pytest.skip("AF_UNIX path too long for this tmp dir")
    _make(kind, path)
    for argv in (["config"], ["run", "--dryrun", *DDP]):
        proc = _config_cli(cwd, home, *argv)
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert path.name in lines[0]
        assert ("regular file" if kind != "huge" else "KiB") in lines[0], lines[0]


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("DISTSPEC_SCHEDULAR", "DISTSPEC_SCHEDULER"),
        ("DISTSPEC_SCHEDULERS", "DISTSPEC_SCHEDULER"),
        ("DISTSPEC_SESION", "DISTSPEC_SESSION"),
        ("DISTSPEC_SESSIONS", "DISTSPEC_SESSION"),
        ("DISTSPEC_STATEDIR", "DISTSPEC_STATE_DIR"),
        ("DISTSPEC_STATE_DIRS", "DISTSPEC_STATE_DIR"),
        ("DISTSPEC_LOGLEVEL", "DISTSPEC_LOG_LEVEL"),
        ("DISTSPEC_LOG_LEVL", "DISTSPEC_LOG_LEVEL"),
        ("DISTSPEC_TORCHX_CONFIG", "DISTSPEC_TORCHXCONFIG"),
        ("DISTSPEC_SHEDULER", "DISTSPEC_SCHEDULER"),
    ],
)
def test_misspelt_distspec_variables(name: str, suggestion: str, tmp_path: Path) -> None:
    """DISTSPEC_* variables that look like a misspelt known one: one line with did-you-mean."""
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, env={"HOME": str(tmp_path), name: TOKEN}, home=tmp_path)
    text = str(info.value)
    assert f"did you mean {suggestion}?" in text and name in text
    assert TOKEN not in text and "\n" not in text


@pytest.mark.parametrize(
    "name",
    [
        *ENV_VARIABLES,
        *DEV_VARIABLES,
        "DISTSPEC_SLURM_PARTITION",  # a run option: checked with slurm's options
        "DISTSPEC_LOCAL_CWD_GRACE_PERIOD",
        "DISTSPEC_MYPLUGIN_QUEUE",  # a plugin scheduler's, or the user's own
        "DISTSPEC_",
        "DISTSPEC_X",
        "DISTSPEC_JOB",
    ],
    ids=str,
)
def test_known_and_foreign_distspec_variables_are_not_flagged(name: str, tmp_path: Path) -> None:
    """DISTSPEC_* variables distspec sets in jobs, reads in tests, or does not know at all: never flagged."""
    value = {
        "DISTSPEC_LOG_LEVEL": "INFO",
        "DISTSPEC_SCHEDULER": "slurm",
        "DISTSPEC_SESSION": "s",
    }.get(name, "/abs")
    env = {"HOME": str(tmp_path), name: value}
    load_config(cwd=tmp_path, env=env, home=tmp_path)


@pytest.mark.parametrize("value", ["rel", "rel/state", ".", "./x", "~/state", " "])
def test_relative_xdg_state_home_is_ignored(value: str, tmp_path: Path) -> None:
    """A relative $XDG_STATE_HOME: ignored, as the XDG Base Directory spec says (never a relative state dir)."""
    cfg = load_config(
        cwd=tmp_path, env={"HOME": str(tmp_path), "XDG_STATE_HOME": value}, home=tmp_path
    )
    assert cfg.state_dir == str(tmp_path / ".local" / "state" / "distspec")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[tool.distspec.schedulers.local_cwd]\ngrace_period = nan\n", "not a finite number"),
        ("[tool.distspec.schedulers.local_cwd]\ngrace_period = inf\n", "not a finite number"),
        ("[tool.distspec.schedulers.local_cwd]\ngrace_period = -inf\n", "not a finite number"),
        ("[tool.distspec.schedulers.slurm]\ntime = +nan\n", "not a finite number"),
        ('[tool.distspec.components."dist.ddp"]\nx = [1.0, nan]\n', "not a finite number"),
        ('[tool.distspec.components."dist.ddp"]\nmax_retries = inf\n', "not a finite number"),
        ('[tool.distspec.components.""]\nj = "1x1"\n', "names no component"),
        ('[tool.distspec.schedulers." "]\nx = "1"\n', "names no scheduler"),
    ],
)
def test_non_finite_numbers_and_empty_names_in_pyproject(
    text: str, message: str, tmp_path: Path
) -> None:
    """pyproject.toml values that are nan/inf, tables with an empty name: one line naming the file."""
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, env={"HOME": str(tmp_path)}, home=tmp_path)
    assert message in str(info.value) and "pyproject.toml" in str(info.value)


@pytest.mark.parametrize(
    "header", ["[component:]", "[component: ]", "[scheduler:]", "[scheduler:\t]", "[component:  ]"]
)
def test_empty_section_names_in_ini(header: str, tmp_path: Path) -> None:
    """.distspecconfig sections [component:] / [scheduler:] that name nothing: one line with file:line."""
    (tmp_path / ".distspecconfig").write_text(f"[distspec]\nsession = s\n{header}\nj = 1x1\n")
    with pytest.raises(ConfigError) as info:
        load_config(cwd=tmp_path, env={"HOME": str(tmp_path)}, home=tmp_path)
    assert "names no" in str(info.value) and ".distspecconfig:3" in str(info.value)


@pytest.mark.parametrize(
    ("argv", "files"),
    [
        pytest.param(
            ["run", "-vv", "--dryrun", "-s", "kubernetes", *K8S], CONFIG_SECRET, id="ini-vv"
        ),
        pytest.param(
            ["run", "-v", "--dryrun", "-s", "kubernetes", *K8S], PYPROJECT_SECRET, id="toml-v"
        ),
        pytest.param(
            ["run", "-vv", "--dryrun", "-s", "kubernetes", "-cfg", f"secret_env=HF={TOKEN}", *K8S],
            {},
            id="cfg-vv",
        ),
        pytest.param(
            [
                "run",
                "-vv",
                "--dryrun",
                "-s",
                "kubernetes",
                "-cfg",
                f"secret_env=HF={TOKEN}:k",
                *K8S,
            ],
            {},
            id="cfg-ref-vv",
        ),
        pytest.param(["config", "-vv"], CONFIG_SECRET, id="config-vv"),
    ],
)
def test_planted_secrets_in_verbose_logs(
    argv: list[str], files: dict[str, str], tmp_path: Path
) -> None:
    """Secret values planted in config and -cfg, with -v/-vv logging on: never in the log lines."""
    home = tmp_path / "home"
    home.mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    proc = _config_cli(tmp_path, home, *argv)
    assert "DEBUG" in proc.stderr or "INFO" in proc.stderr or argv[0] == "config", proc.stderr
    assert TOKEN not in proc.stderr, proc.stderr


@pytest.mark.parametrize("bad", ["\x1b[2J", "\u202e", "\r", "\u2066"], ids=repr)
def test_control_characters_in_the_torchx_warning(bad: str, tmp_path: Path) -> None:
    """A .torchxconfig whose section or key holds a control character or bidi override: the warning line shows it escaped."""
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / ".torchxconfig").write_text(
        f"[slurm]\npartition = gpu\n[my{bad}sched]\nk{bad}ey = 1\n"
    )
    proc = _config_cli(tmp_path, home, "config")
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and "sched" in proc.stderr, proc.stderr
    assert not _UNSAFE & set(proc.stderr), repr(proc.stderr)


@pytest.mark.parametrize("kind", ["fifo", "dir", "zero", "huge", "socket"])
def test_configure_into_a_path_that_is_not_a_regular_file(kind: str, tmp_path: Path) -> None:
    """configure -o PATH where PATH is a FIFO, directory, device, socket or huge file: one line, exit 2, never a hang, nothing written."""
    home = tmp_path / "home"
    home.mkdir()
    target = tmp_path / "c"
    _make(kind, target)
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = _config_cli(tmp_path, home, "configure", "-s", "slurm", "-o", "c")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "-o c: cannot read it" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_configure_keeps_a_private_config_private(tmp_path: Path) -> None:
    """configure appending to a 0600 .distspecconfig (it may hold secret_env): the file stays 0600."""
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / ".distspecconfig"
    config.write_text("[scheduler:kubernetes]\nsecret_env = HF_TOKEN=hf-secret:token\n")
    config.chmod(0o600)
    proc = _config_cli(tmp_path, home, "configure", "-s", "slurm")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert "secret_env = HF_TOKEN=hf-secret:token" in config.read_text()
