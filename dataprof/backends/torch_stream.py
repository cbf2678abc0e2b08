"""A tiny ``torch.utils.data.IterableDataset`` for checks of the DataLoader itself, not of a user's data.

A module of its own, imported only when a check runs: a worker started by spawn finds the class by name.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info


class CountingStream(IterableDataset):
    """Yields ``items`` small tensors, split among the workers as a well-behaved stream is."""

    def __init__(self, items: int) -> None:
        self.items = items

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(first, self.items, step):
            yield torch.full((2,), float(i))
