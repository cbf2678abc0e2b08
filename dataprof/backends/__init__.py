"""Framework backends: check a dataset and build the framework's own DataLoader from a LoaderConfig.

A backend module imports its framework only when one of its functions runs,
so a Paddle run never imports torch and a PyTorch run never imports paddle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from dataprof.backends.common import RecordingBatchSampler, defined_by
from dataprof.errors import UsageError
from dataprof.results.knobs import LoaderConfig
from dataprof.results.vocabulary import Framework


class Backend(Protocol):
    """One framework's side of a trial: check a dataset, build its DataLoader, tune and shut it down."""
    name: str
    internal_paths: tuple[str, ...]
    """Source paths of the framework, skipped when a traceback is summarised to the user's frame."""

    def version(self) -> str:
        """The installed framework's version string."""

    def dataset_kind(self, dataset: Any) -> str:
        """``iterable`` or ``map``."""

    def default_collate(self) -> Callable[[list[Any]], Any]:
        """The framework's default collate function (what its DataLoader uses without one)."""

    def loader_arguments(self) -> tuple[str, ...]:
        """The installed DataLoader's parameter names (versions differ)."""

    def build_loader(self, dataset: Any, config: LoaderConfig, batch_size: int,
                     collate_fn: Callable[[list[Any]], Any] | None, shuffle: bool,
                     drop_last: bool, shard: tuple[int, int] = (0, 1)) -> tuple[Any, RecordingBatchSampler | None]:
        """``shard``: (rank, world size); a map-style dataset is split among ranks as in distributed training."""

    def get_threads(self) -> int:
        """Intra-op CPU threads of the framework's kernels."""

    def set_threads(self, threads: int) -> None:
        """Set the framework's intra-op CPU threads (1 in a process that forks trials)."""

    def sharing_strategy(self) -> str | None:
        """How tensors cross between processes (torch's ``file_descriptor`` holds an open file per tensor)."""

    def shutdown(self, iterator: Any) -> None:
        """Stop a loader iterator's workers."""

    def counting_stream(self, items: int) -> Any:
        """A tiny IterableDataset of the framework, ``items`` samples split among workers (checks the loader)."""

    def left_behind(self, pids: Iterable[int]) -> list[str]:
        """The files the loader's processes ``pids``, all ended, may have left in shared memory: a loader killed
        with batches in flight leaves them to no one."""


def detect_framework(dataset: Any, requested: str) -> str:
    """``--framework auto``: paddle for a ``paddle.io`` dataset (or any class from paddle), else torch."""
    if requested != "auto":
        return requested
    return "paddle" if defined_by(dataset, "paddle") else "torch"


def get_backend(framework: str) -> Backend:
    """The backend for ``torch`` or ``paddle`` (a :class:`Framework`); UsageError naming the install command if it
    is missing."""
    try:
        which = Framework(framework)
    except ValueError:
        which = None
    if which is Framework.PADDLE:
        from dataprof.backends.frameworks import paddle_available
        from dataprof.backends.paddle_backend import PaddleBackend

        if not paddle_available():
            raise UsageError('--framework paddle: paddlepaddle is not installed (pip install "dataprof[paddle]")')
        return PaddleBackend()
    if which is Framework.TORCH:
        from dataprof.backends.torch_backend import TorchBackend

        return TorchBackend()
    raise UsageError(f"--framework {framework}: expected auto, torch or paddle")


def threads_after_fork() -> None:
    """In a process just forked: each framework imported here down to one CPU math thread, as a DataLoader worker
    sets torch's. The parent's OpenMP pool did not come with the fork (libgomp is not fork-safe): the child's
    first parallel op would wait on it for ever."""
    for framework in Framework:
        if framework.value in sys.modules:
            get_backend(framework.value).set_threads(1)
