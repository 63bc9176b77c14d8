"""The worker side of Python callables: load, init, run, write back.

Every rank of a ``dist.fn`` job runs ``python -m distspec.runtime.call [OPTIONS] [-- ARGS]``
under torchrun. It

1. loads the function: ``--fn pkg.module:function`` (called with ARGS as strings),
   or else ``call.pkl`` in the job directory, written by ``distspec.submit``
   (the function, its positional and keyword arguments, pickled with cloudpickle);
   a submitter may write it a moment after the job starts, so it is waited for;
2. calls :func:`distspec.runtime.init` (``--seed``, ``--groups``, ``--backend``,
   ``--timeout``);
3. calls the function, with the :class:`~distspec.runtime.Dist` first when the
   function's first parameter is annotated ``Dist``;
4. writes ``result-<rank>.pkl`` into the job directory: the return value, or the
   exception (type name, message, formatted traceback, rank, host, and the exception
   itself when it pickles), then exits 0 or 1.

The job directory is ``$DISTSPEC_JOB_DIR``. Without one, the function still runs
and rank 0's return value is printed, but nothing is written. The files, their
records and the protocol version are :mod:`distspec.runtime.call_protocol`'s, which
the submitter (:mod:`distspec.callables`) shares.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from distspec.runtime.call_protocol import (
    CALL_FILE,
    JOB_DIR_ENV,
    PROTOCOL_VERSION,
    REACH_HINT,
    is_url,
    join,
    read_bytes,
    remove,
    result_file,
    result_record,
    write_bytes,
)
from distspec.runtime.pickling import dumps

__all__ = ["PAYLOAD_WAIT", "main", "takes_dist"]

#: How long a worker waits for ``call.pkl`` (the submitter writes it after submit).
PAYLOAD_WAIT = 300.0


def takes_dist(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``'s first parameter is annotated ``Dist`` (the class, or a string
    annotation naming it, as ``from __future__ import annotations`` leaves it)."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return False
    ann = params[0].annotation
    if ann is inspect.Parameter.empty:
        return False
    if isinstance(ann, str):
        return ann.rpartition(".")[2].strip("'\"") == "Dist"
    return getattr(ann, "__name__", None) == "Dist" and "distspec" in str(
        getattr(ann, "__module__", "")
    )


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m distspec.runtime.call",
        description="Run a Python function on this rank (the worker side of dist.fn).",
    )
    parser.add_argument("--fn", help="pkg.module:function; else call.pkl in $DISTSPEC_JOB_DIR")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--seed-per-rank", action="store_true")
    parser.add_argument("--groups", help="ranks by commas, groups by semicolons: 0,2;1,3")
    parser.add_argument("--backend")
    parser.add_argument("--timeout", type=float)
    parser.add_argument("--payload-wait", type=float, default=PAYLOAD_WAIT)
    parser.add_argument("fn_args", nargs="*")
    return parser.parse_args(list(argv))


def _rank() -> int:
    # torchrun always sets RANK; a plain `python -m` run is rank 0 of 1.
    return int(os.environ.get("RANK", "0"))


def _import(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{spec} is not callable")
    fn: Callable[..., Any] = obj
    return fn


def _load_payload(
    job_dir: str, wait: float
) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    import cloudpickle

    path = join(job_dir, CALL_FILE)
    deadline = time.monotonic() + wait
    pause = 0.01
    while True:
        try:
            data = read_bytes(path)
            break
        except ImportError as e:  # fsspec: the protocol's library is not installed
            raise ImportError(f"cannot read {path}: {e}{REACH_HINT}") from e
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                raise FileNotFoundError(
                    f"{path} did not appear within {wait:.0f} s: the submitting process did "
                    "not write the function (did it die, or can it not reach this job "
                    "directory?)"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
    payload = cloudpickle.loads(data)
    if payload.get("version") != PROTOCOL_VERSION:
        raise RuntimeError(
            f"{path}: protocol version {payload.get('version')!r}, this worker reads "
            f"{PROTOCOL_VERSION}: the job's distspec differs from the submitter's"
        )
    return payload["fn"], tuple(payload["args"]), dict(payload["kwargs"])


def _type_name(e: BaseException) -> str:
    cls = type(e)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _user_frames(e: BaseException) -> TracebackType | None:
    """``e``'s traceback without this module's own frames at its top (the user's
    function is what the reader wants to see), unless nothing else is left."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb if tb is not None else e.__traceback__


def _error_record(e: BaseException, phase: str, rank: int) -> dict[str, Any]:
    try:
        pickled: bytes | None = dumps(e)
    except Exception:
        pickled = None
    return result_record(
        rank,
        ok=False,
        phase=phase,
        type=_type_name(e),
        message=str(e),
        traceback="".join(traceback.format_exception(type(e), e, _user_frames(e))),
        exception=pickled,
    )


def _write_record(job_dir: str | None, rank: int, record: dict[str, Any]) -> None:
    if job_dir is None:
        return
    try:
        data = dumps(record)
    except Exception as e:  # the return value does not pickle
        record = _error_record(
            TypeError(f"rank {rank}'s return value cannot be pickled: {e}"), "result", rank
        )
        data = dumps(record)
    path = join(job_dir, result_file(rank))
    try:
        write_bytes(path, data)
    except Exception as e:
        why = _why(e)
        print(
            f"distspec: rank {rank} cannot write its result to {path} ({len(data)} bytes): "
            f"{why}{REACH_HINT if is_url(job_dir) else ''}",
            file=sys.stderr,
            flush=True,
        )
        if record.get("ok"):
            # Say so in a small record (the big one's space is free again), so the
            # submitter reads why instead of "died without a result".
            failure = OSError(f"cannot write its result to {path} ({len(data)} bytes): {why}")
            try:
                write_bytes(path, dumps(_error_record(failure, "result", rank)))
            except Exception:
                pass  # the log line above is all there is
        raise ResultNotWritten(why) from e


class ResultNotWritten(Exception):
    """A rank's result file could not be written (said on stderr already)."""


def _why(e: BaseException) -> str:
    """``No space left on device (ENOSPC)``, or the exception's type and text."""
    import errno

    if isinstance(e, OSError) and e.errno is not None and e.errno in errno.errorcode:
        return f"{e.strerror or e} ({errno.errorcode[e.errno]})"
    return f"{type(e).__name__}: {e}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run this rank's call; 0 when the function returned, 1 when anything raised."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    job_dir = os.environ.get(JOB_DIR_ENV) or None
    rank = _rank()
    phase = "load"
    try:
        if job_dir is not None:
            # A rerun of the job (max_retries, a Slurm requeue) must not leave this
            # rank's result of an earlier attempt for the submitter to read.
            remove(join(job_dir, result_file(rank)))
        if args.fn:
            fn = _import(args.fn)
            fn_args: tuple[Any, ...] = tuple(args.fn_args)
            kwargs: dict[str, Any] = {}
        elif job_dir is None:
            raise RuntimeError(
                f"no function: give --fn pkg.module:function, or run with ${JOB_DIR_ENV} "
                f"naming a job directory that holds {CALL_FILE}"
            )
        else:
            fn, fn_args, kwargs = _load_payload(job_dir, args.payload_wait)
        phase = "init"
        from distspec.runtime import init
        from distspec.specs.groups import parse_groups

        groups = parse_groups(args.groups) if args.groups else ()
        with init(
            seed=args.seed,
            seed_per_rank=args.seed_per_rank,
            groups=groups,
            backend=args.backend,
            **({"timeout": args.timeout} if args.timeout is not None else {}),
        ) as dist:
            phase = "call"
            value = fn(dist, *fn_args, **kwargs) if takes_dist(fn) else fn(*fn_args, **kwargs)
            # No rank leaves before every rank is done: a fast rank that tears the
            # group down while a slow one still connects fails the slow one (gloo:
            # "Connection closed by peer" in connectFullMesh).
            phase = "finish"
            if dist.world_size > 1:
                dist.barrier()
    except BaseException as e:
        if isinstance(e, SystemExit) and not e.code:
            value = None
        else:
            traceback.print_exc()
            print(
                f"distspec: rank {rank} failed in {phase}: {_type_name(e)}: {e}",
                file=sys.stderr,
                flush=True,
            )
            try:
                _write_record(job_dir, rank, _error_record(e, phase, rank))
            except Exception:
                pass  # _write_record said why on stderr
            return 130 if isinstance(e, KeyboardInterrupt) else 1
    try:
        _write_record(job_dir, rank, result_record(rank, ok=True, value=value))
    except ResultNotWritten:
        return 1  # the function returned, but its value cannot reach the submitter
    if rank == 0 and args.fn and value is not None:
        print(f"distspec: rank 0 returned {value!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
