"""A healthy loader: cheap in-memory samples and a 50 ms model step.

dataprof should say the loader keeps up and stay quiet otherwise. The step is long enough that a batch
loaded at a busy machine's pace (about 1 ms, with stragglers) stays far below the 5% wait at which the
loader becomes the verdict.
"""

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,2", "--prefetch-factor", "2", "--batch-size", "32", "--step-ms", "50"]
EXPECTED = {"primary": "model_bound", "findings": []}


class InMemory(Dataset):
    def __init__(self, n: int = 50_000) -> None:
        self.data = torch.randn(n, 16)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i]
