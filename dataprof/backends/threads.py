"""Thread workers: the same dataset, batch sampler and collate function loaded by threads of the one process.

Where the installed ``torch.utils.data.DataLoader`` takes ``worker_method`` (PyTorch's own thread workers,
found by its signature, never by its version), a thread config is that DataLoader with
``worker_method="thread"``. Else, where ``torchdata`` is installed, it is the pipeline of torchdata's migration
guide: the batch sampler → ``ParallelMapper`` (``method="thread"``, each thread fetches and collates a whole
batch, as a DataLoader worker does) → ``PinMemory`` (on a GPU) → ``Prefetcher``. Both yield the batches a
DataLoader yields, in its order.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dataprof.backends.target import describe_exception
from dataprof.results.knobs import TORCH_THREAD_ARGUMENT, LoaderConfig


def thread_loader(loader_arguments: Sequence[str]) -> str | None:
    """What builds a thread config's loader here: ``torch`` (the DataLoader's own thread workers),
    ``torchdata.nodes``, or None when neither is installed."""
    if TORCH_THREAD_ARGUMENT in loader_arguments:
        return "torch"
    return "torchdata.nodes" if importlib.util.find_spec("torchdata") is not None and \
        importlib.util.find_spec("torchdata.nodes") is not None else None


class SampleError(Exception):
    """A sample that raised in a loader thread: its index and the user's file and line."""


class FetchBatch:
    """A thread's work: fetch a batch's samples (``__getitems__`` where the dataset has it) and collate them.

    A sample that raises is remembered (the first one, with its index and the user's frame), so the loader can
    name it: torchdata re-raises a thread's error as text, without its index.
    """

    def __init__(self, dataset: Any, collate: Callable[[list[Any]], Any]) -> None:
        self.dataset = dataset
        self.collate = collate
        self.many = getattr(type(dataset), "__getitems__", None) is not None
        self.failure: str | None = None
        self._lock = threading.Lock()

    def __call__(self, indices: list[int]) -> Any:
        if self.many:
            try:
                return self.collate(self.dataset.__getitems__(indices))
            except Exception as exc:
                self._remember(f"dataset.__getitems__({indices[:4]}{'…' if len(indices) > 4 else ''})", exc)
                raise
        samples = []
        for index in indices:
            try:
                samples.append(self.dataset[index])
            except Exception as exc:
                self._remember(f"dataset[{index}]", exc)
                raise
        return self.collate(samples)

    def _remember(self, what: str, exc: BaseException) -> None:
        with self._lock:
            if self.failure is None:
                self.failure = f"in a loader thread: {what} raised {describe_exception(exc)}"


class NodesLoader:
    """A ``torchdata.nodes`` pipeline over threads, iterated as a DataLoader is: each ``iter()`` an epoch.

    ``batch_sampler``: yields each batch's indices (the DataLoader's own ``BatchSampler``, so the batches are
    the same); ``config.pin_memory``: batches are pinned for the current accelerator.
    """

    def __init__(self, dataset: Any, batch_sampler: Any, collate: Callable[[list[Any]], Any],
                 config: LoaderConfig) -> None:
        import torchdata.nodes as tn

        self.fetch = FetchBatch(dataset, collate)
        node: Any = tn.SamplerWrapper(batch_sampler)
        node = tn.ParallelMapper(node, map_fn=self.fetch, num_workers=config.num_workers, method="thread",
                                 in_order=config.in_order is not False)
        if config.pin_memory:
            node = tn.PinMemory(node)
        self.nodes = [node]
        node = tn.Prefetcher(node, prefetch_factor=config.prefetched_batches)
        self.nodes.append(node)
        self.loader = tn.Loader(node)

    def __iter__(self) -> NodesIterator:
        return NodesIterator(self)

    def shutdown(self) -> None:
        """Stop and join the threads of every node, the Prefetcher's first (they are daemons: a trial's end
        would stop them anyway, but a dataset fetched after must not meet them still running)."""
        for node in reversed(self.nodes):
            inner = getattr(node, "_it", None)
            while inner is not None and not hasattr(inner, "_shutdown"):  # a node's iterator may wrap another
                inner = getattr(inner, "_it", None)
            if inner is not None:
                inner._shutdown()


_END = object()
"""What ``next`` gives at the end of an epoch (:meth:`NodesIterator.__next__`)."""


class NodesIterator:
    """One epoch of a :class:`NodesLoader`: a sample that raised in a thread is named by its index; stopped as
    a DataLoader's iterator is (``_shutdown_workers``)."""

    def __init__(self, loader: NodesLoader) -> None:
        self.loader = loader
        self.inner = iter(loader.loader)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self.inner, _END)
        except Exception as exc:
            if self.loader.fetch.failure is not None:
                raise SampleError(self.loader.fetch.failure) from exc
            raise
        if batch is _END:  # the epoch's end is not caught here: a caught StopIteration kept the pipeline's
            raise StopIteration  # threads alive past the next epoch's start, which a plain loop's reset joins
        return batch

    def _shutdown_workers(self) -> None:
        self.loader.shutdown()
