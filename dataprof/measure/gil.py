"""How much of a piece of work releases the GIL: timed alone, then with a second thread doing the same work.

Work that holds the GIL (pure Python) runs one thread at a time: two threads doing ``n`` calls each take twice
as long as one. Work that releases it (sleep, I/O, C decoding, most numpy and torch kernels) runs side by
side: two threads take as long as one, given two CPUs. The share that overlaps is the share that releases the
GIL: ``(2 × alone − paired) / alone``, between 0 (held throughout) and 1 (released throughout).

Wall time alone can be fooled: a thread kept off its CPU by another process while timed alone makes held work
look like overlap. So each round's share is bounded by what the threads' own CPU time shows (:func:`cpu_bound`):
the time one thread spent off its CPU of its own accord (a sleep, I/O; time waiting for a CPU, read from
``/proc/thread-self/schedstat`` where Linux has it, is not) plus the CPU time the pair ran beside each other.
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
    alone: list[Timing] = []
    paired: list[Timing] = []
    for _ in range(ROUNDS):
        alone.append(_alone(call, chosen, clock))
        pair = _paired(call, chosen, clock, PAIRED_TIMEOUT_S + 10 * alone[-1].wall)
        if pair is None:
            return GilShare(release=None, calls=count, alone_s=min(t.wall for t in alone), paired_s=0.0,
                            why="its calls did not finish in a second thread (a lock or state only one thread "
                                "gets: threads cannot load it)")
        paired.append(pair)
    one, two = min(t.wall for t in alone), min(t.wall for t in paired)
    bounds = [cpu_bound(a, p) for a, p in zip(alone, paired, strict=True)]
    rounds = [_share(a.wall, p.wall) for a, p in zip(alone, paired, strict=True)]
    known = [min(r, b) for r, b in zip(rounds, bounds, strict=True) if r is not None]
    release = _share(one, two)
    return GilShare(release=None if release is None else min(release, max(bounds)), calls=count, alone_s=one,
                    paired_s=two, release_low=min(known, default=None), release_high=max(known, default=None))


@dataclass(frozen=True)
class Timing:
    """One timing of the calls: its wall seconds, the CPU seconds of the threads that made them (together) and the
    seconds they waited for a CPU (each thread's; 0 where the system does not say)."""

    wall: float
    cpu: float
    waited: tuple[float, ...]


def _share(alone: float, paired: float) -> float | None:
    """The share of the work that overlapped: ``(2 × alone − paired) / alone``, within 0–1."""
    return max(0.0, min(1.0, (2 * alone - paired) / alone)) if alone > 0 else None


def cpu_bound(alone: Timing, paired: Timing) -> float:
    """The most of the work that can have released the GIL, as the threads' CPU time shows it: the share of one
    thread's time alone off its CPU though no other process held that CPU (a sleep, I/O), plus the CPU time the
    pair ran beside each other (their CPU seconds past the pair's wall time), over the time alone. Time kept off
    a CPU by another process stretches the wall time alone, never the CPU time: held work stays held."""
    if alone.wall <= 0:
        return 1.0
    idle = max(0.0, alone.wall - alone.cpu - sum(alone.waited))
    beside = max(0.0, paired.cpu - paired.wall)
    return max(0.0, min(1.0, (idle + beside) / alone.wall))


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


def _alone(call: Callable[[Any], Any], items: Sequence[Any], clock: Callable[[], float]) -> Timing:
    """How long this thread takes to run ``call`` over ``items``."""
    start, cpu, waited = clock(), time.thread_time(), _waited()
    for item in items:
        call(item)
    return Timing(clock() - start, time.thread_time() - cpu, (_waited() - waited,))


def _paired(call: Callable[[Any], Any], items: Sequence[Any], clock: Callable[[], float],
            timeout_s: float) -> Timing | None:
    """How long two threads take to each run ``call`` over ``items``, started together; None when they did not
    finish within ``timeout_s`` (they are daemons, left behind)."""
    gate = threading.Barrier(3)
    errors: list[BaseException] = []
    used: list[tuple[float, float]] = []

    def work() -> None:
        gate.wait()
        cpu, waited = time.thread_time(), _waited()
        try:
            for item in items:
                call(item)
        except BaseException as exc:
            errors.append(exc)
        used.append((time.thread_time() - cpu, _waited() - waited))

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
    return Timing(clock() - start, sum(cpu for cpu, _ in used), tuple(waited for _, waited in used))


def _waited() -> float:
    """Seconds this thread has waited for a CPU (``/proc/thread-self/schedstat``'s second field); 0 where the
    system does not say."""
    try:
        with open("/proc/thread-self/schedstat") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
