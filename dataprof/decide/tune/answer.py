"""``dataprof tune``'s answer (pure): the config to recommend from the runs of the training, the noise they have,
and why; none without a comparison.

A config's figure is the median of its runs, each put on the script's own pace at its time (the machine drifts).
The noise is pooled from every config run more than once (one run's
relative spread), at least :data:`NOISE_FLOOR`. Among the configs within the noise of the fastest, the cheapest
wins: the fewest workers (processes or threads: each claims a CPU), then worker processes over threads (a new
loader in your code), the least prefetch, no change at all, the least memory. A config is recommended only once it
has :data:`MIN_RUNS` runs (the script's own needs no more than it has): one lucky run wins nothing."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any

from dataprof.decide.tune.causes import failure_cause
from dataprof.decide.tune.memory import over_memory
from dataprof.results.knobs import KnobValues
from dataprof.results.registry import REGISTRY
from dataprof.results.tune import TuneAnswer, TuneReport, TuneTrial
from dataprof.results.vocabulary import WorkerKind

NOISE_FLOOR = 0.05
"""The least relative noise a run of a training is taken to have (two runs alone say little of it)."""
MIN_RUNS = 2
"""Runs a config other than the script's own needs before it is recommended."""

Key = tuple[tuple[str, Any], ...]
Runs = list[tuple[int, TuneTrial]]


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
    run of a config other than the script's own at the script's pace at its time (:func:`on_pace`)."""
    return _by_config(on_pace(trials))


def _by_config(trials: Sequence[TuneTrial]) -> dict[Key, Runs]:
    """The completed runs (not the headspace), by config, with their indexes, as they are."""
    found: dict[Key, Runs] = {}
    for index, trial in enumerate(trials):
        if trial.ok and trial.role != "headspace":
            found.setdefault(key_of(trial), []).append((index, trial))
    return found


def on_pace(trials: Sequence[TuneTrial]) -> list[TuneTrial]:
    """The runs, each of a config other than the script's own with its figures scaled by the script's median pace
    over its pace around that run (between the script's runs before and after it, by their order; the nearest
    when it has them on one side only). This machine's speed drifts over the minutes a tune takes (±20% here): a
    config run early must not be judged against one run late at another speed, and the script's own runs,
    interleaved with the others (:data:`~dataprof.decide.tune.search.YOURS_EVERY`), say how fast the machine
    was. As they are with fewer than two runs of the script's own."""
    mine = [(index, t.iterations_per_s) for index, t in enumerate(trials)
            if t.role == "current" and t.ok and t.iterations_per_s]
    if len(mine) < 2:
        return list(trials)
    pace = statistics.median(value for _, value in mine)
    found = []
    for index, trial in enumerate(trials):
        if not trial.ok or trial.role in ("current", "headspace"):
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


def noise_of(trials: Sequence[TuneTrial]) -> float:
    """One run's relative noise, pooled from every config run more than once, as its runs are (the machine's drift
    between them in it: an upper bound): √2 × the pooled relative standard deviation (for two runs of one config,
    their spread over their mean), at least :data:`NOISE_FLOOR`."""
    squares, freedom = 0.0, 0
    for runs in _by_config(trials).values():
        values = [t.iterations_per_s or 0.0 for _, t in runs]
        mean = statistics.fmean(values)
        if len(values) < 2 or not mean:
            continue
        squares += sum(((v - mean) / mean) ** 2 for v in values)
        freedom += len(values) - 1
    return NOISE_FLOOR if not freedom else max(NOISE_FLOOR, math.sqrt(2 * squares / freedom))


def band(noise: float, one: Sequence[tuple[int, TuneTrial]], other: Sequence[tuple[int, TuneTrial]]) -> float:
    """How far apart the medians of two configs' runs may be by noise alone: one run's ``noise`` over the square
    root of the fewer runs either had (the median of n runs wanders about 1/√n as far), at least the floor."""
    return max(NOISE_FLOOR, noise / math.sqrt(min(len(one), len(other))))


def node_workers(config: KnobValues, knobs: KnobValues) -> int:
    """The workers of a node whose own ``knobs`` sit on top of ``config`` (the knobs the loader has)."""
    return (config | knobs).workers


def cost(runs: Sequence[tuple[int, TuneTrial]], settings: KnobValues,
         nnodes: int = 1) -> tuple[int, bool, int, int, int]:
    """What a config costs, least first: its workers on every node together (each a CPU's claim, thread or
    process), whether they are threads (a new loader in your code, not a knob), its prefetch, the knobs it changes
    in the script (a node's own counted once more), its memory."""
    trial = runs[0][1]
    config = settings | trial.config
    workers = config.workers * (nnodes - len(trial.node_knobs)) + \
        sum(node_workers(config, knobs) for knobs in trial.node_knobs.values())
    return (workers, config.get("worker_kind") == WorkerKind.THREAD, int(config.get("prefetch_factor") or 0),
            len(trial.config) + len(trial.node_knobs), trial.peak_memory_bytes or 0)


def pick(pool: Sequence[Runs], noise: float, settings: KnobValues, nnodes: int = 1) -> tuple[Runs, Runs]:
    """The cheapest of ``pool`` within the noise of its fastest, and that fastest."""
    fastest = max(pool, key=rate)
    top = rate(fastest)
    within = [runs for runs in pool if (top - rate(runs)) / top <= band(noise, runs, fastest)]
    return min(within, key=lambda runs: cost(runs, settings, nnodes)), fastest


def decide_tune(report: TuneReport) -> TuneReport:
    """``report`` with its answer made from its runs (none without a completed run of the script as it is; no
    recommendation without another config completed)."""
    current = report.by_role("current")
    by_config = rates(report.trials)
    if not current or not by_config:
        return dataclasses.replace(report, answer=None)
    settings = report.loader.settings if report.loader else KnobValues()
    noise = noise_of(report.trials)
    mine = by_config[key_of(current[0])]
    blocked = {key_of(runs[0][1]): problem for runs in by_config.values()
               if (problem := stream_problem(runs, mine, report)) is not None}
    usable = [runs for config, runs in by_config.items() if config not in blocked]
    leading, _ = pick(usable, noise, settings, report.nnodes)
    headspace = report.by_role("headspace")
    ceiling = headspace[0].iterations_per_s if headspace else None
    base = rate(mine)
    common: dict[str, Any] = {"noise": noise, "leading": leading[0][0], "step_slowdown": _slowdowns(report.trials),
                              "data_cost_fraction": cost_of(base, ceiling)}
    if len(by_config) < 2:
        return dataclasses.replace(report, answer=TuneAnswer(recommended=None, gain_over_current=None,
                                                             gain_range=None, recommended_data_cost_fraction=None,
                                                             reason=no_comparison(report), **common))
    eligible = [runs for runs in usable if runs is mine or len(runs) >= MIN_RUNS]
    chosen, fastest = pick(eligible, noise, settings, report.nnodes)
    chosen_rate = rate(chosen)
    spread = band(noise, chosen, mine)
    picked = report.loader_sweep.config if report.loader_sweep is not None else None
    swept = by_config.get(key(picked)) if picked is not None else None
    ranked = sorted(by_config.values(), key=rate, reverse=True)
    reason = _reason(chosen, fastest, mine, noise, settings, report.nnodes)
    if blocked:
        reason += "; not recommended: " + "; ".join(sorted(blocked.values())[:2])
    reason += _capped(report, leading, settings)
    if leading is not chosen and len(leading) < MIN_RUNS:
        reason += (f"; {label(leading[0][1])} ran once at {rate(leading) / base - 1:+.0%}: not confirmed "
                   "by a second run (a larger --budget runs it again)")
    return dataclasses.replace(report, answer=TuneAnswer(
        recommended=chosen[0][0], gain_over_current=chosen_rate / base - 1 if base else None,
        gain_range=(chosen_rate * (1 - spread) / (base * (1 + spread)) - 1,
                    chosen_rate * (1 + spread) / (base * (1 - spread)) - 1) if base else None,
        recommended_data_cost_fraction=cost_of(chosen_rate, ceiling), reason=reason,
        loader_sweep_rank=None if swept is None else (ranked.index(swept) + 1, len(ranked)),
        loader_sweep_vs_recommended=None if swept is None or not chosen_rate else rate(swept) / chosen_rate - 1,
        **common))


def _capped(report: TuneReport, leading: Runs, settings: KnobValues) -> str:
    """``; num_workers=16 not tried: …`` when the climb above the leading config stopped for memory."""
    config = settings | leading[0][1].config
    more = max(2, 2 * config.workers)
    ran = any((settings | t.config).workers == more for t in report.trials if t.role != "headspace")
    capped = None if ran or config.get("worker_kind") == WorkerKind.THREAD else over_memory(report, more)
    return "" if capped is None else f"; {capped}"


def stream_problem(runs: Runs, mine: Runs, report: TuneReport) -> str | None:
    """Why a config of a stream's loader (an IterableDataset) cannot be recommended: it changes the workers, and
    an epoch did not hold the same samples with them as with the script's own (each worker yields the whole
    stream unless it shards it), or no epoch ended to tell; None when it can be."""
    loader = report.loader
    if loader is None or not loader.iterable:
        return None

    def workers(of: Runs) -> tuple[int, tuple[int, ...]]:
        """Its workers, and those of each node with knobs of its own."""
        config = loader.settings | of[0][1].config
        return (config.workers,
                tuple(node_workers(config, knobs) for knobs in of[0][1].node_knobs.values()))

    if workers(runs) == workers(mine):
        return None
    theirs = {t.epoch_samples for _, t in runs if t.epoch_samples}
    yours = {t.epoch_samples for _, t in mine if t.epoch_samples}
    named = label(runs[0][1])
    if not theirs or not yours:
        return (f"{named}: the loader streams an IterableDataset and no epoch of it ended within a run, so whether "
                "its workers shard it (get_worker_info()) or each yield all of it is not seen (longer runs: "
                "--trial-seconds)")
    if theirs != yours:
        return (f"{named}: an epoch of the stream held {max(theirs):,} samples against {max(yours):,} as it is: "
                "each worker yields the whole stream unless it shards it by torch.utils.data.get_worker_info()")
    return None


def no_comparison(report: TuneReport) -> str:
    """Why no config other than the script's own completed: how many failed and why (their shared cause named,
    with its fix), or that the search stopped first."""
    failed = [t for t in report.trials if not t.ok and t.role not in ("current", "headspace")]
    cause = failure_cause(report)
    if not failed:
        return ("no config other than yours was measured: the budget ran out first (--budget, or shorter runs with "
                "--trial-seconds)" + (f"; {cause}" if cause else "") + ": nothing to compare, nothing recommended")
    why = cause if cause is not None else f"the first: {failed[0].error}"
    return (f"no config other than yours completed ({len(failed)} failed; {why}): nothing to compare, nothing "
            "recommended")


def cost_of(rate_now: float | None, ceiling: float | None) -> float | None:
    """``1 − rate ÷ ceiling``: what data loading costs the training (0 when it is at its ceiling)."""
    return None if not rate_now or not ceiling else max(0.0, 1 - rate_now / ceiling)


def _slowdowns(trials: Sequence[TuneTrial]) -> dict[int, float]:
    """Each run's step p50 over the headspace's, less one: its workers competing with the step for CPUs."""
    head = next((t for t in trials if t.role == "headspace" and t.ok and t.step_ms), None)
    base = (head.step_ms or {}).get("p50") if head is not None else None
    if not base:
        return {}
    return {i: (t.step_ms or {})["p50"] / base - 1 for i, t in enumerate(trials)
            if t.ok and t.role != "headspace" and (t.step_ms or {}).get("p50")}


def _reason(chosen: Runs, fastest: Runs, mine: Runs, noise: float, settings: KnobValues, nnodes: int) -> str:
    """Why ``chosen`` is recommended, in words."""
    if chosen is mine:
        return (f"your own config is the fastest within the noise (±{100 * band(noise, mine, fastest):.0f}%) or the "
                "cheapest of those: nothing to change")
    if chosen is fastest:
        return f"the fastest run, beyond the noise (±{100 * noise:.0f}% a run) of any cheaper one"
    gap = 1 - rate(chosen) / rate(fastest)
    return (f"within the noise (±{100 * band(noise, chosen, fastest):.0f}%) of the fastest "
            f"({label(fastest[0][1])}: −{100 * gap:.1f}%) and {_cheaper(chosen, fastest, settings, nnodes)}")


def _cheaper(chosen: Runs, other: Runs, settings: KnobValues, nnodes: int) -> str:
    """How ``chosen`` is cheaper than ``other``, in words."""
    mine, theirs = cost(chosen, settings, nnodes), cost(other, settings, nnodes)
    if mine[0] != theirs[0]:
        return f"uses fewer workers ({mine[0]} against {theirs[0]})"
    if mine[1] != theirs[1]:
        return "keeps worker processes (threads are a new loader in your code)"
    if mine[2] != theirs[2]:
        return f"prefetches less ({mine[2]} against {theirs[2]} batches a worker)"
    if mine[3] != theirs[3]:
        return f"changes fewer of your loader's knobs ({mine[3]} against {theirs[3]})"
    return "uses less memory" if mine[4] < theirs[4] else "costs no more"


def _label(config: KnobValues) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "as the script has it"


def label(trial: TuneTrial) -> str:
    """A run's config in words, each node's own knobs after it (``num_workers=2; node 1: num_workers=1``)."""
    return "; ".join([_label(trial.config), *(f"node {node}: {_label(knobs)}"
                                              for node, knobs in sorted(trial.node_knobs.items()))])


def without_idle_knobs(config: KnobValues) -> KnobValues:
    """``config`` without the knobs that need workers when it sets ``num_workers=0``."""
    if config.get("num_workers", 1):
        return config
    idle = {knob.name for knob in REGISTRY if knob.needs_workers}
    return KnobValues({k: v for k, v in config.items() if k not in idle})
