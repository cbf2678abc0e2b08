"""The statistics every layer shares: percentiles, a trial's rate and speedup, the throughput curve, and the one
noise model both engines judge by: a measurement's relative noise, its floor (:data:`MIN_NOISE`), how far a
range reaches at the degrees of freedom it was judged over (:func:`confidence`), and the one rule by which a config
is taken as fast as another (:func:`shown_within`). A sweep's trial brings its
window's own standard error, judged over many batches (two of them either side: :func:`noise_between`); ``tune``
pools one run's noise between runs of a config (``decide.tune.noise``: how runs are paced and pooled), judged
over few runs (Student's t).

Pure functions of result data (stdlib only), so the trial's summary, the
search, the recommendation, the diagnosis, ``dataprof inspect`` and the
renderers compute each figure one way: where two of them state the same
fact, they cannot contradict each other. (The budgets' rules are
``decide.budgets``', the straggler rule ``decide.thresholds``'.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dataprof.results.trial import TrialResult

MIN_NOISE = 0.03
"""Differences under 3% are never called real, however quiet the trials were."""


@dataclass(frozen=True)
class Noise:
    """One measurement's relative noise (its standard deviation over its value), and the degrees of freedom it was
    judged over (0: not judged; the floor :data:`MIN_NOISE` stands in)."""

    relative: float
    freedom: int = 0


T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833, 10: 1.812,
       12: 1.782, 15: 1.753, 20: 1.725, 30: 1.697, 60: 1.671}
"""Student's t at 95%, one-sided, by degrees of freedom (1.645 past them: the noise known)."""


def confidence(freedom: int) -> float:
    """How many of its bands a ratio's range reaches either side when the noise was pooled over ``freedom``
    degrees of freedom: Student's t at 95% one-sided (a noise judged from few runs may be judged low: its bound
    widens), the nearest fewer tabled (:data:`T95`)."""
    if freedom < 1:
        return T95[1]
    return next((T95[df] for df in sorted(T95, reverse=True) if df <= freedom), T95[1]) if freedom <= 60 else 1.645


WINDOW_FREEDOM = 61
"""The degrees of freedom a sweep trial's noise is judged over: its window's many batches (the normal's 1.645,
past :data:`T95`)."""


def ratio_range(ratio: float, noise: Noise, runs: int = 1) -> tuple[float, float]:
    """The range of a ratio of two rates, less one, at ``noise`` (the ratio's relative standard deviation for one
    run of each) with ``runs`` runs of each behind their medians: the ratio less and more ``noise`` over √runs
    times its :func:`confidence`."""
    spread = confidence(noise.freedom) * noise.relative / math.sqrt(max(1, runs))
    return ratio * max(0.0, 1 - spread) - 1, ratio * (1 + spread) - 1


def shown_within(ratio: float, noise: Noise, bound: float, runs: int = 1) -> bool:
    """The one equivalence rule of both engines: whether a ratio of two rates shows the first no slower than the
    second by more than ``bound``, its whole range (:func:`ratio_range`) at or above ``-bound``. Not shown is not
    slower: the measurements cannot tell, and what they cannot show is never taken as equal."""
    return ratio_range(ratio, noise, runs)[0] >= -bound


def line_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares ``y = a + b × x`` over ``points``: ``(a, b)``; None under two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return mean_y - slope * mean_x, slope


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


def noise_of_ratio(a: TrialResult, b: TrialResult) -> Noise:
    """The noise of ``a``'s rate over ``b``'s as :func:`ratio_range` takes it: one standard deviation of the
    ratio, half :func:`noise_between` (which spans two, and its floor), judged over the windows' many batches."""
    return Noise(noise_between(a, b) / 2, WINDOW_FREEDOM)


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


