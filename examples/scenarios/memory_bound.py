"""Each process caches 150 MB on first use and each sample waits 5 ms.

More workers would be faster, but the memory limit stops them.
"""

import os
import time

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "1,2,4,8", "--prefetch-factor", "2", "--batch-size", "16", "--step-ms", "2",
           "--memory-limit", "900MB"]
EXPECTED = {"primary": "memory_bound", "findings": []}


class CachePerWorker(Dataset):
    def __init__(self, cache_mb: int = 150) -> None:
        self.cache_bytes = cache_mb * 1024 * 1024
        self.cache: bytearray | None = None
        self.owner = -1

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.owner != os.getpid():
            self.cache = bytearray(b"\x01" * self.cache_bytes)
            self.owner = os.getpid()
        time.sleep(0.005)
        return torch.full((16,), float(i))
