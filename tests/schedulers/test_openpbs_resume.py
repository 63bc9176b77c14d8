"""On the real OpenPBS cluster, the retry loop tells the next attempt which it is and why
(distspec.runtime.resume's ``attempt`` and ``restart_reason``)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from distspec.schedulers.pbs import PbsScheduler
from distspec.specs import AppState
from tests.schedulers.pbs_jobs import bash_app, job_folder, submit
from tests.schedulers.test_openpbs_cluster import pbs_path, sched, workdir  # noqa: F401

pytestmark = [pytest.mark.openpbs, pytest.mark.slow]

#: Attempt 0 fails (after the hang watchdog's mark when $1 is "hang"); attempt 1 writes
#: what distspec.runtime says of it.
_SCRIPT = """
if [[ $(< "$DISTSPEC_JOB_DIR/attempt") == 0 ]]; then
  sleep 0.1
  [[ $1 == hang ]] && mkdir -p "$DISTSPEC_JOB_DIR/hang" && touch "$DISTSPEC_JOB_DIR/hang/hung"
  exit 3
fi
python3 -c 'import json; from distspec.runtime import resume; print(json.dumps([resume.attempt(), resume.restart_reason()]))' > "$DISTSPEC_JOB_DIR/seen.json"
"""


@pytest.mark.parametrize("how", ["failed-rank", "hang"])
def test_a_retried_attempt_knows_its_number_and_reason(
    sched: PbsScheduler,  # noqa: F811
    how: str,
) -> None:
    app = bash_app("resume", _SCRIPT, how)
    app = dataclasses.replace(app, roles=(dataclasses.replace(app.roles[0], max_retries=1),))
    job = submit(sched, app)
    status = sched.wait(job, timeout=180)
    assert status is not None and status.state is AppState.SUCCEEDED, status
    seen = json.loads((job_folder(sched, job) / "seen.json").read_text())
    assert seen == [1, how]
