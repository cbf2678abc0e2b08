"""A healthy loader: cheap in-memory samples and a 20 ms model step.

dataprof should say the loader keeps up and stay quiet otherwise.
"""

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,2", "--prefetch-factor", "2", "--batch-size", "32", "--step-ms", "20"]
EXPECTED = {"primary": "model_bound", "findings": []}


class InMemory(Dataset):
    def __init__(self, n: int = 50_000) -> None:
        self.data = torch.randn(n, 16)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i]
