"""Loader targets: point dataprof at what your training builds, a DataLoader factory or a LightningDataModule.

``make_loader`` is the function a training script has: a dataset of simulated remote reads, a sampler that
draws by weight, a collate function that pads to the longest sample, a ``worker_init_fn`` that seeds each
worker, and the settings the script runs with (``num_workers=2``). dataprof keeps all of it, sweeps the
knobs, measures your settings first and says how far they are from the best:

    dataprof sweep examples/loaders.py:make_loader
    dataprof sweep examples/loaders.py:make_loader --arg workers=4 --step-ms 20

``RemoteImagesDataModule`` is the same data as a LightningDataModule (``pip install lightning``): dataprof
calls ``prepare_data()``, ``setup("fit")`` and ``train_dataloader()`` (``--split val`` for the other):

    dataprof sweep examples/loaders.py:RemoteImagesDataModule
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler, get_worker_info


class RemoteRecords(Dataset):
    """Records of varying length, each after a simulated ``latency_ms`` read."""

    def __init__(self, length: int = 20_000, latency_ms: float = 4.0, seed: int = 0) -> None:
        self.length = length
        self.latency_s = latency_ms / 1000.0
        self.seed = seed
        self.jitter = random.Random(seed)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.latency_s)
        size = 16 + index % 48
        return torch.full((size,), float(index)), index % 10


def pad_collate(samples: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """Pad every record to the longest in the batch; keep the lengths and labels."""
    longest = max(record.shape[0] for record, _ in samples)
    values = torch.zeros(len(samples), longest)
    for row, (record, _) in enumerate(samples):
        values[row, :record.shape[0]] = record
    return {"values": values, "lengths": torch.tensor([r.shape[0] for r, _ in samples]),
            "labels": torch.tensor([label for _, label in samples])}


def seed_worker(worker_id: int) -> None:
    """Give each worker its own jitter stream, as training scripts do for their augmentations."""
    info = get_worker_info()
    assert info is not None
    info.dataset.jitter = random.Random(info.dataset.seed + worker_id)  # type: ignore[attr-defined]


def make_loader(length: int = 20_000, workers: int = 2, batch_size: int = 32) -> DataLoader:
    """The training loader: weighted sampling, padding collate, seeded workers."""
    dataset = RemoteRecords(length)
    weights = torch.tensor([1.0 + (i % 10 == 0) for i in range(length)])
    return DataLoader(dataset, batch_size=batch_size, sampler=WeightedRandomSampler(weights, length),
                      collate_fn=pad_collate, worker_init_fn=seed_worker, num_workers=workers,
                      prefetch_factor=2 if workers else None, persistent_workers=workers > 0)


def _lightning() -> Any:
    try:
        import lightning
    except ImportError:
        return object
    return lightning.LightningDataModule


class RemoteImagesDataModule(_lightning()):  # type: ignore[misc]
    """``make_loader``'s data as a LightningDataModule: the loaders exist once ``setup`` has run."""

    def __init__(self, length: int = 20_000, batch_size: int = 32, num_workers: int = 2) -> None:
        super().__init__()
        self.length, self.batch_size, self.num_workers = length, batch_size, num_workers

    def setup(self, stage: str) -> None:
        cut = int(0.9 * self.length)
        self.train_set = torch.utils.data.Subset(RemoteRecords(self.length), range(cut))
        self.val_set = torch.utils.data.Subset(RemoteRecords(self.length, seed=1), range(cut, self.length))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, collate_fn=pad_collate,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, collate_fn=pad_collate,
                          num_workers=self.num_workers)
