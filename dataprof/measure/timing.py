"""Turn per-batch timings into steady-state figures. Pure functions.

Each iteration of the training loop is ``wait`` (blocked in ``next()``) +
``copy`` (host to device) + ``step`` (model). The window runs from the end of
the last warm-up iteration to the end of the last timed one, so window time is
exactly the sum of its iterations and nothing is double counted.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from dataprof.results.stats import noise_of, percentile


@dataclass
class BatchLog:
    """Per-iteration records kept by the trial (seconds, samples)."""

    wait_s: list[float] = field(default_factory=list)
    wait_cpu_s: list[float] = field(default_factory=list)
    """Main-thread CPU time inside ``next()``: receiving/unpickling, or loading when num_workers=0."""
    copy_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    end_t: list[float] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    epoch_first: list[int] = field(default_factory=list)
    """Indices of the iterations that began an epoch after the first (their wait holds the epoch's restart)."""

    def add(self, wait_s: float, wait_cpu_s: float, copy_s: float, step_s: float, end_t: float,
            size: int) -> None:
        """Record one iteration: wait, main-thread CPU in the wait, copy and step (s), its end time, its samples."""
        self.wait_s.append(wait_s)
        self.wait_cpu_s.append(wait_cpu_s)
        self.copy_s.append(copy_s)
        self.step_s.append(step_s)
        self.end_t.append(end_t)
        self.size.append(size)

    def __len__(self) -> int:
        return len(self.end_t)


STEADY_SPREAD = 0.01
"""A window may end early once its rate's relative standard error is this small."""
MIN_WINDOW_S = 1.5
"""Shortest window, however steady: memory growth and CPU use need time to show."""
STEADY_CHECK_S = 0.25
"""How often the trial looks at its spread (it costs a pass over the window)."""


def window_unit(num_workers: int, epoch_batches: int | None, batches: int, elapsed_s: float, target_s: float) -> int:
    """The batches a window is a whole number of: worker rounds (:func:`window_done`), or an epoch's batches when
    an epoch, at the window's pace so far, takes no longer than ``target_s``. Each epoch's end, where the workers'
    pipeline drains and fills again (and workers that do not persist start again), then weighs in the window as
    in the training: a window of whole epochs holds one end per epoch, whatever batch it started at."""
    if epoch_batches and batches and elapsed_s * epoch_batches / batches <= target_s:
        return epoch_batches
    return max(1, num_workers)


def window_done(batches_in_window: int, elapsed_s: float, target_s: float, num_workers: int,
                spread: float | None = None, settled: bool = False, unit: int | None = None) -> bool:
    """End the window on a whole number of worker rounds (of ``unit`` batches where :func:`window_unit` says an
    epoch's): after ``target_s``, or sooner once measured enough.

    The DataLoader hands out batches round-robin, so batch ``i`` and
    ``i + k·W`` come from the same worker: a window of whole rounds counts
    exactly the batches produced in its time, whatever the burst phase.
    After :data:`MIN_WINDOW_S`, a window whose rate's relative standard error (``spread``) is at most
    :data:`STEADY_SPREAD` has measured enough, and so has one whose rate has ``settled`` the question the
    trial was run to answer (:meth:`Rival.settled_by`).
    """
    rounds = max(1, num_workers)
    if batches_in_window < 3 * rounds or batches_in_window % (unit or rounds):
        return False
    if elapsed_s >= target_s:
        return True
    return elapsed_s >= min(MIN_WINDOW_S, target_s) and spread is not None and (spread <= STEADY_SPREAD or settled)


@dataclass(frozen=True)
class Rival:
    """The trial a search decision weighs this one against: does this one beat it?"""

    rate: float
    spread: float
    """Its rate's relative standard error."""
    either_way: bool = False
    """Whether a lead settles the question too (a climb: more workers pay, the climb goes on), not only a trail
    (a refinement, a tuned knob, a rule of thumb: only a win changes anything, and a win needs its figure)."""

    def settled_by(self, rate: float, spread: float) -> bool:
        """Whether a rate is slower (or, ``either_way``, faster) than this one's by more than the noise between
        them (``results.stats.noise_of``, as the search judges a step): the answer is known, and a longer window would
        only sharpen a figure that cannot change it."""
        noise = noise_of(spread, self.spread)
        return rate * (1.0 + noise) < self.rate or (self.either_way and rate > self.rate * (1.0 + noise))


def summarize(log: BatchLog, first: int, num_workers: int) -> dict[str, Any]:
    """Steady-state figures for iterations ``first+1 .. end`` (``first`` = last warm-up)."""
    window = range(first + 1, len(log))
    if len(window) == 0:
        raise ValueError("empty window")
    window_s = log.end_t[-1] - log.end_t[first]
    samples = sum(log.size[i] for i in window)
    waits = [log.wait_s[i] for i in window]
    wait_ms = [w * 1000.0 for w in waits]
    restarts = [i for i in log.epoch_first if i in window]
    return {
        "samples_per_s": samples / window_s if window_s > 0 else math.inf,
        "samples_per_s_spread": rate_spread(log, first, max(1, num_workers)),
        "wait_fraction": sum(waits) / window_s if window_s > 0 else 0.0,
        "wait_ms": {"p50": percentile(wait_ms, 50), "p95": percentile(wait_ms, 95), "p99": percentile(wait_ms, 99),
                    "max": max(wait_ms), "mean": statistics.fmean(wait_ms)},
        "wait_cpu_ms_mean": 1000.0 * statistics.fmean(log.wait_cpu_s[i] for i in window),
        "copy_ms_mean": 1000.0 * statistics.fmean(log.copy_s[i] for i in window),
        "step_ms_mean": 1000.0 * statistics.fmean(log.step_s[i] for i in window),
        "batches": len(window),
        "samples": samples,
        "window_s": window_s,
        "epoch_starts_in_window": len(restarts),
        "epoch_start_wait_s": sum(log.wait_s[i] for i in restarts),
    }


def rate_spread(log: BatchLog, first: int, rounds: int, chunks: int = 5) -> float | None:
    """Relative standard error of the rate over up to ``chunks`` sub-windows of whole rounds."""
    total = len(log) - 1 - first
    per_chunk = (total // chunks // rounds) * rounds
    if per_chunk == 0:
        per_chunk = rounds
    edges = list(range(first, len(log), per_chunk))
    rates = []
    for start, end in zip(edges, edges[1:], strict=False):
        span = log.end_t[end] - log.end_t[start]
        if span > 0:
            rates.append(sum(log.size[start + 1 : end + 1]) / span)
    if len(rates) < 2:
        return None
    mean = statistics.fmean(rates)
    return statistics.stdev(rates) / mean / math.sqrt(len(rates)) if mean > 0 else None


