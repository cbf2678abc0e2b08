"""The statistics every layer shares: percentiles, a trial's rate and speedup, the noise between two trials,
the throughput curve.

Pure functions of result data (stdlib only), so the trial's summary, the
search, the recommendation, the diagnosis, ``dataprof inspect`` and the
renderers compute each figure one way: where two of them state the same
fact, they cannot contradict each other. (The budgets' rules are
``decide.budgets``', the straggler rule ``decide.thresholds``'.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dataprof.results.trial import TrialResult

MIN_NOISE = 0.03
"""Differences under 3% are never called real, however quiet the trials were."""


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


def best_by_workers(trials: Sequence[TrialResult], threads: bool = False) -> list[TrialResult]:
    """The fastest trial at each worker count, in worker order (the throughput curve): of the worker processes,
    or with ``threads`` of the thread counts (``num_workers=0`` starts both curves)."""
    best: dict[int, TrialResult] = {}
    for trial in trials:
        w = trial.config.num_workers
        if w and trial.config.threads != threads:
            continue
        if w not in best or rate(trial) > rate(best[w]):
            best[w] = trial
    return [best[w] for w in sorted(best)]


