"""cloudpickle, with each by-value function keeping the name of the file it came from.

A function defined in the submitter's ``__main__`` or in one of the user's own
modules is pickled *by value*: its code object travels inside ``call.pkl``. From
cloudpickle 3.1.3 on, every such code object is written with the file name
``<dynamic-code>`` (so that payloads are byte-for-byte deterministic), and a
traceback raised inside the function on a worker then names no file and shows no
source line. :func:`dumps` pickles code objects through cloudpickle's own reducer
and restores their real ``co_filename`` on load, so the worker's traceback names
the user's file and line, and shows the line wherever that file is readable (the
shared file system a job's script already lives on). With a cloudpickle that keeps
file names (3.0 to 3.1.2) the restore is a no-op.
"""

from __future__ import annotations

import functools
import io
import types
from collections.abc import Callable
from typing import Any

__all__ = ["dumps"]


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, except that code objects keep their file names.

    Raises:
        Exception: whatever cloudpickle raises for an object it cannot pickle.
    """
    buffer = io.BytesIO()
    _pickler_class()(buffer).dump(obj)
    return buffer.getvalue()


def code_with_filename(
    rebuild: Callable[..., types.CodeType], args: tuple[Any, ...], filename: str
) -> types.CodeType:
    """Rebuild a code object from cloudpickle's reduction, with its real file name.

    Called by the unpickler (it is named in the pickle, so it must stay importable
    under this name in every distspec that reads the file protocol).
    """
    code = rebuild(*args)
    if code.co_filename == filename:
        return code
    return code.replace(co_filename=filename)


@functools.cache
def _pickler_class() -> type[Any]:
    import cloudpickle

    # cloudpickle's reducer for code objects, taken from its public Pickler class
    # (the function itself is private and has changed between releases). A release
    # that reduces code objects some other way pickles as cloudpickle does.
    reduce_code = cloudpickle.Pickler.dispatch_table.get(types.CodeType)
    if reduce_code is None:
        return cloudpickle.Pickler  # type: ignore[no-any-return]

    def reduce_keeping_filename(
        code: types.CodeType,
    ) -> tuple[Callable[..., types.CodeType], tuple[Any, ...]]:
        rebuild, args = reduce_code(code)
        return code_with_filename, (rebuild, args, code.co_filename)

    class Pickler(cloudpickle.Pickler):  # type: ignore[misc]
        dispatch_table = cloudpickle.Pickler.dispatch_table.new_child(
            {types.CodeType: reduce_keeping_filename}
        )

    return Pickler
