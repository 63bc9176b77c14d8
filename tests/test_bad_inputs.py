"""The bad-input corpus: every case exits 2 with exactly one line on stderr.

Each case runs the real CLI entry point (:func:`distspec.cli.main.main`) in this
process, with a private state directory, HOME and working directory, and checks:
exit code 2, exactly one stderr line (``distspec VERB: error: ...``), no traceback,
nothing on stdout, and that the state directory holds exactly what it held before
(nothing submitted, nothing half-written). Cases that would submit to Slurm are run
without ``--dryrun`` too, and the cluster queue is compared before and after the
module (where ``squeue`` exists). A handful of cases run as a real subprocess too
(``test_corpus_sample_as_a_process``), so that the console script's own exit path
is covered.

Where a case needs a file (a config that is not UTF-8, a pyproject.toml with a
table of the wrong type), :data:`FILES` writes it into the case's working
directory first. The classes are summarised in docs/reliability.md ("Bad input").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distspec.cli.main import main

SECRET = "hf_s3cr3tT0kenValue"
LONG = "a" * 300
HUGE = "a" * 5000

# name -> (path relative to the case's cwd, bytes)
FILES: dict[str, tuple[str, bytes]] = {
    "ini_not_utf8": (".distspecconfig", b"[distspec]\nsession = \xff\xfe\n"),
    "toml_not_utf8": ("pyproject.toml", b'[tool.distspec]\nscheduler = "x\xff"\n'),
    "toml_sched_not_table": ("pyproject.toml", b'[tool.distspec]\nschedulers = "slurm"\n'),
    "toml_one_sched_not_table": (
        "pyproject.toml",
        b"[tool.distspec]\n[tool.distspec.schedulers]\nslurm = 3\n",
    ),
    "toml_component_not_table": (
        "pyproject.toml",
        b'[tool.distspec]\n[tool.distspec.components]\n"dist.ddp" = 5\n',
    ),
    "toml_general_list": ("pyproject.toml", b'[tool.distspec]\nlog_level = ["INFO"]\n'),
    "toml_general_table": ("pyproject.toml", b"[tool.distspec.session]\nx = 1\n"),
    "toml_invalid": ("pyproject.toml", b"[tool.distspec\nscheduler=1\n"),
    "ini_bad_line": (".distspecconfig", b"[distspec]\nthis is not a pair\n"),
    "ini_unknown_key": (".distspecconfig", b"[distspec]\nschedular = slurm\n"),
    "ini_bad_option": (".distspecconfig", b"[scheduler:local_cwd]\ngrace_period = nan\n"),
    "ini_secret": (
        ".distspecconfig",
        f"[scheduler:kubernetes]\nsecret_env = HF_TOKEN={SECRET}\n".encode(),
    ),
    "ini_bad_component_default": (".distspecconfig", b"[component:dist.ddp]\nj = 0x1\n"),
    "import_multiline": (
        "multi.py",
        b'raise ImportError("first line\\nsecond line\\nthird line")\n',
    ),
    "float_component": (
        "floaty.py",
        b"from distspec.specs import AppDef, Role\n\n\n"
        b"def f(lr: float = 0.1) -> AppDef:\n"
        b'    """Doc.\n\n    Args:\n        lr: a rate\n    """\n'
        b'    return AppDef(name="f", roles=[Role(name="f", image="", entrypoint="true")])\n',
    ),
    "syntax_error": ("syn.py", b"def f(:\n    pass\n"),
    "existing_file": ("taken", b"not a directory\n"),
    "toml_nan_option": (
        "pyproject.toml",
        b"[tool.distspec.schedulers.local_cwd]\ngrace_period = nan\n",
    ),
    "toml_inf_option": (
        "pyproject.toml",
        b"[tool.distspec.schedulers.local_cwd]\ngrace_period = -inf\n",
    ),
    "toml_nan_component_default": (
        "pyproject.toml",
        b'[tool.distspec.components."floaty.py:f"]\nlr = nan\n',
    ),
    "toml_empty_component_name": (
        "pyproject.toml",
        b'[tool.distspec.components.""]\nj = "1x1"\n',
    ),
    "ini_empty_component_section": (".distspecconfig", b"[component:]\nj = 1x1\n"),
    "ini_empty_scheduler_section": (".distspecconfig", b"[scheduler: ]\npartition = x\n"),
    "ini_component_env_secret_bad_key": (
        ".distspecconfig",
        f"[component:dist.ddp]\nenv = 1BAD={SECRET}\n".encode(),
    ),
    "ini_component_env_secret_no_key": (
        ".distspecconfig",
        f"[component:dist.ddp]\nenv = {SECRET}\n".encode(),
    ),
}
#: Config paths that exist but are not regular files (made by _prepare): a FIFO, a
#: directory, a link to a device. Each is one line, never a hang.
SPECIAL = {
    "fifo:.distspecconfig": ".distspecconfig",
    "dir:pyproject.toml": "pyproject.toml",
    "link:.distspecconfig=/dev/zero": ".distspecconfig",
    "dir:.distspecconfig": ".distspecconfig",
}

DDP = ["dist.ddp", "-j", "1x1", "--script", "train.py"]
K8S = ["dist.ddp", "-j", "1x1", "--image", "img:1", "--script", "train.py"]


def _args(sched: str) -> list[str]:
    return K8S if sched == "kubernetes" else DDP


def _k8s(cfg: str, *extra: str) -> list[str]:
    return ["run", "--dryrun", "-s", "kubernetes", "-cfg", cfg, *K8S, *extra]


def _cases() -> Iterator[tuple[str, list[str], str | None, str]]:
    """(id, argv, file key or None, text the one line must contain)."""
    # -- empty values, every verb and option that takes a string ---------------
    for sched in ("local_cwd", "slurm", "pbs", "kubernetes"):
        yield (
            f"empty-o-{sched}",
            ["run", "--dryrun", "-o", "", "-s", sched, *_args(sched)],
            None,
            "empty",
        )
        yield (
            f"empty-cfg-{sched}",
            ["run", "--dryrun", "-s", sched, "-cfg", "", *DDP],
            None,
            "empty",
        )
        # --image "" is legitimate (its default): local and HPC jobs need no image.
        for flag in (
            "-h",
            "--name",
            "--script",
            "-m",
            *(["--image"] if sched == "kubernetes" else []),
        ):
            argv = ["run", "--dryrun", "-s", sched, "dist.ddp", "-j", "1x1", flag, ""]
            if flag != "--script":
                argv += ["--script", "t.py"] if flag != "-m" else []
            yield f"empty{flag}-{sched}", argv, None, "image" if flag == "--image" else "empty"
    yield "empty-s", ["run", "--dryrun", "-s", "", *DDP], None, "empty"
    yield "empty-s-submit", ["run", "-s", "", *DDP], None, "empty"
    yield "empty-component", ["run", "--dryrun", ""], None, "empty"
    for verb in ("status", "describe", "log", "cancel"):
        yield f"empty-handle-{verb}", [verb, ""], None, "empty"
    yield "list-empty-s", ["list", "-s", ""], None, "empty"
    yield "launch-empty-program", ["launch", "--", ""], None, "empty"
    yield "launch-empty-program-dryrun", ["launch", "--dryrun", "--", " "], None, "empty"
    yield "prune-empty-s", ["prune", "-s", ""], None, ""
    yield "configure-empty-s", ["configure", "-s", ""], None, "empty"
    yield "configure-empty-o", ["configure", "-s", "slurm", "-o", ""], None, "empty"
    yield "log-empty-regex", ["log", "local_cwd://s/x", "--regex", ""], None, "empty"
    yield "log-empty-since", ["log", "local_cwd://s/x", "--since", ""], None, "empty"
    for comp, flag in (
        ("utils.python", "-c"),
        ("utils.python", "-m"),
        ("utils.python", "--script"),
        ("utils.copy", "--src"),
        ("utils.copy", "--dst"),
        ("utils.touch", "--file"),
        ("utils.echo", "--msg"),
    ):
        other = {"--src": ["--dst", "/x"], "--dst": ["--src", "/x"]}.get(flag, [])
        yield f"empty-{comp}{flag}", ["run", "--dryrun", comp, flag, "", *other], None, "empty"
    # -- absurd numbers ---------------------------------------------------------
    yield "log-tail-negative", ["log", "--tail", "-5", "local_cwd://s/x"], None, "--tail"
    for value in ("nan", "inf", "-inf", "-3", "1e999", "soon"):
        yield (
            f"grace-{value}",
            ["run", "--dryrun", "-cfg", f"grace_period={value}", *DDP],
            None,
            "grace_period",
        )
        yield (
            f"grace-{value}-submit",
            ["run", "-cfg", f"grace_period={value}", *DDP],
            None,
            "grace_period",
        )
    # -- the fault-tolerance options (docs/fault-tolerance.md) -------------------
    for sched in ("local_cwd", "slurm", "pbs", "kubernetes"):
        for value in ("0", "-5", "5s", "nan", "inf", "1e9", "40d", "soon", "10 m"):
            yield (
                f"watchdog-{value or 'empty'}-{sched}",
                ["run", "--dryrun", "-s", sched, "-cfg", f"watchdog={value}", *_args(sched)],
                None,
                "watchdog=",
            )
        yield (
            f"checkpoint-dir-relative-{sched}",
            ["run", "--dryrun", "-s", sched, "-cfg", "checkpoint_dir=ckpt", *_args(sched)],
            None,
            "checkpoint_dir=",
        )
    for sched in ("local_cwd", "slurm", "pbs"):
        for value in ("/proc/distspec-ckpt", "/etc/hostname/ckpt"):
            yield (
                f"checkpoint-dir-{value}-{sched}",
                ["run", "--dryrun", "-s", sched, "-cfg", f"checkpoint_dir={value}", *DDP],
                None,
                "checkpoint_dir=",
            )
    # -- spare nodes (--spares / -cfg spares): Slurm only ----------------------------
    for sched in ("local_cwd", "pbs", "kubernetes"):
        for dry in (["--dryrun"], []):
            yield (
                f"spares-{sched}{'' if dry else '-submit'}",
                ["run", *dry, "-s", sched, "--spares", "1", *_args(sched)],
                None,
                f"the {sched} backend cannot keep spare nodes",
            )
    for value in ("-1", "257", "99999999999999999999"):
        yield (
            f"spares-{value}",
            ["run", "--dryrun", "-s", "slurm", "--spares", value, *DDP],
            None,
            "spares=",
        )
    for value in ("two", "1.5", "-3"):
        yield (
            f"spares-cfg-{value}",
            ["run", "--dryrun", "-s", "slurm", "-cfg", f"spares={value}", *DDP],
            None,
            "spares",
        )
    yield (
        "spares-not-a-number",
        ["run", "--dryrun", "-s", "slurm", "--spares", "x", *DDP],
        None,
        "--spares",
    )
    for name, cfg, text in (
        ("direct", "workers=direct", "workers=direct"),
        ("oci", "container=oci", "container=oci"),
        ("env-to-local", "env_to_local=/tmp", "env_to_local"),
        ("srun-nodefile", "srun_args=--nodefile=/tmp/n", "--nodefile"),
    ):
        yield (
            f"spares-{name}",
            ["run", "--dryrun", "-s", "slurm", "--spares", "1", "-cfg", cfg, "dist.ddp", "-j",
             "2x1", "--image", "/tmp", "--script", "train.py"],
            None,
            text,
        )  # fmt: skip
    yield (
        "spares-elastic",
        ["run", "--dryrun", "-s", "slurm", "--spares", "1", "dist.ddp", "-j", "1:2x1", "--script", "t.py"],
        None,
        "fixed node count",
    )  # fmt: skip
    yield (
        "watchdog-in-a-container",
        ["run", "--dryrun", "-s", "slurm", "-cfg", "container=podman,watchdog=1m", *K8S],
        None,
        "containers",
    )
    for value in ("nan", "inf", "-inf", "1e999"):
        yield (
            f"int-arg-{value}",
            ["run", "--dryrun", "utils.echo", "--num_replicas", value],
            None,
            "num_replicas",
        )
        yield (
            f"float-arg-{value}",
            ["run", "--dryrun", "floaty.py:f", f"--lr={value}"],
            "float_component",
            "finite",
        )
    for flag in ("--cpu", "--gpu", "--memMB"):
        for value in ("-1", "2147483648", "99999999999999999999999"):
            for sched in ("local_cwd", "slurm", "kubernetes"):
                yield (
                    f"resource{flag}-{value}-{sched}",
                    ["run", "--dryrun", "-s", sched, *_args(sched), f"{flag}={value}"],
                    None,
                    "resource",
                )
    for value in ("-1", "2147483648", "99999999999999999999999"):
        yield (
            f"max-retries-{value}",
            ["run", "--dryrun", *DDP, f"--max_retries={value}"],
            None,
            "max_retries",
        )
    for value in ("0", "-1", "65537", "99999999999999999999"):
        for sched in ("local_cwd", "slurm", "kubernetes"):
            extra = ["--image", "img:1"] if sched == "kubernetes" else []
            yield (
                f"replicas-{value}-{sched}",
                ["run", "--dryrun", "-s", sched, "utils.echo", "--num_replicas", value, *extra],
                None,
                "num_replicas",
            )
    for sched in ("local_cwd", "slurm", "pbs", "kubernetes"):
        for j in ("0x1", "1x0", "-1x1", "2x", "x2", "1:0x1", "99999999999999999999999x1"):
            yield (
                f"j-{j}-{sched}",
                ["run", "--dryrun", "-s", sched, "dist.ddp", "-j", j, "--script", "t.py"],
                None,
                "-j",
            )
    # -- names and ids ------------------------------------------------------------
    for sched in ("local_cwd", "slurm", "pbs", "kubernetes"):
        # (blanks and other characters in --name are replaced, by design: dist.ddp
        # derives a name from it; a name that cannot be made valid is refused.)
        for name in (LONG, "b" * 129):
            yield (
                f"name-{name[:8]!r}-{sched}",
                ["run", "--dryrun", "-s", sched, *_args(sched), "--name", name],
                None,
                "name",
            )
    for verb in ("status", "describe", "log", "cancel"):
        for sched in ("local_cwd", "slurm", "pbs", "kubernetes"):
            yield f"huge-id-{verb}-{sched}", [verb, f"{sched}://s/{HUGE}"], None, "5000 characters"
        yield f"bad-handle-{verb}", [verb, "local_cwd:/x"], None, "SCHEDULER://"
        yield (
            f"no-such-app-{verb}",
            [verb, "local_cwd://distspec/nope-00000000"],
            None,
            "no such app",
        )
    for which in ("role/²", "role/x", "role/-1", "role/\u0661"):
        yield f"log-which-{which}", ["log", "local_cwd://s/x", which], None, "REPLICA"
    yield (
        "log-replica-contradicts",
        ["log", "local_cwd://s/x", "r/1", "--replica", "2"],
        None,
        "contradicts",
    )
    for flag, value in (
        ("--rank", "-1"),
        ("--replica", "-1"),
        ("--tail", "99999999999999999999"),
        ("--rank", "99999999999999999999"),
        ("--replica", "2147483648"),
    ):
        yield f"log{flag}={value}", ["log", "local_cwd://s/x", f"{flag}={value}"], None, flag
    yield (
        "log-which-huge-replica",
        ["log", "local_cwd://s/x", "r/99999999999999999999"],
        None,
        "REPLICA",
    )
    for value in ("-1", "-99999999999999999999", "99999999999999999999"):
        yield f"resources-gpus={value}", ["resources", f"--gpus={value}"], None, "--gpus"
    yield "log-bad-regex", ["log", "local_cwd://s/x", "--regex", "("], None, "--regex"
    yield "log-bad-since", ["log", "local_cwd://s/x", "--since", "yesterday"], None, "--since"
    # -- config sources -----------------------------------------------------------
    for key in (
        "ini_not_utf8",
        "toml_not_utf8",
        "toml_sched_not_table",
        "toml_one_sched_not_table",
        "toml_component_not_table",
        "toml_general_list",
        "toml_general_table",
        "toml_invalid",
        "ini_bad_line",
        "ini_unknown_key",
        "ini_bad_option",
        "toml_nan_option",
        "toml_inf_option",
        "toml_empty_component_name",
        "ini_empty_component_section",
        "ini_empty_scheduler_section",
    ):
        yield f"config-{key}-run", ["run", "--dryrun", *DDP], key, FILES[key][0]
        if key != "ini_bad_option":  # `config` shows values; `run` validates them
            yield f"config-{key}-config", ["config"], key, FILES[key][0]
    yield (
        "config-toml_nan_component_default",
        ["run", "--dryrun", "floaty.py:f"],
        "toml_nan_component_default",
        "finite",
    )
    # -- config files that are not regular files ------------------------------------
    for key, name in SPECIAL.items():
        yield f"config-{key}-run", ["run", "--dryrun", *DDP], key, "not a regular file"
        yield f"config-{key}-config", ["config"], key, name
    # -- misspelt DISTSPEC_* variables ----------------------------------------------
    for env, text in (
        ("DISTSPEC_SCHEDULAR=slurm", "did you mean DISTSPEC_SCHEDULER?"),
        ("DISTSPEC_SESION=s", "did you mean DISTSPEC_SESSION?"),
        ("DISTSPEC_STATEDIR=/x", "did you mean DISTSPEC_STATE_DIR?"),
        ("DISTSPEC_LOGLEVEL=DEBUG", "did you mean DISTSPEC_LOG_LEVEL?"),
        (f"DISTSPEC_TORCHX_CONFIG={SECRET}", "did you mean DISTSPEC_TORCHXCONFIG?"),
    ):
        yield f"env-misspelt-{env.partition('=')[0]}", ["run", "--dryrun", *DDP], f"env:{env}", text
        yield f"env-misspelt-{env.partition('=')[0]}-config", ["config"], f"env:{env}", text
    for env, text in (
        ("DISTSPEC_LOCAL_CWD_GRACE_PERIOD=nan", "grace_period"),
        ("DISTSPEC_LOCAL_CWD_GRACE_PERIOD=-1", "grace_period"),
        ("DISTSPEC_LOCAL_CWD_NOPE=1", "NOPE"),
        ("DISTSPEC_SCHEDULER=nope", "nope"),
        ("DISTSPEC_LOG_LEVEL=LOUD", "LOUD"),
        ("DISTSPEC_KUBERNETES_NAMESPACE=Bad_NS", "namespace"),
        (f"DISTSPEC_KUBERNETES_SECRET_ENV={SECRET}", "secret_env"),
        (f"DISTSPEC_KUBERNETES_SECRET_ENV=HF_TOKEN={SECRET}", "secret_env"),
    ):
        sched = "kubernetes" if "KUBERNETES" in env else "local_cwd"
        yield (
            f"config-env-{env[:36]}",
            ["run", "--dryrun", "-s", sched, *_args(sched)]
            if "SCHEDULER" not in env
            else ["run", "--dryrun", *DDP],
            f"env:{env}",
            text,
        )
    yield (
        "config-ini-secret",
        ["run", "--dryrun", "-s", "kubernetes", *K8S],
        "ini_secret",
        "secret_env",
    )
    yield (
        "config-component-default",
        ["run", "--dryrun", "dist.ddp", "--script", "t.py"],
        "ini_bad_component_default",
        "-j",
    )
    # -- output paths -------------------------------------------------------------
    for sched in ("local_cwd", "slurm", "pbs", "kubernetes"):
        args = ["-s", sched, *_args(sched)]
        yield (
            f"o-existing-file-{sched}",
            ["run", "--dryrun", "-o", "taken", *args],
            "existing_file",
            "-o",
        )
        yield f"o-proc-{sched}", ["run", "--dryrun", "-o", "/proc/distspec-x", *args], None, "-o"
        yield f"o-without-dryrun-{sched}", ["run", "-o", "out", *args], None, "--dryrun"
    yield (
        "configure-missing-dir",
        ["configure", "-s", "slurm", "-o", "no/such/dir/cfg"],
        None,
        "cannot write",
    )
    yield (
        "configure-proc",
        ["configure", "-s", "slurm", "-o", "/proc/distspec-cfg"],
        None,
        "cannot write",
    )
    yield (
        "configure-not-utf8",
        ["configure", "-s", "slurm", "-o", ".distspecconfig"],
        "ini_not_utf8",
        "cannot read",
    )
    # -- components -----------------------------------------------------------------
    yield (
        "import-multiline",
        ["run", "--dryrun", "multi.py:f"],
        "import_multiline",
        "-v shows 2 more lines",
    )
    yield "import-syntax", ["run", "--dryrun", "syn.py:f"], "syntax_error", "SyntaxError"
    yield "component-missing-file", ["run", "--dryrun", "nofile.py:f"], None, "nofile.py"
    yield "component-unknown-flag", ["run", "--dryrun", "dist.ddp", "--bogus", "1"], None, "--bogus"
    # -- mounts -------------------------------------------------------------------
    for mount in (
        "type=volume,src=data",
        "type=volume,src=data,dst=",
        "type=bind,src=/d,dst=rel",
        "type=weird,src=/d",
        "dst=/d",
        "type=bind,src=/d,colour=red",
        # flags that are not exactly a known value: refused, never read-write
        "type=bind,src=/d,dst=/d,readonly=maybe",
        "type=bind,src=/d,dst=/d,readonly=",
        "type=volume,src=pvc,dst=/d,readonly=ro",
        "type=bind,src=/d,dst=/d,readonly,readonly=false",
        "type=bind,src=/d,dst=/d,perm=r",
        "type=device,src=/dev/fuse,readonly",
        "type=bind,src=/d,dst=/d,dst=/e",
        # paths the API server or the kubelet refuses
        "type=bind,src=/d,dst=/a/../b",
        "type=bind,src=rel,dst=/d",
        "type=bind,src=/a/../etc,dst=/d",
        "type=bind,src=/a,dst=/d,type=volume,src=pvc,dst=/d",
        "type=bind,src=/a,dst=/d,type=bind,src=/b,dst=/d/",
        "type=bind,src=/a,dst=/dev/shm",
        "type=volume,src=emptyDir:lots,dst=/scratch",
        "type=volume,src=emptyDir:-5Gi,dst=/scratch",
    ):
        yield (
            f"mount-{mount}",
            ["run", "--dryrun", "-s", "kubernetes", *K8S, "--mounts", mount],
            None,
            "mount",
        )
    for perm in ("rwx", ""):
        yield (
            f"mount-device-perm={perm}",
            ["run", "--dryrun", *DDP, "--mounts", f"type=device,src=/dev/fuse,perm={perm}"],
            None,
            "permissions",
        )
    # -- Kubernetes names and values, checked at compile time -----------------------
    for cfg, text in (
        ("namespace=Bad_NS", "namespace"),
        ("namespace=" + "n" * 64, "namespace"),
        ("namespace=-lead", "namespace"),
        ("labels=Foo Bar=x", "labels"),
        ("labels=a=b c", "labels"),
        ("labels=a=" + "v" * 64, "labels"),
        ("labels=UPPER.example/x=y", "labels"),
        ("labels=/x=y", "labels"),
        ("node_selector=a/b/c=x", "node_selector"),
        ("node_selector=k=-v", "node_selector"),
        ("annotations=bad key=v", "annotations"),
        ("service_account=SA", "service_account"),
        ("service_account=a_b", "service_account"),
        ("priority_class=High", "priority_class"),
        ("image_pull_secrets=ok;Not_OK", "image_pull_secrets"),
        ("image_pull_policy=sometimes", "image_pull_policy"),
        ("image_pull_policy=always", "image_pull_policy"),
        ("gpu_resource=gpu", "gpu_resource"),
        ("gpu_resource=kubernetes.io/gpu", "gpu_resource"),
        ("gpu_resource=nvidia.com/", "gpu_resource"),
        ("gpu_resource=Nvidia.com/gpu", "gpu_resource"),
        ("tolerations=bad key:NoSchedule", "toleration"),
        ("tolerations=k:Sometimes", "toleration"),
        ("shm_size=lots", "shm_size"),
        ("shm_size=-1Gi", "shm_size"),
        ("rdzv_port=0", "rdzv_port"),
        ("flavor=volcano,queue=Q_1", "queue"),
        ("flavor=jobset,queue=a b", "queue"),
        ("queue=-team", "queue"),
        ("flavor=nope", "flavor"),
    ):
        yield f"k8s-{cfg}", _k8s(cfg), None, text
    yield (
        "k8s-image-space",
        [
            "run",
            "--dryrun",
            "-s",
            "kubernetes",
            "dist.ddp",
            "-j",
            "1x1",
            "--image",
            "img :1",
            "--script",
            "t.py",
        ],
        None,
        "image",
    )
    yield (
        "k8s-image-tab",
        [
            "run",
            "--dryrun",
            "-s",
            "kubernetes",
            "dist.ddp",
            "-j",
            "1x1",
            "--image",
            "img\t1",
            "--script",
            "t.py",
        ],
        None,
        "image",
    )
    yield "k8s-no-image", ["run", "--dryrun", "-s", "kubernetes", *DDP], None, "image"
    yield (
        "k8s-pvc-name",
        ["run", "--dryrun", "-s", "kubernetes", *K8S, "--mounts", "type=volume,src=Data_1,dst=/d"],
        None,
        "PersistentVolumeClaim",
    )
    # -- env_to_local (Slurm, PBS): refused at compile, before anything is packed ---------
    for sched in ("slurm", "pbs"):
        for cfg, text in (
            ("env_to_local=tmp", "absolute node-local directory"),
            ("env_to_local=/tmp/a b", "absolute node-local directory"),
            ("env_to_local=/tmp/../etc", "absolute node-local directory"),
            ("env_to_local=/tmp,env_prefix=venv", "expected an absolute path"),
            ("env_to_local=/tmp,env_prefix=/usr", "not a virtual environment"),
            ("env_prefix=/opt/venv", "env_prefix is set without env_to_local"),
        ):
            yield (
                f"env-to-local-{sched}-{cfg}",
                ["run", "--dryrun", "-s", sched, "-cfg", cfg, *DDP],
                None,
                text,
            )
    # -- containers (Slurm, PBS): refused at compile, nothing submitted ------------------
    for sched in ("slurm", "pbs"):
        for cfg, image, extra, text in (
            ("container=docker", "ubuntu", [], "expected one of"),
            ("container=podman", "/images/t.sif", [], "cannot run"),
            ("container=podman", "/opt/project", [], "cannot run"),
            ("container=apptainer", "/images/t.sqsh", [], "cannot run"),
            ("container=podman", "ubuntu", ["--mounts", "type=bind,src=data,dst=/d"], "absolute"),
            ("container=none", "ubuntu", [], "-cfg container="),
            ("container=none", "", ["--mounts", "type=bind,src=/d,dst=/d"], "container runtime"),
        ):
            yield (
                f"container-{sched}-{cfg}-{image}-{len(extra)}",
                [
                    *("run", "--dryrun", "-s", sched, "-cfg", cfg, *DDP),
                    *(["--image", image] if image else []),
                    *extra,
                ],
                None,
                text,
            )
    for runtime in ("pyxis", "oci"):
        yield (
            f"container-pbs-{runtime}",
            ["run", "--dryrun", "-s", "pbs", "-cfg", f"container={runtime}", *DDP, "--image", "/b"],
            None,
            "PBS does not have",
        )
    # -- secrets: never echoed, never doubled -------------------------------------------
    for cfg in (
        f"secret_env=HF_TOKEN={SECRET}",
        f"secret_env=HF_TOKEN=Bad_{SECRET}:k",
        f"secret_env=HF_TOKEN=s:{SECRET}/x",
        f"secret_env={SECRET}",
        f"secret_env=1BAD={SECRET}",
    ):
        yield f"secret-{cfg[:24]}", _k8s(cfg), None, "secret_env"
    for env in (f"HF_TOKEN={SECRET}", f"HF_TOKEN={SECRET},B=1"):
        for comp in (["utils.echo"], ["utils.echo", "--msg", "hi"]):
            yield (
                f"secret-env-on-{'-'.join(comp)}-{env[:12]}",
                ["run", "--dryrun", *comp, "--env", env],
                None,
                "--env",
            )
    yield (
        "secret-env=-on-echo",
        ["run", "--dryrun", "utils.echo", f"--env={SECRET}"],
        None,
        "--env",
    )
    for argv in (
        ["status", "local_cwd://s/x", "--env", f"HF_TOKEN={SECRET}"],
        ["list", f"--token={SECRET}"],
        ["list", "--token", SECRET],
        ["run", "--env", f"HF_TOKEN={SECRET}", "--dryrun", *DDP],
        [f"--env=HF_TOKEN={SECRET}"],
    ):
        yield f"secret-verb-{'-'.join(argv)[:20]}", argv, None, "unrecognized"
    for env in (f"={SECRET}", SECRET, f"1BAD={SECRET}", f"A-B={SECRET}"):
        yield f"secret-bad-env-{env[:8]}", ["run", "--dryrun", *DDP, "--env", env], None, "env"
    for key in ("ini_component_env_secret_bad_key", "ini_component_env_secret_no_key"):
        yield f"secret-{key}", ["run", "--dryrun", *DDP[:-2], "--script", "t.py"], key, "env"
    # -- control characters and bidi overrides: escaped, never printed raw ---------------
    for bad in ("\x1b[31mred", "a\u202eexe.txt", "x\ry", "\u2066iso\u2069", "\u200fm"):
        yield f"ctrl-verb-{bad!r}", ["run", "--dryrun", f"--{bad}", *DDP], None, "error"
        yield f"ctrl-component-{bad!r}", ["run", "--dryrun", f"{bad}.py:f"], None, "error"
        yield f"ctrl-flag-{bad!r}", ["run", "--dryrun", *DDP, f"--{bad}"], None, "error"
        yield f"ctrl-s-{bad!r}", ["run", "--dryrun", "-s", bad, *DDP], None, "scheduler"
        yield f"ctrl-cfg-{bad!r}", ["run", "--dryrun", "-cfg", f"{bad}=1", *DDP], None, "error"
        yield f"ctrl-handle-{bad!r}", ["status", f"local_cwd://s/{bad}"], None, "error"
        yield f"ctrl-mount-{bad!r}", ["run", "--dryrun", *K8S, "--mounts", bad], None, "mount"
    yield (
        "secret-and-env",
        _k8s("secret_env=HF_TOKEN=s:k", "--env", "HF_TOKEN=x"),
        None,
        "both --env",
    )


def _with_submits() -> Iterator[tuple[str, list[str], str | None, str]]:
    """Every case, and every Slurm/PBS dry-run case again without --dryrun: refused
    before anything reaches sbatch or qsub (the queue check in slurm_queue)."""
    for name, argv, files, text in _cases():
        yield name, argv, files, text
        if (
            argv[:2] == ["run", "--dryrun"]
            and ("slurm" in argv or "pbs" in argv)
            and "-o" not in argv
        ):
            yield f"{name}-submit", ["run", *argv[2:]], files, text


CASES = list(_with_submits())


#: What may never reach a terminal raw: control characters (but the line's own end)
#: and the bidi overrides and marks.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _ids() -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for case in CASES:
        n = seen.get(case[0], 0)
        seen[case[0]] = n + 1
        out.append(case[0] if not n else f"{case[0]}#{n}")
    return out


def _listing(root: Path) -> list[tuple[str, int]]:
    if not root.exists():
        return []
    return sorted(
        (str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")
    )


def _queue() -> str | None:
    if shutil.which("squeue") is None:
        return None
    proc = subprocess.run(
        ["squeue", "-h", "-u", str(os.getuid()), "-o", "%i %j"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else None


@pytest.fixture(scope="module")
def slurm_queue() -> Iterator[None]:
    """No case may add a job to the Slurm queue (jobs named after a case's app)."""
    before = _queue()
    yield
    after = _queue()
    if before is not None and after is not None:
        added = set(after.splitlines()) - set(before.splitlines())
        assert not {line for line in added if "train" in line or "echo" in line}, added


def _prepare(tmp_path: Path, key: str | None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory with the case's file; a key ``env:NAME=VALUE`` sets
    an environment variable instead (the environment is a config source too)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    if key is not None and key.startswith("env:"):
        name, _, value = key[4:].partition("=")
        monkeypatch.setenv(name, value)
    elif key in SPECIAL:
        kind, _, rest = key.partition(":")
        name, _, target = rest.partition("=")
        if kind == "fifo":
            os.mkfifo(cwd / name)
        elif kind == "dir":
            (cwd / name).mkdir()
        else:
            (cwd / name).symlink_to(target)
    elif key is not None:
        name, data = FILES[key]
        (cwd / name).write_bytes(data)
    monkeypatch.chdir(cwd)
    return cwd


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 400, len(CASES)


@pytest.mark.parametrize(("name", "argv", "files", "text"), CASES, ids=_ids())
def test_bad_input(
    name: str,
    argv: list[str],
    files: str | None,
    text: str,
    tmp_path: Path,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    slurm_queue: None,
) -> None:
    monkeypatch.setenv("DISTSPEC_TORCHXCONFIG", "off")
    cwd = _prepare(tmp_path, files, monkeypatch)
    state_dir.mkdir(parents=True, exist_ok=True)
    before, files_before = _listing(state_dir), _listing(cwd)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code if isinstance(e.code, int) else 2
    out, err = capfd.readouterr()
    assert code == 2, (argv, out, err)
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("distspec"), err
    assert "error" in lines[0], err
    assert "Traceback" not in err
    assert text in lines[0], (text, err)
    assert SECRET not in err and SECRET not in out
    assert not _UNSAFE.search(err.rstrip("\n")), err  # control characters come escaped
    assert out == ""
    assert _listing(state_dir) == before, "something was written to the state dir"
    assert _listing(cwd) == files_before, "something was written to the working directory"


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "-s", "", *DDP],
        ["status", f"local_cwd://s/{HUGE}"],
        ["log", "local_cwd://s/x", "role/²"],
        ["run", "--dryrun", "-s", "kubernetes", "-cfg", f"secret_env=HF_TOKEN={SECRET}", *K8S],
    ],
)
def test_corpus_sample_as_a_process(argv: list[str], tmp_path: Path, state_dir: Path) -> None:
    """The console script itself: exit 2, one line, nothing in the state dir."""
    proc = subprocess.run(
        [sys.executable, "-m", "distspec", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and SECRET not in proc.stderr
    assert not state_dir.exists() or not any(state_dir.iterdir())


def test_dry_run_prints_secret_references_never_values(
    state_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Kubernetes is the one backend with secret_env: the manifest names the Secret."""
    code = main(_k8s("secret_env=HF_TOKEN=hf-secret:token"))
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "secretKeyRef" in out and "hf-secret" in out
    block = out[out.index("name: HF_TOKEN") :][:200]
    assert "value:" not in block.split("valueFrom")[0], block


def test_multiline_error_shows_the_rest_with_verbose(
    tmp_path: Path,
    state_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    _prepare(tmp_path, "import_multiline", monkeypatch)
    assert main(["run", "-v", "--dryrun", "multi.py:f"]) == 2
    err = capfd.readouterr().err
    assert "second line" in err and "third line" in err


@pytest.mark.parametrize(
    "cfg",
    [
        "namespace=Bad_NS",
        "namespace=" + "n" * 64,
        "labels=Foo Bar=x",
        "labels=a=b c",
        "labels=a=" + "v" * 64,
        "labels=UPPER.example/x=y",
        "annotations=bad key=v",
        # (k8s_validate does not check resource names, so gpu_resource, service
        # accounts, pull policies and PVC names are not cross-checked here.)
    ],
)
def test_refused_kubernetes_values_are_ones_the_api_server_rejects(
    cfg: str, state_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Not over-strict: with distspec's own check switched off, the manifest it would
    print breaks a rule tests/k8s_validate.py knows the API server enforces."""
    import yaml

    from distspec.schedulers.kubernetes import checks
    from tests.k8s_validate import check_semantics

    argv = _k8s(cfg)
    assert main(argv) == 2
    capfd.readouterr()
    monkeypatch.setattr(checks, "_check_api_names", lambda app, opts: None)
    assert main(argv) == 0
    docs = [d for d in yaml.safe_load_all(capfd.readouterr().out) if d]
    assert check_semantics(docs) != []
