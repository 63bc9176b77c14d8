"""A user component: the training knobs of one project, typed, on top of dist.ddp.

Run it by path, from the repository root (it runs examples/components/train.py)::

    distspec run --wait examples/components/trainer.py:trainer --data /tmp/trainer-data
    distspec run examples/components/trainer.py:trainer --help
"""

from __future__ import annotations

import enum
from typing import Optional

from distspec.components.dist import ddp
from distspec.specs import AppDef


class Precision(enum.Enum):
    """Numeric precision of the training loop."""

    FP32 = "fp32"
    BF16 = "bf16"


def trainer(
    *extra: str,
    data: str,
    epochs: int = 1,
    lr: float = 0.1,
    precision: Precision = Precision.BF16,
    compile: bool = False,
    tags: list[str] | None = None,
    checkpoint: Optional[str] = None,  # noqa: UP045 - both spellings are supported
    env: dict[str, str] | None = None,
    j: str = "1x2",
    image: str = "",
) -> AppDef:
    """Train the example model with DDP.

    Wraps dist.ddp: the knobs a training run needs, nothing else. The script is
    examples/components/train.py, relative to the directory the job runs in (the
    repository root; on Kubernetes, the image's working directory).

    Args:
        extra: more arguments for the script, passed through unchanged.
        data: where the dataset lives (a path inside the job).
        epochs: how many passes over the data.
        lr: the learning rate.
        precision: numeric precision of the training loop.
        compile: compile the model with torch.compile.
        tags: labels recorded with the run, comma-separated.
        checkpoint: a checkpoint to resume from.
        env: extra environment variables, K=V,K2=V2.
        j: the topology, [MIN:]NxM.
        image: the container image.
    """
    args = [
        "--data",
        data,
        "--epochs",
        str(epochs),
        "--lr",
        str(lr),
        "--precision",
        precision.value,
    ]
    if compile:
        args.append("--compile")
    for tag in tags or []:
        args += ["--tag", tag]
    if checkpoint is not None:
        args += ["--resume", checkpoint]
    return ddp(
        *args,
        *extra,
        script="examples/components/train.py",
        name="trainer",
        j=j,
        env=env,
        image=image,
    )
