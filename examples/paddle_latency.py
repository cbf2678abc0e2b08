"""A PaddlePaddle dataset whose samples wait on simulated remote storage.

``RemoteReadDataset`` is ``examples/latency.py``'s dataset written for
``paddle.io``: every ``__getitem__`` blocks for ``latency_ms`` (the CPU stays
idle, as on an object store or network filesystem), builds a 3×64×64 image
and normalises it with a ``paddle.vision.transforms.Compose``. More workers
keep scaling well past the core count. dataprof sees a ``paddle.io.Dataset``
and sweeps ``paddle.io.DataLoader``'s own arguments:

    pip install -e ".[paddle]"
    dataprof sweep examples/paddle_latency.py:RemoteReadDataset --batch-size 16
    dataprof inspect examples/paddle_latency.py:RemoteReadDataset
"""

from __future__ import annotations

import time
import warnings

import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # paddle warns about ccache at import
    from paddle.io import Dataset
    from paddle.vision import transforms as T


class SleepDataset(Dataset):
    """The analytic ground truth: each sample sleeps ``sleep_ms``, so W workers deliver W / sleep_s samples/s."""

    def __init__(self, length: int = 100_000, sleep_ms: float = 10.0, sample_floats: int = 16) -> None:
        super().__init__()
        self.length = length
        self.sleep_s = sleep_ms / 1000.0
        self.sample_floats = sample_floats

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> np.ndarray:
        time.sleep(self.sleep_s)
        return np.full((self.sample_floats,), float(index), dtype=np.float32)


class RemoteReadDataset(Dataset):
    """Simulated object-store reads: ``latency_ms`` of waiting, then a normalised 3×64×64 image and a label."""

    def __init__(self, length: int = 50_000, latency_ms: float = 8.0, image_size: int = 64) -> None:
        super().__init__()
        self.length = length
        self.latency_s = latency_ms / 1000.0
        self.image_size = image_size
        self.transform = T.Compose([T.Normalize(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25], data_format="CHW")])

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.int64]:
        time.sleep(self.latency_s)  # the round trip to storage
        image = np.random.default_rng(index).random((3, self.image_size, self.image_size), dtype=np.float32)
        return self.transform(image).astype(np.float32), np.int64(index % 10)
