"""Three pipelines on either side of the GIL line: where thread workers win, and where they lose.

``CompressedRecords`` decompresses each sample with zlib (C code that releases the GIL, like an image decoder):
threads load it side by side, in one process. ``PythonTokens`` tokenizes text in pure Python (it holds the GIL):
threads take turns, and worker processes win. ``NumpyAugment`` crops, flips and normalises an image with numpy:
small array operations, part C (released) and part Python (held).

    dataprof sweep examples/threads.py:CompressedRecords --batch-size 32 --worker-kind process,thread
    dataprof inspect examples/threads.py:PythonTokens
"""

from __future__ import annotations

import zlib

import numpy as np
import torch
from torch.utils.data import Dataset

WORDS = ("the", "loader", "waits", "for", "data", "while", "gpu", "idles", "batch", "sample", "thread", "process")


class CompressedRecords(Dataset):
    """``length`` records of ``kib`` KiB, each stored zlib-compressed and decompressed on every read."""

    def __init__(self, length: int = 4096, kib: int = 256, records: int = 64) -> None:
        rng = np.random.default_rng(0)
        values = (rng.integers(0, 16, size=kib * 1024, dtype=np.uint8) for _ in range(records))
        self.blobs = [zlib.compress(value.tobytes(), 6) for value in values]  # a few distinct blobs, reused
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        raw = zlib.decompress(self.blobs[index % len(self.blobs)])
        return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8)[:4096].astype(np.float32))


class PythonTokens(Dataset):
    """Sentences tokenized into ids by a Python loop over their words (what a pure-Python tokenizer does)."""

    def __init__(self, length: int = 4096, words: int = 2000, vocabulary: int = 30_000) -> None:
        self.length = length
        self.words = words
        self.vocabulary = vocabulary

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        text = " ".join(WORDS[(index * 7 + i * 13) % len(WORDS)] for i in range(self.words))
        ids = []
        for position, word in enumerate(text.split()):
            ids.append((hash(word) + position * 31) % self.vocabulary)
        return torch.tensor(ids[:512], dtype=torch.int64)


class NumpyAugment(Dataset):
    """A 3×224×224 image cropped to 160, flipped every other sample and normalised, in numpy."""

    def __init__(self, length: int = 4096, images: int = 32) -> None:
        rng = np.random.default_rng(0)
        self.images = [rng.integers(0, 256, size=(3, 224, 224), dtype=np.uint8) for _ in range(images)]
        self.length = length
        self.mean = np.array([123.7, 116.3, 103.5], dtype=np.float32).reshape(3, 1, 1)
        self.std = np.array([58.4, 57.1, 57.4], dtype=np.float32).reshape(3, 1, 1)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        image = self.images[index % len(self.images)]
        top, left = (index * 17) % 64, (index * 29) % 64
        crop = image[:, top:top + 160, left:left + 160]
        if index % 2:
            crop = crop[:, :, ::-1]
        return torch.from_numpy((crop.astype(np.float32) - self.mean) / self.std)
