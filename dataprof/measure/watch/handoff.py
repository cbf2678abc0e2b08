"""A loader iterated in a thread of the script's own (a background prefetcher: ``prefetch_generator``'s
``BackgroundGenerator``, a ``threading.Thread`` filling a ``queue.Queue``), its batches handed to the training
through a queue: timed where the training takes them, and the run's end raised there, at a batch boundary, not in
the user's thread."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol


class WatchEnded(BaseException):
    """Raised out of the script's loop when ``--max-steps`` or ``--seconds`` is reached: it stops the script."""


class Batches(Protocol):
    """Where batch timings go (the recorder): what ended the window, its clock, one batch's figures."""

    ended: str | None

    def clock(self) -> float:
        """Seconds, on the recorder's clock."""

    def batch(self, number: int, epoch: int, index: int, wait_s: float, step_s: float | None, size: int) -> None:
        """One batch delivered (see ``Recorder.batch``)."""

PENDING_MOST = 4096
"""Batches handed off and not yet taken that are remembered at most (a queue deeper than this loses its oldest)."""


class Handoff:
    """The batches a producer thread took from watched loaders, and the training taking them from a queue."""

    def __init__(self, recorder: Batches) -> None:
        self.recorder = recorder
        self.producers: set[int] = set()
        """The threads (idents) that iterate a watched loader outside the main thread."""
        self.consumed: set[int] = set()
        """The loaders (numbers) whose batches the training takes from a queue: timed there."""
        self._pending: dict[int, tuple[int, int, int, int]] = {}
        self._taken: dict[int, float] = {}

    def produced(self, number: int, epoch: int, index: int, batch: Any, size: int) -> bool:
        """A batch of loader ``number`` delivered in a thread that is not the main one; whether its loader is timed
        where the training takes its batches (the thread's own figures are then not the training's)."""
        self.producers.add(threading.get_ident())
        if len(self._pending) >= PENDING_MOST:
            self._pending.pop(next(iter(self._pending)))
        self._pending[id(batch)] = (number, epoch, index, size)
        return number in self.consumed

    def install(self) -> Callable[[], None]:
        """Time ``queue.Queue.get`` where it hands the training a batch a producer thread took; the function that
        puts it back."""
        original = queue.Queue.get
        handoff = self

        def get(self: Any, block: bool = True, timeout: float | None = None) -> Any:
            if not handoff.producers or threading.get_ident() in handoff.producers:
                return original(self, block, timeout)
            recorder = handoff.recorder
            if recorder.ended is not None and self.__dict__.get("_dataprof_handoff"):
                raise WatchEnded(recorder.ended)  # the training leaves its loop where it takes the next batch
            start = recorder.clock()
            item = original(self, block, timeout)
            taken = handoff._pending.pop(id(item), None)
            if taken is not None:
                self.__dict__["_dataprof_handoff"] = True
                handoff.took(taken, start, recorder.clock())
            return item

        queue.Queue.get = get  # type: ignore[method-assign]

        def restore() -> None:
            queue.Queue.get = original  # type: ignore[method-assign]

        return restore

    def took(self, taken: tuple[int, int, int, int], start: float, arrived: float) -> None:
        """The training took a batch: its wait in ``get``, and its step since it took the one before."""
        number, epoch, index, size = taken
        self.consumed.add(number)
        before = self._taken.get(number)
        self._taken[number] = arrived
        self.recorder.batch(number, epoch, index, arrived - start, None if before is None else start - before, size)


def quiet_thread_ends() -> None:
    """The run's end raised in a thread of the script's own (its producer's next batch) ends that thread without
    a word: the training ends where it takes its batches."""
    original = threading.excepthook

    def hook(args: Any) -> None:
        if args.exc_type is not None and issubclass(args.exc_type, WatchEnded):
            return
        original(args)

    threading.excepthook = hook
