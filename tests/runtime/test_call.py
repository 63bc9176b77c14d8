"""The worker side of Python callables (distspec.runtime.call), run as real processes.

Kubernetes: no Kubernetes controller runs here, so the pod is the narrowest honest
stand-in: the exact container command and environment of a dry run's manifest, run
on this machine under real torchrun, with ``job_dir=file://...`` read and written
through fsspec as an object store would be.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
import yaml

from distspec.callables import Job, compile_call
from distspec.errors import CallableError, RemoteError
from distspec.runtime.call import takes_dist
from distspec.runtime.call_protocol import CALL_FILE, result_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.runtime import Dist

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def square_rank(dist: Dist, base: int) -> int:
    return base + dist.rank**2


def fails(dist: Dist) -> None:
    raise OSError(f"disk full on rank {dist.rank}")


def _pod(manifest: str) -> tuple[list[str], dict[str, str]]:
    """The container's argv and plain env values of the (only) pod template."""
    for doc in yaml.safe_load_all(manifest):
        if doc and doc.get("kind") == "Job":
            spec = doc["spec"]["template"]["spec"]["containers"][0]
            env = {e["name"]: e["value"] for e in spec.get("env", ()) if "value" in e}
            return [*spec["command"], *spec["args"]], env
    raise AssertionError("no Job in the manifest")


def _run_pod(call: Any, tmp_path: Path) -> tuple[str, subprocess.CompletedProcess[str]]:
    argv, env = _pod(call.request.render())
    job_dir = env["DISTSPEC_JOB_DIR"]
    from distspec.callables import _write_payload

    _write_payload(job_dir, call.payload)
    proc = subprocess.run(
        argv,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return job_dir, proc


def test_dryrun_puts_the_job_dir_url_in_the_pod(state_dir: Path) -> None:
    call = compile_call(
        square_rank,
        (1,),
        j="1x2",
        scheduler="kubernetes",
        cfg={"job_dir": "s3://bucket/prefix/"},
        options={"image": "repo/img:1"},
    )
    argv, env = _pod(call.request.render())
    assert env["DISTSPEC_JOB_DIR"] == f"s3://bucket/prefix/{call.request.app_id}"
    assert argv[argv.index("-m") + 1] == "distspec.runtime.call"


def test_kubernetes_without_job_dir_is_refused_before_submitting(state_dir: Path) -> None:
    import distspec

    with pytest.raises(CallableError, match="job_dir"):
        distspec.submit(square_rank, 1, scheduler="kubernetes", options={"image": "img"})


def test_kubernetes_job_dir_this_machine_cannot_write_is_refused(state_dir: Path) -> None:
    import distspec

    with pytest.raises(CallableError, match="cannot write the function to the job directory"):
        distspec.submit(
            square_rank,
            1,
            scheduler="kubernetes",
            cfg={"job_dir": "nosuchprotocol://bucket/prefix"},
            options={"image": "img"},
        )


@pytest.mark.torch
def test_pod_command_with_a_file_url_job_dir(state_dir: Path, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/bucket"
    call = compile_call(
        square_rank,
        (10,),
        j="1x2",
        scheduler="kubernetes",
        cfg={"job_dir": url},
        options={"image": "img"},
    )
    job_dir, proc = _run_pod(call, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_dir.startswith(url + "/")
    folder = Path(job_dir.removeprefix("file://"))
    assert sorted(p.name for p in folder.iterdir()) == [CALL_FILE, result_file(0), result_file(1)]
    job = Job("kubernetes://s/x", job_dir=job_dir, nodes=1, nproc_per_node=2, role="fn")
    records = [job._read(rank) for rank in (0, 1)]
    assert [(r["ok"], r["value"], r["rank"]) for r in records if r] == [
        (True, 10, 0),
        (True, 11, 1),
    ]


@pytest.mark.torch
def test_pod_command_raising_writes_the_remote_error(state_dir: Path, tmp_path: Path) -> None:
    call = compile_call(
        fails,
        j="1x2",
        scheduler="kubernetes",
        cfg={"job_dir": f"file://{tmp_path}/bucket"},
        options={"image": "img"},
    )
    job_dir, proc = _run_pod(call, tmp_path)
    assert proc.returncode != 0
    job = Job("kubernetes://s/x", job_dir=job_dir, nodes=1, nproc_per_node=2, role="fn")
    record = job._read(0) or job._read(1)
    assert record is not None and not record["ok"]
    from distspec.callables import _remote_error

    err = _remote_error(record, job.handle)
    assert isinstance(err, RemoteError)
    assert err.type_name == "OSError"
    assert err.remote_message.startswith("disk full on rank ")
    assert "def fails" in err.remote_traceback or "fails" in err.remote_traceback


def _worker(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "RANK"))}
    return subprocess.run(
        [sys.executable, "-m", "distspec.runtime.call", *args],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.torch
def test_plain_python_runs_an_importable_function_and_prints_its_value() -> None:
    proc = _worker("--fn", "tests.callables_app:join_words", "--", "a", "b", env={})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "distspec: rank 0 returned 'a-b-1'" in proc.stdout


def test_missing_payload_is_an_error_record_naming_the_cause(tmp_path: Path) -> None:
    proc = _worker("--payload-wait", "0.2", env={"DISTSPEC_JOB_DIR": str(tmp_path)})
    assert proc.returncode == 1
    record = cloudpickle.loads((tmp_path / result_file(0)).read_bytes())
    assert record["ok"] is False and record["phase"] == "load"
    assert "did not appear" in record["message"]


def test_job_dir_protocol_without_its_library_is_explained_in_the_log() -> None:
    import importlib.util

    # A protocol whose fsspec library is not installed here (the tests install s3fs).
    missing = [
        (p, lib)
        for p, lib in (("s3", "s3fs"), ("gs", "gcsfs"), ("abfs", "adlfs"))
        if importlib.util.find_spec(lib) is None
    ]
    if not missing:
        pytest.skip("s3fs, gcsfs and adlfs are all installed: no protocol lacks its library")
    proto, lib = missing[0]
    url = f"{proto}://bucket/prefix"
    proc = _worker("--payload-wait", "1", env={"DISTSPEC_JOB_DIR": url})
    assert proc.returncode == 1
    assert re.search(rf"cannot reach {url}/result-0.pkl: (Please i|I)nstall {lib}", proc.stderr)
    assert "the job's image needs distspec and the fsspec library of this protocol" in proc.stderr
    assert f"rank 0 cannot write its result to {url}/result-0.pkl" in proc.stderr


def test_function_not_importable_on_the_worker(tmp_path: Path) -> None:
    proc = _worker("--fn", "no_such_module_here:f", env={"DISTSPEC_JOB_DIR": str(tmp_path)})
    assert proc.returncode == 1
    record = cloudpickle.loads((tmp_path / result_file(0)).read_bytes())
    assert record["type"] == "ModuleNotFoundError"
    assert "no_such_module_here" in record["message"]


class _Dist:  # a stand-in class named Dist from elsewhere does not count
    pass


def _annotated(dist: Dist) -> None: ...


def _annotated_class(d: _Dist) -> None: ...


def _first_is_other(x: int, dist: Dist) -> None: ...


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_annotated, True),
        (_first_is_other, False),
        (_annotated_class, False),
        (lambda: None, False),
        (lambda dist: None, False),
        (print, False),
    ],
)
def test_takes_dist(fn: Any, expected: bool) -> None:
    assert takes_dist(fn) is expected


def test_takes_dist_with_the_real_class() -> None:
    from distspec.runtime import Dist

    def f(dist: Dist) -> None: ...

    f.__annotations__["dist"] = Dist  # as without `from __future__ import annotations`
    assert takes_dist(f)


@pytest.mark.parametrize("url", [False, True])
def test_remove_a_stale_result_local_or_url(tmp_path: Path, url: bool) -> None:
    from distspec.runtime.call_protocol import exists, remove, write_bytes

    base = f"file://{tmp_path}" if url else str(tmp_path)
    path = f"{base}/{result_file(3)}"
    write_bytes(path, b"stale")
    assert exists(path)
    remove(path)
    assert not exists(path)
    assert not (tmp_path / result_file(3)).exists()
    remove(path)  # absent: nothing happens
