"""Batches of 64 float32 images at 224×224 (38 MB) that cost little to make.

A sample costs about 0.1 ms of CPU (a scale and a clamp), so loading in the
main process (num_workers=0) is clearly slower than 4 workers; with workers,
the host-to-device copy dominates each iteration. Needs --device cuda.
"""

import torch
from torch.utils.data import Dataset

COMMAND = ["--strategy", "grid", "--no-rules-of-thumb",
           "--workers", "4", "--prefetch-factor", "2", "--pin-memory", "off", "--batch-size", "64",
           "--step-ms", "2", "--device", "cuda"]
EXPECTED = {"primary": "transfer_bound", "findings": []}
REQUIRES_GPU = True


class FloatImages(Dataset):
    def __init__(self) -> None:
        self.image = torch.rand(3, 224, 224)

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.clamp(self.image * 1.0, 0.0, 1.0)
