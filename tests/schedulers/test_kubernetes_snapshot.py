"""Kubernetes runs from a code snapshot: the archive goes to ``job_dir`` (a real S3 API
server, moto in server mode, through s3fs; and ``file://``), the pod's command fetches
and unpacks it and runs the snapshot's code.

The pods' API server is the loopback fake (tests/k8s_fake_server.py); the pod's command
is taken from the Job it created and run here with bash and a real torchrun (CPU, one
process), with this test's temporary folder standing in for the pod's ``/tmp``.
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distspec.errors import SchedulerError
from distspec.runner import Runner
from distspec.runtime.unpack import UnsafeArchive, unpack, unpack_stream
from distspec.schedulers.kubernetes.snapshot import POD_ROOT
from tests.k8s_fake_server import FakeApiServer

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed")

NS = "default"
VENV_BIN = str(Path(sys.executable).parent)


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3 API server (moto's, in server mode) on a free loopback port."""
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install -e '.[s3test]')")
    server_mod = pytest.importorskip(
        "moto.server", reason="moto[server] is not installed (pip install -e '.[s3test]')"
    )
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _aws_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        # botocore (>= 1.31) reads the endpoint from the environment; s3fs passes no
        # endpoint of its own, so s3:// URLs reach the test server.
        "AWS_ENDPOINT_URL_S3": endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # instances are cached per arguments, not env


@pytest.fixture
def bucket(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Any:
    """A fresh versioned bucket (each upload is a version: counted below); its boto3
    client is returned with the bucket's name as ``client.bucket``."""
    import boto3

    _aws_env(monkeypatch, moto_endpoint)
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    name = "snap-" + request.node.name.lower().replace("_", "-").replace("[", "-")[:40].strip("-]")
    name = name.rstrip("]-")
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    client.bucket = name
    return client


@pytest.fixture
def api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_dir: Path
) -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        yield server


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


TRAIN = """\
import os, sys
import snaphelper
print("train says", {version!r}, "helper says", snaphelper.VERSION, flush=True)
print("ran", os.path.abspath(__file__), flush=True)
print("path", os.pathsep.join(sys.path), flush=True)
"""


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with a script and a package under src/ that the submitter
    imports (on its sys.path, as an editable install puts it); the test runs in it."""
    repo = tmp_path / "repo"
    (repo / "src" / "snaphelper").mkdir(parents=True)
    (repo / "train.py").write_text(TRAIN.format(version="v1"))
    (repo / "src" / "snaphelper" / "__init__.py").write_text('VERSION = "h1"\n')
    (repo / "data").mkdir()
    (repo / "data" / "link").symlink_to("../train.py")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "v1")
    monkeypatch.chdir(repo)
    monkeypatch.setattr(sys, "path", [sys.path[0], str(repo / "src"), *sys.path[1:]])
    return repo


def _submit(runner: Runner, job_dir: str) -> tuple[str, Any]:
    app = runner.bind(
        _ddp(), ["-j", "1x1", "--image", "img:1", "--script", "train.py"], scheduler="kubernetes"
    )
    request = runner.dryrun(app, "kubernetes", {"snapshot": "on", "job_dir": job_dir})
    handle = runner.submit(request)
    return handle.app_id, request


def _ddp() -> Any:
    from distspec.components.loader import load

    return load("dist.ddp")


def _job(api: FakeApiServer, app_id: str) -> dict[str, Any]:
    kid = app_id.split(":", 1)[1]
    (job,) = [
        j
        for j in api.objects.values()
        if j.get("kind") == "Job" and j["metadata"]["labels"].get("distspec.io/app-id") == kid
    ]
    return job


def _run_pod_command(job: dict[str, Any], pod_tmp: Path, env_extra: dict[str, str]) -> str:
    """The Job's container command, run here with bash (``exec "$@"``) as the kubelet
    would run it: its env on top of this machine's, ``pod_tmp`` as the pod's /tmp."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    root = str(pod_tmp / "distspec-snapshot")

    def local(word: str) -> str:
        return word.replace(POD_ROOT, root)

    argv = [local(w) for w in [*container["command"], *container.get("args", [])]]
    assert not any("$(" in w for w in argv), argv  # nothing for the kubelet to expand
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTSPEC_", "PYTHON"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(env_extra)
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = local(var["value"])
    work = pod_tmp / "workdir"  # the image's working directory
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["bash", "-c", 'exec "$@"', "bash", *argv],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


# -- the run ------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("where", ["s3", "file"])
def test_pod_runs_the_snapshot_after_the_tree_changed(
    where: str, repo: Path, api: FakeApiServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pytest.importorskip("torch", reason="torchrun runs the pod's command")
    if where == "s3":
        s3 = request.getfixturevalue("bucket")
        job_dir = f"s3://{s3.bucket}/jobs"
    else:
        job_dir = f"file://{tmp_path}/shared/jobs"
    runner = Runner()
    first, request1 = _submit(runner, job_dir)
    second, request2 = _submit(runner, job_dir)  # a sweep's second point: same tree
    tree_id = request1.snapshot.tree_id
    assert request2.snapshot.tree_id == tree_id and first != second
    key = f"jobs/snapshots/{tree_id}.tar.gz"
    if where == "s3":
        versions = s3.list_object_versions(Bucket=s3.bucket, Prefix="jobs/snapshots/")
        assert [v["Key"] for v in versions.get("Versions", [])] == [key]  # uploaded once
        # the provenance record went to the job folder in the bucket too
        kid = second.split(":", 1)[1]
        s3.head_object(Bucket=s3.bucket, Key=f"jobs/{kid}/provenance.json")
    else:
        snaps = tmp_path / "shared" / "jobs" / "snapshots"
        assert sorted(p.name for p in snaps.iterdir()) == [f"{tree_id}.tar.gz"]
        kid = second.split(":", 1)[1]
        assert (tmp_path / "shared" / "jobs" / kid / "provenance.json").is_file()

    # describe's provenance record, read back from the job folder under job_dir
    record = runner.provenance(f"kubernetes://{runner.session}/{second}")
    assert record is not None and record["snapshot"]["id"] == tree_id
    assert record["snapshot"]["job_path"] == f"{POD_ROOT}/{tree_id}"

    job = _job(api, second)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["python", "-m", "distspec.runtime.unpack"]
    assert container["command"][3] == f"{job_dir}/snapshots/{tree_id}.tar.gz"
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert "PYTHONPATH" not in env  # the image's own is not replaced ...
    assert env["DISTSPEC_SNAPSHOT_PYTHONPATH"] == f"{POD_ROOT}/{tree_id}/src"  # ... but extended

    # The user edits the code after submitting; the pod still runs what was submitted.
    (repo / "train.py").write_text(TRAIN.format(version="v2"))
    (repo / "src" / "snaphelper" / "__init__.py").write_text('VERSION = "h2"\n')
    pod_tmp = tmp_path / "pod-tmp"
    out = _run_pod_command(job, pod_tmp, {"PYTHONPATH": "/image/lib"})
    assert "train says v1 helper says h1" in out, out
    assert "says v2" not in out and "says h2" not in out, out
    dest = pod_tmp / "distspec-snapshot" / tree_id
    assert f"ran {dest}/train.py" in out, out
    path_line = next(line for line in out.splitlines() if "path " in line)
    entries = path_line.split("path ", 1)[1].split(os.pathsep)
    assert entries.index(f"{dest}/src") < entries.index("/image/lib"), entries
    assert os.readlink(dest / "data" / "link") == "../train.py"
    assert [p.name for p in (pod_tmp / "distspec-snapshot").iterdir()] == [tree_id]

    # A second container on the same node: the folder is there, nothing is fetched again.
    (dest / "marker").write_text("kept")
    _run_pod_command(_job(api, first), pod_tmp, {})
    assert (dest / "marker").read_text() == "kept"


def test_a_run_without_job_dir_keeps_its_provenance_in_the_state_dir(
    repo: Path, api: FakeApiServer, state_dir: Path
) -> None:
    """Without ``job_dir`` a Kubernetes run has no job folder (and no snapshot): its
    record is kept on the submitting machine, shown by describe, and rerun says the
    code was not kept."""
    from distspec.errors import UsageError
    from distspec.snapshot.rerun import rerun_record

    (repo / "train.py").write_text("print('edited')\n")  # a dirty tree, recorded as such
    runner = Runner()
    app = runner.bind(
        _ddp(), ["-j", "1x1", "--image", "img:1", "--script", "train.py"], scheduler="kubernetes"
    )
    handle = runner.submit(runner.dryrun(app, "kubernetes", {"snapshot": "off"}))
    folder = state_dir / "provenance" / "kubernetes" / handle.app_id
    assert (folder / "provenance.json").is_file()
    assert (folder / "snapshot.patch").read_text().count("+print('edited')") == 1
    record = runner.provenance(handle)
    assert record is not None and record["handle"] == handle.format()
    assert record["snapshot"] is None
    assert record["git"]["dirty"] is True
    with pytest.raises(UsageError, match="ran without a snapshot"):
        rerun_record(runner, handle.format())
    # describe shows it
    proc = subprocess.run(
        [f"{VENV_BIN}/distspec", "describe", handle.format(), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    assert json.loads(proc.stdout)["provenance"]["handle"] == handle.format()


@pytest.mark.parametrize("sweep", [False, True])
def test_dry_run_output_folder_uploads_the_archive_its_submit_sh_needs(
    sweep: bool, repo: Path, api: FakeApiServer, tmp_path: Path
) -> None:
    """``--dryrun -o DIR`` takes the snapshot and, on Kubernetes, uploads its archive
    to job_dir, since the pods of the Job submit.sh creates fetch it from there; no
    Kubernetes object is created."""
    job_dir = f"file://{tmp_path}/shared/jobs"
    out = tmp_path / "out"
    argv = [f"{VENV_BIN}/distspec", "run", "-s", "kubernetes", "--dryrun", "-o", str(out)]
    argv += ["-cfg", "snapshot=on", "-cfg", f"job_dir={job_dir}"]
    if sweep:
        argv += ["--sweep", "x=1,2"]
    argv += ["dist.ddp", "-j", "1x1", "--image", "img:1", "--script", "train.py"]
    argv += ["--", "--x", "{{x}}"] if sweep else []
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    archives = list((tmp_path / "shared" / "jobs" / "snapshots").iterdir())
    assert len(archives) == 1 and archives[0].name.endswith(".tar.gz"), archives
    assert f"the code snapshot is uploaded to {job_dir}/snapshots/" in proc.stderr
    with tarfile.open(archives[0]) as tar:
        assert "train.py" in tar.getnames()
    assert not [p for m, p in api.requests if m == "POST"]


# -- bad inputs ---------------------------------------------------------------------------


def test_snapshot_without_job_dir_is_one_line_exit_2(repo: Path, api: FakeApiServer) -> None:
    argv = [f"{VENV_BIN}/distspec", "run", "-s", "kubernetes", "-cfg", "snapshot=on"]
    argv += ["dist.ddp", "-j", "1x1", "--image", "img:1", "--script", "train.py"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert "-cfg snapshot=on needs -cfg job_dir=URL" in proc.stderr
    assert not [p for m, p in api.requests if m == "POST"]


def test_unreachable_s3_is_a_clear_error_and_creates_no_job(
    repo: Path, api: FakeApiServer, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _aws_env(monkeypatch, f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # no backoff: the answer is the same
    runner = Runner()
    with pytest.raises(SchedulerError, match=r"cannot upload the code snapshot to s3://.*no job"):
        _submit(runner, "s3://nowhere/jobs")
    assert not [p for m, p in api.requests if m == "POST"]


def test_compile_without_a_snapshot_is_unchanged(repo: Path, api: FakeApiServer) -> None:
    runner = Runner()
    app = runner.bind(
        _ddp(), ["-j", "1x1", "--image", "img:1", "--script", "train.py"], scheduler="kubernetes"
    )
    plain = runner.dryrun(app, "kubernetes", {"job_dir": "s3://b/jobs"}, app_id="a-1")
    assert "distspec.runtime.unpack" not in plain.render()
    assert "train.py" in plain.render() and POD_ROOT not in plain.render()


@pytest.mark.parametrize("flavor", ["job", "jobset", "volcano"])
def test_every_flavour_unpacks_first(repo: Path, state_dir: Path, flavor: str) -> None:
    import yaml

    runner = Runner()
    app = runner.bind(
        _ddp(), ["-j", "2x1", "--image", "img:1", "--script", "train.py"], scheduler="kubernetes"
    )
    cfg = {"snapshot": "on", "job_dir": "gs://b/jobs/", "flavor": flavor}
    req = runner.dryrun(app, "kubernetes", cfg, app_id="a-1")
    tree_id = req.snapshot.tree_id
    containers = [c for doc in yaml.safe_load_all(req.render()) if doc for c in _containers_of(doc)]
    assert containers
    for c in containers:
        assert c["command"] == [
            "python",
            "-m",
            "distspec.runtime.unpack",
            f"gs://b/jobs/snapshots/{tree_id}.tar.gz",
            f"{POD_ROOT}/{tree_id}",
            "--",
            "torchrun",
        ]
        assert c["args"][-1] == f"{POD_ROOT}/{tree_id}/train.py"


def _containers_of(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            return list(node["containers"])
        return [c for v in node.values() for c in _containers_of(v)]
    if isinstance(node, list):
        return [c for v in node for c in _containers_of(v)]
    return []


# -- the unpacker -------------------------------------------------------------------------


def _tar(members: list[tuple[str, str, str]]) -> bytes:
    """A .tar.gz of (name, kind, data-or-link-target) members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data.encode()))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, data
                tar.addfile(info)
            else:
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([("/etc/evil", "file", "x")], "not a relative path"),
        ([("a/../../evil", "file", "x")], "climbs out"),
        ([("up", "sym", "/tmp"), ("up/evil", "file", "x")], "passes through a symbolic link"),
        ([("a/up", "sym", "../../x")], "leaves the destination"),
        ([("a", "file", "x"), ("b", "hard", "a")], "hard link"),
        ([("p", "fifo", "")], "special file"),
        ([("a", "file", "x"), ("a", "file", "y")], "appears twice"),
    ],
)
def test_unpack_refuses_members_that_escape(
    tmp_path: Path, members: list[tuple[str, str, str]], why: str
) -> None:
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tar(members))
    dest = tmp_path / "out" / "tree"
    with pytest.raises(UnsafeArchive, match=why):
        unpack(str(archive), str(dest))
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    assert not (tmp_path / "evil").exists()


def test_unpack_keeps_links_inside_and_absolute_links(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(
        _tar(
            [
                ("d", "dir", ""),
                ("d/f.py", "file", "print(1)"),
                ("d/rel", "sym", "f.py"),
                ("data", "sym", "/scratch/data"),
            ]
        )
    )
    dest = tmp_path / "tree"
    assert unpack(f"file://{archive}", str(dest)) is True
    assert (dest / "d" / "f.py").read_text() == "print(1)"
    assert os.readlink(dest / "d" / "rel") == "f.py"
    assert os.readlink(dest / "data") == "/scratch/data"
    assert unpack(str(archive), str(dest)) is False  # there already: idempotent


def test_unpack_stream_needs_a_gzip_tar(tmp_path: Path) -> None:
    with pytest.raises(tarfile.TarError):
        unpack_stream(io.BytesIO(b"not an archive"), str(tmp_path))


def test_concurrent_unpacks_into_one_folder(tmp_path: Path) -> None:
    """Containers of one node racing: each ends with the complete folder, no temp left."""
    files = [(f"pkg/m{i}.py", "file", "x" * 10_000 * (i + 1)) for i in range(50)]
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(_tar(files))
    dest = tmp_path / "pod" / "tree"
    code = "import sys; from distspec.runtime.unpack import main; sys.exit(main(sys.argv[1:]))"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                str(archive),
                str(dest),
                "--",
                "test",
                "-f",
                f"{dest}/pkg/m49.py",
            ]
        )
        for _ in range(6)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    assert sorted(p.name for p in (dest / "pkg").iterdir()) == sorted(
        Path(n).name for n, _, _ in files
    )
    assert [p.name for p in (tmp_path / "pod").iterdir()] == ["tree"]


def test_unpack_main_exit_codes(tmp_path: Path) -> None:
    code = "import sys; from distspec.runtime.unpack import main; sys.exit(main(sys.argv[1:]))"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
        )

    assert run("only-one").returncode == 2
    missing = run(str(tmp_path / "none.tar.gz"), str(tmp_path / "t"), "--", "true")
    assert missing.returncode == 1 and "cannot unpack" in missing.stderr
    assert not (tmp_path / "t").exists() and not list(tmp_path.iterdir())
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(_tar([("/abs", "file", "x")]))
    refused = run(str(bad), str(tmp_path / "t"), "--", "true")
    assert refused.returncode == 2 and "refusing" in refused.stderr
    good = tmp_path / "good.tar.gz"
    good.write_bytes(_tar([("f", "file", "x")]))
    nocmd = run(str(good), str(tmp_path / "t"), "--", "no-such-command-distspec")
    assert nocmd.returncode == 127
    shutil.rmtree(tmp_path / "t")
