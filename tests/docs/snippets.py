"""Parse and run the fenced snippets of a Markdown page (the docs snippet convention).

The convention (docs/contributing/index.md states it for writers):

- ```` ```console ````: each line starting with ``$ `` is a bash command (a trailing
  ``\\`` continues it on the next line); the lines after it, up to the next ``$ ``
  line, are its expected output (stdout and stderr together, as a terminal shows
  them), matched line by line with trailing spaces ignored. ``...`` inside a line
  matches any text; a line that is only ``...`` matches any number of lines.
  Every command must exit 0 unless the block's directive says ``exit=N``. Each
  command runs in its own bash in the page's directory; shell variables it sets
  carry over to the page's later commands (see `_with_shell_vars`).
- ```` ```python ````: run with the venv's python. ```` ```bash ```` / ```` ```sh ````:
  run with bash, output not checked. Any block with ``title="path"`` is written to
  that file instead of run. Any other language is not executed.
- A directive is an HTML comment on the line right before the fence:
  ``<!-- snippet: WORDS -->`` with the words ``skip=reason``, ``skip: free text``
  (the rest of the comment), ``exit=N``, ``slurm``, ``pbs``, ``k8s``,
  ``timeout=SECONDS``, ``env=NAME=VALUE``.

This module is the pure half (parsing, matching) plus `run_block`, which executes
one block in a working directory; the pytest side is in test_snippets.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CLUSTER_TAGS",
    "EXECUTED",
    "KNOWN_LANGUAGES",
    "Block",
    "Command",
    "SnippetError",
    "SnippetFailure",
    "match_output",
    "needs_cluster",
    "pages_under",
    "parse_console",
    "parse_page",
    "run_block",
]

#: Languages run (when the block has no title).
EXECUTED = frozenset({"console", "python", "bash", "sh"})
#: Every language a fence in the docs may name; a bare ``` fence is an error.
KNOWN_LANGUAGES = EXECUTED | frozenset(
    {"text", "ini", "toml", "yaml", "json", "diff", "dockerfile", "make", "mermaid"}
)
#: Directive words that say a block needs a cluster (run only when it is up).
CLUSTER_TAGS = ("slurm", "pbs", "k8s")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*?)[ \t]*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:(?P<words>.*?)-->\s*$")
_TITLE = re.compile(r"""title=(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>\S+))""")
_DEFAULT_TIMEOUT_S = 120.0


class SnippetError(ValueError):
    """A page breaks the snippet convention (unclosed fence, bad directive, ...)."""


@dataclass(frozen=True)
class Command:
    """One ``$ `` command of a console block and the output it must print."""

    text: str
    expected: tuple[str, ...]
    line: int  # 1-based line of the ``$ `` in the page


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    title: str | None
    body: str
    exit_code: int = 0
    skip: str | None = None  # the reason, when the block is not run
    tags: frozenset[str] = frozenset()
    timeout: float = _DEFAULT_TIMEOUT_S
    env: tuple[tuple[str, str], ...] = ()
    directive: str | None = field(default=None, compare=False)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def action(self) -> str:
        """``write``, ``console``, ``python``, ``bash`` or ``none``."""
        if self.title is not None:
            return "write"
        if self.lang in ("bash", "sh"):
            return "bash"
        if self.lang in ("console", "python"):
            return self.lang
        return "none"


class SnippetFailure(AssertionError):
    """A block did not do what the page says; the message names page:line."""


@dataclass
class _Directive:
    skip: str | None = None
    exit_code: int = 0
    tags: set[str] = field(default_factory=set)
    timeout: float = _DEFAULT_TIMEOUT_S
    env: list[tuple[str, str]] = field(default_factory=list)


def _parse_directive(text: str, where: str) -> _Directive:
    out = _Directive()
    head, sep, reason = text.partition("skip:")
    if sep:
        if not reason.strip():
            raise SnippetError(f"{where}: 'skip:' needs a reason")
        out.skip = reason.strip()
    for word in head.split():
        key, eq, value = word.partition("=")
        if word in CLUSTER_TAGS:
            out.tags.add(word)
        elif key == "skip" and eq:
            if not value:
                raise SnippetError(f"{where}: 'skip=' needs a reason")
            out.skip = value.replace("-", " ")
        elif key == "exit" and eq and value.isdigit():
            out.exit_code = int(value)
        elif key == "timeout" and eq and re.fullmatch(r"\d+(\.\d+)?", value):
            out.timeout = float(value)
        elif key == "env" and eq and "=" in value:
            name, _, val = value.partition("=")
            out.env.append((name, val))
        else:
            raise SnippetError(f"{where}: unknown snippet directive word {word!r}")
    return out


def _dedent(lines: list[str], indent: str) -> list[str]:
    n = len(indent.expandtabs())
    out = []
    for line in lines:
        expanded = line.expandtabs()
        stripped = len(expanded) - len(expanded.lstrip(" "))
        out.append(expanded[min(n, stripped) :])
    return out


def parse_page(text: str, page: str) -> list[Block]:
    """Every fenced block of a Markdown page, in order.

    Raises:
        SnippetError: an unclosed fence or a malformed directive.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        indent, fence, info = m["indent"], m["fence"], m["info"]
        lang, _, attrs = info.partition(" ")
        title_m = _TITLE.search(attrs)
        title = None
        if title_m is not None:
            title = title_m["dq"] if title_m["dq"] is not None else title_m["sq"] or title_m["bare"]
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if (
                close is not None
                and not close["info"]
                and close["fence"][0] == fence[0]
                and len(close["fence"]) >= len(fence)
            ):
                break
            body.append(lines[i])
            i += 1
        else:
            raise SnippetError(f"{page}:{start + 1}: fence {fence}{info} is never closed")
        i += 1
        where = f"{page}:{start + 1}"
        directive = None
        parsed = _Directive()
        if start > 0 and (d := _DIRECTIVE.match(lines[start - 1])) is not None:
            directive = d["words"].strip()
            parsed = _parse_directive(directive, where)
        body_text = "\n".join(_dedent(body, indent))
        blocks.append(
            Block(
                page=page,
                line=start + 1,
                lang=lang.strip().lower(),
                title=title,
                body=body_text + ("\n" if body else ""),
                exit_code=parsed.exit_code,
                skip=parsed.skip,
                tags=frozenset(parsed.tags),
                timeout=parsed.timeout,
                env=tuple(parsed.env),
                directive=directive,
            )
        )
    return blocks


def parse_console(block: Block) -> list[Command]:
    """The commands of a console block, each with its expected output lines.

    Raises:
        SnippetError: text before the first ``$ `` line, or no command at all.
    """
    commands: list[Command] = []
    lines = block.body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not (line.startswith("$ ") or line == "$"):
            if not commands:
                if not line.strip():
                    i += 1
                    continue
                raise SnippetError(
                    f"{block.page}:{block.line + 1 + i}: console block text before the first "
                    f"'$ ' command: {line!r}"
                )
            cmd = commands[-1]
            commands[-1] = Command(cmd.text, (*cmd.expected, line), cmd.line)
            i += 1
            continue
        first = i
        parts = [line[2:]]
        while parts[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            parts.append(lines[i])
        commands.append(Command("\n".join(parts), (), block.line + 1 + first))
        i += 1
    if not commands:
        raise SnippetError(f"{block.where}: console block without a '$ ' command")
    return commands


def _line_pattern(expected: str) -> re.Pattern[str]:
    pieces = [re.escape(p) for p in expected.rstrip().split("...")]
    return re.compile(".*".join(pieces), re.DOTALL)


def match_output(expected: list[str] | tuple[str, ...], actual: list[str]) -> bool:
    """Whether output lines match the expected lines of a console command.

    Trailing spaces and trailing blank lines are ignored on both sides. An
    expected line that is only ``...`` matches any number of lines (zero
    included); ``...`` inside a line matches any text.
    """
    exp = [e.rstrip() for e in expected]
    act = [a.rstrip() for a in actual]
    while exp and not exp[-1]:
        exp.pop()
    while act and not act[-1]:
        act.pop()
    patterns = [None if e.strip() == "..." else _line_pattern(e) for e in exp]
    # reach[j]: expected[:i] can match actual[:j].
    reach = [True] + [False] * len(act)
    for pat in patterns:
        nxt = [False] * (len(act) + 1)
        if pat is None:
            seen = False
            for j in range(len(act) + 1):
                seen = seen or reach[j]
                nxt[j] = seen
        else:
            for j in range(len(act)):
                if reach[j] and pat.fullmatch(act[j]):
                    nxt[j + 1] = True
        reach = nxt
    return reach[len(act)]


def _env(block: Block, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    env.update(dict(block.env))
    return env


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float, stdin: str | None = None
) -> tuple[int, str]:
    """Run argv in a session of its own; stdout and stderr together, as a terminal
    shows them. On timeout the whole session is killed and the code is -1."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(stdin or "", timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return -1, f"{out}\n[timed out after {timeout:g}s; its processes were killed]"
    return proc.returncode, out


#: Where a page's shell variables are kept between its console commands.
VARS_FILE = ".snippet-shell-vars"


def _with_shell_vars(command: str, cwd: Path) -> str:
    """The command, wrapped so that shell variables it sets (``H=$(distspec run ...)``)
    are there for the page's later console commands, as in one terminal session.

    Each command still starts in the page's directory (a ``cd`` does not carry over).
    """
    state = shlex.quote(str(cwd / VARS_FILE))
    return (
        "__snippet_base=$(compgen -v)\n"
        f"if [ -f {state} ]; then source {state}; fi\n"
        f"{command}\n"
        "__snippet_rc=$?\n"
        "for __snippet_v in $(compgen -v); do\n"
        '  case "$__snippet_v" in __snippet_*|BASH_*|FUNCNAME|PIPESTATUS|_) continue;; esac\n'
        '  printf "%s\\n" "$__snippet_base" | grep -qxF "$__snippet_v" && continue\n'
        '  declare -p "$__snippet_v"\n'
        f"done > {state}.new 2>/dev/null && mv {state}.new {state}\n"
        'exit "$__snippet_rc"\n'
    )


def _indent(lines: list[str] | tuple[str, ...]) -> str:
    return "\n".join(f"    {line}" for line in lines) if lines else "    (nothing)"


def run_block(block: Block, cwd: Path, env: dict[str, str]) -> int:
    """Execute one block in ``cwd``; return how many commands/programs ran.

    Raises:
        SnippetFailure: output or exit status differs from the page; the
            message names page:line, the command, expected and actual output.
    """
    full_env = _env(block, env)
    action = block.action
    if action == "write":
        assert block.title is not None
        path = cwd / block.title
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.body)
        return 0
    if action == "none":
        return 0
    if action in ("python", "bash"):
        argv = ["python", "-"] if action == "python" else ["bash", "-e", "-s"]
        code, out = _run(argv, cwd, full_env, block.timeout, stdin=block.body)
        if code != block.exit_code:
            raise SnippetFailure(
                f"{block.where}: {block.lang} block exited {code}, expected {block.exit_code}\n"
                f"  block:\n{_indent(block.body.splitlines())}\n"
                f"  output:\n{_indent(out.splitlines())}"
            )
        return 1
    commands = parse_console(block)
    for cmd in commands:
        code, out = _run(
            ["bash", "-c", _with_shell_vars(cmd.text, cwd)], cwd, full_env, block.timeout
        )
        actual = out.splitlines()
        problems = []
        if code != block.exit_code:
            problems.append(f"exit status {code}, expected {block.exit_code}")
        if not match_output(cmd.expected, actual):
            problems.append("output differs")
        if problems:
            raise SnippetFailure(
                f"{block.page}:{cmd.line}: {'; '.join(problems)}\n"
                f"  $ {cmd.text}\n"
                f"  expected:\n{_indent(cmd.expected)}\n"
                f"  actual:\n{_indent(actual)}"
            )
    return len(commands)


def pages_under(root: Path) -> list[Path]:
    """README.md and every docs/**/*.md under a checkout, sorted."""
    pages = sorted((root / "docs").rglob("*.md"))
    readme = root / "README.md"
    return ([readme] if readme.is_file() else []) + pages


def needs_cluster(blocks: list[Block]) -> set[str]:
    """The cluster tags any runnable block of a page carries."""
    return {t for b in blocks if b.skip is None and b.action != "none" for t in b.tags}
