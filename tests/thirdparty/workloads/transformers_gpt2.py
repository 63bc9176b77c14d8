"""A transformers Trainer on a tiny, randomly initialised GPT-2, as transformers' docs
run one under torchrun.

It knows nothing of distspec and downloads nothing (HF_HUB_OFFLINE=1 is set before
transformers is imported): the model is ``GPT2LMHeadModel(GPT2Config(...))`` with one
layer and a 100-token vocabulary, the dataset random token ids. The Trainer runs on
CPU with ``ddp_backend="gloo"`` and finds its ranks in torchrun's environment::

    torchrun --nproc_per_node 2 transformers_gpt2.py --steps 3

``--fail-rank R`` makes rank R raise ValueError at the end of its first step.
Each rank prints ``rank R done: trained S steps``.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

VOCAB, LENGTH = 100, 16


class RandomTokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (size, LENGTH), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Report(TrainerCallback):
    def __init__(self, fail_rank: int | None) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.fail_rank = fail_rank

    def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
        if logs and "loss" in logs:
            print(f"step {state.global_step} rank {self.rank} loss {logs['loss']:.4f}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if self.fail_rank == self.rank:
            raise ValueError(f"rank {self.rank} fails on purpose after step {state.global_step}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--fail-rank", type=int, default=None)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=1, n_head=2)
    with tempfile.TemporaryDirectory(prefix="gpt2-tiny-") as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir,
            use_cpu=True,
            ddp_backend="gloo",
            max_steps=args.steps,
            per_device_train_batch_size=4,
            learning_rate=1e-3,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = Trainer(
            model=GPT2LMHeadModel(config),
            args=training_args,
            train_dataset=RandomTokens(64),
            callbacks=[Report(args.fail_rank)],
        )
        result = trainer.train()
    rank = training_args.process_index
    print(f"rank {rank} done: trained {result.global_step} steps", flush=True)


if __name__ == "__main__":
    main()
