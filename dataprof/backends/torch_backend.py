"""PyTorch: check that a dataset can be batched, and build its DataLoader."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from dataprof.backends.common import RecordingBatchSampler
from dataprof.backends.threads import NodesLoader, thread_loader
from dataprof.errors import TargetError
from dataprof.results.knobs import TORCH_THREAD_ARGUMENT, LoaderConfig
from dataprof.results.vocabulary import DatasetKind


class TorchBackend:
    """``torch.utils.data.DataLoader``."""
    name = "torch"
    internal_paths: tuple[str, ...] = ("/torch/",)

    def version(self) -> str:
        """The installed torch's version."""
        import torch

        return str(torch.__version__)

    def dataset_kind(self, dataset: Any) -> str:
        """``iterable`` for IterableDataset or objects with only ``__iter__``; else ``map``."""
        from torch.utils.data import IterableDataset

        if isinstance(dataset, IterableDataset):
            return "iterable"
        cls = type(dataset)
        return "map" if hasattr(cls, "__getitem__") and hasattr(cls, "__len__") else "iterable"

    def default_collate(self) -> Callable[[list[Any]], Any]:
        """``torch.utils.data.default_collate``."""
        from torch.utils.data import default_collate

        return default_collate  # type: ignore[no-any-return]

    def loader_arguments(self) -> tuple[str, ...]:
        """The parameter names of the installed ``torch.utils.data.DataLoader``."""
        from torch.utils.data import DataLoader

        return tuple(inspect.signature(DataLoader).parameters)

    def build_loader(self, dataset: Any, config: LoaderConfig, batch_size: int,
                     collate_fn: Callable[[list[Any]], Any] | None, shuffle: bool,
                     drop_last: bool, shard: tuple[int, int] = (0, 1)) -> tuple[Any, RecordingBatchSampler | None]:
        """A real ``torch.utils.data.DataLoader`` for this config; with several ranks, over this rank's
        ``DistributedSampler`` shard (an IterableDataset shards itself, as in training)."""
        from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler, SequentialSampler

        kwargs = config.dataloader_kwargs()
        if collate_fn is not None:
            kwargs["collate_fn"] = collate_fn
        iterable = self.dataset_kind(dataset) == DatasetKind.ITERABLE
        if config.threads and iterable:
            raise TargetError("thread workers load a map-style dataset: threads cannot shard an IterableDataset")
        if iterable:
            return DataLoader(dataset, batch_size=batch_size, drop_last=drop_last, **kwargs), None
        rank, world_size = shard
        sampler: Any
        if world_size > 1:
            sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle)
        else:
            sampler = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        recording = RecordingBatchSampler(BatchSampler(sampler, batch_size, drop_last))
        if config.threads:
            return self._thread_loader(dataset, recording, config, kwargs), recording
        return DataLoader(dataset, batch_sampler=recording, **kwargs), recording

    def _thread_loader(self, dataset: Any, batches: RecordingBatchSampler, config: LoaderConfig,
                       kwargs: dict[str, Any]) -> Any:
        """``config`` over threads (:mod:`dataprof.backends.threads`): the DataLoader's own thread workers, else
        a ``torchdata.nodes`` pipeline; a TargetError when neither is installed."""
        from torch.utils.data import DataLoader

        kind = thread_loader(self.loader_arguments())
        if kind == "torch":
            return DataLoader(dataset, batch_sampler=batches, **{**kwargs, TORCH_THREAD_ARGUMENT: "thread"})
        if kind is None:
            raise TargetError("thread workers need torchdata (pip install torchdata) or a torch whose DataLoader "
                              f"takes {TORCH_THREAD_ARGUMENT}")
        return NodesLoader(dataset, batches, kwargs.get("collate_fn") or self.default_collate(), config)

    def get_threads(self) -> int:
        """torch's intra-op CPU threads (``torch.get_num_threads()``)."""
        import torch

        return torch.get_num_threads()

    def set_threads(self, threads: int) -> None:
        """Set torch's intra-op CPU threads."""
        import torch

        torch.set_num_threads(threads)

    def sharing_strategy(self) -> str | None:
        """``torch.multiprocessing``'s sharing strategy (``file_descriptor``: an open file per tensor in flight)."""
        import torch.multiprocessing

        return str(torch.multiprocessing.get_sharing_strategy())

    def shutdown(self, iterator: Any) -> None:
        """Stop a loader iterator's workers (``_shutdown_workers``)."""
        stop = getattr(iterator, "_shutdown_workers", None)
        if stop is not None:
            stop()

    def counting_stream(self, items: int) -> Any:
        """A tiny ``torch.utils.data.IterableDataset`` of ``items`` tensors, split among workers."""
        from dataprof.backends.torch_stream import CountingStream

        return CountingStream(items)

    def left_behind(self, pids: Iterable[int]) -> list[str]:
        """None: a tensor's shared memory is unlinked once it is mapped (``file_descriptor``), or its manager
        (``torch_shm_manager``, for ``file_system``) frees it when its last user ends."""
        return []
