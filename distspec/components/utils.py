"""Small utility components: echo, sh, python, touch, copy.

Run as a program, this module is also the in-job half of ``utils.copy``::

    python -m distspec.components.utils copy SRC_URL DST_URL
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from distspec.components.dist import group_mounts, resource_for, role_name_for
from distspec.errors import ComponentError
from distspec.frozen import frozendict
from distspec.specs.app import SCRIPT_METADATA, AppDef, Role
from distspec.specs.mounts import parse_mounts

__all__ = ["copy", "echo", "python", "sh", "touch"]


def echo(msg: str = "hello", image: str = "", num_replicas: int = 1) -> AppDef:
    """Print a message; the smallest job there is, for checking a scheduler works.

    Example: ``distspec run utils.echo --msg 'hi from ${replica_id}' --num_replicas 2``

    Args:
        msg: the message; macros such as ``${replica_id}`` are filled in per replica.
        image: the container image; empty runs in the scheduler's current environment.
        num_replicas: how many copies to run.
    """
    role = Role(name="echo", image=image, entrypoint="echo", args=(msg,), num_replicas=num_replicas)
    return AppDef(name="echo", roles=(role,))


def sh(
    *args: str,
    image: str = "",
    num_replicas: int = 1,
    env: dict[str, str] | None = None,
    h: str | None = None,
    mounts: list[str] | None = None,
) -> AppDef:
    r"""Run a shell command with ``sh -c``; the words are joined with spaces.

    Example: ``distspec run utils.sh -- 'nvidia-smi && hostname'``

    Args:
        args: the command and its arguments, joined with spaces into the ``sh -c`` script.
        image: the container image; empty runs in the scheduler's current environment.
        num_replicas: how many copies to run.
        env: environment variables, ``K=V,K2=V2``; ``\,`` keeps a comma.
        h: a named host type (``cpu.small``, ``gpu.large``) for each replica.
        mounts: mounts, each ``type=bind|volume|device,src=SRC,dst=DST[,readonly]``.
    """
    if not args:
        raise ComponentError("utils.sh needs a command, e.g. `utils.sh -- echo hello`")
    role = Role(
        name="sh",
        image=image,
        entrypoint="sh",
        args=("-c", " ".join(args)),
        env=frozendict(env),
        num_replicas=num_replicas,
        resource=resource_for(h=h, cpu=None, gpu=None, mem_mb=None),
        mounts=parse_mounts(group_mounts(mounts or [])),
    )
    return AppDef(name="sh", roles=(role,))


def python(
    *args: str,
    m: str | None = None,
    c: str | None = None,
    script: str | None = None,
    image: str = "",
    name: str | None = None,
    num_replicas: int = 1,
    h: str | None = None,
    cpu: int | None = None,
    gpu: int | None = None,
    mem_mb: int | None = None,
    env: dict[str, str] | None = None,
    mounts: list[str] | None = None,
) -> AppDef:
    r"""Run Python: a module (-m), a command string (-c) or a script (--script).

    Example: ``distspec run utils.python -c 'import torch; print(torch.__version__)'``

    Args:
        args: arguments for the module, command or script.
        m: a module to run, as ``python -m``.
        c: a program passed as a string, as ``python -c``.
        script: a script file to run (a path inside the image).
        image: the container image; empty runs in the scheduler's current environment.
        name: the job name; derived from the module or script when not given.
        num_replicas: how many copies to run.
        h: a named host type (``cpu.small``, ``gpu.large``) for each replica.
        cpu: CPUs per replica; without it and -h, the cluster's default.
        gpu: GPUs per replica (0 without -h).
        mem_mb: memory per replica in MiB; without it and -h, the cluster's default.
        env: environment variables, ``K=V,K2=V2``; ``\,`` keeps a comma.
        mounts: mounts, each ``type=bind|volume|device,src=SRC,dst=DST[,readonly]``.
    """
    given = [flag for flag, v in (("-m", m), ("-c", c), ("--script", script)) if v is not None]
    if len(given) != 1:
        have = " and ".join(given) if given else "none"
        raise ComponentError(f"utils.python needs exactly one of -m, -c and --script; got {have}")
    if m is not None:
        head: tuple[str, ...] = ("-m", m)
        derived = role_name_for(script=None, module=m)
    elif c is not None:
        head = ("-c", c)
        derived = "python"
    else:
        assert script is not None
        head = (script,)
        derived = role_name_for(script=script, module=None)
    role = Role(
        name=derived,
        image=image,
        entrypoint="python",
        args=(*head, *args),
        env=frozendict(env),
        num_replicas=num_replicas,
        resource=resource_for(h=h, cpu=cpu, gpu=gpu, mem_mb=mem_mb),
        mounts=parse_mounts(group_mounts(mounts or [])),
        metadata=frozendict({SCRIPT_METADATA: script} if script else {}),
    )
    return AppDef(name=name or derived, roles=(role,))


def touch(file: str, image: str = "") -> AppDef:
    """Create an empty file (or update its time), for checking that a path is writable.

    Args:
        file: the path of the file, as seen by the job.
        image: the container image; empty runs in the scheduler's current environment.
    """
    role = Role(name="touch", image=image, entrypoint="touch", args=(file,))
    return AppDef(name="touch", roles=(role,))


def copy(src: str, dst: str, image: str = "", env: dict[str, str] | None = None) -> AppDef:
    """Copy one file between any two fsspec URLs (local paths, s3://, gs://, memory://, ...).

    The job runs ``python -m distspec.components.utils copy SRC DST``, so the image
    needs distspec and the fsspec driver for each URL (s3fs, gcsfs, ...). A DST that
    ends with ``/`` is a directory: the file keeps its name. Missing parent
    directories are created.

    Args:
        src: the URL or path of the file to read.
        dst: the URL or path to write.
        image: the container image; empty runs in the scheduler's current environment.
        env: environment variables (credentials, endpoints), ``K=V,K2=V2``.
    """
    role = Role(
        name="copy",
        image=image,
        entrypoint="python",
        args=("-m", "distspec.components.utils", "copy", src, dst),
        env=frozendict(env),
    )
    return AppDef(name="copy", roles=(role,))


def copy_file(src: str, dst: str, *, chunk_size: int = 1 << 20) -> str:
    """Copy ``src`` to ``dst`` (fsspec URLs); returns the URL written. Imports fsspec."""
    import shutil

    import fsspec

    if dst.endswith("/"):
        dst += src.rstrip("/").rsplit("/", 1)[-1]
    with fsspec.open(src, "rb") as fin, fsspec.open(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, chunk_size)
    return dst


def _main(argv: Sequence[str]) -> int:
    if len(argv) == 3 and argv[0] == "copy":
        written = copy_file(argv[1], argv[2])
        print(f"copied {argv[1]} to {written}")
        return 0
    print("usage: python -m distspec.components.utils copy SRC_URL DST_URL", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
