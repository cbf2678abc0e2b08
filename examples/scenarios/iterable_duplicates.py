"""An IterableDataset that does not shard: every worker yields the whole stream."""

import time
from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,2", "--prefetch-factor", "2", "--batch-size", "16", "--step-ms", "1"]
EXPECTED = {"primary": None, "findings": ["iterable_duplicates"]}


class Unsharded(IterableDataset):
    def __init__(self, n: int = 2000) -> None:
        self.n = n

    def __iter__(self) -> Iterator[torch.Tensor]:
        for i in range(self.n):
            time.sleep(0.0001)
            yield torch.full((16,), float(i))
