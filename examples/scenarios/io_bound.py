"""Each sample waits 5 ms (a remote read) and uses almost no CPU.

Throughput scales with workers far past the CPU count.
"""

import time

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,2,4,8", "--prefetch-factor", "2", "--batch-size", "16", "--step-ms", "5"]
EXPECTED = {"primary": "io_bound", "findings": []}


class RemoteReads(Dataset):
    def __init__(self, latency_ms: float = 5.0) -> None:
        self.latency_s = latency_ms / 1000

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.latency_s)
        return torch.full((16,), float(i))
