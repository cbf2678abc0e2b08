"""Do threads return the samples a worker process would? Checked once, in its own forked process, before any
thread trial counts.

Threads share the one dataset object: a ``__getitem__`` that is not thread-safe (a shared file handle, a
decoder with global state, a cache filled racily) can return wrong samples without an error. A worker process
fetches a batch's samples one by one, alone: the check fetches the first batches' indices so, twice (a dataset
whose samples are random cannot be compared, and is said to be), in a fresh copy of the dataset (a process
forked before any thread touched it: a racy cache filled by the threads cannot poison what they are compared
with), then through the thread loader, and compares every byte of what the same indices gave, whatever order the
batches came in (``in_order=False`` delivers them as they are ready).
"""

from __future__ import annotations

import signal
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dataprof.backends import Backend
from dataprof.backends.target import describe_exception
from dataprof.measure.forked import ForkFailed, run_forked
from dataprof.measure.protocol import error_event
from dataprof.measure.sweep.events import answer
from dataprof.measure.sweep.fingerprints import fingerprint
from dataprof.measure.sweep.outcome import SideEnd
from dataprof.results.knobs import LoaderConfig
from dataprof.results.threads import ThreadCheck
from dataprof.results.vocabulary import ThreadVerdict, TrialStatus

CHECK_SAMPLES = 256
"""Samples compared at most (at least two batches, and two per thread when that is fewer)."""

Reference = Callable[[Callable[[list[int]], int], list[list[int]]], tuple[list[int], list[int]]]
"""How the one-by-one checksums are made: ``(fetch a batch's checksum, batches) -> (first pass, second pass)``."""


def batches_to_check(config: LoaderConfig, batch_size: int, length: int) -> int:
    """Two batches per thread (every thread busy at once), at least two, within :data:`CHECK_SAMPLES`."""
    wanted = max(2, 2 * config.num_workers)
    return max(1, min(wanted, max(2, CHECK_SAMPLES // max(1, batch_size)), -(-length // max(1, batch_size))))


class Head:
    """The first ``length`` samples of a map-style dataset: the thread loader's epoch is exactly the batches
    compared, whatever order its threads deliver them in."""

    def __init__(self, dataset: Any, length: int) -> None:
        self.dataset = dataset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]


def in_this_process(checksum: Callable[[list[int]], int], batches: list[list[int]]) -> tuple[list[int], list[int]]:
    """The one-by-one checksums of ``batches``, twice, fetched here (before any thread touches the dataset)."""
    return [checksum(b) for b in batches], [checksum(b) for b in batches]


def in_a_fresh_copy(checksum: Callable[[list[int]], int], batches: list[list[int]]) -> tuple[list[int], list[int]]:
    """:func:`in_this_process`, in a process forked now: its dataset is a copy no thread will touch; an error
    or a crash there is raised here, with its text."""
    try:
        first, second = run_forked(lambda: in_this_process(checksum, batches))
    except ForkFailed as exc:
        raise RuntimeError(f"fetching the samples one by one in a fresh copy: {exc}") from None
    return first, second


@dataclass(frozen=True)
class ThreadAnswer:
    """The check's verdict, its ``result`` event: of how many batches, and what differed."""

    verdict: ThreadVerdict
    batches: int
    detail: str = ""


def run_thread_check(backend: Backend, dataset: Any, collate: Callable[[list[Any]], Any] | None,
                     config: LoaderConfig, batch_size: int, emit: Callable[[dict[str, Any]], None],
                     reference: Reference = in_a_fresh_copy) -> None:
    """Compare what the thread loader gave for its first batches' indices with what the same indices give
    fetched one by one (``reference``: in a fresh copy of the dataset, first); emit the verdict (``same``,
    ``differs``, ``unchecked``) or the error. Never raises."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        count = batches_to_check(config, batch_size, len(dataset))
        size = min(len(dataset), count * batch_size)
        indices = [list(range(start, min(start + batch_size, size))) for start in range(0, size, batch_size)]
        fold = collate or backend.default_collate()
        first, second = reference(lambda batch: fingerprint(fold([dataset[i] for i in batch]), whole=True), indices)
        loader, _ = backend.build_loader(Head(dataset, size), config, batch_size, collate, False, False)
        iterator = iter(loader)
        threaded = [fingerprint(batch, whole=True) for batch in iterator]
        backend.shutdown(iterator)
    except Exception as exc:
        emit(error_event(TrialStatus.FAILED, describe_exception(exc), traceback.format_exc()))
        return
    emit(answer(verdict(threaded, first, second, indices)))


def verdict(threaded: Sequence[int], first: Sequence[int], second: Sequence[int],
            indices: Sequence[Sequence[int]]) -> ThreadAnswer:
    """The check's verdict from the batches' checksums: through threads (in the order they came), and one by one
    twice (in the order of ``indices``). The threads' batches are compared with what the same indices gave, as
    a multiset: their order is the loader's, not the dataset's."""
    if list(first) != list(second):
        return ThreadAnswer(ThreadVerdict.UNCHECKED, len(first), "the same indices fetched twice one by one gave "
                            "other samples (random transforms?), so the threads' samples cannot be compared")
    missing = Counter(first) - Counter(threaded)
    if not missing and len(threaded) == len(first):
        return ThreadAnswer(ThreadVerdict.SAME, len(first))
    wrong = next((n for n, checksum in enumerate(first) if checksum in missing), 0)
    shown = ", ".join(map(str, indices[wrong][:4])) + ("…" if len(indices[wrong]) > 4 else "")
    return ThreadAnswer(ThreadVerdict.DIFFERS, len(first), f"threads gave other samples for indices {shown} "
                        f"(batch {wrong}) than the same indices fetched one by one")


def checked(config: LoaderConfig, end: SideEnd[ThreadAnswer]) -> ThreadCheck:
    """The check's outcome from how its forked run ended."""
    if end.status == TrialStatus.TIMEOUT:
        return ThreadCheck(ThreadVerdict.FAILED, 0, "no verdict before the trial timeout", config)
    if end.answer is None:
        return ThreadCheck(ThreadVerdict.FAILED, 0, str(end.why), config)
    return ThreadCheck(end.answer.verdict, end.answer.batches, end.answer.detail, config)
