"""Every snippet in README.md and docs/**/*.md is executed (issue 16).

One test per page (its id is the page's path): the page's blocks run in order
in a fresh directory holding a copy of the repo's examples/, with
DISTSPEC_STATE_DIR and HOME inside it and the venv's bin first on PATH (the
convention is in tests/docs/snippets.py). Blocks marked ``slurm`` run in a second
test of the page, ``PAGE[slurm]``, carrying the ``slurm`` marker: it needs the
local Slurm cluster (scripts/slurm-cluster). Blocks marked ``pbs`` run in
``PAGE[pbs]`` (marker ``openpbs``) on the local OpenPBS server (scripts/pbs-cluster,
its client commands first on PATH). Blocks marked ``k8s`` run in ``PAGE[k8s]``
against the locally built kube-apiserver (scripts/k8s-apiserver; no kubelet, so
nothing a pod would print can be shown). A cluster test writes the page's
titled files and runs only its cluster blocks (in page order), so a dry run
whose output a cluster block submits is marked too. New pages are picked up
automatically.

The parser and matcher have their own tests below, including pages edited to be
wrong (expected output differs, a command fails), which must fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.snippets import (
    KNOWN_LANGUAGES,
    Block,
    SnippetError,
    SnippetFailure,
    match_output,
    needs_cluster,
    pages_under,
    parse_console,
    parse_page,
    run_block,
)

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PAGES = pages_under(REPO)

#: What each page run did, for the summary tests/docs/conftest.py prints.
RESULTS: list[dict[str, object]] = []


def _rel(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def _blocks(page: Path) -> list[Block]:
    return parse_page(page.read_text(encoding="utf-8"), _rel(page))


def _params() -> list[object]:
    params: list[object] = []
    for page in PAGES:
        params.append(pytest.param(page, None, id=_rel(page), marks=pytest.mark.slow))
        try:
            tags = needs_cluster(_blocks(page))
        except SnippetError:
            continue  # the local test reports it
        if "slurm" in tags:
            params.append(
                pytest.param(
                    page,
                    "slurm",
                    id=f"{_rel(page)}[slurm]",
                    marks=[pytest.mark.slurm, pytest.mark.slow],
                )
            )
        if "pbs" in tags:
            params.append(
                pytest.param(
                    page,
                    "pbs",
                    id=f"{_rel(page)}[pbs]",
                    marks=[pytest.mark.openpbs, pytest.mark.slow],
                )
            )
        if "k8s" in tags:
            params.append(
                pytest.param(
                    page,
                    "k8s",
                    id=f"{_rel(page)}[k8s]",
                    marks=[pytest.mark.k8s_apiserver, pytest.mark.slow],
                )
            )
    return params


def _page_env(work: Path, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "KUBECONFIG"))}
    env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        DISTSPEC_STATE_DIR=str(work / ".distspec-state"),
        HOME=str(home),
        COLUMNS="80",  # argparse wraps --help at the terminal width
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    env.pop("XDG_CONFIG_HOME", None)
    return env


def _distspec(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["distspec", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _cancel_leftovers(work: Path, env: dict[str, str]) -> None:
    """Cancel what a page left running: local apps (a snippet without --wait), and
    the Slurm/PBS jobs it submitted (their records are in the page's state dir), also
    when a block failed half-way."""
    running = _distspec(work, env, "list", "-s", "local_cwd", "--state", "running,pending", "-q")
    handles = running.stdout.split()
    state = Path(env["DISTSPEC_STATE_DIR"])
    for sched in ("slurm", "pbs"):
        for record in sorted((state / sched / "jobs").glob("*.json")):
            handle = f"{sched}://distspec/{record.stem}"
            # --exit-status 4: not ended yet.
            if _distspec(work, env, "status", "--exit-status", handle).returncode == 4:
                handles.append(handle)
    for handle in handles:
        _distspec(work, env, "cancel", handle)


def _cluster_ready(cluster: str, env: dict[str, str]) -> dict[str, str]:
    """Bring up (or skip for) what a cluster test needs; extra environment for it."""
    if cluster == "slurm":
        from tests.slurm_cluster import require_slurm_cluster

        require_slurm_cluster()
        return {}
    if cluster == "pbs":
        from tests.openpbs_cluster import require_openpbs_cluster

        return {"PATH": f"{require_openpbs_cluster()}{os.pathsep}{env['PATH']}"}
    from tests.k8s_apiserver import require_apiserver

    return {"KUBECONFIG": require_apiserver()}


@pytest.mark.parametrize(("page", "cluster"), _params())
def test_page(page: Path, cluster: str | None, tmp_path: Path) -> None:
    blocks = _blocks(page)
    wanted = {None: set(), "slurm": {"slurm"}, "pbs": {"pbs"}, "k8s": {"k8s"}}[cluster]
    work = tmp_path / "work"
    home = tmp_path / "home"
    home.mkdir()
    shutil.copytree(
        REPO / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = _page_env(work, home)
    env |= _cluster_ready(cluster, env) if cluster else {}
    skipped: list[str] = []
    ran = commands = 0
    try:
        for block in blocks:
            runs = block.action not in ("write", "none")
            if block.skip is not None and block.action != "none":
                # Listed once: by the local test, or by the cluster test for its own blocks.
                if (cluster is None) == (not block.tags & wanted):
                    skipped.append(f"{block.where}: {block.skip}")
                continue
            if runs and block.tags - wanted:
                if cluster is None:
                    need = "/".join(sorted(block.tags))
                    test = next(t for t in ("k8s", "pbs", "slurm") if t in block.tags)
                    skipped.append(
                        f"{block.where}: needs {need} (runs in the page's [{test}] test)"
                    )
                continue
            if runs and cluster is not None and not block.tags & wanted:
                continue  # the page's local test runs it
            n = run_block(block, work, env)
            ran += block.action not in ("write", "none")
            commands += n
    finally:
        _cancel_leftovers(work, env)
        RESULTS.append(
            {
                "id": _rel(page) + (f"[{cluster}]" if cluster else ""),
                "blocks": ran,
                "commands": commands,
                "skipped": skipped,
            }
        )


# -- the docs follow the convention ---------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_fences_name_a_known_language(page: Path) -> None:
    """No bare ``` fence: a reader (and this test) must know what a block is."""
    bad = [
        f"{b.where}: {'no language' if not b.lang else f'unknown language {b.lang!r}'}"
        for b in _blocks(page)
        if b.lang not in KNOWN_LANGUAGES
    ]
    assert not bad, "use text for output shown alone:\n" + "\n".join(bad)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_skips_say_why_and_directives_sit_on_fences(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    blocks = _blocks(page)
    for b in blocks:
        if b.skip is not None:
            assert len(b.skip.split()) >= 2, f"{b.where}: skip reason {b.skip!r} says too little"
        if b.action == "none" and b.directive:
            pytest.fail(f"{b.where}: a directive on a {b.lang or 'bare'} block, which never runs")
    fence_lines = {b.line for b in blocks}
    for n, line in enumerate(text.splitlines(), start=1):
        if "<!-- snippet:" in line and n + 1 not in fence_lines:
            pytest.fail(f"{_rel(page)}:{n}: snippet directive not on the line before a fence")


def test_pages_are_found() -> None:
    names = {_rel(p) for p in PAGES}
    assert "README.md" in names
    assert "docs/cli.md" in names


# -- the parser and the matcher -------------------------------------------------------

SAMPLE = """\
# A page

```console
$ echo one
one
$ printf 'a\\nb\\nc\\n'
a
...
```

<!-- snippet: exit=2 -->
```console
$ echo bad >&2; \\
  exit 2
bad
```

```python title="sub/hello.py"
print("hello")
```

- a list item:

  ```python
  import sys
  sys.exit(0)
  ```

<!-- snippet: skip: needs a real GPU -->
```bash
nvidia-smi
```

<!-- snippet: slurm timeout=30 env=A=1 -->
```console
$ sinfo -h -o %D
...
```

```text
just output
```
"""


def test_parse_page_blocks_and_directives() -> None:
    blocks = parse_page(SAMPLE, "p.md")
    assert [(b.lang, b.line, b.action) for b in blocks] == [
        ("console", 3, "console"),
        ("console", 12, "console"),
        ("python", 18, "write"),
        ("python", 24, "python"),
        ("bash", 30, "bash"),
        ("console", 35, "console"),
        ("text", 40, "none"),
    ]
    assert blocks[1].exit_code == 2
    assert blocks[2].title == "sub/hello.py" and blocks[2].body == 'print("hello")\n'
    assert blocks[3].body == "import sys\nsys.exit(0)\n"  # de-indented list item
    assert blocks[4].skip == "needs a real GPU"
    assert (
        blocks[5].tags == {"slurm"} and blocks[5].timeout == 30 and blocks[5].env == (("A", "1"),)
    )
    assert needs_cluster(blocks) == {"slurm"}


def test_parse_console_commands_and_continuations() -> None:
    blocks = parse_page(SAMPLE, "p.md")
    first = parse_console(blocks[0])
    assert [(c.text, c.expected, c.line) for c in first] == [
        ("echo one", ("one",), 4),
        ("printf 'a\\nb\\nc\\n'", ("a", "..."), 6),
    ]
    (cont,) = parse_console(blocks[1])
    assert (cont.text, cont.expected, cont.line) == ("echo bad >&2; \\\n  exit 2", ("bad",), 13)


@pytest.mark.parametrize(
    "bad",
    [
        "```console\n$ true\n",  # never closed
        "<!-- snippet: flavour=x -->\n```console\n$ true\n```\n",  # unknown word
        "<!-- snippet: skip= -->\n```console\n$ true\n```\n",  # no reason
    ],
)
def test_parse_page_rejects(bad: str) -> None:
    with pytest.raises(SnippetError, match=r"p\.md:\d+"):
        parse_page(bad, "p.md")


def test_console_text_before_first_command_is_an_error() -> None:
    (block,) = parse_page("```console\noutput\n$ true\n```\n", "p.md")
    with pytest.raises(SnippetError, match="before the first"):
        parse_console(block)


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        (["a", "b"], ["a", "b"], True),
        (["a", "b"], ["a", "b  ", ""], True),  # trailing spaces and blank lines
        (["a", "b"], ["a", "c"], False),
        (["a"], ["a", "b"], False),  # extra output is a mismatch
        (["a", "b"], ["a"], False),
        (["a", "..."], ["a"], True),  # ... matches none
        (["a", "...", "z"], ["a", "b", "c", "z"], True),
        (["...", "z"], ["a", "y"], False),
        (["handle: ...://...-..."], ["handle: local_cwd://distspec/x-1a2b"], True),
        (["rank ... done"], ["rank 1 done!"], False),  # ... is anchored in the line
        (["a.b"], ["axb"], False),  # only ... is special
        ([], [], True),
        ([], ["unexpected"], False),
    ],
)
def test_match_output(expected: list[str], actual: list[str], ok: bool) -> None:
    assert match_output(expected, actual) is ok


def _run_page(text: str, tmp_path: Path) -> int:
    env = _page_env(tmp_path, tmp_path)
    return sum(run_block(b, tmp_path, env) for b in parse_page(text, "edited.md"))


def test_shell_variables_carry_over_between_commands(tmp_path: Path) -> None:
    page = (
        "```console\n$ H=$(echo local_cwd://distspec/x-1); export E=2\n$ cd /\n```\n\n"
        "```console\n$ echo $H $E; pwd\nlocal_cwd://distspec/x-1 2\n" + str(tmp_path) + "\n```\n"
    )
    assert _run_page(page, tmp_path) == 3


def test_a_correct_page_passes(tmp_path: Path) -> None:
    page = (
        '```python title="hello.py"\nprint("hello from a file")\n```\n\n'
        "```console\n$ python hello.py\nhello from a file\n$ distspec --version\ndistspec ...\n```\n\n"
        "<!-- snippet: exit=2 -->\n```console\n$ distspec run -j 1x2\n...\n```\n"
    )
    assert _run_page(page, tmp_path) == 3


@pytest.mark.parametrize(
    ("page", "message"),
    [
        # Expected output edited to be wrong.
        (
            "intro\n\n```console\n$ echo 42\n41\n```\n",
            r"edited\.md:4: output differs\n  \$ echo 42\n  expected:\n    41\n  actual:\n    42",
        ),
        # A command that fails.
        (
            "```console\n$ distspec run dist.nope\n...\n```\n",
            r"edited\.md:2: exit status 2, expected 0\n  \$ distspec run dist.nope",
        ),
        # A Python snippet that raises.
        ("\n```python\nraise SystemExit(3)\n```\n", r"edited\.md:2: python block exited 3"),
        # A real command's output edited (the real line is "local_cwd").
        (
            "```console\n$ distspec builtins\n...\nlocal_cwd_edited\n...\n```\n",
            r"edited\.md:2: output differs",
        ),
        # A command that hangs is stopped at the block's timeout.
        (
            "<!-- snippet: timeout=1 -->\n```console\n$ sleep 30 & sleep 20\n```\n",
            r"(?s)exit status -1, expected 0.*timed out after 1s",
        ),
        # exit= that does not hold.
        ("<!-- snippet: exit=2 -->\n```console\n$ true\n```\n", r"exit status 0, expected 2"),
    ],
)
def test_an_edited_wrong_snippet_fails(page: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(SnippetFailure, match=message):
        _run_page(page, tmp_path)
