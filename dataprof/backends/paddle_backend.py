"""PaddlePaddle: check that a dataset can be batched, and build its ``paddle.io.DataLoader``.

The swept arguments are read from the installed DataLoader's signature
(versions differ); an argument it lacks is not passed, and the report says so.
Paddle has no ``pin_memory`` argument.
"""

from __future__ import annotations

import glob
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from dataprof.backends.common import RecordingBatchSampler
from dataprof.backends.frameworks import import_paddle
from dataprof.results.knobs import LoaderConfig
from dataprof.results.vocabulary import DatasetKind


class PaddleBackend:
    """``paddle.io.DataLoader``: its knobs as the installed version's signature has them."""
    name = "paddle"
    internal_paths: tuple[str, ...] = ("/paddle/",)

    def version(self) -> str:
        """The installed paddlepaddle's version."""
        return str(import_paddle().__version__)

    def dataset_kind(self, dataset: Any) -> str:
        """``iterable`` for ``paddle.io.IterableDataset`` or objects with only ``__iter__``; else ``map``."""
        paddle = import_paddle()
        if isinstance(dataset, paddle.io.IterableDataset):
            return "iterable"
        cls = type(dataset)
        return "map" if hasattr(cls, "__getitem__") and hasattr(cls, "__len__") else "iterable"

    def default_collate(self) -> Callable[[list[Any]], Any]:
        """``paddle.io.dataloader.collate.default_collate_fn``."""
        import_paddle()
        from paddle.io.dataloader.collate import default_collate_fn

        return default_collate_fn  # type: ignore[no-any-return]

    def loader_arguments(self) -> tuple[str, ...]:
        """The parameter names of the installed ``paddle.io.DataLoader``."""
        return tuple(inspect.signature(import_paddle().io.DataLoader).parameters)

    def build_loader(self, dataset: Any, config: LoaderConfig, batch_size: int,
                     collate_fn: Callable[[list[Any]], Any] | None, shuffle: bool,
                     drop_last: bool, shard: tuple[int, int] = (0, 1)) -> tuple[Any, RecordingBatchSampler | None]:
        """A real ``paddle.io.DataLoader`` for this config (arguments the installed version lacks are not passed).

        ``shard`` is always (0, 1): distributed sweeps drive torch.distributed ranks only."""
        io = import_paddle().io
        accepted = set(self.loader_arguments())
        kwargs = {k: v for k, v in config.dataloader_kwargs().items() if k in accepted}
        if collate_fn is not None:
            kwargs["collate_fn"] = collate_fn
        if self.dataset_kind(dataset) == DatasetKind.ITERABLE:
            return io.DataLoader(dataset, batch_size=batch_size, drop_last=drop_last, **kwargs), None
        sampler = io.RandomSampler(dataset) if shuffle else io.SequenceSampler(dataset)
        recording = RecordingBatchSampler(io.BatchSampler(sampler=sampler, batch_size=batch_size,
                                                          drop_last=drop_last))
        return io.DataLoader(dataset, batch_sampler=recording, **kwargs), recording

    def get_threads(self) -> int:
        """Paddle's CPU math threads (``FLAGS_paddle_num_threads``)."""
        return int(import_paddle().get_flags(["FLAGS_paddle_num_threads"])["FLAGS_paddle_num_threads"])

    def set_threads(self, threads: int) -> None:
        """Set Paddle's CPU math threads (``FLAGS_paddle_num_threads``)."""
        import_paddle().set_flags({"FLAGS_paddle_num_threads": threads})

    def sharing_strategy(self) -> str | None:
        """None: batches cross through /dev/shm files (use_shared_memory) or a pipe, not per-tensor fds."""
        return None

    def shutdown(self, iterator: Any) -> None:
        """Stop a loader iterator's workers (its ``_try_shutdown_all``, when it has one)."""
        stop = getattr(iterator, "_try_shutdown_all", None)
        if stop is not None:
            stop()

    def counting_stream(self, items: int) -> Any:
        """A tiny ``paddle.io.IterableDataset`` of ``items`` arrays, split among workers."""
        from dataprof.backends.paddle_stream import CountingStream

        return CountingStream(items)

    def left_behind(self, pids: Iterable[int]) -> list[str]:
        """The ``/dev/shm/paddle_<pid>_…`` files of ``pids``: with ``use_shared_memory``, each batch a worker
        makes is such a file, removed once the main process is done with it or by the process's exit handlers;
        a worker or main process killed (a hung loader ended, a trial's workers stopped) leaves its own."""
        return [path for pid in pids for path in glob.glob(f"/dev/shm/paddle_{pid}_*")]
