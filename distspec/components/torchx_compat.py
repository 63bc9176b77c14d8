"""Run TorchX component files unchanged: convert a returned ``torchx.specs.AppDef``.

A TorchX component is a typed function returning ``torchx.specs.AppDef``. When
:func:`distspec.components.binder.bind` gets such an object back, it hands it to
:func:`from_torchx`, which builds the equal distspec :class:`~distspec.specs.app.AppDef`
or raises :class:`~distspec.errors.ComponentError` naming the TorchX field that has
no distspec equivalent and what to use instead (exit 2, nothing submitted).

The object is recognised by its class (``AppDef`` defined in a ``torchx.*``
module) and read attribute by attribute; this module never imports ``torchx``,
so distspec keeps TorchX out of its dependencies and its start-up.

What maps to what:

=============================  ===================================================
TorchX                         distspec
=============================  ===================================================
``AppDef.name/roles/metadata``  the same fields (metadata values must be strings)
``Role.name``, ``entrypoint``,  the same fields
``args``, ``env``,
``num_replicas``,
``min_replicas``,
``max_retries``, ``port_map``,
``mounts``
``Role.retry_policy``           the same policy (``REPLICA`` → ``replica`` ...)
``Role.metadata``               string values kept; anything else is refused
``Role.workspace``              refused: distspec runs what ``--image`` (or the
                                working directory) already holds
``Role.overrides``              applied: TorchX's Role resolves them when a
                                field is read
``Role.image``                  kept on Kubernetes; dropped on local_cwd, Slurm
                                and PBS, where TorchX ignores it (see
                                :func:`from_torchx`)
``Resource(cpu, gpu, memMB)``   ``Resource(cpu, gpu, mem_mb)``; TorchX's
                                ``NULL_RESOURCE`` (all ``-1``) requests nothing
                                (CPU and memory unset, no GPU), as TorchX's
                                schedulers do
``Resource.capabilities``       kept, values as strings (str, int, float, bool)
``Resource.devices``            kept
``Resource.tags``               dropped: TorchX documents them as not interpreted
                                by schedulers
=============================  ===================================================

Macros: TorchX substitutes ``args``, ``env`` and ``metadata`` with
:class:`string.Template` (``$$`` is a literal ``$``; ``$name`` and ``${name}`` both
work). Each piece of text is rewritten so that distspec's macros give the same
result: ``${img_root}``, ``${app_id}`` and ``${replica_id}`` map to distspec's
macros of the same name; ``${rank0_env}`` (the *name* of a variable holding the
rank-0 host) becomes ``TORCHX_RANK0_HOST``, and the role gets
``TORCHX_RANK0_HOST=${rank0_host}``, which every backend fills in or refuses at
compile time, as TorchX's own local scheduler does with ``localhost``. Text that
TorchX leaves as written but distspec would substitute (a literal
``${num_replicas}`` or ``${rank0_host}``, or ``$${app_id}``) is refused, and so is TorchX
0.7.0's ``${base_img_root}``.
"""

from __future__ import annotations

from distspec.errors import ComponentError, SpecError
from distspec.frozen import frozendict
from distspec.specs.app import AppDef, Resource, Role
from distspec.specs.macros import Macro
from distspec.specs.macros import find as find_macros

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distspec.specs.mounts import Mount

__all__ = [
    "RANK0_ENV",
    "TORCHX_MACROS",
    "from_torchx",
    "is_torchx_appdef",
    "returns_torchx_appdef",
    "type_label",
]

#: The variable that stands for TorchX's ``${rank0_env}`` (TorchX's local, Docker and
#: Kubernetes schedulers use the same name).
RANK0_ENV = "TORCHX_RANK0_HOST"

#: TorchX's macro names and the text each becomes before distspec's own macros run.
TORCHX_MACROS = {
    "img_root": Macro.IMG_ROOT.token,
    "app_id": Macro.APP_ID.token,
    "replica_id": Macro.REPLICA_ID.token,
    "rank0_env": RANK0_ENV,
}

#: TorchX's scheduler whose ``${img_root}`` is the working directory, as distspec's is
#: once the image is dropped (TorchX's Slurm scheduler puts the image's name there).
#: A name in TorchX's vocabulary, not a decision about a distspec backend.
_TORCHX_IMG_ROOT_IS_CWD = "local_cwd"

_IDENT_START = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_IDENT = _IDENT_START + "0123456789"


def type_label(obj: object) -> str:
    """``module.Class`` of ``obj``, with TorchX's public path for its spec types."""
    cls = type(obj)
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    if module.startswith("torchx.specs"):
        module = "torchx.specs"
    return f"{module}.{cls.__qualname__}"


def is_torchx_appdef(obj: object) -> bool:
    """``obj`` is a ``torchx.specs.AppDef`` (checked by class; imports nothing)."""
    cls = type(obj)
    return cls.__name__ == "AppDef" and cls.__module__.split(".", 1)[0] == "torchx"


def returns_torchx_appdef(fn: Any) -> bool:
    """``fn``'s return annotation is TorchX's ``AppDef``: the class itself, or a string
    (``"specs.AppDef"`` under ``from __future__ import annotations``) naming it in
    ``fn``'s module. Imports nothing; TorchX accepts such components without a docstring.
    """
    hint = (getattr(fn, "__annotations__", None) or {}).get("return")
    if isinstance(hint, str):
        head, _, rest = hint.partition(".")
        target = (getattr(fn, "__globals__", None) or {}).get(head)
        for part in rest.split(".") if rest else ():
            target = getattr(target, part, None)
        hint = target
    return (
        isinstance(hint, type)
        and hint.__name__ == "AppDef"
        and hint.__module__.split(".", 1)[0] == "torchx"
    )


class _Refusal(Exception):
    """A field that cannot be converted; the message names it and the way out."""


def from_torchx(app: Any, source: str = "", *, scheduler: str | None = None) -> AppDef:
    """The distspec AppDef equal to the TorchX ``app``, for ``scheduler``.

    Args:
        app: a ``torchx.specs.AppDef`` (see :func:`is_torchx_appdef`).
        source: ``file:line`` of the component, for messages.
        scheduler: the backend the app is for. On ``local_cwd``, ``slurm`` and
            ``pbs`` the role's ``image`` is dropped (kept in the role's metadata as
            ``torchx.image``): TorchX's local_cwd and Slurm schedulers ignore it and
            run in the working directory, while distspec's would take it as that
            directory. Elsewhere (Kubernetes, or ``None``) it is kept.

    Raises:
        ComponentError: a field has no distspec equivalent; the message names the
            field (``roles[0].workspace``) and what to use instead.
    """
    prefix = f"{source}: " if source else ""
    where = "name"
    try:
        roles = []
        for i, role in enumerate(list(app.roles)):
            where = f"roles[{i}]"
            roles.append(_role(role, where, scheduler))
        where = "metadata"
        metadata = _str_map(app.metadata, "metadata", macros=False)
        where = "name"
        return AppDef(name=str(app.name), roles=tuple(roles), metadata=frozendict(metadata))
    except _Refusal as e:
        raise ComponentError(
            f"{prefix}cannot convert torchx.specs.AppDef {getattr(app, 'name', '?')!r}: {e}"
        ) from None
    except SpecError as e:
        raise ComponentError(
            f"{prefix}cannot convert torchx.specs.AppDef {getattr(app, 'name', '?')!r} "
            f"({where}): {e}"
        ) from None


def _image_is_directory(scheduler: str) -> bool:
    """True where distspec would run a role in its image as a directory (local, Slurm,
    PBS): TorchX's schedulers there ignore the image, so it is dropped (PBS has no
    TorchX scheduler; it is treated as Slurm). An unknown name is left to the runner,
    which refuses it."""
    from distspec.errors import SchedulerError, SchedulerNotFound
    from distspec.schedulers import SchedulerRegistry

    try:
        backend = SchedulerRegistry().get(scheduler)
    except (SchedulerError, SchedulerNotFound):
        return False
    return backend.capabilities.image == "directory"


def _role(role: Any, where: str, scheduler: str | None) -> Role:
    if getattr(role, "workspace", None):
        raise _Refusal(
            f"{where}.workspace is set; distspec does not copy or build workspaces: "
            "bake the code into the image given with --image, or run from a shared "
            "directory on Slurm/PBS/local_cwd"
        )
    # Role.overrides (deprecated in TorchX) need no handling: TorchX's Role resolves
    # them when an attribute is read, so every read below sees the overridden value.
    entrypoint = str(role.entrypoint)
    if entrypoint in ("", "<MISSING>"):
        raise _Refusal(f"{where}.entrypoint is missing; distspec's Role.entrypoint is required")
    uses_rank0 = [False]
    args = tuple(_text(a, f"{where}.args[{j}]", uses_rank0) for j, a in enumerate(role.args))
    env = {str(k): _text(v, f"{where}.env[{k!r}]", uses_rank0) for k, v in dict(role.env).items()}
    policy = getattr(role.retry_policy, "value", role.retry_policy)
    image = str(role.image or "")
    metadata = _str_map(role.metadata, f"{where}.metadata", macros=True, uses_rank0=uses_rank0)
    if uses_rank0[0]:
        env.setdefault(RANK0_ENV, Macro.RANK0_HOST.token)
    if image and scheduler is not None and _image_is_directory(scheduler):
        if scheduler != _TORCHX_IMG_ROOT_IS_CWD and any(
            Macro.IMG_ROOT.token in text for text in (*args, *env.values())
        ):
            raise _Refusal(
                f"{where} uses ${{img_root}} with image {image!r}: TorchX's Slurm scheduler "
                f"puts the image's name there; distspec's {scheduler} puts the working "
                "directory: write the path you mean instead"
            )
        metadata["torchx.image"] = image
        image = ""
    return Role(
        name=str(role.name),
        entrypoint=entrypoint,
        args=args,
        image=image,
        env=frozendict(env),
        num_replicas=int(role.num_replicas),
        min_replicas=None if role.min_replicas is None else int(role.min_replicas),
        resource=_resource(role.resource, f"{where}.resource"),
        port_map=frozendict({str(k): int(v) for k, v in dict(role.port_map).items()}),
        max_retries=int(role.max_retries),
        retry_policy=str(policy).lower(),  # type: ignore[arg-type]  # Role converts it
        mounts=tuple(_mount(m, f"{where}.mounts[{j}]") for j, m in enumerate(role.mounts)),
        metadata=frozendict(metadata),
    )


def _resource(res: Any, where: str) -> Resource:
    cpu, gpu, mem = int(res.cpu), int(res.gpu), int(res.memMB)
    for name, value in (("cpu", cpu), ("gpu", gpu), ("memMB", mem)):
        if value < 0 and (cpu, gpu, mem) != (-1, -1, -1):
            raise _Refusal(f"{where}.{name} is {value}; distspec needs a count >= 0")
    # torchx.specs.NULL_RESOURCE (all -1) asks for nothing: CPU and memory unset
    # (the cluster's default), no GPU, as TorchX's schedulers treat it.
    null = (cpu, gpu, mem) == (-1, -1, -1)
    capabilities = {}
    for key, value in dict(res.capabilities).items():
        if not isinstance(value, (str, int, float, bool)):
            raise _Refusal(
                f"{where}.capabilities[{key!r}] is of type {type(value).__name__}; distspec's "
                "Resource.capabilities holds strings"
            )
        capabilities[str(key)] = str(value)
    devices = {str(k): int(v) for k, v in dict(res.devices).items()}
    return Resource(
        cpu=None if null else cpu,
        gpu=0 if null else gpu,
        mem_mb=None if null else mem,
        capabilities=frozendict(capabilities),
        devices=frozendict(devices),
    )


def _mount(mount: Any, where: str) -> Mount:
    from distspec.specs import mounts

    kind = type(mount).__name__
    if kind == "BindMount":
        return mounts.BindMount(
            src_path=mount.src_path, dst_path=mount.dst_path, read_only=bool(mount.read_only)
        )
    if kind == "VolumeMount":
        return mounts.VolumeMount(
            src=mount.src, dst_path=mount.dst_path, read_only=bool(mount.read_only)
        )
    if kind == "DeviceMount":
        return mounts.DeviceMount(
            src_path=mount.src_path, dst_path=mount.dst_path, permissions=mount.permissions
        )
    raise _Refusal(
        f"{where} is of type {type_label(mount)}; distspec has bind, volume and device mounts"
    )


def _str_map(
    data: Any, where: str, *, macros: bool, uses_rank0: list[bool] | None = None
) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in dict(data or {}).items():
        if not isinstance(value, str):
            raise _Refusal(
                f"{where}[{key!r}] is of type {type(value).__name__}; distspec's metadata holds strings"
            )
        out[str(key)] = (
            _text(value, f"{where}[{key!r}]", uses_rank0 or [False]) if macros else value
        )
    return out


def _text(text: Any, where: str, uses_rank0: list[bool]) -> str:
    """``text`` as TorchX's ``Template.safe_substitute`` reads it, in distspec's macro syntax.

    Sets ``uses_rank0[0]`` when ``${rank0_env}`` is used.
    """
    if not isinstance(text, str):
        raise _Refusal(f"{where} is of type {type(text).__name__}, not a string")
    out: list[str] = []
    literal: list[str] = []  # the literal text, to check it holds no distspec macro

    def emit(piece: str, *, is_literal: bool) -> None:
        out.append(piece)
        literal.append(piece if is_literal else "\0")

    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$":
            emit(ch, is_literal=True)
            i += 1
            continue
        if text.startswith("$$", i):
            emit("$", is_literal=True)
            i += 2
            continue
        name, end = _template_name(text, i)
        if name == "base_img_root":  # TorchX 0.7.0 and older
            raise _Refusal(
                f"{where} uses ${{base_img_root}} (TorchX's base image root); distspec has no "
                "base images: use ${img_root}, the role's image (a directory off Kubernetes)"
            )
        if name is not None and name in TORCHX_MACROS:
            if name == "rank0_env":
                uses_rank0[0] = True
            emit(TORCHX_MACROS[name], is_literal=False)
            i = end
            continue
        emit(text[i:end], is_literal=True)  # unknown or malformed: Template leaves it
        i = end
    kept = find_macros("".join(literal))
    if kept:
        names = ", ".join(sorted(m.token for m in kept))
        raise _Refusal(
            f"{where} holds {names} as literal text; TorchX leaves it as written but distspec "
            "would substitute it: spell it differently (for example with an environment variable)"
        )
    return "".join(out)


def _template_name(text: str, i: int) -> tuple[str | None, int]:
    """The identifier of a ``$name`` / ``${name}`` at ``text[i]`` and where it ends;
    ``(None, i + 1)`` for a ``$`` that starts neither."""
    j = i + 1
    braced = text.startswith("{", j)
    if braced:
        j += 1
    if j >= len(text) or text[j] not in _IDENT_START:
        return None, i + 1
    k = j + 1
    while k < len(text) and text[k] in _IDENT:
        k += 1
    if braced:
        if not text.startswith("}", k):
            return None, i + 1
        return text[j:k], k + 1
    return text[j:k], k
