"""``dataprof tune``'s runs under the noise model (``results.stats``'s, pure): runs grouped by config, put on the
script's pace where the machine drifted, one run's noise pooled from the configs run more than once, and the range
of one config's rate over another's at that noise: what the answer (``answer``) and the search (``search``)
compare configs by."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any

from dataprof.results.knobs import KnobValues, changes_label
from dataprof.results.stats import MIN_NOISE, Noise, ratio_range, shown_within
from dataprof.results.tune import TuneTrial

AS_FAST = 0.05
"""How much slower than the script's own config a recommended config may be shown to be, at most: the equivalence
bound of "no slower than yours"."""
NEAR_BEST = 0.10
"""How much slower than the fastest config a recommended config may be shown to be, at most: the equivalence
bound of "as fast as the fastest"."""
MIN_RUNS = 2
"""Runs a config other than the script's own needs before it is recommended."""

Key = tuple[tuple[str, Any], ...]
Runs = list[tuple[int, TuneTrial]]
HEADSPACE: Key = (("", "headspace"),)
"""The key the headspace's runs are pooled under (their noise is the machine's too)."""


def key(config: KnobValues, node_knobs: dict[str, KnobValues] | None = None) -> Key:
    """A config (with the knobs of its own on each node that has some) as a hashable key."""
    nodes = tuple(sorted((node, tuple(sorted(knobs.items()))) for node, knobs in (node_knobs or {}).items()
                         if knobs))
    return tuple(sorted(config.items())) + ((("nodes", nodes),) if nodes else ())


def key_of(trial: TuneTrial) -> Key:
    """The key of a run's config, its nodes' own knobs included."""
    return key(trial.config, trial.node_knobs)


def rates(trials: Sequence[TuneTrial]) -> dict[Key, Runs]:
    """The completed runs of the training with its loader (not the headspace), by config, with their indexes; each
    run of a config other than the script's own at the script's pace at its time where that steadies them
    (:func:`paced`)."""
    return _by_config(paced(trials))


def headspace_runs(trials: Sequence[TuneTrial]) -> Runs:
    """The completed headspace runs, with their indexes, as :func:`rates` has the others."""
    return _by_config(paced(trials), headspace=True).get(HEADSPACE, [])


def _by_config(trials: Sequence[TuneTrial], headspace: bool = False) -> dict[Key, Runs]:
    """The completed runs by config, with their indexes, as they are; the headspace's under :data:`HEADSPACE`
    with ``headspace``, else left out."""
    found: dict[Key, Runs] = {}
    for index, trial in enumerate(trials):
        if trial.ok and (headspace or trial.role != "headspace"):
            found.setdefault(HEADSPACE if trial.role == "headspace" else key_of(trial), []).append((index, trial))
    return found


def unconfirmed_ahead(trials: Sequence[TuneTrial], leading: Key) -> int:
    """The configs run once, the ``leading`` one apart, whose run beat it and the fastest config run twice (or the
    script's own): each keeps the leading config from being recommended until its second run (the answer's "near
    what ran faster once")."""
    by_config = rates(trials)
    settled = [runs for config, runs in by_config.items()
               if len(runs) >= MIN_RUNS or runs[0][1].role == "current" or config == leading]
    top = max((rate(runs) for runs in settled), default=0.0)
    return sum(1 for config, runs in by_config.items() if len(runs) < MIN_RUNS and config != leading
               and runs[0][1].role != "current" and rate(runs) > top)


def on_pace(trials: Sequence[TuneTrial]) -> list[TuneTrial]:
    """The runs, each but the script's own with its figures scaled by the script's median pace over its pace around
    that run (between the script's runs before and after it, by their order; the nearest when it has them on one
    side only). This machine's speed drifts over the minutes a tune takes (±20% here): a config run early must not
    be judged against one run late at another speed, and the script's own runs, interleaved with the others
    (:data:`~dataprof.decide.tune.search.YOURS_EVERY`), say how fast the machine was. As they are with fewer than
    two runs of the script's own."""
    mine = [(index, t.iterations_per_s) for index, t in enumerate(trials)
            if t.role == "current" and t.ok and t.iterations_per_s]
    if len(mine) < 2:
        return list(trials)
    pace = statistics.median(value for _, value in mine)
    found = []
    for index, trial in enumerate(trials):
        if not trial.ok or trial.role == "current":
            found.append(trial)
            continue
        before = [(i, v) for i, v in mine if i < index]
        after = [(i, v) for i, v in mine if i > index]
        if before and after:
            (i0, v0), (i1, v1) = before[-1], after[0]
            around = v0 + (v1 - v0) * (index - i0) / (i1 - i0)
        else:
            around = (before[-1] if before else after[0])[1]
        scale = pace / around
        found.append(dataclasses.replace(trial, iterations_per_s=(trial.iterations_per_s or 0.0) * scale,
                                         samples_per_s=None if trial.samples_per_s is None else
                                         trial.samples_per_s * scale))
    return found


def rate(runs: Sequence[tuple[int, TuneTrial]]) -> float:
    """The median iterations/s of a config's runs."""
    return statistics.median(t.iterations_per_s or 0.0 for _, t in runs)


def paced(trials: Sequence[TuneTrial]) -> list[TuneTrial]:
    """The runs :func:`on_pace`, where that steadies the runs of the configs run more than once (the script's own
    apart, the headspace's in): the machine drifted slowly, and its pace is known from the script's runs; else
    as they are (each run moves on its own, and scaling by the script's nearest runs would add their spread)."""
    return _paced(trials)[0]


def _paced(trials: Sequence[TuneTrial]) -> tuple[list[TuneTrial], bool]:
    """:func:`paced`, and whether the runs were put on the script's pace."""
    moved = on_pace(trials)
    ours, freedom = _spread(moved, others=True)
    theirs, _ = _spread(trials, others=True)
    return (moved, True) if freedom and ours < theirs else (list(trials), False)


def _spread(trials: Sequence[TuneTrial], others: bool = False) -> tuple[float, int]:
    """The squared relative deviations of the runs of every config run more than once (the headspace's too; the
    script's own left out with ``others``) from their config's mean, summed, and their degrees of freedom."""
    squares, freedom = 0.0, 0
    for runs in _by_config(trials, headspace=True).values():
        values = [t.iterations_per_s or 0.0 for _, t in runs]
        mean = statistics.fmean(values)
        if len(values) < 2 or not mean or (others and runs[0][1].role == "current"):
            continue
        squares += sum(((v - mean) / mean) ** 2 for v in values)
        freedom += len(values) - 1
    return squares, freedom


def noise_of(trials: Sequence[TuneTrial]) -> float:
    """One run's relative noise (:func:`pooled_noise`)."""
    return pooled_noise(trials).relative


def pooled_noise(trials: Sequence[TuneTrial]) -> Noise:
    """One run's relative noise, pooled from every config run more than once (the headspace's runs too), as
    :func:`rates` has them (what drift is left in them: an upper bound): √2 × the pooled relative standard
    deviation (for two runs of one config, their spread over their mean), at least ``MIN_NOISE`` (the floor the
    sweep's trials have too: ``results.stats``); with its degrees of freedom. Runs put on the script's pace leave
    the script's own out: their spread is the drift the pace takes out of the others (what the pace's own error
    adds is in the others' spread)."""
    runs, on = _paced(trials)
    squares, freedom = _spread(runs, others=on)
    return Noise(MIN_NOISE if not freedom else max(MIN_NOISE, math.sqrt(2 * squares / freedom)), freedom)


def band(noise: float, one: Sequence[tuple[int, TuneTrial]], other: Sequence[tuple[int, TuneTrial]]) -> float:
    """How far apart the medians of two configs' runs may be by noise alone, relatively: one run's ``noise`` over
    the square root of the fewer runs either had (the median of n runs wanders about 1/√n as far)."""
    return noise / math.sqrt(max(1, min(len(one), len(other))))


def bounds(noise: Noise, one: Runs, other: Runs) -> tuple[float, float]:
    """The range of ``one``'s iterations/s over ``other``'s, less one (:func:`ratio_range`), over the fewer runs
    either had (the median of n runs wanders about 1/√n as far)."""
    return ratio_range(rate(one) / rate(other), noise, min(len(one), len(other)))


def as_fast(noise: Noise, one: Runs, other: Runs, within: float = AS_FAST) -> bool:
    """Whether ``one``'s runs show it no slower than ``other``'s by more than ``within`` (itself is): the sweep's
    rule too (:func:`shown_within`)."""
    return one is other or shown_within(rate(one) / rate(other), noise, within, min(len(one), len(other)))


def faster(noise: Noise, one: Runs, other: Runs) -> bool:
    """Whether ``one``'s runs show it faster than ``other``'s beyond the noise."""
    return one is not other and bounds(noise, one, other)[0] > 0


def label(trial: TuneTrial) -> str:
    """A run's config in words, each node's own knobs after it (``num_workers=2; node 1: num_workers=1``)."""
    return changes_label(trial.config, trial.node_knobs)
