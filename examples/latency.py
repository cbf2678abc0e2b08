"""Latency-bound datasets: each sample waits on simulated remote storage.

``RemoteReadDataset`` stands for an object store or network filesystem: every
``__getitem__`` blocks for ``latency_ms`` (the CPU stays idle) and then builds
a small tensor. More workers keep scaling well past the core count.

``SleepDataset`` is the analytic ground truth: ``W`` workers deliver exactly
``W / sleep_s`` samples/s while the CPU is not saturated.

    dataprof sweep examples/latency.py:RemoteReadDataset --batch-size 16
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class SleepDataset(Dataset):
    """Each sample sleeps ``sleep_ms`` and returns a tiny tensor."""

    def __init__(self, length: int = 100_000, sleep_ms: float = 10.0, sample_floats: int = 16) -> None:
        self.length = length
        self.sleep_s = sleep_ms / 1000.0
        self.sample_floats = sample_floats

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.full((self.sample_floats,), float(index))


class RemoteReadDataset(Dataset):
    """Simulated object-store reads: ``latency_ms`` of waiting, then a 3×64×64 image."""

    def __init__(self, length: int = 50_000, latency_ms: float = 8.0, image_size: int = 64) -> None:
        self.length = length
        self.latency_s = latency_ms / 1000.0
        self.image_size = image_size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.latency_s)  # the round trip to storage
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, self.image_size, self.image_size, generator=generator)
        return image, index % 10
