"""Run option ``container`` of Slurm and PBS: a role's ``--image`` run as a container.

``container=none`` (the default) keeps the image's batch meaning: an absolute
directory the role runs in. Any other value names the runtime that runs the image on
every node, and this module says what each runtime accepts as an image
(:func:`image_kind`, :func:`runtime_image`), what it is given (binds, environment,
network, GPUs) and the script lines that run one replica's command in it
(:func:`run_lines` for podman and apptainer, which wrap the command inside the task;
:func:`srun_flags` for pyxis and Slurm's OCI ``--container``, which wrap the whole
srun task) and pull the image first (:func:`pull_lines`).

Every replica sees, at the same paths as on the host: the job folder (its ``job_dir``
base), the working directory, the code snapshot, and the role's bind ``--mounts``.
Values of the environment are never written into the script: podman gets
``--env NAME`` (the value is read from the task's environment), apptainer and pyxis
pass the task's environment themselves. Host networking keeps the rendezvous as
without containers.

Nothing here runs a command or reads the environment.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence

from distspec.errors import CompileError
from distspec.frozen import frozen
from distspec.schedulers.shell import shell_word

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distspec.specs.app import Role

__all__ = [
    "PULL_REASON",
    "SLURM_ONLY",
    "STANDARD_PATH",
    "Container",
    "ContainerPlan",
    "ImageKind",
    "accepted",
    "check_mounts",
    "image_kind",
    "plan",
    "pull_lines",
    "run_lines",
    "runtime_image",
    "srun_flags",
    "stop_command",
]


class Container(str, enum.Enum):
    """How a role's image runs on Slurm and PBS (run option ``container``)."""

    #: No container: the image is an absolute directory the role runs in.
    NONE = "none"
    #: ``podman run`` on each node (rootful or rootless), host network and IPC.
    PODMAN = "podman"
    #: ``apptainer exec`` on each node.
    APPTAINER = "apptainer"
    #: Apptainer's dialect run by the ``singularity`` binary (SingularityCE, older sites).
    SINGULARITY = "singularity"
    #: Slurm only: ``srun --container-image`` (NVIDIA pyxis + enroot).
    PYXIS = "pyxis"
    #: Slurm only: ``srun --container=BUNDLE``, an OCI bundle directory (oci.conf).
    OCI = "oci"


class ImageKind(str, enum.Enum):
    """What an ``--image`` value is; the value is how messages name it."""

    DIRECTORY = "an absolute directory"
    SIF = "a .sif file"
    SQSH = "a .sqsh file"
    DOCKER = "a docker:// URI"
    ORAS = "an oras:// URI"
    PODMAN = "a podman:// URI"
    REGISTRY = "a registry reference"
    RELATIVE = "a relative path"
    UNKNOWN = "no image reference"


# A registry reference as docker and podman take it: [HOST[:PORT]/]PATH[:TAG][@DIGEST],
# each path component lowercase letters and digits, separated by . _ __ or -.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = (
    r"(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*(?::[0-9]+)?)/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,})?"
)
_SCHEMES = {"docker": ImageKind.DOCKER, "oras": ImageKind.ORAS, "podman": ImageKind.PODMAN}


def image_kind(image: str) -> ImageKind:
    """What ``image`` is, from its text alone (compile reads no files).

    ``/x/y.sif`` and ``/x/y.sqsh`` (or ``.squashfs``) are image files, any other
    absolute path a directory; ``docker://``, ``oras://`` and ``podman://`` URIs are
    told by their scheme; a relative path (``./x``, ``~/x``, ``x.sif``) is no image
    anywhere; what is left must read as a registry reference (``ubuntu``,
    ``python:3.11``, ``localhost/distspec-test:cpu``, ``nvcr.io/nvidia/pytorch:24.01-py3``).
    """
    scheme, sep, rest = image.partition("://")
    if sep:
        kind = _SCHEMES.get(scheme)
        return kind if kind is not None and rest else ImageKind.UNKNOWN
    if image.startswith("/"):
        if image.endswith(".sif"):
            return ImageKind.SIF
        if image.endswith((".sqsh", ".squashfs")):
            return ImageKind.SQSH
        return ImageKind.DIRECTORY
    if image.startswith((".", "~")) or image.endswith((".sif", ".sqsh", ".squashfs")):
        return ImageKind.RELATIVE
    if re.fullmatch(_REFERENCE, image):
        return ImageKind.REGISTRY
    return ImageKind.UNKNOWN


#: What each runtime runs; anything else is refused at compile time.
_ACCEPTS: dict[Container, tuple[ImageKind, ...]] = {
    Container.NONE: (ImageKind.DIRECTORY,),
    Container.PODMAN: (ImageKind.REGISTRY, ImageKind.DOCKER, ImageKind.PODMAN),
    Container.APPTAINER: (ImageKind.SIF, ImageKind.DOCKER, ImageKind.ORAS, ImageKind.REGISTRY),
    Container.SINGULARITY: (ImageKind.SIF, ImageKind.DOCKER, ImageKind.ORAS, ImageKind.REGISTRY),
    Container.PYXIS: (ImageKind.SQSH, ImageKind.REGISTRY, ImageKind.DOCKER),
    Container.OCI: (ImageKind.DIRECTORY,),
}

#: Runtimes that only Slurm has.
SLURM_ONLY = frozenset({Container.PYXIS, Container.OCI})


def accepted(runtime: Container) -> str:
    """What ``runtime`` takes as an image, for messages and docs."""
    if runtime is Container.OCI:
        return "an OCI bundle directory (absolute)"
    kinds = [k.value for k in _ACCEPTS[runtime]]
    return ", ".join(kinds[:-1]) + (" or " if len(kinds) > 1 else "") + kinds[-1]


def _registry_host(ref: str) -> tuple[str, str]:
    """``(host, rest)`` of a registry reference whose first component is a registry
    (it has a ``.`` or a ``:``, or is ``localhost``), else ``("", ref)``."""
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "", ref


def runtime_image(role: Role, runtime: Container, scheduler: str) -> str:
    """The role's image as ``runtime`` is given it: podman a reference (``podman://X``:
    ``X``, from podman's own storage), apptainer a file or a URI (a registry reference
    becomes ``docker://REF``), pyxis an enroot reference (``HOST#PATH:TAG``) or a
    ``.sqsh`` file, oci the bundle directory.

    Raises:
        CompileError: one line naming the image, what it is, the runtime and what the
            runtime accepts; with ``container=none`` a container image is refused as
            before, pointing at ``-cfg container=...``.
    """
    image = role.image
    kind = image_kind(image)
    if kind in _ACCEPTS[runtime]:
        if kind is ImageKind.PODMAN and runtime is Container.PODMAN:
            return image.partition("://")[2]
        if kind is ImageKind.REGISTRY and runtime in (Container.APPTAINER, Container.SINGULARITY):
            return f"docker://{image}"
        if runtime is Container.PYXIS and kind in (ImageKind.REGISTRY, ImageKind.DOCKER):
            host, rest = _registry_host(image.removeprefix("docker://"))
            return f"{host}#{rest}" if host else rest
        return image
    where = f"role {role.name!r}: --image {image!r} is {kind.value}"
    if runtime is Container.NONE:
        raise CompileError(
            scheduler, f"{where}; without a container runtime it must be an absolute directory"
        )
    hint = ""
    if kind is ImageKind.DIRECTORY:
        hint = " (a directory is where the job runs with container=none)"
    elif kind is ImageKind.PODMAN:
        hint = " (enroot import -o FILE.sqsh podman://IMAGE makes one pyxis takes)"
    raise CompileError(
        scheduler,
        f"{where}, which container={runtime.value} cannot run: it takes {accepted(runtime)}{hint}",
    )


@frozen
class ContainerPlan:
    """What a role's container is given, as shell words."""

    runtime: Container
    #: The image as the runtime takes it (a shell word).
    image: str
    #: ``(source, destination, read_only)`` binds, shell words, in order, no duplicates.
    binds: tuple[tuple[str, str, bool], ...]
    #: Environment names or ``PREFIX*`` patterns podman passes (``--env NAME``).
    env: tuple[str, ...]
    #: Whether the role asks for GPUs.
    gpus: bool
    #: The PATH inside the container (``container_path`` + the standard directories),
    #: or "" for the image's own.
    path: str
    #: More runtime flags (``container_args``), shell words.
    args: tuple[str, ...]
    #: The working directory, the same path inside (a shell word).
    workdir: str
    #: With ``pull=true``: what the pull step fetches (``image`` is then what it wrote,
    #: for apptainer and pyxis a file in the job folder); "" for no pull.
    source: str = ""
    #: The role's ``--image`` as given, for messages.
    given: str = ""


#: The directories after ``container_path`` on the container's PATH.
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_ENV_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*\*?"


def check_mounts(role: Role, runtime: Container, scheduler: str) -> None:
    """Raise CompileError for a mount the runtime cannot make: a bind mount without a
    runtime, a relative source, a volume or device mount, any mount with ``oci``
    (its binds are the bundle's ``config.json``)."""
    from distspec.specs.mounts import BindMount, VolumeMount

    for mount in role.mounts:
        if not isinstance(mount, BindMount):
            kind = "volume" if isinstance(mount, VolumeMount) else "device"
            raise CompileError(
                scheduler, f"role {role.name!r}: {kind} mounts are not supported here"
            )
        if runtime is Container.NONE:
            raise CompileError(
                scheduler,
                f"role {role.name!r}: bind mount {mount.src_path}:{mount.dst_path} needs a "
                "container runtime here (-cfg container=podman|apptainer|...); without one "
                "the job sees the host's files as they are",
            )
        if runtime is Container.OCI:
            raise CompileError(
                scheduler,
                f"role {role.name!r}: container=oci takes its binds from the bundle's "
                f"config.json; bind mount {mount.src_path} cannot be added (add it there)",
            )
        if not mount.src_path.startswith("/") or ".." in mount.src_path.split("/"):
            raise CompileError(
                scheduler,
                f"role {role.name!r}: bind mount source {mount.src_path!r} must be an "
                "absolute path without '..' (the nodes resolve it, not this directory)",
            )
        if any(c in mount.src_path + mount.dst_path for c in ",:\n"):
            raise CompileError(
                scheduler,
                f"role {role.name!r}: bind mount {mount.src_path}:{mount.dst_path}: a path "
                "with ',' or ':' cannot be given to a container runtime",
            )


def plan(
    role: Role,
    *,
    runtime: Container,
    scheduler: str,
    job_base: str,
    workdir: str,
    launcher_env: str,
    env: Sequence[str] = (),
    path: str | None = None,
    args: Sequence[str] = (),
    pull: bool = False,
) -> ContainerPlan | None:
    """The role's container, or None for ``container=none`` (after checking that its
    image and mounts suit the runtime).

    Args:
        role: the role; its image, mounts, env and GPUs.
        runtime: the ``container`` option.
        scheduler: the backend's name, for errors.
        job_base: the ``job_dir`` base (literal), which holds the job folder.
        workdir: the working directory as a shell word (``"$PWD"``).
        launcher_env: the pattern of the launcher's variables podman passes (``SLURM_*``).
        env: the ``container_env`` option: more names or ``PREFIX*`` patterns.
        path: the ``container_path`` option.
        args: the ``container_args`` option.
        pull: the ``pull`` option: podman pulls the image on each node; apptainer and
            pyxis pull it once into the job folder (``<role>.sif``, ``<role>.sqsh``),
            and run that file; an image file already is one (nothing to pull).
    """
    if role.image:
        image = shell_word(runtime_image(role, runtime, scheduler), {})
    elif runtime is Container.NONE:
        image = ""
    else:
        raise CompileError(
            scheduler,
            f"role {role.name!r}: container={runtime.value} runs an image; give one with --image",
        )
    check_mounts(role, runtime, scheduler)
    if runtime is Container.NONE:
        if env or path or args or pull:
            raise CompileError(
                scheduler,
                "container_env, container_path, container_args and pull need a container "
                "runtime (-cfg container=...)",
            )
        return None
    for name in env:
        if not re.fullmatch(_ENV_PATTERN, name):
            raise CompileError(
                scheduler,
                f"container_env: {name!r} is not a variable name or a PREFIX* pattern",
            )
    if path is not None and (not path or any(not p.startswith("/") for p in path.split(":"))):
        raise CompileError(
            scheduler, f"container_path={path!r}: expected absolute directories separated by ':'"
        )
    from distspec.snapshot.policy import SNAPSHOT_ENV

    binds: list[tuple[str, str, bool]] = []

    def bind(src: str, dst: str, read_only: bool = False) -> None:
        if all((s, d) != (src, dst) for s, d, _ in binds):
            binds.append((src, dst, read_only))

    base = shell_word(job_base, {})
    bind(base, base)
    bind(workdir, workdir)
    snapshot = role.env.get(SNAPSHOT_ENV)
    if snapshot and not snapshot.startswith(job_base.rstrip("/") + "/"):
        word = shell_word(snapshot, {})
        bind(word, word, True)
    from distspec.specs.mounts import BindMount

    for mount in role.mounts:
        if isinstance(mount, BindMount):
            bind(shell_word(mount.src_path, {}), shell_word(mount.dst_path, {}), mount.read_only)
    names = ["DISTSPEC_*", launcher_env, "PYTHONUNBUFFERED", *role.env, *env]
    source = ""
    if pull and runtime is Container.OCI:
        raise CompileError(
            scheduler, "pull=true: container=oci runs a bundle directory; there is nothing to pull"
        )
    # An image file, or podman's own storage (podman://), has nothing to pull.
    if pull and image_kind(role.image) not in (ImageKind.SIF, ImageKind.SQSH, ImageKind.PODMAN):
        source = image
        if runtime is Container.PYXIS:
            source = shell_word("docker://" + runtime_image(role, runtime, scheduler), {})
            image = f'"$DISTSPEC_JOB_DIR"/{role.name}.sqsh'
        elif runtime is not Container.PODMAN:
            image = f'"$DISTSPEC_JOB_DIR"/{role.name}.sif'
    return ContainerPlan(
        given=role.image,
        source=source,
        runtime=runtime,
        image=image,
        binds=tuple(binds),
        env=tuple(dict.fromkeys(names)),
        gpus=bool(role.resource.gpu),
        path=f"{path}:{STANDARD_PATH}"
        if path
        else (STANDARD_PATH if runtime is Container.OCI else ""),
        args=tuple(shell_word(a, {}) for a in args),
        workdir=workdir,
    )


def _bind_word(src: str, dst: str, read_only: bool) -> str:
    return f"{src}:{dst}" + (":ro" if read_only else "")


def _exported(lines: Sequence[str]) -> list[str]:
    """The names the ``export`` lines among ``lines`` set."""
    names = []
    for line in lines:
        text = line.strip()
        if text.startswith("export "):
            names += re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", text[len("export ") :])
    return names


def run_lines(
    plan: ContainerPlan,
    command: str,
    *,
    name: str,
    exported: Sequence[str] = (),
    output: str = "",
    trap: bool = True,
    background: bool = False,
    stopped: str = "",
    watch: str = "",
) -> list[str]:
    """Lines that run ``command`` (a shell command line, its words already quoted) in
    the role's container: ``$?`` after the last line is the command's exit code. For
    podman and apptainer; no single quote, so the lines may go into a single-quoted
    ``bash -c`` word.

    Apptainer's processes are the task's own children: it runs in the foreground, as
    the command would (a TERM then waits for it, see
    :data:`~distspec.schedulers.batch.script.STAY`), unless ``background``.

    Podman's container is named ``name`` (a shell word unique per job and replica),
    replaces a left-over one of that name (a requeued job), and is removed on TERM and
    INT: the container hangs off conmon, outside the launcher's process tree, so
    killing the task (scancel, qdel, a failed replica's peers) would leave it running.

    Args:
        plan: the role's container.
        command: the command line to run in it.
        name: shell word of podman's container name.
        exported: the task's ``export`` lines before the command: podman passes the
            names they set.
        output: a redirection for the runtime's output (``>> "$base.log" 2>&1``).
        trap: whether the lines set the TERM and INT trap that removes podman's
            container (else the caller's own trap runs :func:`stop_command`).
        background: run apptainer in the background and ``wait`` for it (podman
            always is, so that its trap runs at once).
        stopped: a command podman's trap runs once the container is gone (PBS marks
            the replica stopped for the script, which waits for that before it exits).
        watch: a file (shell word) whose appearance stops podman's container as a
            TERM would, looked for every second (PBS: the script asks the tasks on
            other hosts, which no signal of the job reaches before their SIGKILL).
            With it, a reaper in a session of its own (PBS kills a job by session)
            removes the container by its id (``--cidfile``, per task) once the task
            has died, whatever killed it: OpenPBS SIGKILLs the other hosts' tasks at
            once on qdel, and their containers ran on under conmon.
    """
    redirect = f" {output}" if output else ""
    inner = f"env PATH={plan.path} {command}" if plan.path else command
    if plan.runtime is Container.PODMAN:
        cid = '"$base.cid-$$"'
        quoted_cid = cid.replace('"', '\\"')  # inside the reaper's double quotes
        words = [
            "podman run --rm --replace --name " + name,
            *([f"--cidfile {cid}"] if watch else []),
            "--network host --ipc host",
            *([] if not plan.gpus else ["--device nvidia.com/gpu=all"]),
            *(f'--env "{n}"' if n.endswith("*") else f"--env {n}" for n in _env(plan, exported)),
            *(f"--volume {_bind_word(*b)}" for b in plan.binds),
            f"--workdir {plan.workdir}",
            *plan.args,
            plan.image,
            inner,
        ]
        stop = stop_command(plan, name)
        return [
            *(
                [
                    f'trap "{stop}; {stopped + "; " if stopped else ""}exit 143" TERM INT'
                    "  # the container outlives its client"
                ]
                if trap
                else []
            ),
            *(
                [
                    f'setsid bash -c "while kill -0 $$ 2> /dev/null; do sleep 1; done; '
                    f"podman rm -f -t 2 \\$(cat {quoted_cid} 2> /dev/null) > /dev/null 2>&1; "
                    f'rm -f {quoted_cid}"'
                    " > /dev/null 2>&1 < /dev/null &  # removes it if the task is killed outright"
                ]
                if watch
                else []
            ),
            " ".join(words) + f"{redirect} &",
            *(
                [
                    "distspec_c=$!; while kill -0 $distspec_c 2> /dev/null; do "
                    f"[[ -e {watch} ]] && kill -TERM $$; sleep 1 & wait -n; done; wait $distspec_c"
                ]
                if watch
                else ["wait $!"]
            ),
        ]
    binary = plan.runtime.value  # apptainer, singularity
    words = [
        f"{binary} exec",
        *(["--nv"] if plan.gpus else []),
        *(f"--bind {_bind_word(*b)}" for b in plan.binds),
        f"--pwd {plan.workdir}",
        *plan.args,
        plan.image,
        inner,
    ]
    if background:
        return [" ".join(words) + f"{redirect} &", "wait $!"]
    return [" ".join(words) + redirect]


def stop_command(plan: ContainerPlan | None, name: str) -> str:
    """The command that removes podman's container ``name`` at once (2 s for its
    processes to end on SIGTERM, then SIGKILL); "" for the other runtimes, whose
    processes are the task's own. For use inside double quotes.

    The grace is short on purpose: the scheduler kills the task, this command
    included, a while after its TERM (Slurm's KillWait, 30 s by default, 5 s on the
    local test cluster); a ``podman rm`` killed while it waits leaves the container
    "Stopping" with its processes running, and a later ``podman rm -f`` then drops
    the record without killing them (podman 4.3)."""
    if plan is None or plan.runtime is not Container.PODMAN:
        return ""
    return f"podman rm -f -t 2 {_unquoted(name)} > /dev/null 2>&1"


def _unquoted(word: str) -> str:
    """A shell word's text for use inside a double-quoted string (its own double
    quotes dropped: the word is made of ``$VAR``s and plain characters)."""
    return word.replace('"', "")


def _env(plan: ContainerPlan, exported: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*plan.env, *_exported(exported)]))


def srun_flags(plan: ContainerPlan) -> list[str]:
    """The srun flags that run a step's tasks in the container (pyxis, oci)."""
    if plan.runtime is Container.PYXIS:
        mounts = ",".join(_bind_word(*b) for b in plan.binds)
        return [
            f"--container-image={plan.image}",
            f"--container-mounts={mounts}",
            f"--container-workdir={plan.workdir}",
            *plan.args,
        ]
    return [f"--container={plan.image}", *plan.args]


#: What the pull step writes into a replica's ``.reason`` file when its node could not
#: pull the image (``{image}`` and the node filled in at run time).
PULL_REASON = "image {image} could not be pulled on node"


def pull_lines(
    plan: ContainerPlan, *, host: str, reason_file: str, exit_file: str, log: str
) -> list[str]:
    """What pulls ``plan.source`` on one node (podman: into its storage) or once for
    the job (apptainer: ``plan.image``, a ``.sif`` in the job folder; pyxis: an enroot
    ``.sqsh`` there). On failure the lines write ``exit_file`` (the pull's exit code)
    and ``reason_file`` ("image IMAGE could not be pulled on node N: LAST LINE") and
    exit with that code.

    Args:
        plan: the role's container, with a ``source`` to pull.
        host: shell expression of the node's name.
        reason_file: shell word of the replica's ``.reason`` file.
        exit_file: shell word of the replica's ``.exit`` file.
        log: shell word of the pull's log.
    """
    if plan.runtime is Container.PODMAN:
        command = f"podman pull {plan.source}"
    elif plan.runtime is Container.PYXIS:
        command = f"enroot import --output {plan.image} {plan.source}"
    else:
        command = f"{plan.runtime.value} pull --force {plan.image} {plan.source}"
    shown = "".join(c for c in plan.given if c not in "'\"$`\\")
    reason = f"{PULL_REASON.format(image=shown)} {host}"
    return [
        f"{command} >> {log} 2>&1 < /dev/null || {{",
        "  code=$?",
        f'  echo "{reason}: $(grep -v "^[[:space:]]*$" {log} | tail -n1)" > {reason_file}',
        f'  echo "$code" > {exit_file}',
        '  exit "$code"',
        "}",
    ]
