"""Each sample costs 3 ms of CPU (a heavy augmentation).

Throughput stops at the number of usable CPUs.
"""

import time

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,1,2,4", "--prefetch-factor", "2", "--batch-size", "8", "--step-ms", "2"]
EXPECTED = {"primary": "cpu_bound", "findings": []}


class HeavyAugment(Dataset):
    def __init__(self, cpu_ms: float = 3.0) -> None:
        self.cpu_s = cpu_ms / 1000

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> torch.Tensor:
        end = time.thread_time() + self.cpu_s
        x = float(i)
        while time.thread_time() < end:
            x = (x * 1.000001 + 1.0) % 1e6
        return torch.full((16,), x)
