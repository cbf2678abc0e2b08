"""Each sample is 64 small tensors; making one takes 4 ms of waiting.

Workers make batches quickly, but the main process rebuilds every tensor of
every batch, fetching a file descriptor from the worker for each: it is the
serial step that caps throughput however many workers there are.
"""

import time

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "4,8", "--prefetch-factor", "2", "--batch-size", "16"]
EXPECTED = {"primary": "main_process_bound", "findings": []}


class ManyTensors(Dataset):
    def __init__(self, fields: int = 64) -> None:
        self.fields = fields

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, ...]:
        time.sleep(0.004)
        return tuple(torch.full((4,), float(i + k)) for k in range(self.fields))
