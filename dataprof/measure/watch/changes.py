"""What ``dataprof run --override`` and ``--replay`` (and so ``dataprof tune``'s runs) change in the script's
loaders: the knobs set where a loader is built, and its first batches replayed in its place."""

from __future__ import annotations

import copy
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from dataprof.backends.threads import thread_loader
from dataprof.measure.watch.sites import retag, tag_of
from dataprof.results.knobs import TORCH_THREAD_ARGUMENT, KnobValues, LoaderConfig
from dataprof.results.registry import REGISTRY
from dataprof.results.vocabulary import Framework, WorkerKind


def overridden(init: Callable[..., None], loader: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
               knobs: KnobValues) -> tuple[dict[str, Any], LoaderConfig | None]:
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
        for knob in REGISTRY:
            if knob.keyword and not knob.threads:
                values.pop(knob.name, None)
        by = thread_loader(list(bound.signature.parameters))
        if by is None:
            raise TypeError("dataprof: worker_kind=thread needs torchdata (pip install torchdata) or a DataLoader "
                            "that takes worker_method")
        if by == Framework.TORCH:
            values[TORCH_THREAD_ARGUMENT] = WorkerKind.THREAD.value
        else:
            taken = {knob.name: values.pop(knob.name) for knob in REGISTRY if knob.threads and knob.name in values}
            taken["pin_memory"] = bool(taken.get("pin_memory")) and _can_pin()
            threads = LoaderConfig(num_workers=int(values.pop("num_workers")), worker_kind=WorkerKind.THREAD.value,
                                   **taken)
    for name in REGISTRY.idle(int(values.get("num_workers") or 0)):
        values.pop(name, None)
    return values, threads


def lost_knobs(loader: Any, asked: Mapping[str, Any], threaded: bool = False) -> dict[str, Any]:
    """The knobs of ``asked`` (set where ``loader`` was built) that it no longer has at its first iteration, with
    the value it has: the script changed them after construction. Knobs that need workers are not checked on a
    loader left none, nor any on a loader whose workers are threads (``threaded``: the watch's thread pipeline
    stands in for them)."""
    if threaded or asked.get("worker_kind"):
        return {}
    workers = getattr(loader, "num_workers", None)
    idle = REGISTRY.idle(workers or 0)
    lost = {}
    for name in ("num_workers", *(knob.name for knob in REGISTRY if knob.attribute)):
        if name not in asked or not hasattr(loader, name) or name in idle:
            continue
        if getattr(loader, name) != asked[name]:
            lost[name] = getattr(loader, name)
    return lost


def _can_pin() -> bool:
    """Whether there is a device to pin batches for: as a DataLoader does, ``pin_memory=True`` pins nothing
    without one (it warns), so the thread pipeline standing in for it adds no pinning stage then."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return bool(cuda is not None and cuda.is_available())


def streams(loader: Any) -> bool:
    """Whether ``loader`` (a torch DataLoader) streams an ``IterableDataset``."""
    iterable = getattr(sys.modules.get("torch.utils.data"), "IterableDataset", None)
    return iterable is not None and isinstance(getattr(loader, "dataset", None), iterable)


def thread_epoch(loader: Any) -> Any:
    """An epoch of ``loader``'s batches loaded by threads (``worker_kind=thread``, as its tag's ``threads`` says):
    its dataset, batch sampler and collate function in a ``torchdata.nodes`` pipeline, built at its first epoch and
    kept on its tag for the others."""
    from dataprof.backends.threads import NodesLoader

    tag = tag_of(loader)
    assert tag is not None and tag.threads is not None
    pipeline = tag.pipeline
    if pipeline is None:
        if loader.batch_sampler is None or streams(loader):
            raise TypeError("dataprof: worker_kind=thread needs a map-style dataset and a batch size; this "
                            "DataLoader streams an IterableDataset")
        pipeline = retag(loader, pipeline=NodesLoader(loader.dataset, loader.batch_sampler, loader.collate_fn,
                                                      tag.threads)).pipeline
    return iter(pipeline)


class Replay:
    """A loader's first ``count`` batches, delivered by it, then delivered again in turn for the rest of each
    epoch (as many batches as the loader has, or without end): the training runs as if data came for free.
    The loader's workers are stopped once the batches are kept. Each batch given again is a fresh container
    (dicts, lists, tuples, mappings such as a ``BatchEncoding``) over the kept tensors: a step that pops a key or
    swaps an entry for its copy on the GPU changes only that delivery."""

    def __init__(self, count: int, length: int | None, began: Callable[[], None] = lambda: None) -> None:
        self.count = count
        self.length = length
        self.kept: list[Any] = []
        self.began = began
        """Called once, when the batches are kept and the replay begins."""
        self.begun = False

    def epoch(self, inner: Any | None) -> ReplayEpoch:
        """One epoch: from ``inner`` while batches are still to keep (None once they are), then the kept ones."""
        return ReplayEpoch(self._batches(inner), self.length)

    def _batches(self, inner: Any | None) -> Iterator[Any]:
        index = 0
        while inner is not None and len(self.kept) < self.count:
            try:
                batch = next(inner)
            except StopIteration:
                return
            self.kept.append(fresh(batch))
            index += 1
            yield batch
        if inner is not None:
            stop = getattr(inner, "_shutdown_workers", None)
            if stop is not None:
                stop()
        # asked for the first batch past those kept: the replay begins (in a later epoch, where the training
        # stopped asking at the epoch's length, as Lightning's loop does, when the last kept one ended an epoch)
        if len(self.kept) == self.count and not self.begun and (self.length is None or index < self.length):
            self.begun = True
            self.began()
        while self.kept and (self.length is None or index < self.length):
            yield fresh(self.kept[index % len(self.kept)])
            index += 1


class ReplayEpoch:
    """An epoch of a replayed loader: its batches, and its length as the loader's (``len(iter(loader))``)."""

    def __init__(self, batches: Iterator[Any], length: int | None) -> None:
        self._batches = batches
        self._length = length

    def __iter__(self) -> ReplayEpoch:
        return self

    def __next__(self) -> Any:
        return next(self._batches)

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError("a replayed stream has no length")
        return self._length


def fresh(batch: Any) -> Any:
    """A new container of ``batch``'s kind over the same tensors (and other leaves): lists, tuples (named ones
    too) and mutable mappings are rebuilt, all the way down."""
    if isinstance(batch, list):
        made = copy.copy(batch)
        made[:] = [fresh(item) for item in batch]
        return made
    if isinstance(batch, tuple):
        items = [fresh(item) for item in batch]
        if hasattr(batch, "_fields"):
            return type(batch)(*items)
        try:
            return type(batch)(items)
        except TypeError:
            return tuple(items)
    if isinstance(batch, MutableMapping):
        mapping: MutableMapping[Any, Any] = copy.copy(batch)
        for name in list(batch.keys()):
            mapping[name] = fresh(batch[name])
        return mapping
    return batch


NODE_DEPTH = 32
"""Nodes followed at most from a ``torchdata.nodes.Loader``'s root to its sampler."""


def pipeline(loader: Any) -> list[Any]:
    """A ``torchdata.nodes.Loader``'s nodes from its root down its sources."""
    nodes: list[Any] = []
    node = loader.root
    while node is not None and len(nodes) < NODE_DEPTH:
        nodes.append(node)
        node = getattr(node, "source", None)
    return nodes


MAPPER, PINNING = "ParallelMapper", "PinMemory"
"""The pipeline's node that loads with workers (it holds their count: ``ParallelMapper.num_workers``), and the
node whose presence pins batches."""


def placed() -> dict[str, tuple[str, str]]:
    """Where a ``torchdata.nodes`` pipeline holds each knob: (node, argument), its workers' count and each knob its
    record places (:attr:`~dataprof.results.registry.Knob.node`)."""
    places = {"num_workers": f"{MAPPER}.num_workers", **{k.name: k.node for k in REGISTRY if k.node is not None}}
    return {name: (place.partition(".")[0], place.partition(".")[2]) for name, place in places.items()}


def _as_held(name: str, value: Any, workers: int) -> Any:
    """A knob's value as its node holds it: the Prefetcher's depth in all (``prefetch_factor`` per worker), the
    mapper's ``method`` word for the worker kind."""
    if name == "prefetch_factor":
        return int(value) * max(1, workers)
    if name == "worker_kind":
        return WorkerKind.THREAD.value if value == WorkerKind.THREAD else WorkerKind.PROCESS.value
    return value


def _as_knob(name: str, held: Any, workers: int) -> Any:
    """A node's argument as the knob's value (:func:`_as_held` undone): the depth per worker, at least one."""
    if name == "prefetch_factor":
        return max(1, int(held) // workers) if isinstance(held, int) and held and workers else None
    if name == "worker_kind":
        return WorkerKind.THREAD.value if held == WorkerKind.THREAD else WorkerKind.PROCESS.value
    return held


def _by_class(loader: Any) -> dict[str, Any]:
    """A ``torchdata.nodes.Loader``'s nodes by their class's name, the nearest the root of each."""
    return {type(node).__name__: node for node in reversed(pipeline(loader))}


def nodes_knobs(loader: Any) -> dict[str, Any]:
    """The knobs a ``torchdata.nodes.Loader``'s pipeline holds, by name, as a DataLoader's would read: each where
    :func:`placed` says (none without the node), pinning where a PinMemory node is."""
    nodes = _by_class(loader)
    workers = int(getattr(nodes.get(MAPPER), "num_workers", 0) or 0)
    found: dict[str, Any] = {"num_workers": workers, "pin_memory": PINNING in nodes}
    for name, (node, argument) in placed().items():
        if node in nodes and name != "num_workers":
            found[name] = _as_knob(name, getattr(nodes[node], argument, None), workers)
    return found


def override_nodes(loader: Any, knobs: Mapping[str, Any]) -> None:
    """Set ``knobs`` in a ``torchdata.nodes.Loader``'s pipeline before its first epoch, each where :func:`placed`
    says: its ParallelMapper built anew by its own constructor (it fixes its workers when built) with the
    arguments asked for; another node's argument set in place (the Prefetcher's depth, per worker of the rebuilt
    mapper). TypeError (one line) for a knob the pipeline has no place for, or a pipeline without the node a knob
    sets."""
    nodes = _by_class(loader)
    knobs = {k: v for k, v in knobs.items() if not (k == "pin_memory" and bool(v) == (PINNING in nodes))}
    places = placed()
    unplaced = sorted(name for name in knobs if name not in places or places[name][0] not in nodes)
    if unplaced:
        raise TypeError(f"dataprof: this torchdata.nodes pipeline has no place for {', '.join(unplaced)}")
    mapper = nodes.get(MAPPER)
    asked = {places[name][1]: _as_held(name, value, 0) for name, value in knobs.items() if places[name][0] == MAPPER}
    if mapper is not None and asked:
        if mapper.prebatch is not None:
            raise TypeError("dataprof: a torchdata.nodes ParallelMapper with prebatch cannot be rebuilt")
        arguments = {**{argument: getattr(mapper, argument) for node, argument in places.values() if node == MAPPER},
                     **asked}
        workers, limit = int(arguments["num_workers"]), mapper.max_concurrent
        fresh = type(mapper)(mapper.source, mapper.map_fn, **{
            "max_concurrent": min(limit, workers) if isinstance(limit, int) and workers else limit,
            "snapshot_frequency": mapper.snapshot_frequency, **arguments, "num_workers": workers})
        mapper.__dict__.update(fresh.__dict__)
    workers = int(getattr(mapper, "num_workers", 0) or 0)
    for name, value in knobs.items():
        node, argument = places[name]
        if node != MAPPER:
            setattr(nodes[node], argument, _as_held(name, value, workers))

