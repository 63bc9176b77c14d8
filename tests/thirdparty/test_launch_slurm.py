"""The third-party corpus through ``distspec launch`` inside ``salloc -N2
--ntasks-per-node=2`` on the local cluster, with each launcher: srun, one task per
process (the default, which gives every task torchrun's environment), and
``--launcher torchrun``, one torchrun per node (see tests/thirdparty/corpus.py).

One allocation per launcher runs every workload in turn (each writes NAME.out,
NAME.err and NAME.rc), then the plain torchrun script with rank 3 failing. The
``--launcher torchrun`` case runs only with DISTSPEC_TEST_THIRDPARTY=full (CI's time).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm_cluster import require_slurm_cluster
from tests.thirdparty.corpus import (
    BIN,
    STEPS,
    WORKLOADS,
    done_ranks,
    stage,
    wait_no_leftovers,
)

pytestmark = [pytest.mark.slurm, pytest.mark.torch, pytest.mark.slow]


@pytest.fixture
def job_name() -> Iterator[str]:
    """A unique job name; any job left under it is cancelled after the test."""
    name = f"tp-launch-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["scancel", "--name", name], capture_output=True, check=False)


@pytest.fixture
def env() -> dict[str, str]:
    """This environment without allocation variables; this venv first on PATH."""
    require_slurm_cluster()
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PBS_", "DISTSPEC_", "RANK", "WORLD_", "LOCAL_"))
    }
    clean["PATH"] = f"{BIN}:{clean.get('PATH', '')}"
    clean["HF_HUB_OFFLINE"] = "1"
    return clean


def _launch(launcher: tuple[str, ...], script: Path, out: str, *args: str) -> str:
    cmd = ["distspec", "launch", *launcher, "--", str(script), "--steps", str(STEPS), *args]
    return f"{shlex.join(cmd)} > {out}.out 2> {out}.err; echo $? > {out}.rc"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_launch_in_salloc(
    launcher: str, tmp_path: Path, env: dict[str, str], job_name: str
) -> None:
    if os.environ.get("DISTSPEC_TEST_THIRDPARTY") == "0":
        pytest.skip("the third-party corpus is off (DISTSPEC_TEST_THIRDPARTY=0)")
    if launcher == "torchrun" and os.environ.get("DISTSPEC_TEST_THIRDPARTY") != "full":
        pytest.skip(
            "torchrun per node is what distspec run -s slurm runs (test_run_slurm.py); "
            "to keep CI's time it runs under launch only with DISTSPEC_TEST_THIRDPARTY=full"
        )
    workloads = [w for w in WORKLOADS if w.missing() is None]
    missing = [f"{w.name}: {w.missing()}" for w in WORKLOADS if w.missing()]
    if not workloads:
        pytest.skip("; ".join(missing))
    flags = () if launcher == "srun" else ("--launcher", "torchrun")
    scripts = {w.name: stage(w, tmp_path) for w in workloads}
    lines = [f"cd {shlex.quote(str(tmp_path))}"]
    lines += [_launch(flags, script, name) for name, script in scripts.items()]
    failing = stage(WORKLOADS[0], tmp_path)
    lines.append(_launch(flags, failing, "failing", "--fail-rank", "3"))
    proc = subprocess.run(
        ["salloc", "-N2", "--ntasks-per-node=2", "-J", job_name, "bash", "-c", "\n".join(lines)],
        env=env,
        capture_output=True,
        text=True,
        timeout=880,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr

    def result(name: str) -> tuple[str, str]:
        rc = (tmp_path / f"{name}.rc").read_text().strip()
        return rc, (tmp_path / f"{name}.out").read_text() + (tmp_path / f"{name}.err").read_text()

    wrong = []
    for name in scripts:
        rc, text = result(name)
        if rc != "0" or done_ranks(text) != [0, 1, 2, 3]:
            wrong.append(f"{name}: exit {rc}, ranks done {done_ranks(text)}\n{text[-3000:]}")
    assert not wrong, f"under launch {launcher}:\n" + "\n\n".join(wrong)

    rc, text = result("failing")
    if launcher == "torchrun":
        # launch reports torchrun's root cause, with the rank's own exit code.
        assert rc == "1", text
        assert re.search(
            r"distspec launch: failed: rank 3 \(local rank 1\) on n1 exited with 1", text
        ), text
    else:
        # srun ends the step when rank 3 exits 1 and kills the others: it exits with the
        # highest code (143, SIGTERM) but names the task that failed (block layout:
        # task 3 is rank 3).
        assert rc not in ("", "0"), text
        assert "n1: task 3: Exited with exit code 1" in text, text
    assert "Traceback (most recent call last):" in text, text
    assert f'File "{failing}", line' in text, text
    assert "ValueError: rank 3 fails on purpose" in text, text
    # salloc has returned; Slurm may still list the job as COMPLETING (CG) for a moment
    # while the nodes run their end-of-job work (plugins' exit hooks): it must leave
    # the queue by itself.
    deadline = time.monotonic() + 60
    while True:
        queued = subprocess.run(
            ["squeue", "-h", "-n", job_name, "-o", "%i %T"],
            capture_output=True,
            text=True,
            check=True,
        )
        if not queued.stdout.strip() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not queued.stdout.strip(), queued.stdout
    wait_no_leftovers(str(tmp_path))
