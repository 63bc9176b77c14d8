"""Hostile arguments to the Python API: one UsageError at the call, nothing submitted.

``distspec.submit``, ``compile_call``, ``@distributed``, the ``Job`` methods,
``Job.from_handle`` and the ``Runner`` methods are fed arguments of the wrong type
or value, unknown or mistyped options, damaged callable records and malformed
handles. The contract (docs/callables.md, "Mistakes are refused at the call"): a
:class:`~distspec.errors.UsageError` subclass (a DistspecError for a damaged
record) whose one-line message names the argument and shows its value escaped,
never a secret; never a raw TypeError / ValueError / AttributeError, never a hang;
and the state directory is exactly what it was (no run directory, no record: no
job was submitted). ``dist.fn``'s own flags are checked the same way at compile
time: ``distspec run --dryrun dist.fn ...`` exits 2 with one line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distspec
from distspec.callables import Job, compile_call
from distspec.cli.main import main
from distspec.errors import (
    ArgumentError,
    CallableError,
    ComponentError,
    DistspecError,
    HandleError,
    OptionError,
    RemoteError,
    SchedulerNotFound,
    SpecError,
    TopologyError,
    UsageError,
)
from distspec.runner import Runner
from distspec.specs.topology import Topology

pytestmark = pytest.mark.timeout(120)

SECRET = "hf_s3cr3tT0kenValue"
ESC = "\x1b[31m"
BIDI = "\u202e"
EXAMPLES = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def noop() -> int:
    return 1


@pytest.fixture(autouse=True)
def _isolated(state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # No config from the repository or the user; the state directory is private.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return state_dir


def _tree(root: Path) -> set[tuple[str, int]]:
    if not root.exists():
        return set()
    return {
        (str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")
    }


def refused(
    state_dir: Path,
    call: Callable[[], Any],
    error: type[BaseException] = UsageError,
    *,
    says: tuple[str, ...] = (),
    hides: tuple[str, ...] = (SECRET,),
) -> BaseException:
    """``call()`` raises ``error`` with one line that contains ``says`` and no raw
    control character, bidi override or secret, and the state directory is unchanged."""
    before = _tree(state_dir)
    with pytest.raises(DistspecError) as info:
        call()
    e = info.value
    assert isinstance(e, error), f"{type(e).__name__}: {e}"
    text = str(e)
    assert "\n" not in text, text
    assert "\x1b" not in text and BIDI not in text, text
    for word in says:
        assert word in text, text
    for secret in hides:
        assert secret not in text, text
    assert _tree(state_dir) == before, "the state directory changed: something was submitted"
    return e


def _submit(**kw: Any) -> Callable[[], Any]:
    return lambda: distspec.submit(noop, **kw)


# ---------------------------------------------------------------------------
# submit's own arguments


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        pytest.param({"j": 2}, "j=2", id="j-int"),
        pytest.param({"j": 3.5}, "j=3.5", id="j-float"),
        pytest.param({"j": True}, "j=True", id="j-bool"),
        pytest.param({"j": None}, "j=None", id="j-none"),
        pytest.param({"j": b"1x2"}, "j=b'1x2'", id="j-bytes"),
        pytest.param({"j": ["1x2"]}, "j=['1x2']", id="j-list"),
        pytest.param({"scheduler": 3}, "scheduler=3", id="scheduler-int"),
        pytest.param({"scheduler": ["slurm"]}, "scheduler=['slurm']", id="scheduler-list"),
        pytest.param({"cfg": [("grace_period", 1)]}, "cfg: give a mapping", id="cfg-list"),
        pytest.param({"cfg": "grace_period=1"}, "cfg: give a mapping", id="cfg-str"),
        pytest.param({"cfg": {1: 2}}, "the key 1", id="cfg-int-key"),
        pytest.param({"seed": "1"}, "seed='1'", id="seed-str"),
        pytest.param({"seed": 1.5}, "seed=1.5", id="seed-float"),
        pytest.param({"seed": True}, "seed=True", id="seed-bool"),
        pytest.param({"seed": [0]}, "seed=[0]", id="seed-list"),
        pytest.param({"groups": "0,1"}, "groups='0,1'", id="groups-str"),
        pytest.param({"groups": [0, 1]}, "groups[0]=0", id="groups-flat"),
        pytest.param({"groups": [["a", "b"]]}, "groups[0][0]='a'", id="groups-str-ranks"),
        pytest.param({"groups": [[True, False]]}, "groups[0][0]=True", id="groups-bool-ranks"),
        pytest.param({"groups": [[0.0, 1.0]]}, "groups[0][0]=0.0", id="groups-float-ranks"),
        pytest.param({"groups": None}, "groups=None", id="groups-none"),
        pytest.param({"groups": {0: 1}}, "groups=", id="groups-dict"),
        pytest.param({"timeout": "10"}, "timeout='10'", id="timeout-str"),
        pytest.param({"timeout": True}, "timeout=True", id="timeout-bool"),
        pytest.param({"timeout": [1]}, "timeout=[1]", id="timeout-list"),
        pytest.param({"timeout": 1j}, "timeout=1j", id="timeout-complex"),
        pytest.param({"backend": 1}, "backend=1", id="backend-int"),
        pytest.param({"backend": b"gloo"}, "backend=b'gloo'", id="backend-bytes"),
        pytest.param({"options": [("name", "x")]}, "options: give a mapping", id="options-list"),
        pytest.param({"options": "name=x"}, "options: give a mapping", id="options-str"),
        pytest.param({"runner": "local_cwd"}, "runner='local_cwd'", id="runner-str"),
        pytest.param({"runner": Runner}, "runner=", id="runner-class"),
    ],
)
def test_wrong_types_of_submit_arguments(state_dir: Path, kw: dict[str, Any], says: str) -> None:
    """Arguments of submit of the wrong type: an ArgumentError naming the argument."""
    e = refused(state_dir, _submit(**kw), ArgumentError, says=(says,))
    assert str(e).startswith("distspec.submit: ")


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        pytest.param(lambda: distspec.submit(None), CallableError, "fn=None", id="fn-none"),
        pytest.param(lambda: distspec.submit(3), CallableError, "fn=3", id="fn-int"),
        pytest.param(
            lambda: distspec.submit("pkg.mod:fn"), CallableError, "fn='pkg.mod:fn'", id="fn-str"
        ),
        pytest.param(lambda: compile_call(noop, 3), ArgumentError, "args=3", id="args-int"),
        pytest.param(lambda: compile_call(noop, "ab"), ArgumentError, "args='ab'", id="args-str"),
        pytest.param(lambda: compile_call(noop, {"a": 1}), ArgumentError, "args=", id="args-dict"),
        pytest.param(
            lambda: compile_call(noop, (), [("a", 1)]), ArgumentError, "kwargs", id="kwargs-list"
        ),
        pytest.param(
            lambda: compile_call(noop, (), {1: 2}), ArgumentError, "the key 1", id="kwargs-int-key"
        ),
    ],
)
def test_non_callable_function_and_malformed_arguments(
    state_dir: Path, call: Callable[[], Any], error: type[BaseException], says: str
) -> None:
    """A function that is not callable, args that are not a sequence, kwargs not a mapping."""
    refused(state_dir, call, error, says=(says,))


@pytest.mark.parametrize(
    ("kw", "error", "says"),
    [
        pytest.param({"j": "0"}, TopologyError, "'1x0'", id="j-zero"),
        pytest.param({"j": "-1"}, TopologyError, "'-1'", id="j-negative"),
        pytest.param({"j": "1x"}, TopologyError, "'1x'", id="j-no-nproc"),
        pytest.param({"j": "0x1"}, TopologyError, "'0x1'", id="j-zero-nodes"),
        pytest.param({"j": "1x2x3"}, TopologyError, "'1x2x3'", id="j-three-parts"),
        pytest.param({"j": "1x" + "9" * 30}, TopologyError, "at most", id="j-huge"),
        pytest.param({"j": ""}, ArgumentError, "j=''", id="j-empty"),
        pytest.param({"j": "   "}, ArgumentError, "j='   '", id="j-blank"),
        pytest.param({"j": "1" * 5000}, ArgumentError, "5000 characters", id="j-5000-chars"),
        pytest.param({"j": ESC + "2"}, TopologyError, "\\x1b", id="j-escape-sequence"),
        pytest.param({"scheduler": ""}, ArgumentError, "scheduler=''", id="scheduler-empty"),
        pytest.param({"scheduler": "slurmm"}, SchedulerNotFound, "'slurm'", id="scheduler-typo"),
        pytest.param(
            {"scheduler": "local_cwd" + ESC}, SchedulerNotFound, "\\x1b", id="scheduler-escape"
        ),
        pytest.param({"seed": -1}, ArgumentError, "seed=-1", id="seed-negative"),
        pytest.param({"seed": 2**63}, ArgumentError, "seed=", id="seed-2**63"),
        pytest.param({"seed": 10**5000}, ArgumentError, "bits", id="seed-5000-digits"),
        pytest.param({"timeout": 0}, ArgumentError, "timeout=0", id="timeout-zero"),
        pytest.param({"timeout": -1}, ArgumentError, "timeout=-1", id="timeout-negative"),
        pytest.param({"timeout": math.nan}, ArgumentError, "timeout=nan", id="timeout-nan"),
        pytest.param({"timeout": math.inf}, ArgumentError, "timeout=inf", id="timeout-inf"),
        pytest.param({"timeout": -math.inf}, ArgumentError, "timeout=-inf", id="timeout-minus-inf"),
        pytest.param({"timeout": 1e300}, ArgumentError, "at most", id="timeout-1e300"),
        pytest.param({"groups": [[5]]}, ArgumentError, "rank 5 is not in 0..1", id="groups-out"),
        pytest.param({"groups": [[]]}, ArgumentError, "group 0 is empty", id="groups-empty"),
        pytest.param({"groups": [[0, 0], [1]]}, ArgumentError, "twice", id="groups-twice"),
        pytest.param(
            {"groups": [[0, 1], [1]]}, ArgumentError, "groups 0 and 1", id="groups-overlap"
        ),
        pytest.param({"groups": [[0]]}, ArgumentError, "rank 1 is in no group", id="groups-miss"),
        pytest.param({"groups": [[-1]]}, ArgumentError, "groups[0][0]=-1", id="groups-negative"),
        pytest.param({"groups": [[2**70]]}, ArgumentError, "not in 0..1", id="groups-huge-rank"),
        pytest.param({"backend": "foo"}, ArgumentError, "known: gloo", id="backend-unknown"),
        pytest.param({"backend": "glo"}, ArgumentError, "did you mean 'gloo'", id="backend-typo"),
        pytest.param({"backend": ""}, ArgumentError, "backend=''", id="backend-empty"),
        pytest.param({"backend": "GLOO"}, ArgumentError, "backend='GLOO'", id="backend-case"),
        pytest.param({"backend": "gloo" + BIDI}, ArgumentError, "\\u202e", id="backend-bidi"),
        pytest.param(
            {"backend": "cpu:gloo,cuda:nccl"}, ArgumentError, "backend=", id="backend-composite"
        ),
    ],
)
def test_bad_values_of_submit_arguments(
    state_dir: Path, kw: dict[str, Any], error: type[BaseException], says: str
) -> None:
    """Arguments of submit of the right type and a wrong value: zero, negative, huge, NaN, escapes."""
    refused(state_dir, _submit(**kw), error, says=(says,))


@pytest.mark.parametrize(
    ("kw", "error", "says"),
    [
        pytest.param({"options": {"nmae": "x"}}, ArgumentError, "did you mean 'name'", id="typo"),
        pytest.param({"options": {"gpus": 1}}, ArgumentError, "did you mean 'gpu'", id="plural"),
        pytest.param({"options": {"": 1}}, ArgumentError, "options key ''", id="empty-key"),
        pytest.param({"options": {1: "x"}}, ArgumentError, "the key 1", id="int-key"),
        pytest.param({"options": {"j": "1x1"}}, ArgumentError, "pass j=", id="own-keyword-j"),
        pytest.param({"options": {"seed": 1}}, ArgumentError, "pass seed=", id="own-keyword-seed"),
        pytest.param({"options": {"fn": "m:f"}}, ArgumentError, "command line", id="cli-fn"),
        pytest.param({"options": {"fn_args": ["a"]}}, ArgumentError, "command line", id="fn-args"),
        pytest.param({"options": {"name": ""}}, ArgumentError, "may not be empty", id="name-empty"),
        pytest.param({"options": {"name": "a" + ESC}}, ArgumentError, "\\x1b", id="name-escape"),
        pytest.param({"options": {"name": "a" + BIDI}}, ArgumentError, "\\u202e", id="name-bidi"),
        pytest.param({"options": {"name": "a" * 5000}}, SpecError, "5000", id="name-5000"),
        pytest.param({"options": {"name": 3}}, ArgumentError, "options['name']=3", id="name-int"),
        pytest.param({"options": {"cpu": "2"}}, ArgumentError, "options['cpu']='2'", id="cpu-str"),
        pytest.param(
            {"options": {"cpu": True}}, ArgumentError, "options['cpu']=True", id="cpu-bool"
        ),
        pytest.param({"options": {"cpu": -1}}, SpecError, "-1", id="cpu-negative"),
        pytest.param({"options": {"max_retries": 1.5}}, ArgumentError, "1.5", id="retries-float"),
        pytest.param({"options": {"tee": 9}}, ComponentError, "9", id="tee-9"),
        pytest.param({"options": {"debug": "yes"}}, ArgumentError, "'yes'", id="debug-str"),
        pytest.param({"options": {"rdzv_port": "x"}}, ArgumentError, "'x'", id="port-str"),
        pytest.param({"options": {"env": ["A=1"]}}, ArgumentError, "options['env']", id="env-list"),
        pytest.param({"options": {"env": "A=1"}}, ArgumentError, "options['env']", id="env-str"),
        pytest.param({"options": {"env": {1: "x"}}}, ArgumentError, "the key 1", id="env-int-key"),
        pytest.param(
            {"options": {"env": {"HF_TOKEN": 12345}}}, ArgumentError, "<hidden>", id="env-int"
        ),
        pytest.param(
            {"options": {"env": {"A": "x", "HF_TOKEN": [SECRET]}}},
            ArgumentError,
            "options['env']['HF_TOKEN']",
            id="env-secret-in-list",
        ),
        pytest.param(
            {"options": {"mounts": "type=bind,src=/a"}}, ArgumentError, "mounts", id="mounts-str"
        ),
        pytest.param({"options": {"mounts": [1]}}, ArgumentError, "mounts'][0]=1", id="mounts-int"),
        pytest.param(
            {"cfg": {"nonsense": 1}}, OptionError, "unknown option 'nonsense'", id="cfg-unknown"
        ),
        pytest.param(
            {"cfg": {"grace_perod": 1}}, OptionError, "did you mean 'grace_period'", id="cfg-typo"
        ),
        pytest.param(
            {"cfg": {"grace_period": True}}, OptionError, "grace_period=True", id="cfg-bool"
        ),
        pytest.param(
            {"cfg": {"grace_period": "abc"}}, OptionError, "grace_period='abc'", id="cfg-text"
        ),
        pytest.param(
            {"cfg": {"grace_period": math.nan}}, OptionError, "grace_period=nan", id="cfg-nan"
        ),
        pytest.param(
            {"cfg": {"grace_period": [1]}}, OptionError, "grace_period=[1]", id="cfg-list"
        ),
        pytest.param(
            {"scheduler": "kubernetes", "cfg": {"secret_env": [f"HF_TOKEN={SECRET}"]}},
            OptionError,
            "secret_env=<hidden>",
            id="cfg-secret-of-wrong-type",
        ),
        pytest.param(
            {"scheduler": "slurm", "cfg": {"requeue_before": 3.5}},
            OptionError,
            "requeue_before=3.5: give an integer",
            id="cfg-float-for-int",
        ),
        pytest.param(
            {"scheduler": "slurm", "cfg": {"nodes_per_job": 3.5}},
            OptionError,
            "unknown option",
            id="cfg-unknown-slurm",
        ),
    ],
)
def test_unknown_or_mistyped_options(
    state_dir: Path, kw: dict[str, Any], error: type[BaseException], says: str
) -> None:
    """Unknown or mistyped options and run options (cfg), with a did-you-mean; secrets hidden."""
    refused(state_dir, _submit(**kw), error, says=(says,))


# ---------------------------------------------------------------------------
# the decorator


@pytest.mark.parametrize(
    ("call", "error", "says"),
    [
        pytest.param(lambda: distspec.distributed(j=2), ArgumentError, "j=2", id="j-int"),
        pytest.param(lambda: distspec.distributed(j="0x1"), TopologyError, "0x1", id="j-zero"),
        pytest.param(lambda: distspec.distributed(seed=-1), ArgumentError, "seed=-1", id="seed"),
        pytest.param(
            lambda: distspec.distributed(timeout=math.nan), ArgumentError, "nan", id="timeout-nan"
        ),
        pytest.param(
            lambda: distspec.distributed(scheduler="slurmm"),
            SchedulerNotFound,
            "did you mean 'slurm'",
            id="scheduler-typo",
        ),
        pytest.param(
            lambda: distspec.distributed(options={"nmae": "x"}), ArgumentError, "'name'", id="opt"
        ),
        pytest.param(
            lambda: distspec.distributed()(3), CallableError, "an int", id="decorates-int"
        ),
        pytest.param(
            lambda: distspec.distributed()(lambda j: j).submit(j="1x1"),
            ArgumentError,
            "keyword 'j'",
            id="function-keyword-named-j",
        ),
        pytest.param(
            lambda: distspec.distributed()(lambda **kw: kw)(seed=1),
            ArgumentError,
            "keyword 'seed'",
            id="call-keyword-named-seed",
        ),
    ],
)
def test_decorator_settings_refused_at_the_decorator(
    state_dir: Path, call: Callable[[], Any], error: type[BaseException], says: str
) -> None:
    """@distributed's settings are refused when decorating, before any call submits."""
    refused(state_dir, call, error, says=(says,))


# ---------------------------------------------------------------------------
# Job methods and Runner methods


@pytest.fixture
def job() -> Job:
    """A Job that was never submitted: a check that let its argument through would
    reach the scheduler and fail with AppNotFound, not ArgumentError."""
    return Job(
        "local_cwd://distspec/fn-00000000",
        job_dir="/nonexistent",
        nodes=1,
        nproc_per_node=2,
        role="fn",
        runner=Runner(),
    )


@pytest.mark.parametrize(
    ("method", "kw", "says"),
    [
        pytest.param(m, {"timeout": v}, f"Job.{m}: timeout=", id=f"{m}-{name}")
        for m in ("wait", "result", "results", "exception")
        for name, v in (
            ("negative", -1),
            ("nan", math.nan),
            ("inf", math.inf),
            ("bool", True),
            ("str", "1"),
            ("list", [1]),
        )
    ]
    + [
        pytest.param("logs", {"rank": 2}, "rank=2", id="logs-rank-out"),
        pytest.param("logs", {"rank": -1}, "rank=-1", id="logs-rank-negative"),
        pytest.param("logs", {"rank": "0"}, "rank='0'", id="logs-rank-str"),
        pytest.param("logs", {"rank": True}, "rank=True", id="logs-rank-bool"),
        pytest.param("logs", {"rank": 0.0}, "rank=0.0", id="logs-rank-float"),
        pytest.param("logs", {"tail": -1}, "tail=-1", id="logs-tail-negative"),
        pytest.param("logs", {"tail": "5"}, "tail='5'", id="logs-tail-str"),
        pytest.param("logs", {"tail": 1.5}, "tail=1.5", id="logs-tail-float"),
    ],
)
def test_job_method_arguments(
    state_dir: Path, job: Job, method: str, kw: dict[str, Any], says: str
) -> None:
    """Job.wait/result/results/exception timeouts and Job.logs' rank and tail of the wrong type or value."""
    refused(state_dir, lambda: getattr(job, method)(**kw), ArgumentError, says=(says,))


HANDLE = "local_cwd://distspec/fn-00000000"


@pytest.mark.parametrize(
    ("call", "says"),
    [
        pytest.param(lambda r: Runner(session="a/b"), "session='a/b'", id="session-slash"),
        pytest.param(lambda r: Runner(session="a b"), "session='a b'", id="session-space"),
        pytest.param(lambda r: Runner(session="a" + ESC), "\\x1b", id="session-escape"),
        pytest.param(lambda r: Runner(session=3), "session=3", id="session-int"),
        pytest.param(lambda r: r.status(3), "handle=3", id="status-int-handle"),
        pytest.param(lambda r: r.cancel(None), "handle=None", id="cancel-none-handle"),
        pytest.param(lambda r: r.wait(HANDLE, timeout=math.nan), "timeout=nan", id="wait-nan"),
        pytest.param(lambda r: r.wait(HANDLE, timeout=-1), "timeout=-1", id="wait-negative"),
        pytest.param(lambda r: r.wait(HANDLE, timeout="5"), "timeout='5'", id="wait-str"),
        pytest.param(lambda r: r.wait(HANDLE, on_status=3), "on_status=3", id="wait-on-status"),
        pytest.param(lambda r: r.log_lines(HANDLE, replica=-1), "replica=-1", id="log-replica"),
        pytest.param(lambda r: r.log_lines(HANDLE, role=3), "role=3", id="log-role-int"),
        pytest.param(lambda r: r.log_lines(HANDLE, tail="5"), "tail='5'", id="log-tail-str"),
        pytest.param(lambda r: r.log_lines(HANDLE, rank=-1), "rank=-1", id="log-rank"),
        pytest.param(lambda r: r.log_lines(HANDLE, regex="("), "regex='('", id="log-regex"),
        pytest.param(lambda r: r.log_lines(HANDLE, since="x"), "since='x'", id="log-since"),
        pytest.param(
            lambda r: r.log_lines(HANDLE, since=math.nan), "since=nan", id="log-since-nan"
        ),
        pytest.param(lambda r: r.log_lines(HANDLE, follow="no"), "follow='no'", id="log-follow"),
        pytest.param(lambda r: r.dryrun("app", "local_cwd"), "app='app'", id="dryrun-str-app"),
        pytest.param(lambda r: r.run("app", "local_cwd"), "app='app'", id="run-str-app"),
        pytest.param(lambda r: r.submit("request"), "request='request'", id="submit-str"),
        pytest.param(lambda r: r.list(3), "scheduler=3", id="list-int"),
        pytest.param(
            lambda r: r.run_component("dist.fn", "-j 1x2"), "args='-j 1x2'", id="component-str-args"
        ),
        pytest.param(
            lambda r: r.run_component("dist.fn", ["-j", 2]), "args[1]=2", id="component-int-arg"
        ),
        pytest.param(lambda r: r.run_component(3), "component=3", id="component-int"),
        pytest.param(
            lambda r: r.options("local_cwd", [("grace_period", "1")]), "cfg", id="options-list"
        ),
    ],
)
def test_runner_method_arguments(state_dir: Path, call: Callable[[Runner], Any], says: str) -> None:
    """Runner's public methods given values of the wrong type or value, refused at the call."""
    runner = Runner()
    refused(state_dir, lambda: call(runner), ArgumentError, says=(says,))


# ---------------------------------------------------------------------------
# dist.fn's own flags, at compile time


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(["--fn", "a.b"], "pkg.module:function", id="fn-no-colon"),
        pytest.param(["--fn", ":f"], "pkg.module:function", id="fn-no-module"),
        pytest.param(["--fn", "a:"], "pkg.module:function", id="fn-no-function"),
        pytest.param(["--fn", "a..b:f"], "empty part", id="fn-empty-module-part"),
        pytest.param(["--fn", "a:f."], "empty part", id="fn-empty-function-part"),
        pytest.param(["--fn", "1a:f"], "'1a' is not a Python name", id="fn-digit"),
        pytest.param(["--fn", "a-b:f"], "'a-b'", id="fn-dash"),
        pytest.param(["--fn", "a:b:c"], "'b:c'", id="fn-two-colons"),
        pytest.param(["--fn", "a:<lambda>"], "'<lambda>'", id="fn-lambda"),
        pytest.param(["--fn", "a/b.py:f"], "'a/b.py'", id="fn-path"),
        pytest.param(["--fn", "a:f" + ESC], "\\x1b", id="fn-escape"),
        pytest.param(["--fn", "a:f" + BIDI], "\\u202e", id="fn-bidi"),
        pytest.param(["--groups", "0,,1"], "--groups", id="groups-empty-rank"),
        pytest.param(["--groups", "a"], "--groups", id="groups-letters"),
        pytest.param(["--groups", "0,0;1"], "twice", id="groups-twice"),
        pytest.param(["--groups", "0,1;1"], "groups 0 and 1", id="groups-overlap"),
        pytest.param(["--groups", "0"], "rank 1 is in no group", id="groups-miss"),
        pytest.param(["--groups", "0;1;2"], "rank 2 is not in 0..1", id="groups-out"),
        pytest.param(["--groups", "9" * 40], "not in 0..1", id="groups-huge"),
        pytest.param(["--groups", "-1"], "negative", id="groups-negative"),
        pytest.param(["--timeout", "-1"], "--timeout", id="timeout-negative"),
        pytest.param(["--timeout", "0"], "--timeout", id="timeout-zero"),
        pytest.param(["--timeout", "nan"], "--timeout", id="timeout-nan"),
        pytest.param(["--timeout", "inf"], "--timeout", id="timeout-inf"),
        pytest.param(["--timeout", "1e20"], "at most", id="timeout-1e20"),
        pytest.param(["--timeout", "ten"], "--timeout", id="timeout-word"),
        pytest.param(["--seed", "-1"], "--seed -1", id="seed-negative"),
        pytest.param(["--seed", str(2**63)], "--seed", id="seed-2**63"),
        pytest.param(["--seed", "1.5"], "--seed", id="seed-float"),
        pytest.param(["--seed", "x"], "--seed", id="seed-word"),
        pytest.param(["--backend", "foo"], "known: gloo", id="backend-unknown"),
        pytest.param(["--backend", "ncl"], "did you mean 'nccl'", id="backend-typo"),
        pytest.param(["--name", "run" + ESC], "\\x1b", id="name-escape"),
    ],
)
def test_dist_fn_compile_time_arguments(
    state_dir: Path, capfd: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    """dist.fn's --fn, --groups, --timeout, --seed, --backend, --name: exit 2, one line, at compile time."""
    before = _tree(state_dir)
    try:
        code = main(["run", "--dryrun", "dist.fn", "-j", "1x2", *args])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    out, err = capfd.readouterr()
    assert code == 2, (out, err)
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "\x1b" not in err and BIDI not in err, err
    assert says in lines[0], lines[0]
    assert out == ""
    assert _tree(state_dir) == before


# ---------------------------------------------------------------------------
# re-attaching: malformed handles and damaged records


@pytest.mark.parametrize(
    ("handle", "error", "says"),
    [
        pytest.param("x", HandleError, "'x'", id="no-scheme"),
        pytest.param("", HandleError, "''", id="empty"),
        pytest.param("local_cwd://", HandleError, "local_cwd://", id="no-app"),
        pytest.param("local_cwd://s/a/b", HandleError, "local_cwd://s/a/b", id="slash-in-app"),
        pytest.param("local_cwd://s/" + "a" * 300, HandleError, "300", id="app-300-chars"),
        pytest.param("local_cwd://s/a b", HandleError, "'local_cwd://s/a b'", id="space"),
        pytest.param("local_cwd://s/a" + ESC, CallableError, "\\x1b", id="escape-in-app"),
        pytest.param(
            "slurmm://s/x-1", SchedulerNotFound, "did you mean 'slurm'", id="scheduler-typo"
        ),
        pytest.param("nosuch://s/x-1", SchedulerNotFound, "'nosuch'", id="scheduler-unknown"),
        pytest.param(
            "local_cwd://s/never-submitted", CallableError, "no callable", id="unknown-app"
        ),
        pytest.param(3, ArgumentError, "handle=3", id="int"),
        pytest.param(None, ArgumentError, "handle=None", id="none"),
        pytest.param(b"local_cwd://s/x", ArgumentError, "handle=b'", id="bytes"),
    ],
)
def test_malformed_handles(
    state_dir: Path, handle: Any, error: type[BaseException], says: str
) -> None:
    """Job.from_handle on a malformed handle, an unknown scheduler or an app never submitted."""
    refused(state_dir, lambda: Job.from_handle(handle), error, says=(says,))


GOOD_RECORD = {
    "handle": "local_cwd://distspec/fn-1",
    "job_dir": "/tmp/x",
    "nodes": 1,
    "nproc_per_node": 2,
    "role": "fn",
}


def _with(**changes: Any) -> bytes:
    record: dict[str, Any] = {**GOOD_RECORD, **changes}
    return json.dumps({k: v for k, v in record.items() if v is not _DROP}).encode()


_DROP = object()

RECORDS: dict[str, bytes | str] = {
    "empty": b"",
    "blank": b"  \n",
    "truncated": _with()[:20],
    "not-utf8": b'{"job_dir": "\xff\xfe"}',
    "binary": bytes(range(256)),
    "json-list": b"[1, 2]",
    "json-string": b'"local_cwd"',
    "json-null": b"null",
    "json-number": b"42",
    "no-job-dir": _with(job_dir=_DROP),
    "no-nodes": _with(nodes=_DROP),
    "no-role": _with(role=_DROP),
    "nodes-str": _with(nodes="2"),
    "nodes-zero": _with(nodes=0),
    "nodes-negative": _with(nodes=-1),
    "nodes-bool": _with(nodes=True),
    "nodes-float": _with(nodes=1.5),
    "nodes-huge": b'{"job_dir": "/x", "nodes": 1e999, "nproc_per_node": 1, "role": "fn"}',
    "nproc-null": _with(nproc_per_node=None),
    "job-dir-empty": _with(job_dir=""),
    "job-dir-list": _with(job_dir=["/x"]),
    "role-int": _with(role=5),
    "nan": b'{"job_dir": "/x", "nodes": NaN, "nproc_per_node": 1, "role": "fn"}',
    "deep-nesting": b"[" * 100_000 + b"]" * 100_000,
    "over-64KiB": _with(job_dir="/" + "a" * 70_000),
    "directory": "dir",
    "fifo": "fifo",
    "symlink-to-dev-zero": "devzero",
}


@pytest.mark.parametrize("case", list(RECORDS))
def test_damaged_callable_records(state_dir: Path, case: str) -> None:
    """Job.from_handle on a record that is damaged: empty, truncated, not JSON, not an object, fields missing or mistyped, a directory, a FIFO, a device.

    Each case then writes a good record at the same path and reads the Job back, so the
    refusal is the damage's doing."""
    app = "fn-1"
    path = state_dir / "callables" / "local_cwd" / f"{app}.json"
    path.parent.mkdir(parents=True)
    content = RECORDS[case]
    if content == "dir":
        path.mkdir()
    elif content == "fifo":
        os.mkfifo(path)
    elif content == "devzero":
        path.symlink_to("/dev/zero")
    else:
        assert isinstance(content, bytes)
        path.write_bytes(content)
    e = refused(
        state_dir,
        lambda: Job.from_handle(f"local_cwd://distspec/{app}"),
        CallableError,
        says=("damaged", app),
    )
    assert e.__cause__ is None, "a json/OS traceback is chained"
    assert e.__context__ is None or e.__suppress_context__, "a json/OS traceback is chained"
    # The control: the same path holding a good record gives the Job.
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink()
    path.write_bytes(_with())
    job = Job.from_handle(f"local_cwd://distspec/{app}")
    assert (job.job_dir, job.nodes, job.nproc_per_node, job.role) == ("/tmp/x", 1, 2, "fn")


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"not a pickle", id="garbage"),
        pytest.param(b"\x80\x05\x95", id="truncated-pickle"),
        pytest.param(None, id="pickled-list"),
    ],
)
def test_damaged_result_files(state_dir: Path, tmp_path: Path, content: bytes | None) -> None:
    """A rank's result file damaged after the job wrote it: one RemoteError naming the file."""
    import pickle

    from distspec.runtime.call_protocol import result_file

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    data = pickle.dumps([1, 2]) if content is None else content
    (job_dir / result_file(0)).write_bytes(data)
    job = Job(HANDLE, job_dir=str(job_dir), nodes=1, nproc_per_node=1, role="fn")
    with pytest.raises(RemoteError, match="result file .* is damaged") as info:
        job._read(0)
    assert info.value.__cause__ is None


# ---------------------------------------------------------------------------
# property-based: arbitrary objects


def _objects() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.binary(max_size=8),
        st.sampled_from(["1x2", "2", "1:2x1", "0", "1x0", "2x2", " 1x2 ", "1X2"]),
    )
    return st.one_of(
        scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=3), scalars)
    )


def _after(args: tuple[str, ...], flag: str) -> str | None:
    """The word after ``flag`` in the role's arguments, or None."""
    return args[args.index(flag) + 1] if flag in args else None


def _compile_or_refuse(state_dir: Path, **kw: Any) -> Any:
    before = _tree(state_dir)
    try:
        call = compile_call(noop, j=kw.pop("j", "1x2"), **kw)
    except UsageError as e:
        assert "\n" not in str(e)
        call = None
    assert _tree(state_dir) == before
    return call


@EXAMPLES
@given(value=_objects())
def test_arbitrary_objects_as_j(state_dir: Path, value: Any) -> None:
    """Arbitrary objects as j (120 examples): a UsageError, or a job of exactly that topology."""
    call = _compile_or_refuse(state_dir, j=value)
    if call is not None:
        assert isinstance(value, str)
        topology = Topology.parse(value)
        assert (call.nodes, call.nproc_per_node) == (topology.nodes, topology.nproc_per_node)
        args = call.request.app.roles[0].args
        assert _after(args, "--nproc_per_node") == str(topology.nproc_per_node)
        assert _after(args, "--nnodes") == topology.nnodes_arg


@EXAMPLES
@given(value=_objects())
def test_arbitrary_objects_as_seed(state_dir: Path, value: Any) -> None:
    """Arbitrary objects as seed (120 examples): a UsageError, or the job seeds with exactly that int."""
    call = _compile_or_refuse(state_dir, seed=value)
    if call is not None:
        seed = _after(call.request.app.roles[0].args, "--seed")
        if value is None:
            assert seed is None
        else:
            assert type(value) is int and 0 <= value < 2**63
            assert seed == str(value)


@EXAMPLES
@given(value=_objects())
def test_arbitrary_objects_as_timeout(state_dir: Path, value: Any) -> None:
    """Arbitrary objects as timeout (120 examples): a UsageError, or the job's timeout is exactly that number."""
    call = _compile_or_refuse(state_dir, timeout=value)
    if call is not None:
        timeout = _after(call.request.app.roles[0].args, "--timeout")
        if value is None:
            assert timeout is None
        else:
            assert not isinstance(value, bool) and isinstance(value, (int, float))
            assert math.isfinite(value) and value > 0
            assert timeout == repr(float(value))


@EXAMPLES
@given(value=st.lists(st.lists(st.integers(min_value=-2, max_value=5), max_size=4), max_size=4))
def test_arbitrary_rank_lists_as_groups(state_dir: Path, value: list[list[int]]) -> None:
    """Arbitrary lists of rank lists as groups of a 1x4 job (120 examples): a UsageError, or a partition of the 4 ranks."""
    before = _tree(state_dir)
    try:
        call = compile_call(noop, j="1x4", groups=value)
    except UsageError:
        call = None
    assert _tree(state_dir) == before
    flat = sorted(r for g in value for r in g)
    partition = all(value) and flat == [0, 1, 2, 3]
    assert (call is not None) == (partition or value == [])


@EXAMPLES
@given(value=_objects())
def test_arbitrary_objects_as_job_timeouts(state_dir: Path, value: Any) -> None:
    """Arbitrary objects as Job.wait's timeout (120 examples): ArgumentError, or the wait goes to the scheduler."""
    from distspec.errors import AppNotFound

    job = Job(HANDLE, job_dir="/nonexistent", nodes=1, nproc_per_node=1, role="fn", runner=Runner())
    try:
        job.wait(value)
    except ArgumentError as e:
        assert "Job.wait: timeout=" in str(e)
        assert value is not None
    except AppNotFound:  # the argument passed: the scheduler was asked
        assert value is None or (
            not isinstance(value, bool)
            and isinstance(value, (int, float))
            and math.isfinite(value)
            and value >= 0
        )
