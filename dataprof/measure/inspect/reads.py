"""``dataprof inspect``'s storage passes: what the samples read as the page cache found them, then cold and warm.

The inspection's own pass runs with the files its code opens logged (``cache.open_log.OpenLog``, for that pass only)
and this process's ``/proc/self/io`` read before and after. When it read data files, up to :data:`PASS_SAMPLES`
of its samples are fetched again right after those files were evicted from the page cache (cold), then once
more (warm, now cached). Nothing but the files the samples read is evicted.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataprof.measure.cache.files import NO_EVICTION, OWN_PREFIX, held_paths
from dataprof.measure.cache.footprint import DataFiles, footprint, page_cache_room
from dataprof.measure.cache.open_log import OpenLog
from dataprof.measure.cache.page_cache import can_evict, evict, read_back
from dataprof.results.cache import PassReads, StorageReads

PASS_SAMPLES = 64
PASS_S = 10.0
"""A cold or warm pass fetches at most this many samples, for at most this long."""


def self_io() -> tuple[int, int] | None:
    """This process's ``read_bytes`` (from storage) and ``rchar`` (every ``read()``) so far; None without /proc."""
    values: dict[str, int] = {}
    try:
        with open("/proc/self/io") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                values[key] = int(value)
    except (OSError, ValueError):
        return None
    return values.get("read_bytes", 0), values.get("rchar", 0)


@dataclass
class Logged:
    """What one logged stretch read: this process's reads, the files it opened, the files it held after."""

    io: tuple[int, int] | None = None
    opened: list[tuple[float, str]] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    own: set[str] = field(default_factory=set)
    """The log's own directory (``/``-ended): never a data file, whatever its name."""


@contextlib.contextmanager
def logged() -> Iterator[Logged]:
    """Log the block's opens and reads (this process only; the openers are put back after)."""
    got = Logged()
    before_held = held_paths([os.getpid()], maps=True)
    with tempfile.TemporaryDirectory(prefix=OWN_PREFIX + "opens-") as directory:
        got.own.add(os.path.join(directory, ""))
        log = OpenLog(directory)
        start = self_io()
        log.install()
        try:
            yield got
        finally:
            log.uninstall()
            end = self_io()
            got.opened = OpenLog.read(directory)
    got.io = None if start is None or end is None else (end[0] - start[0], end[1] - start[1])
    got.held = held_paths([os.getpid()], maps=True) - before_held  # what the block opened and kept


def _reads(got: Logged, samples: int, seconds: float, files: DataFiles) -> PassReads:
    files.own |= got.own
    kept = files.add({path for _, path in got.opened} | got.held)
    opens = sum(1 for _, path in got.opened if path in kept)
    return PassReads(samples=samples, wall_ms_mean=1000.0 * seconds / samples if samples else 0.0,
                     read_bytes_per_sample=got.io[0] / samples if got.io and samples else None,
                     read_chars_per_sample=got.io[1] / samples if got.io and samples else None,
                     files_per_sample=opens / samples if samples else None)


def _pass(fetch: Callable[[int], Any], indices: Sequence[int], files: DataFiles) -> PassReads:
    """Fetch ``indices`` (within :data:`PASS_S`), logged; what they read."""
    done = 0
    started = time.perf_counter()
    with logged() as got:
        for index in indices:
            if time.perf_counter() - started > PASS_S:
                break
            with contextlib.suppress(Exception):  # an index that raises was reported by the main pass
                fetch(index)
            done += 1
    return _reads(got, done, time.perf_counter() - started, files)


def storage_reads(first: Logged, count: int, seconds: float, fetch: Callable[[int], Any] | None,
                  indices: Sequence[int]) -> StorageReads | None:
    """The main pass's reads (``first``: ``count`` samples in ``seconds``), then a cold and a warm pass over up
    to :data:`PASS_SAMPLES` of ``indices`` through ``fetch`` (None: an iterable, which cannot be fetched again);
    None when the samples read no data file."""
    files = DataFiles()
    reads = _reads(first, count, seconds, files)
    if not files.sizes:
        return None
    found = footprint(files, page_cache_room())
    if fetch is None:
        return StorageReads(reads, footprint=found, note="no cold pass: an IterableDataset cannot be read again "
                                                         "from the same samples")
    if (missing := can_evict()) is not None:
        return StorageReads(reads, footprint=found, note=f"no cold pass: {missing}")
    if found is not None and found.filesystem in NO_EVICTION:
        return StorageReads(reads, footprint=found, note=f"no cold pass: the data lives on {found.filesystem}, "
                                                         "whose files are held in memory")
    again = list(indices[:PASS_SAMPLES])
    eviction = evict(files.sizes)
    cold = _pass(fetch, again, files)
    warm = _pass(fetch, again, files)
    read_back(eviction.cached_before)
    note = None if eviction.effective is not False else \
        "eviction had no effect: the files stayed in the page cache, so the cold pass read them warm"
    return StorageReads(reads, cold, warm, found, note)
