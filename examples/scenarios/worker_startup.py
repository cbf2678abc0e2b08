"""Opening the data costs 0.3 s in each process, and an epoch is short.

Without persistent_workers every epoch pays the opening again.
"""

import os
import time

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "0,2", "--prefetch-factor", "2", "--persistent-workers", "on,off", "--batch-size", "16",
           "--step-ms", "1"]
EXPECTED = {"primary": None, "findings": ["worker_startup"]}


class SlowOpen(Dataset):
    def __init__(self, n: int = 256) -> None:
        self.n = n
        self.opened_in = -1

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.opened_in != os.getpid():
            time.sleep(0.3)
            self.opened_in = os.getpid()
        time.sleep(0.0002)
        return torch.full((16,), float(i))
