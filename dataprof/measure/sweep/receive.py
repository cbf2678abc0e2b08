"""The main process's share of receiving a batch from a worker: unpickling it (:class:`ReceiveTimer`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class ReceiveTimer:
    """Times the main process's unpickling of worker results (``multiprocessing.queues`` loads).

    Rebuilding a batch's tensors (a file descriptor fetched from the worker
    for each) and its Python objects happens there, in the main process,
    whatever the number of workers: a serial cost that can cap throughput.
    """

    def __init__(self, inner: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        self.inner = inner
        self.clock = clock
        self.busy_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def loads(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        """Unpickle a worker's result, timing it."""
        start = self.clock()
        try:
            return self.inner.loads(data, *args, **kwargs)
        finally:
            self.busy_s += self.clock() - start

    @classmethod
    def install(cls) -> ReceiveTimer:
        """Wrap the pickler the DataLoader's result queue uses (in this trial process only)."""
        import multiprocessing.queues

        timer = cls(multiprocessing.queues._ForkingPickler)  # type: ignore[attr-defined]
        multiprocessing.queues._ForkingPickler = timer  # type: ignore[attr-defined]
        return timer
