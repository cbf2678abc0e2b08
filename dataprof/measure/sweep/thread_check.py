"""Do threads return the samples a worker process would? Checked once, in its own forked process, before any
thread trial counts.

Threads share the one dataset object: a ``__getitem__`` that is not thread-safe (a shared file handle, a
decoder with global state) can return wrong samples without an error. A worker process fetches a batch's
samples one by one, alone: the check fetches the same indices so, twice (a dataset whose samples are random
cannot be compared, and is said to be), and through the thread loader once between, and compares every byte.
"""

from __future__ import annotations

import signal
import traceback
from collections.abc import Callable
from itertools import islice
from typing import Any

from dataprof.backends import Backend
from dataprof.backends.target import describe_exception
from dataprof.measure.protocol import error_event
from dataprof.measure.sweep.trial import fingerprint
from dataprof.results.settings import LoaderConfig
from dataprof.results.threads import ThreadCheck
from dataprof.results.vocabulary import ThreadVerdict, TrialStatus

CHECK_SAMPLES = 256
"""Samples compared at most (at least two batches, and two per thread when that is fewer)."""


def batches_to_check(config: LoaderConfig, batch_size: int, length: int) -> int:
    """Two batches per thread (every thread busy at once), at least two, within :data:`CHECK_SAMPLES`."""
    wanted = max(2, 2 * config.num_workers)
    return max(1, min(wanted, max(2, CHECK_SAMPLES // max(1, batch_size)), -(-length // max(1, batch_size))))


def run_thread_check(backend: Backend, dataset: Any, collate: Callable[[list[Any]], Any] | None,
                     config: LoaderConfig, batch_size: int, emit: Callable[[dict[str, Any]], None]) -> None:
    """Compare the thread loader's first batches with the same indices fetched one by one; emit the verdict
    (``same``, ``differs``, ``unchecked``) or the error. Never raises."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        loader, recorder = backend.build_loader(dataset, config, batch_size, collate, False, False)
        count = batches_to_check(config, batch_size, len(dataset))
        iterator = iter(loader)
        threaded = [fingerprint(batch, whole=True) for batch in islice(iterator, count)]
        backend.shutdown(iterator)
        assert recorder is not None  # a map-style dataset's loader records its batches
        indices = [list(batch) for batch in islice(iter(recorder.inner), len(threaded))]
        fold = collate or backend.default_collate()
        first = [fingerprint(fold([dataset[i] for i in batch]), whole=True) for batch in indices]
        second = [fingerprint(fold([dataset[i] for i in batch]), whole=True) for batch in indices]
    except Exception as exc:
        emit(error_event(TrialStatus.FAILED, describe_exception(exc), traceback.format_exc()))
        return
    emit({"ev": "result", **verdict(threaded, first, second, indices)})


def verdict(threaded: list[int], first: list[int], second: list[int], indices: list[list[int]]) -> dict[str, Any]:
    """The check's verdict from the batches' checksums: through threads, then one by one twice."""
    if first != second:
        return {"verdict": ThreadVerdict.UNCHECKED, "batches": len(first),
                "detail": "the same indices fetched twice one by one gave other samples (random transforms?), "
                          "so the threads' samples cannot be compared"}
    wrong = next((n for n, (a, b) in enumerate(zip(threaded, first, strict=True)) if a != b), None)
    if wrong is None:
        return {"verdict": ThreadVerdict.SAME, "batches": len(first), "detail": ""}
    shown = ", ".join(map(str, indices[wrong][:4])) + ("…" if len(indices[wrong]) > 4 else "")
    return {"verdict": ThreadVerdict.DIFFERS, "batches": len(first),
            "detail": f"batch {wrong} (indices {shown}) differs from the same indices fetched one by one"}


def checked(config: LoaderConfig, status: TrialStatus, word: dict[str, Any]) -> ThreadCheck:
    """The check's outcome from the status and last word of its forked run."""
    if status == TrialStatus.TIMEOUT:
        return ThreadCheck(ThreadVerdict.FAILED, 0, "no verdict before the trial timeout", config)
    if status != TrialStatus.OK:
        return ThreadCheck(ThreadVerdict.FAILED, 0, str(word.get("message")), config)
    return ThreadCheck(ThreadVerdict(word["verdict"]), int(word["batches"]), word.get("detail") or "", config)
