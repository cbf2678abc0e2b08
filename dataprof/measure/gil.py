"""How much of a piece of work releases the GIL: timed alone, then with a second thread doing the same work.

Work that holds the GIL (pure Python) runs one thread at a time: two threads doing ``n`` calls each take twice
as long as one. Work that releases it (sleep, I/O, C decoding, most numpy and torch kernels) runs side by
side: two threads take as long as one, given two CPUs. The share that overlaps is the share that releases the
GIL: ``(2 × alone − paired) / alone``, between 0 (held throughout) and 1 (released throughout).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from dataprof.results.threads import GilShare

PAIRED_TIMEOUT_S = 1.0
"""Two threads that have not finished this long (plus ten times what one took) are left behind: the work
blocks in a second thread."""
MAX_CALLS = 100_000
"""Calls timed at most per thread and round, however quick each."""
ROUNDS = 5
"""Alone and paired are each timed this many times, interleaved; the quickest of each counts (noise only ever
adds time: a CPU taken by another process, or by the hypervisor, makes the pair overlap less than it could)."""


def gil_enabled() -> bool:
    """False on a free-threaded interpreter running without the GIL (``sys._is_gil_enabled()``)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def release_share(call: Callable[[Any], Any], items: Sequence[Any], budget_s: float = 0.6,
                  clock: Callable[[], float] = time.perf_counter) -> GilShare:
    """How much of ``call`` releases the GIL, over ``items`` cycled through as many times as fit ``budget_s``
    (each call then runs ``3 × ROUNDS + 1`` times). Needs two CPUs: on one, work that releases the GIL cannot
    overlap either (``release`` is None then)."""
    if not gil_enabled():
        return GilShare(release=1.0, calls=0, alone_s=0.0, paired_s=0.0, free_threaded=True)
    if usable_cpus() < 2 or not items:
        return GilShare(release=None, calls=0, alone_s=0.0, paired_s=0.0,
                        why="one usable CPU: work that releases the GIL cannot overlap on it either")
    count, start = 0, clock()
    while count < MAX_CALLS and (count == 0 or clock() - start < budget_s / (3 * ROUNDS + 1)):
        call(items[count % len(items)])  # warms the work up, and sizes the measurement (items again if quick)
        count += 1
    chosen = [items[n % len(items)] for n in range(count)]
    alone, paired = [], []
    for _ in range(ROUNDS):
        alone.append(_timed(call, chosen, 1, clock))
        paired.append(_timed(call, chosen, 2, clock, PAIRED_TIMEOUT_S + 10 * alone[-1]))
        if paired[-1] is None:
            return GilShare(release=None, calls=count, alone_s=min(alone), paired_s=0.0,
                            why="its calls did not finish in a second thread (a lock or state only one thread "
                                "gets: threads cannot load it)")
    one, two = min(alone), min(paired)
    share = max(0.0, min(1.0, (2 * one - two) / one)) if one > 0 else None
    return GilShare(release=share, calls=count, alone_s=one, paired_s=two)


def _timed(call: Callable[[Any], Any], items: Sequence[Any], threads: int, clock: Callable[[], float],
           timeout_s: float | None = None) -> Any:
    """Seconds ``threads`` threads take to each run ``call`` over ``items``, started together; None when they
    did not finish within ``timeout_s`` (they are daemons, left behind)."""
    if threads == 1:
        start = clock()
        for item in items:
            call(item)
        return clock() - start
    gate = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def work() -> None:
        gate.wait()
        try:
            for item in items:
                call(item)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    gate.wait()
    start = clock()
    for worker in workers:
        worker.join(None if timeout_s is None else max(0.0, start + timeout_s - clock()))
    if any(worker.is_alive() for worker in workers):
        return None
    if errors:
        raise errors[0]
    return clock() - start
