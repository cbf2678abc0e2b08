"""A dataset of ``.npy`` files, one per sample, read from storage: what cold trials are for.

The files are written once into ``root`` (a cache directory by default) and reused after. Each sample is one
``np.load``: a file opened, read and closed, as an ImageFolder reads its JPEGs.

    dataprof sweep examples/files.py:NpyFiles --batch-size 32 --arg count=4096 --arg kib=256
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

DEFAULT_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dataprof" / "examples" / "npy"


def generate(root: Path, count: int, kib: int) -> list[Path]:
    """Write ``count`` files of ``kib`` KiB of float32 noise once (``root/kib/00000.npy`` …), each on storage
    before it is used (the page cache drops only pages that are); reuse them after."""
    folder = root / f"{kib}k"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = [folder / f"{i:05d}.npy" for i in range(count)]
    for path in paths:
        if path.exists():
            continue
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
        with open(tmp, "wb") as handle:
            np.save(handle, rng.standard_normal(kib * 256, dtype=np.float32))
            handle.flush()
            os.fsync(handle.fileno())  # on storage now: a cold trial moments later can evict its pages
        os.replace(tmp, path)
    return paths


class NpyFiles(Dataset):
    """``count`` files of ``kib`` KiB; a sample is the file's mean and its first 16 values, as a tensor."""

    def __init__(self, root: str | None = None, count: int = 2048, kib: int = 256) -> None:
        self.paths = generate(Path(root) if root else DEFAULT_ROOT, count, kib)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        values = np.load(self.paths[index])
        return torch.from_numpy(np.concatenate(([values.mean()], values[:16])))
