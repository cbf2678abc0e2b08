"""A tiny ``paddle.io.IterableDataset`` for checks of the DataLoader itself, not of a user's data.

A module of its own, imported only when a check runs: a worker started by spawn finds the class by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dataprof.backends.frameworks import import_paddle

paddle = import_paddle()


class CountingStream(paddle.io.IterableDataset):  # type: ignore[misc,name-defined]
    """Yields ``items`` small arrays, split among the workers as a well-behaved stream is."""

    def __init__(self, items: int) -> None:
        self.items = items

    def __iter__(self) -> Iterator[Any]:
        info = paddle.io.get_worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(first, self.items, step):
            yield np.full((2,), i, dtype="float32")
