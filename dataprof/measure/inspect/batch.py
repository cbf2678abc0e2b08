"""A batch as a DataLoader worker makes it, measured in this process: the batch fetch of a dataset that fetches
a batch's samples at once, the collation, and the pickled dataset (what a spawned worker is sent)."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dataprof.backends.target import describe_exception

COLLATE_REPEATS = 5
COLLATE_BUDGET_S = 2.0


class _CountingSink:
    """A write-only file that counts bytes, so pickling a large dataset never holds the bytes."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, chunk: Any) -> int:
        """Count the bytes written (the pickled size), keep none: bytes, or a buffer handed over whole (protocol 5
        writes a large one, an Arrow table's, as a ``PickleBuffer``, which has no ``len()``)."""
        size = memoryview(chunk).nbytes
        self.size += size
        return size


def pickled_size(dataset: Any) -> tuple[int | None, float | None, str | None]:
    """Bytes and seconds to pickle the dataset (what spawn/forkserver send to every worker), or the error."""
    sink = _CountingSink()
    start = time.perf_counter()
    try:
        pickle.dump(dataset, sink, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        return None, None, describe_exception(exc)
    return sink.size, time.perf_counter() - start, None


@dataclass(frozen=True)
class Collated:
    """The kept samples collated a few times: each time's wall and CPU seconds, what the batch weighs
    (``backends.common.footprint``), or why collating raised; all empty when there was nothing to collate."""

    wall: tuple[float, ...] = ()
    cpu: tuple[float, ...] = ()
    batch_bytes: int | None = None
    batch_tensors: int | None = None
    batch_objects: int | None = None
    error: str | None = None


def batched(dataset: Any, indices: list[int], batch: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """A dataset that fetches a batch's samples at once (``__getitems__``, as Hugging Face datasets do), as a
    DataLoader fetches them: the sampled indices in batches of ``batch``, the wall and CPU time per sample of each
    batch (within the collation's budget); none for a dataset without it, or one whose batch fetch raises."""
    getitems = getattr(type(dataset), "__getitems__", None)
    if getitems is None or batch < 1:
        return (), ()
    wall: list[float] = []
    cpu: list[float] = []
    begin = time.perf_counter()
    for start in range(0, len(indices) - batch + 1, batch):
        if time.perf_counter() - begin > COLLATE_BUDGET_S:
            break
        chunk = indices[start:start + batch]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            getitems(dataset, chunk)
        except Exception:
            return (), ()
        wall.append((time.perf_counter() - wall0) / len(chunk))
        cpu.append((time.process_time() - cpu0) / len(chunk))
    return tuple(wall), tuple(cpu)


def collated(collate: Callable[[list[Any]], Any], samples: list[Any]) -> Collated:
    """Collate the kept samples a few times (median is used), and weigh the batch."""
    from dataprof.backends.common import footprint

    wall: list[float] = []
    cpu: list[float] = []
    batch: Any = None
    begin = time.perf_counter()
    while len(wall) < COLLATE_REPEATS and (not wall or time.perf_counter() - begin < COLLATE_BUDGET_S):
        cpu0, start = time.process_time(), time.perf_counter()
        try:
            batch = collate(samples)
        except Exception as exc:
            return Collated(error=describe_exception(exc))
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu0)
    weight = footprint(batch)
    return Collated(tuple(wall), tuple(cpu), weight["bytes"], weight["tensors"], weight["objects"])
