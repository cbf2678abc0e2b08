"""The dataset keeps 8 million Python floats in a list and reads them in order.

Reading an object writes its reference count, so every page read is copied
into the worker that read it: worker memory grows all epoch long. One epoch
(1000 samples, about 5 s with 2 workers) outlasts warm-up plus the timed
window, so the window sees the growth rather than an epoch that has already
copied everything.
"""

import time

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,2", "--prefetch-factor", "2", "--batch-size", "16", "--step-ms", "2",
           "--trial-seconds", "3"]
EXPECTED = {"primary": None, "findings": ["copy_on_read"]}


class PythonObjects(Dataset):
    def __init__(self, n: int = 8_000_000, per_sample: int = 8000) -> None:
        self.values = [float(i) for i in range(n)]
        self.per_sample = per_sample

    def __len__(self) -> int:
        return len(self.values) // self.per_sample

    def __getitem__(self, i: int) -> torch.Tensor:
        start = i * self.per_sample
        total = sum(self.values[start:start + self.per_sample])
        time.sleep(0.01)
        return torch.tensor([total])
