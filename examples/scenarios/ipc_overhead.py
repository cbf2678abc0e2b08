"""Tiny samples in batches of 4: handing a batch between processes costs more than making it."""

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,1,2", "--prefetch-factor", "2", "--batch-size", "4"]
EXPECTED = {"primary": "main_process_bound", "findings": ["ipc_overhead"]}


class Tiny(Dataset):
    def __init__(self, n: int = 100_000) -> None:
        self.data = torch.arange(n)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i]
