"""A Hugging Face ``Trainer`` run: the loaders are built by ``Trainer.get_train_dataloader`` and
``get_eval_dataloader`` from ``TrainingArguments(dataloader_num_workers=...)`` and wrapped by accelerate, with
an evaluation and a checkpoint each epoch. The model is the tiny CNN of examples/train.py (no download).
Nothing in it knows about dataprof.

    pip install transformers accelerate
    python examples/frameworks/hf_train.py --epochs 2 --workers 2
    dataprof tune examples/frameworks/hf_train.py --epochs 100 --workers 4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import Trainer, TrainerCallback, TrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from images import JpegDataset  # noqa: E402
from train import TinyCNN  # noqa: E402


class Pixels(Dataset):
    """The JPEG example as a Trainer wants it: a dict of ``pixel_values`` and ``labels`` per sample."""

    def __init__(self, count: int) -> None:
        self.images = JpegDataset(count=count, size=96, out_size=64)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, Any]:
        image, label = self.images[index]
        return {"pixel_values": image, "labels": label}


class Classifier(nn.Module):
    """The tiny CNN, returning its loss as a Trainer expects."""

    def __init__(self) -> None:
        super().__init__()
        self.model, self.loss = TinyCNN(), nn.CrossEntropyLoss()

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.model(pixel_values)
        return {"loss": self.loss(logits, labels), "logits": logits}


class StepTimes(TrainerCallback):
    """Print each training step's own time (data included, the evaluation between epochs left out)."""

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.last = self.started = time.perf_counter()
        self.steps = 0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        print(f"step {state.global_step} time {now - self.last:.4f}", flush=True)
        self.last = now
        self.steps += 1

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        print(f"train epoch {state.epoch:.0f}: {self.steps} steps in {time.perf_counter() - self.started:.4f} s",
              flush=True)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loader = kwargs.get("eval_dataloader")
        if loader is not None:
            print(f"val loader: num_workers={loader.num_workers} prefetch_factor={loader.prefetch_factor} "
                  f"persistent_workers={loader.persistent_workers}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--output-dir", default="hf_out")
    parser.add_argument("--prefetch-factor", type=int, default=None, help="batches each worker loads ahead")
    parser.add_argument("--persistent-workers", action="store_true", help="keep the workers between epochs")
    parser.add_argument("--eval-first", type=int, default=0, metavar="K",
                        help="evaluate before training (eval_on_start), over K times the evaluation set")
    opts = parser.parse_args()
    args = TrainingArguments(output_dir=opts.output_dir, num_train_epochs=opts.epochs,
                             per_device_train_batch_size=opts.batch_size, per_device_eval_batch_size=opts.batch_size,
                             dataloader_num_workers=opts.workers, dataloader_prefetch_factor=opts.prefetch_factor,
                             dataloader_persistent_workers=opts.persistent_workers and opts.workers > 0,
                             eval_strategy="epoch", save_strategy="epoch", eval_on_start=opts.eval_first > 0,
                             logging_steps=10, report_to=[], use_cpu=True, disable_tqdm=True, learning_rate=0.05)
    trainer = Trainer(model=Classifier(), args=args, train_dataset=Pixels(opts.images),
                      eval_dataset=Pixels(opts.images // 4 * max(1, opts.eval_first)), callbacks=[StepTimes()])
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
