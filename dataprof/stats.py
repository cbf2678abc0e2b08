"""The statistics every layer shares: noise between trials, budgets' headroom, fits, percentiles.

Pure functions of result data (stdlib only), so the trial's summary, the
search, the recommendation, the diagnosis, ``dataprof inspect`` and the
renderers compute each figure one way: where two of them state the same
fact, they cannot contradict each other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from dataprof.config import LoaderConfig
from dataprof.model import TrialResult

MIN_NOISE = 0.03
"""Differences under 3% are never called real, however quiet the trials were."""

HEADROOM = 0.8
"""Share of a budget (memory limit, /dev/shm, open files) a configuration may plan to use.

The search never proposes a config predicted past it, and the diagnosis and
``dataprof inspect`` count the workers that fit with the same margin, so all
three tell the same story.
"""


STRAGGLER_RATIO = 3.0
STRAGGLER_MIN_MS = 2.0
STRAGGLER_TAIL_SHARE = 0.2
"""A batch wait whose p99 is this many times its median, at least this much above it, and whose time above the
median is this share of its mean, has stragglers (a heavy tail; rare scheduler hiccups do not count)."""


def heavy_tail(trial: TrialResult, ratio: float = STRAGGLER_RATIO, min_ms: float = STRAGGLER_MIN_MS,
               share: float = STRAGGLER_TAIL_SHARE) -> bool:
    """Whether the trial's wait for a batch has stragglers (see :data:`STRAGGLER_RATIO`)."""
    waits = trial.wait_ms
    if trial.status != "ok" or waits is None or waits.p99 is None:
        return False
    if not waits.mean or waits.p99 < ratio * waits.p50 or waits.p99 - waits.p50 < min_ms:
        return False
    return 1 - waits.p50 / waits.mean >= share


FOREIGN_CPUS = 0.25
"""CPU (cores) other processes take during a trial from which it counts: the CPUs it had are fewer."""


def available_cpus(trial: TrialResult, usable_cpus: int) -> float:
    """The CPUs the trial had: the usable ones less what other processes took of them in its window (once that
    competition reaches :data:`FOREIGN_CPUS`), never below one."""
    foreign = (trial.foreign_cpu_percent or 0.0) / 100.0
    return float(usable_cpus) if foreign < FOREIGN_CPUS else max(1.0, usable_cpus - foreign)


QUIETER = 2.0
"""A reading whose spread is this many times smaller than the other's settles a re-measure by itself."""


def pooled(first: TrialResult, again: TrialResult) -> TrialResult:
    """One config measured twice, as one trial (``repeats`` counts both).

    A reading far quieter than the other (its spread :data:`QUIETER` times smaller: the other was taken
    while something else ran) stands for both. Two alike pool their windows: the samples of both over their
    time, with a spread of at least half their relative difference (what separated them is noise too). A
    re-measure that did not complete leaves the first figures.
    """
    repeats = first.repeats + again.repeats
    readings = [t for t in (first, again) if t.status == "ok" and t.samples_per_s and t.window_s and t.samples]
    if len(readings) < 2:
        return dataclasses.replace(readings[0] if readings else first, repeats=repeats)
    spread = {id(t): t.samples_per_s_spread or 0.0 for t in readings}
    quiet = min(readings, key=lambda t: spread[id(t)])
    loud = max(readings, key=lambda t: spread[id(t)])
    if spread[id(loud)] > QUIETER * spread[id(quiet)]:
        return dataclasses.replace(quiet, repeats=repeats)
    window = (first.window_s or 0.0) + (again.window_s or 0.0)
    rate_ = ((first.samples or 0) + (again.samples or 0)) / window
    errors = [(t.window_s or 0.0) * spread[id(t)] * (t.samples_per_s or 0.0) for t in readings]
    within = math.sqrt(sum(e * e for e in errors)) / window / rate_
    a, b = (first.samples_per_s or 0.0), (again.samples_per_s or 0.0)
    return dataclasses.replace(again, samples_per_s=rate_, samples_per_s_spread=max(within, abs(a - b) / (a + b)),
                               samples=(first.samples or 0) + (again.samples or 0), window_s=window,
                               batches=(first.batches or 0) + (again.batches or 0), repeats=repeats)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of ``values``, ``q`` in [0, 100]; NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def rate(trial: TrialResult) -> float:
    """The trial's samples/s, 0 when it measured none."""
    return trial.samples_per_s or 0.0


def noise_between(a: TrialResult, b: TrialResult) -> float:
    """Relative difference two trials need before it counts (2 combined standard errors, at least 3%)."""
    return noise_of(a.samples_per_s_spread or 0.0, b.samples_per_s_spread or 0.0)


def noise_of(spread_a: float, spread_b: float) -> float:
    """:func:`noise_between` for two rates' relative standard errors (a trial's own, while its window runs)."""
    return max(MIN_NOISE, 2.0 * math.hypot(spread_a, spread_b))


def speedup(trial: TrialResult, baseline: TrialResult | None) -> float | None:
    """``trial``'s throughput over the baseline's (``×w0``); None when either has none."""
    if baseline is None or not baseline.samples_per_s or not trial.samples_per_s:
        return None
    return trial.samples_per_s / baseline.samples_per_s


def best_by_workers(trials: Sequence[TrialResult]) -> list[TrialResult]:
    """The fastest trial at each worker count, in worker order (the throughput curve)."""
    best: dict[int, TrialResult] = {}
    for trial in trials:
        w = trial.config.num_workers
        if w not in best or rate(trial) > rate(best[w]):
            best[w] = trial
    return [best[w] for w in sorted(best)]


def memory_fit(trials: Sequence[TrialResult]) -> tuple[float, float] | None:
    """Least-squares ``peak PSS = base + per_worker × num_workers`` (bytes) over the trials; None under 2 counts."""
    points = [(t.config.num_workers, t.peak_memory_bytes) for t in trials if t.peak_memory_bytes]
    if len({w for w, _ in points}) < 2:
        return None
    n = len(points)
    mean_w = sum(w for w, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    var = sum((w - mean_w) ** 2 for w, _ in points)
    slope = sum((w - mean_w) * (m - mean_m) for w, m in points) / var
    return mean_m - slope * mean_w, slope


def shm_in_flight(config: LoaderConfig, batch_bytes: int) -> int:
    """Bytes of batches ``config`` keeps in /dev/shm: workers × prefetch_factor (2 when unset) × batch bytes;
    0 without workers or with Paddle's ``use_shared_memory=False`` (batches go through a pipe)."""
    if config.num_workers == 0 or config.use_shared_memory is False:
        return 0
    return config.num_workers * (config.prefetch_factor or 2) * batch_bytes


def shm_workers(shm_free_bytes: int, batch_bytes: int, prefetch_factor: int) -> int:
    """The one /dev/shm rule: how many workers' batches in flight fit in :data:`HEADROOM` of the free space."""
    return int(HEADROOM * shm_free_bytes // (batch_bytes * prefetch_factor))


def shm_fits(config: LoaderConfig, batch_bytes: int, shm_free_bytes: int) -> bool:
    """Whether ``config``'s batches in flight fit in /dev/shm by :func:`shm_workers`' rule."""
    if shm_in_flight(config, batch_bytes) == 0:
        return True
    return config.num_workers <= shm_workers(shm_free_bytes, batch_bytes, config.prefetch_factor or 2)
