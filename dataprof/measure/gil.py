"""How much of a piece of work releases the GIL: timed alone, then with a second thread doing the same work.

Work that holds the GIL (pure Python) runs one thread at a time: two threads doing ``n`` calls each take twice
as long as one. Work that releases it (sleep, I/O, C decoding, most numpy and torch kernels) runs side by
side: two threads take as long as one, given two CPUs. The share that overlaps is the share that releases the
GIL: ``(2 × alone − paired) / alone``, between 0 (held throughout) and 1 (released throughout).

The time alone is its wall time less the time the thread waited for a CPU (``/proc/thread-self/schedstat``, where
Linux has it): a thread kept waiting by other processes while timed alone would make held work look like overlap.
The pair's wall time is taken as it is for the share (``release``, and each round's least, ``release_low``): what
it lost to other processes can only lower it, so held work never reads as released. What the pair's threads waited
for a CPU may have cost it up to the longest thread's waits (a pair that releases the GIL, kept off both CPUs side
by side) or nothing (one thread waiting while the other held the GIL): less those, each round reads the most the
share can be, and the most of any round is ``release_high``.
On a quiet machine the two meet; on a busy one they say how far apart the measure cannot tell.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    alone: list[float] = []
    paired: list[Pair] = []
    for _ in range(ROUNDS):
        alone.append(_timed_alone(call, chosen, clock))
        pair = _timed_pair(call, chosen, clock, PAIRED_TIMEOUT_S + 10 * alone[-1])
        if pair is None:
            return GilShare(release=None, calls=count, alone_s=min(alone), paired_s=0.0,
                            why="its calls did not finish in a second thread (a lock or state only one thread "
                                "gets: threads cannot load it)")
        paired.append(pair)
    one, two = min(alone), min(pair.wall for pair in paired)
    low = [r for a, p in zip(alone, paired, strict=True) if (r := _share(a, p.wall)) is not None]
    high = [r for a, p in zip(alone, paired, strict=True) if (r := _share(a, p.wall - max(p.waited))) is not None]
    return GilShare(release=_share(one, two), calls=count, alone_s=one, paired_s=two,
                    release_low=min(low, default=None), release_high=max(high, default=None))


@dataclass(frozen=True)
class Pair:
    """Two threads' timing: the seconds they took together, and those each waited for a CPU."""

    wall: float
    waited: tuple[float, float]


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


def _timed_alone(call: Callable[[Any], Any], items: Sequence[Any], clock: Callable[[], float]) -> float:
    """Seconds this thread takes to run ``call`` over ``items``, less those it waited for a CPU. The waits are read
    between the clock's readings (after the first, before the last), so only waits within the time are taken out
    of it: one at either end, between two readings, stays in. On a busy machine the time alone can then never be
    shorter than the calls ran, which would read released work as held (and rule thread workers out)."""
    start = clock()
    waited = _waited()
    for item in items:
        call(item)
    waited = _waited() - waited
    return max(0.0, clock() - start - waited)


def _waited() -> float:
    """Seconds this thread has waited for a CPU (``/proc/thread-self/schedstat``'s second field); 0 where the
    system does not say."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _timed_pair(call: Callable[[Any], Any], items: Sequence[Any], clock: Callable[[], float],
                timeout_s: float) -> Pair | None:
    """How long two threads take to each run ``call`` over ``items``, started together; None when they did not
    finish within ``timeout_s`` (they are daemons, left behind)."""
    gate = threading.Barrier(3)
    errors: list[BaseException] = []
    waits: list[float] = []

    def work() -> None:
        gate.wait()
        waited = _waited()
        try:
            for item in items:
                call(item)
        except BaseException as exc:
            errors.append(exc)
        waits.append(_waited() - waited)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for worker in workers:
        worker.start()
    gate.wait()
    start = clock()
    for worker in workers:
        worker.join(max(0.0, start + timeout_s - clock()))
    if any(worker.is_alive() for worker in workers):
        return None
    if errors:
        raise errors[0]
    return Pair(clock() - start, (waits[0], waits[1]))
