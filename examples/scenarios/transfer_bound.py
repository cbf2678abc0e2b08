"""Batches of 64 float32 images at 224×224 (38 MB) that cost little to make.

On a GPU machine the host-to-device copy dominates. Needs --device cuda.
"""

import torch
from torch.utils.data import Dataset

COMMAND = ["--workers", "4", "--prefetch-factor", "2", "--pin-memory", "off", "--batch-size", "64",
           "--step-ms", "2", "--device", "cuda"]
EXPECTED = {"primary": "transfer_bound", "findings": []}
REQUIRES_GPU = True


class FloatImages(Dataset):
    def __init__(self) -> None:
        self.image = torch.rand(3, 224, 224)

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.image
