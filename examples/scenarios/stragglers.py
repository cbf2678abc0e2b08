"""One sample in 101 takes 60 ms; the rest take 0.5 ms."""

import time

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,2,4", "--prefetch-factor", "2", "--batch-size", "16", "--step-ms", "5"]
EXPECTED = {"primary": None, "findings": ["stragglers"]}


class SomeSlow(Dataset):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.060 if i % 101 == 0 else 0.0005)
        return torch.full((16,), float(i))
