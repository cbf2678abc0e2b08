"""What ``dataprof run --override`` and ``--replay`` (and so ``dataprof tune``'s runs) change in the script's
loaders: the knobs set where a loader is built, and its first batches replayed in its place."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

from dataprof.backends.threads import thread_loader
from dataprof.results.knobs import REGISTRY, TORCH_THREAD_ARGUMENT, LoaderConfig
from dataprof.results.vocabulary import WorkerKind


class Changes:
    """What the watch changes in the script's loaders (``dataprof run --override``, ``--replay``): the knobs set
    where a loader is built, and its first batches replayed in place of the loader; for every loader, or for
    the one built at ``site`` (``file:line``, as the report names it)."""

    def __init__(self, knobs: dict[str, Any] | None = None, replay: int | None = None,
                 site: str | None = None) -> None:
        self.knobs = knobs or {}
        self.replay = replay
        self.site = site

    def applies(self, site: str) -> bool:
        """Whether the loader built at ``site`` is the one changed."""
        return self.site is None or site == self.site or site.endswith("/" + self.site)


def overridden(init: Callable[..., None], loader: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               knobs: dict[str, Any]) -> tuple[dict[str, Any], LoaderConfig | None]:
    """The loader's constructor arguments as keywords, with ``knobs`` set: the rest as the script passed them;
    the knobs that need workers left at the loader's defaults when it is left none. With thread workers asked
    for (``worker_kind=thread``) where the constructor takes no ``worker_method``, the loader is left no workers
    of its own, and the thread config a ``torchdata.nodes`` pipeline loads its batches with comes second (None
    otherwise)."""
    bound = inspect.signature(init).bind(loader, *args, **kwargs)
    values: dict[str, Any] = {}
    for name, value in list(bound.arguments.items())[1:]:
        kind = bound.signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            raise TypeError("its constructor takes *args: its knobs cannot be set by name")
        values.update(value if kind == inspect.Parameter.VAR_KEYWORD else {name: value})
    values.update(knobs)
    threads = None
    if values.pop("worker_kind", None) == WorkerKind.THREAD and values.get("num_workers"):
        values.pop("persistent_workers", None)
        values.pop("multiprocessing_context", None)
        by = thread_loader(list(bound.signature.parameters))
        if by is None:
            raise TypeError("dataprof: worker_kind=thread needs torchdata (pip install torchdata) or a DataLoader "
                            "that takes worker_method")
        if by == "torch":
            values[TORCH_THREAD_ARGUMENT] = WorkerKind.THREAD.value
        else:
            threads = LoaderConfig(num_workers=int(values.pop("num_workers")),
                                   pin_memory=bool(values.pop("pin_memory", False)),
                                   prefetch_factor=values.pop("prefetch_factor", None),
                                   in_order=values.pop("in_order", None), worker_kind=WorkerKind.THREAD.value)
    if not values.get("num_workers"):
        for knob in REGISTRY:
            if knob.needs_workers:
                values.pop(knob.name, None)
    return values, threads


def streams(loader: Any) -> bool:
    """Whether ``loader`` (a torch DataLoader) streams an ``IterableDataset``."""
    iterable = getattr(sys.modules.get("torch.utils.data"), "IterableDataset", None)
    return iterable is not None and isinstance(getattr(loader, "dataset", None), iterable)


def thread_epoch(loader: Any) -> Any:
    """An epoch of ``loader``'s batches loaded by threads (``worker_kind=thread``): its dataset, batch sampler
    and collate function in a ``torchdata.nodes`` pipeline, built at its first epoch and kept for the others."""
    from dataprof.backends.threads import NodesLoader

    pipeline = loader.__dict__.get("_dataprof_pipeline")
    if pipeline is None:
        if loader.batch_sampler is None or streams(loader):
            raise TypeError("dataprof: worker_kind=thread needs a map-style dataset and a batch size; this "
                            "DataLoader streams an IterableDataset")
        pipeline = NodesLoader(loader.dataset, loader.batch_sampler, loader.collate_fn,
                               loader.__dict__["_dataprof_threads"])
        loader.__dict__["_dataprof_pipeline"] = pipeline
    return iter(pipeline)


def threads_settings(loader: Any) -> dict[str, Any]:
    """A loader whose batches threads load (``worker_kind=thread``, or the DataLoader's own ``worker_method``):
    its thread settings, as a report names them."""
    threads = getattr(loader, "__dict__", {}).get("_dataprof_threads")
    if threads is not None:
        return {"num_workers": threads.num_workers, "prefetch_factor": threads.prefetch_factor or 2,
                "persistent_workers": None, "pin_memory": threads.pin_memory, "worker_kind": WorkerKind.THREAD.value}
    if getattr(loader, TORCH_THREAD_ARGUMENT, None) == WorkerKind.THREAD:
        return {"persistent_workers": None, "worker_kind": WorkerKind.THREAD.value}
    return {}


class Replay:
    """A loader's first ``count`` batches, delivered by it, then delivered again in turn for the rest of each
    epoch (as many batches as the loader has, or without end): the training runs as if data came for free.
    The loader's workers are stopped once the batches are kept."""

    def __init__(self, count: int, length: int | None, began: Callable[[], None] = lambda: None) -> None:
        self.count = count
        self.length = length
        self.kept: list[Any] = []
        self.began = began
        """Called once, when the batches are kept and the replay begins."""

    def epoch(self, inner: Any | None) -> Iterator[Any]:
        """One epoch: from ``inner`` while batches are still to keep (None once they are), then the kept ones."""
        index = 0
        while inner is not None and len(self.kept) < self.count:
            try:
                batch = next(inner)
            except StopIteration:
                return
            self.kept.append(batch)
            index += 1
            if len(self.kept) == self.count:
                self.began()
            yield batch
        if inner is not None:
            stop = getattr(inner, "_shutdown_workers", None)
            if stop is not None:
                stop()
        while self.kept and (self.length is None or index < self.length):
            yield self.kept[index % len(self.kept)]
            index += 1
