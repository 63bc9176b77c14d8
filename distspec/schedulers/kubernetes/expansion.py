"""How a macro becomes a value in a Kubernetes container: a literal, escaped so that
Kubernetes' ``$(VAR)`` expansion gives it back unchanged, or a reference to a
variable Kubernetes sets when the container starts (``$(JOB_COMPLETION_INDEX)``,
``$(VK_TASK_INDEX)``), so that every pod of a role shares one template."""

from __future__ import annotations

import re
from collections.abc import Mapping

from distspec.frozen import frozen
from distspec.schedulers.kubernetes.options import Flavor, KubernetesOptions
from distspec.specs import macros
from distspec.specs.macros import Macro

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.schedulers.kubernetes.names import Names
    from distspec.specs.app import AppDef, Role

__all__ = ["Runtime", "expand", "k8s_escape", "macro_values"]


def _index_var(flavor: Flavor) -> str:
    # JobSet runs Indexed Jobs, so the job controller sets JOB_COMPLETION_INDEX
    # there too; Volcano's env plugin sets VK_TASK_INDEX.
    return "VK_TASK_INDEX" if flavor is Flavor.VOLCANO else "JOB_COMPLETION_INDEX"


_NEEDS_ESCAPE = r"\$(?=[($]|\Z)"


def k8s_escape(literal: str) -> str:
    """``literal`` such that Kubernetes' ``$(VAR)`` expansion gives it back unchanged.

    Kubernetes turns ``$$`` into ``$`` and ``$(NAME)`` into a variable's value;
    any other ``$`` stays. So a ``$`` is doubled when a ``(`` or ``$`` follows it,
    or when it ends the piece (a runtime reference may follow it).
    """
    if "$" not in literal:
        return literal
    return re.compile(_NEEDS_ESCAPE).sub("$$", literal)


@frozen(kw_only=False)
class Runtime:
    """A value Kubernetes fills in when the container starts: ``$(VAR)``."""

    var: str


def expand(text: str, values: Mapping[Macro, str | Runtime]) -> str:
    """``text`` with each macro replaced by its value in ``values`` (an unknown one kept
    as written), every literal piece escaped for Kubernetes."""
    out = []
    for part in macros.split(text):
        value = values.get(part, part.token) if isinstance(part, Macro) else part
        out.append(f"$({value.var})" if isinstance(value, Runtime) else k8s_escape(value))
    return "".join(out)


def macro_values(
    app: AppDef, role: Role, names: Names, opts: KubernetesOptions
) -> dict[Macro, str | Runtime]:
    """What each macro becomes in ``role``'s container."""
    first = app.roles[0]
    return {
        Macro.APP_ID: names.app_id,
        Macro.REPLICA_ID: Runtime(_index_var(opts.flavor)),
        Macro.NUM_REPLICAS: str(role.num_replicas),
        Macro.RANK0_HOST: names.rank0_host(opts.flavor, first.name),
        Macro.RDZV_PORT: str(opts.rdzv_port),  # each pod has its own address
        Macro.IMG_ROOT: "",
    }
