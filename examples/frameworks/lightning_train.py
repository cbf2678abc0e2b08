"""A LightningModule and a LightningDataModule under ``Trainer.fit``: the loaders are built in the DataModule's
``train_dataloader`` and ``val_dataloader`` hooks, which Lightning calls from inside ``fit`` (and wraps), with a
validation pass each epoch and Lightning's own logs and checkpoints. Nothing in it knows about dataprof.

    python examples/frameworks/lightning_train.py --epochs 2 --workers 2
    dataprof tune examples/frameworks/lightning_train.py --epochs 100 --workers 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from images import JpegDataset  # noqa: E402
from train import TinyCNN  # noqa: E402


class Images(L.LightningDataModule):
    """Decoded, augmented JPEGs: a training split and a validation split."""

    def __init__(self, workers: int = 1, batch_size: int = 32, images: int = 256, size: int = 96,
                 out_size: int = 64, prefetch_factor: int | None = None, val_workers: int | None = None) -> None:
        super().__init__()
        self.workers, self.batch_size, self.prefetch_factor = workers, batch_size, prefetch_factor
        self.val_workers = workers if val_workers is None else val_workers
        self.images, self.size, self.out_size = images, size, out_size

    def setup(self, stage: str) -> None:
        self.train_set = JpegDataset(count=self.images, size=self.size, out_size=self.out_size)
        self.val_set = JpegDataset(count=self.images // 4, size=self.size, out_size=self.out_size)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.workers,
                          persistent_workers=self.workers > 0,
                          prefetch_factor=self.prefetch_factor if self.workers else None)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=self.val_workers,
                          persistent_workers=self.val_workers > 0)


class Classifier(L.LightningModule):
    """The tiny CNN of examples/train.py, trained with SGD."""

    def __init__(self) -> None:
        super().__init__()
        self.model, self.loss = TinyCNN(), nn.CrossEntropyLoss()

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        images, labels = batch
        return self.loss(self.model(images), labels)

    def validation_step(self, batch: Any, index: int) -> None:
        images, labels = batch
        self.log("val_loss", self.loss(self.model(images), labels))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class StepTimes(L.Callback):
    """Print each training step's own time (data included, the validation between epochs left out)."""

    def __init__(self) -> None:
        self.last, self.took, self.steps = time.perf_counter(), 0.0, 0

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.last = time.perf_counter()
        self.took, self.steps = 0.0, 0

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any,
                           index: int) -> None:
        now = time.perf_counter()
        print(f"step {trainer.global_step} time {now - self.last:.4f}", flush=True)
        self.took, self.steps, self.last = self.took + now - self.last, self.steps + 1, now

    def on_validation_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        loader = trainer.val_dataloaders
        print(f"val loader: num_workers={loader.num_workers} prefetch_factor={loader.prefetch_factor} "
              f"persistent_workers={loader.persistent_workers}", flush=True)
        if not trainer.sanity_checking and self.steps:  # the epoch's training is over: its validation apart
            print(f"train epoch {trainer.current_epoch}: {self.steps} steps in {self.took:.4f} s", flush=True)
            self.steps = 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--val-workers", type=int, default=None, help="the validation loader's (default: --workers)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--prefetch-factor", type=int, default=None, help="batches each worker loads ahead")
    parser.add_argument("--eval-first", type=int, default=0, metavar="K",
                        help="validate K times before fitting (trainer.validate: a resumed run checking its model)")
    opts = parser.parse_args()
    trainer = L.Trainer(max_epochs=opts.epochs, accelerator="cpu", devices=1, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[StepTimes()], log_every_n_steps=1)
    model, data = Classifier(), Images(opts.workers, opts.batch_size, opts.images, prefetch_factor=opts.prefetch_factor,
                                       val_workers=opts.val_workers)
    for _ in range(opts.eval_first):
        trainer.validate(model, datamodule=data, verbose=False)
    trainer.fit(model, datamodule=data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
