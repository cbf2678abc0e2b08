"""What both frameworks share: describing samples, weighing batches, checking that they batch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

from dataprof.backends.target import describe_exception
from dataprof.errors import TargetError
from dataprof.results.vocabulary import DatasetKind


def dataset_length(dataset: Any) -> int | None:
    """``len(dataset)``, or None for a dataset without a length (a stream)."""
    try:
        return len(dataset)
    except Exception:
        return None


def describe_sample(sample: Any, depth: int = 0) -> str:
    """Structure of a sample: ``(Tensor[3,32,32] float32, int)``."""
    if depth > 3:
        return "…"
    shape = getattr(sample, "shape", None)
    dtype = getattr(sample, "dtype", None)
    if shape is not None and dtype is not None:
        kind = str(dtype).replace("torch.", "").replace("paddle.", "")
        return f"{type(sample).__name__}[{','.join(str(s) for s in shape)}] {kind}"
    if isinstance(sample, dict):
        inner = ", ".join(f"{k!r}: {describe_sample(v, depth + 1)}" for k, v in list(sample.items())[:6])
        return "{" + inner + "}"
    if isinstance(sample, (list, tuple)):
        inner = ", ".join(describe_sample(v, depth + 1) for v in sample[:6])
        return ("(" + inner + ")") if isinstance(sample, tuple) else ("[" + inner + "]")
    return type(sample).__name__


def first_samples(dataset: Any, kind: str, count: int) -> list[Any]:
    """Fetch the first ``count`` samples; a failing index becomes a TargetError."""
    if kind == DatasetKind.ITERABLE:
        try:
            return list(islice(iter(dataset), count))
        except Exception as exc:
            raise TargetError(f"iterating the dataset raised {describe_exception(exc)}") from exc
    samples = []
    for index in range(min(count, dataset_length(dataset) or 0)):
        try:
            samples.append(dataset[index])
        except Exception as exc:
            raise TargetError(f"dataset[{index}] raised {describe_exception(exc)}") from exc
    return samples


def footprint(obj: Any, depth: int = 0) -> dict[str, int]:
    """What a batch weighs when it crosses from a worker to the main process.

    ``bytes``: array payload (tensors, numpy arrays, bytes, str); ``tensors``:
    arrays, each a shared-memory handle to rebuild; ``objects``: every other
    Python object, each pickled and unpickled on its own.
    """
    if hasattr(obj, "shape") and isinstance(getattr(obj, "nbytes", None), int):
        return {"bytes": obj.nbytes, "tensors": 1, "objects": 0}
    if hasattr(obj, "shape") and hasattr(obj, "element_size") and hasattr(obj, "numel"):
        return {"bytes": int(obj.element_size()) * int(obj.numel()), "tensors": 1, "objects": 0}
    total = {"bytes": len(obj) if isinstance(obj, (bytes, bytearray, str)) else 0, "tensors": 0, "objects": 1}
    children: list[Any] = []
    if depth < 64 and isinstance(obj, dict):
        children = [item for pair in obj.items() for item in pair]
    elif depth < 64 and isinstance(obj, (list, tuple, set, frozenset)):
        children = list(obj)
    for child in children:
        for name, value in footprint(child, depth + 1).items():
            total[name] += value
    return total


def check_batchable(dataset: Any, kind: str, collate: Callable[[list[Any]], Any], batch_size: int) -> dict[str, Any]:
    """Collate the first batch; describe the sample and the batch's footprint, or raise TargetError."""
    if kind == DatasetKind.MAP and not dataset_length(dataset):
        raise TargetError("the dataset is empty (len() is 0): nothing to load")
    samples = first_samples(dataset, kind, batch_size)
    if not samples:
        raise TargetError("the dataset is empty: iterating it yields no sample")
    try:
        batch = collate(samples)
    except Exception as exc:
        shapes = sorted({describe_sample(s) for s in samples})
        detail = f"; samples differ: {' vs '.join(shapes[:3])}" if len(shapes) > 1 else ""
        name = getattr(collate, "__name__", "collate_fn")
        raise TargetError(
            f"samples cannot be batched by {name}: {describe_exception(exc)}{detail} "
            "(make samples the same shape/type, or pass --collate-fn)"
        ) from exc
    weight = footprint(batch)
    return {"sample": describe_sample(samples[0]), "batch_samples": len(samples),
            "batch_bytes": weight["bytes"], "batch_tensors": weight["tensors"], "batch_objects": weight["objects"]}


def defined_by(dataset: Any, package: str) -> bool:
    """Whether the dataset's class derives from a class of ``package`` (checked without importing it)."""
    return any(getattr(cls, "__module__", "").split(".")[0] == package for cls in type(dataset).__mro__)


class RecordingBatchSampler:
    """Wraps a batch sampler and remembers the indices of the last batch handed out.

    With ``num_workers == 0`` the batch that raised is the last one handed out,
    so a failure can be traced to the exact index. It also times the sampler:
    a slow one holds up the main process whatever the worker count.
    """

    def __init__(self, inner: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        self.inner = inner
        self.clock = clock
        self.last: list[int] = []
        self.busy_s = 0.0
        """Time spent inside the wrapped sampler (it runs in the main process)."""

    def __iter__(self) -> Iterator[list[int]]:
        batches = iter(self.inner)
        while True:
            start = self.clock()
            try:
                batch = next(batches)
            except StopIteration:
                return
            self.busy_s += self.clock() - start
            self.last = list(batch)
            yield batch

    def __len__(self) -> int:
        return len(self.inner)


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first collated field, else its length.

    ``default_collate`` gives tensors (or tuples/dicts of them) whose first
    dimension is the batch; a custom collate may return a plain list of samples.
    """
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict) and batch:
        return batch_size_of(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        collated_field = (hasattr(first, "shape") and len(first.shape) > 0) or isinstance(first, dict)
        return batch_size_of(first) if collated_field else len(batch)
    return 1
