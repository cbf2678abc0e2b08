"""A cheap in-memory dataset: the loader is never the bottleneck.

Give the model some work and the report should say so:

    dataprof sweep examples/in_memory.py:InMemoryDataset --step-ms 20
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class InMemoryDataset(Dataset):
    """Pre-built tensors (one storage, no Python objects per sample)."""

    def __init__(self, length: int = 20_000, features: int = 256) -> None:
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(length, features, generator=generator)
        self.labels = torch.randint(0, 10, (length,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[index], self.labels[index]
