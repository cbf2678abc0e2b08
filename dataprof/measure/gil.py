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

from dataprof.measure.forked import ForkFailed, run_forked
from dataprof.results.codec import decode, encode
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
    rounds = [_share(a, p) for a, p in zip(alone, paired, strict=True)]
    known = [r for r in rounds if r is not None]
    return GilShare(release=_share(one, two), calls=count, alone_s=one, paired_s=two,
                    release_low=min(known, default=None), release_high=max(known, default=None))


def _share(alone: float, paired: float) -> float | None:
    """The share of the work that overlapped: ``(2 × alone − paired) / alone``, within 0–1."""
    return max(0.0, min(1.0, (2 * alone - paired) / alone)) if alone > 0 else None


SAMPLE_S_MAX = 2.0
"""A call slower than this is not measured for the GIL: its rounds would take minutes."""
APART_WAIT_S = 2.0
"""What the measure in its own process may take beyond its calls' own time."""


def release_share_apart(call: Callable[[Any], Any], items: Sequence[Any], budget_s: float = 0.6,
                        clock: Callable[[], float] = time.perf_counter) -> GilShare:
    """:func:`release_share`, run in a process forked for it: a call that crashes in a second thread (a C
    extension that is not thread-safe) costs only this figure, and threads left behind end with that process.
    One call is timed here first; the measure's time scales with it (each round runs the call alone, then in two
    threads at once), and a call slower than :data:`SAMPLE_S_MAX` is not measured."""
    if not gil_enabled() or usable_cpus() < 2 or not items:
        return release_share(call, items, budget_s, clock)  # told without calling
    start = clock()
    call(items[0])
    took = clock() - start
    if took > SAMPLE_S_MAX:
        return GilShare(release=None, calls=1, alone_s=took, paired_s=0.0,
                        why=f"a call takes {took:.1f} s: too slow to time in rounds")
    calls = 3 * ROUNDS + 1 + 2 * ROUNDS
    try:
        found = run_forked(lambda: encode(release_share(call, items, budget_s, clock)),
                           timeout_s=APART_WAIT_S + budget_s + 2 * calls * took)
    except ForkFailed as exc:
        return GilShare(release=None, calls=0, alone_s=took, paired_s=0.0, why=f"the measure failed: {exc}")
    return decode(GilShare, found)


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
