"""torchrun's output, read by distspec.torchrun_output: rank prefixes, the
ChildFailedError report, exit codes and signal names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from distspec.torchrun_output import (
    RootCause,
    exit_code_of,
    line_of_rank,
    rank_lines,
    root_cause,
    signal_name,
    split_rank,
    torchrun_root_cause,
)

DATA = Path(__file__).resolve().parent / "data" / "launch"

SUMMARY = [
    "Failures:",
    "[1]:",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -15 (pid: 3315)  (SIGTERM)",
    "------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-11-23_11:56:46",
    "  host      : localhost",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -9 (pid: 3316)  (SIGKILL)",
]


@pytest.mark.parametrize(
    ("line", "rank", "mine"),
    [
        ("[rank1]:hello", 1, True),
        ("[rank0]:hello", 1, False),
        ("[call1]:hello", 1, True),
        ("[call0]:hello", 1, False),
        ("W1123 torchrun says", 1, True),
        ("[not a prefix", 1, True),
    ],
)
def test_line_of_rank(line: str, rank: int, mine: bool) -> None:
    assert line_of_rank(line, "call", rank, rank % 2) is mine


@pytest.mark.parametrize(
    ("line", "role", "expected"),
    [
        ("[rank3]:hello", "", (3, "hello")),
        ("[rank3]:[rank3]: Traceback", "", (3, "Traceback")),
        ("[train1]:[rank3]: Traceback", "train", (3, "Traceback")),
        ("[train1]:step", "train", (None, "step")),
        ("[rank3]:[rank2]: other", "", (3, "[rank2]: other")),
        ("torchrun says", "train", (None, "torchrun says")),
        # Cut by torchrun's tailer between a line's text and its newline.
        ("[rank3]:step 7[rank3]:", "", (3, "step 7")),
        ("[rank3]:[rank3]:", "", (3, "")),
        # Not a cut: another rank's prefix, or the prefix inside the text.
        ("[rank3]:see [rank2]:", "", (3, "see [rank2]:")),
        ("[rank3]:a [rank3]: b", "", (3, "a [rank3]: b")),
    ],
)
def test_split_rank(line: str, role: str, expected: tuple[int | None, str]) -> None:
    assert split_rank(line, role) == expected


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # Whole lines pass through as split_rank reads them.
        (
            ["[rank0]:a", "[rank1]:[rank1]: Traceback", "torchrun says"],
            [(0, "a"), (1, "Traceback"), (None, "torchrun says")],
        ),
        # Rank 1's line cut before its newline, rank 0's line printed after the cut.
        (
            ["[rank1]:seq 293[rank0]:seq 7", "[rank0]:seq 8", "[rank1]:"],
            [(0, "seq 7"), (0, "seq 8"), (1, "seq 293")],
        ),
        # Cut and completed at once by the same rank.
        (["[rank3]:step 7[rank3]:"], [(3, "step 7")]),
        # Three ranks on one line; the last one's text starts with torch's hook prefix.
        (
            ["[rank1]:a[rank2]:b[rank0]:[rank0]: Traceback", "[rank2]:", "[rank1]:"],
            [(0, "Traceback"), (2, "b"), (1, "a")],
        ),
        # A line cut twice (text written in three pieces) reads back whole.
        (
            ["[rank1]:a[rank0]:x", "[rank1]:b[rank0]:y", "[rank1]:c"],
            [(0, "x"), (0, "y"), (1, "abc")],
        ),
        # Text without a prefix before a rank's piece is its own line.
        (["junk[rank1]:a"], [(None, "junk"), (1, "a")]),
        # What is still cut when the log ends is given out as it is.
        (["[rank1]:tail[rank0]:x"], [(0, "x"), (1, "tail")]),
        # A prefix-like text that is not one is text.
        (["[rank1]:see [rankX]: or [rank"], [(1, "see [rankX]: or [rank")]),
    ],
)
def test_rank_lines_rejoins_lines_cut_by_the_tailer(
    lines: list[str], expected: list[tuple[int | None, str]]
) -> None:
    assert list(rank_lines(lines)) == expected


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # torchrun's default prefix ([<role><local rank>]:, no distspec template: a
        # job submitted by hand) is cut like [rankN]: when the role is known.
        (
            ["[train1]:sum 3[train0]:sum 3", "[train1]:"],
            [(None, "sum 3"), (None, "sum 3")],
        ),
        (["[train0]:a[train1]:b[train0]:c"], [(None, "ac"), (None, "b")]),
        # Another role's prefix, or a role prefix without digits, is text.
        (["[train0]:see [eval1]: and [train]:"], [(None, "see [eval1]: and [train]:")]),
    ],
)
def test_rank_lines_cuts_at_the_roles_default_prefix(
    lines: list[str], expected: list[tuple[int | None, str]]
) -> None:
    assert list(rank_lines(lines, "train")) == expected
    # Without the role, the same lines are not cut (nothing says what prefixes are).
    assert len(list(rank_lines(lines))) == len(lines)


@pytest.mark.torch
def test_a_line_cut_while_another_rank_prints_is_read_whole(tmp_path: Path) -> None:
    """Two of torchrun's tailer threads (ranks 0 and 1) printing into one stream: rank
    1's line cut between its text and its newline, rank 0's whole line printed in
    between, lands in one line of the agent's output; rank_lines reads both back."""
    import io
    import threading
    import time

    pytest.importorskip("torch")
    from torch.distributed.elastic.multiprocessing.tail_log import tail_logfile

    out = io.StringIO()
    finished = threading.Event()
    files = {rank: tmp_path / f"{rank}.log" for rank in (0, 1)}
    tailers = []
    for rank, log in files.items():
        log.write_text("")
        tailers.append(
            threading.Thread(
                target=tail_logfile,
                args=(f"[rank{rank}]:", str(log), out, finished, 0.01, lambda line: True),
            )
        )
        tailers[-1].start()

    def write(rank: int, text: str, shown: str) -> None:
        with files[rank].open("a") as f:
            f.write(text)
        deadline = time.monotonic() + 10
        while shown not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)

    write(1, "seq 1 293", "seq 1 293")  # print()'s first write
    write(0, "seq 0 294\n", "seq 0 294\n")  # another rank's whole line
    write(1, "\n", "[rank1]:\n")  # and the first print's newline
    finished.set()
    for tailer in tailers:
        tailer.join(10)
    printed = out.getvalue()
    assert printed == "[rank1]:seq 1 293[rank0]:seq 0 294\n[rank1]:\n"  # torchrun's, as it is
    assert list(rank_lines(printed.splitlines())) == [(0, "seq 0 294"), (1, "seq 1 293")]


def test_root_cause_reads_the_entry_of_the_summary() -> None:
    assert root_cause(SUMMARY) == RootCause(
        rank=1, local_rank=1, host="localhost", exitcode=-9, pid=3316
    )
    assert root_cause(SUMMARY, first=True) == root_cause(SUMMARY)
    assert root_cause(SUMMARY[:5]) is None
    assert root_cause(["Root Cause (first observed failure):", "====="]) is None


def test_root_cause_first_or_last_of_two_reports() -> None:
    second = [*SUMMARY[5:9], "  rank      : 4 (local_rank: 0)", "  exitcode  : 3 (pid: 9)"]
    lines = SUMMARY + second
    found = root_cause(lines)
    assert found is not None and found.rank == 4
    found = root_cause(lines, first=True)
    assert found is not None and found.rank == 1


def test_root_cause_is_frozen() -> None:
    found = RootCause(rank=1)
    with pytest.raises(AttributeError):
        found.rank = 2  # type: ignore[misc]
    assert repr(found) == ("RootCause(rank=1, local_rank=None, host=None, exitcode=None, pid=None)")
    assert hash(found) == hash(RootCause(rank=1))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("torchrun-exit7.stderr", (7, "torchrun: rank 1 (local_rank 1) exited with 7, pid 21796")),
        (
            "torchrun-raise.stderr",
            (
                1,
                "torchrun: rank 1 (local_rank 1) exited with 1, pid 23632; its last line: "
                "RuntimeError: rank 1 fails on purpose",
            ),
        ),
        (
            "srun-torchrun-exit7.stderr",
            (7, "torchrun: rank 3 (local_rank 1) exited with 7, pid 13224"),
        ),
    ],
)
def test_torchrun_root_cause_of_real_torchrun_output(name: str, expected: tuple[int, str]) -> None:
    assert torchrun_root_cause((DATA / name).read_text().splitlines()) == expected


def test_torchrun_root_cause_of_a_signal() -> None:
    assert torchrun_root_cause(SUMMARY) == (
        137,
        "torchrun: rank 1 (local_rank 1) was killed by SIGKILL, pid 3316",
    )
    assert torchrun_root_cause(SUMMARY[:5]) is None


def test_signal_names_and_exit_codes() -> None:
    assert signal_name(9) == "SIGKILL"
    assert signal_name(99) == "signal 99"
    assert exit_code_of(-11) == 139
    assert exit_code_of(7) == 7


def test_imports_nothing_but_itself() -> None:
    # The local supervisor (python -S) and the compile path import it for free.
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import distspec.torchrun_output\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.stdout.strip() == "['__future__', 'distspec', 'distspec.torchrun_output']"


@pytest.mark.torch
def test_a_line_cut_by_torchruns_tailer_is_read_whole(tmp_path: Path) -> None:
    """torchrun's --tee tailer, reading a worker's log between ``print()``'s two writes
    (the text, then the newline), prints the line in two prefixed pieces; what it
    prints reads back as the worker's one line."""
    import io
    import threading
    import time

    pytest.importorskip("torch")
    from torch.distributed.elastic.multiprocessing.tail_log import tail_logfile

    log = tmp_path / "stdout.log"
    log.write_text("")
    out = io.StringIO()
    finished = threading.Event()
    # As TailLog starts it for torchrun --tee (every line passes its filter).
    tailer = threading.Thread(
        target=tail_logfile,
        args=("[rank3]:", str(log), out, finished, 0.01, lambda line: True),
    )
    tailer.start()
    with log.open("a") as f:
        f.write("step 7")  # print()'s first write
        f.flush()
        deadline = time.monotonic() + 10
        while "step 7" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        f.write("\n")  # and its second
    finished.set()
    tailer.join(10)
    printed = out.getvalue()
    assert printed == "[rank3]:step 7[rank3]:\n"  # torchrun's cut, as it is
    assert split_rank(printed.rstrip("\n")) == (3, "step 7")


def _report(*entries: tuple[str, int, int]) -> list[str]:
    """A ChildFailedError report as torch 2.x prints it: ``(time, rank, exitcode)``
    per failure, the first entry being the root cause, the others "Failures"."""

    def entry(idx: int, time: str, rank: int, code: int) -> list[str]:
        return [
            f"[{idx}]:",
            f"  time      : 2026-11-27_18:43:{time}",
            "  host      : n0",
            f"  rank      : {rank} (local_rank: {rank})",
            f"  exitcode  : {code} (pid: {100 + rank})",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs",
        ]

    (root, *others) = entries
    lines = ["=" * 40, "train.py FAILED", "-" * 40, "Failures:"]
    for idx, (time, rank, code) in enumerate(others, start=1):
        lines += entry(idx, time, rank, code)
    if not others:
        lines.append("  <NO_OTHER_FAILURES>")
    lines += ["-" * 40, "Root Cause (first observed failure):", *entry(0, *root), "=" * 40]
    return lines


@pytest.mark.parametrize(
    ("entries", "blamed"),
    [
        # torchrun's tie in the same second goes to local rank 0, which gloo aborted
        # because rank 1 raised: rank 1 is the cause (the CI flake of stop 35).
        ((("11", 0, -6), ("11", 1, 7)), 1),
        ((("11", 0, -15), ("11", 2, -15), ("11", 3, 1)), 3),
        ((("11", 0, -6), ("11", 1, -11)), 1),  # a segfault is a cause of its own
        # A second apart, torchrun's order is real: its root cause stays.
        ((("10", 0, -6), ("11", 1, 7)), 0),
        # Bystanders only, or a root cause that exited by itself: kept.
        ((("11", 0, -6), ("11", 1, -15)), 0),
        ((("11", 0, 1), ("11", 1, 7)), 0),
        ((("11", 2, -6),), 2),
    ],
)
def test_root_cause_prefers_a_rank_that_ended_by_itself_in_the_same_second(
    entries: tuple[tuple[str, int, int], ...], blamed: int
) -> None:
    lines = ["[rank1]: ValueError: broken", *_report(*entries), "torchrun exits"]
    found = root_cause(lines)
    assert found is not None and found.rank == blamed
    code = dict((rank, code) for _, rank, code in entries)[blamed]
    assert found.exitcode == code and found.local_rank == blamed and found.host == "n0"
    assert root_cause(lines, first=True) == found
