"""The hang watchdog (``-cfg watchdog``) on the real local OpenPBS cluster: the same
2x2 torchrun job as on Slurm (tests/schedulers/test_slurm_watchdog.py), its replicas
started by ``pbsdsh`` on pbs0 and pbs1. The ``pbs_path`` fixture checks that no job
and no process of it is left on either host. Without OpenPBS's source archive these
tests skip and say why."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from distspec.hangs import HUNG_EXIT, read_hang
from tests.runtime.test_watchdog import HANGS
from tests.schedulers.test_openpbs_cluster import _distspec, pbs_path, workdir

pytestmark = [pytest.mark.openpbs, pytest.mark.torch]

__all__ = ["pbs_path", "workdir"]  # fixtures, used by name


def test_a_hung_2x2_job_is_reported_with_every_rank_s_stack(pbs_path: str, workdir: Path) -> None:
    (workdir / "job.py").write_text(HANGS)
    proc = _distspec(
        workdir,
        *("run", "--wait", "-s", "pbs", "-cfg", "watchdog=15s"),
        *("dist.ddp", "-j", "2x2", "--script", "job.py"),
        timeout=300,
    )
    assert proc.returncode == HUNG_EXIT, proc.stdout + proc.stderr
    assert re.search(r"HUNG after \S+: no rank made progress for 15s", proc.stderr), proc.stderr
    assert re.search(r"\n  ranks 0,2-3 in all_reduce at job\.py:8 \(on pbs0,pbs1\)", proc.stderr)
    assert re.search(r"\n  rank 1 in main at job\.py:18 \(on pbs0\)", proc.stderr), proc.stderr
    found = re.search(r"stacks:\s+(\S+)/hang/stacks/", proc.stderr)
    assert found, proc.stderr
    hang = read_hang(Path(found.group(1)))
    assert hang is not None
    assert sorted(p["rank"] for p in hang.processes if p["rank"] is not None) == [0, 1, 2, 3]
    handle = re.search(r"pbs://\S+", proc.stdout)
    assert handle, proc.stdout
    described = _distspec(workdir, "describe", handle.group(0))
    assert "\nhung:       no rank made progress for 15s" in described.stdout, described.stdout
    assert "  ranks 0,2-3 in all_reduce at job.py:8 (on pbs0,pbs1)" in described.stdout
    assert "reason=hung: no rank made progress" in described.stdout, described.stdout
