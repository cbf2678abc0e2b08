"""An epoch is two batches: the workers wait at every epoch's start, not on storage or CPU.

Like a small cached dataset (MONAI's CacheDataset of a few dozen volumes) with
a large batch: each epoch hands out 2 batches to 4 workers, so 2 of them sit
idle, and each epoch starts with its pipeline empty. Nearly all the loop's
waiting is for each epoch's first batch.
"""

import time

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,4", "--prefetch-factor", "2", "--batch-size", "8", "--step-ms", "2"]
EXPECTED = {"primary": "short_epoch", "findings": []}


class CachedVolumes(Dataset):
    def __init__(self, n: int = 16) -> None:
        self.volumes = [torch.full((8, 8, 8), float(i)) for i in range(n)]

    def __len__(self) -> int:
        return len(self.volumes)

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.004)  # a random crop and intensity transform of a cached volume
        return self.volumes[i].clone()
