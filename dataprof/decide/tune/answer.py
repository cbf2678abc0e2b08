"""``dataprof tune``'s answer (pure): the config to recommend from the runs of the training, and why; "cannot
tell" when the runs cannot show an answer right, none without a comparison.

Configs are compared through the range of one's rate over another's at the runs' noise (``noise``), and an answer
must be shown, not merely not refuted: a config is recommended only when its range shows it no slower than the
script's own config by more than :data:`~dataprof.decide.tune.noise.AS_FAST`, and no slower than the fastest
config run twice, and each config run once whose run beat it, by more than
:data:`~dataprof.decide.tune.noise.NEAR_BEST` (equivalence bounds); among those the cheapest wins: the fewest
workers, then the least prefetch, the fewest knobs changed, the least memory. Threads in place of the script's
worker processes ask for new code, and a config of its own for some nodes asks for one command line per node:
each is recommended only when faster beyond the noise than every config of processes for every node, never as
cheaper. When nothing is shown, the answer is "cannot tell" with the range measured. A config
is recommended only once it has :data:`~dataprof.decide.tune.noise.MIN_RUNS` runs (the script's own needs no more
than it has): one lucky run wins nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from dataprof.decide.cost import cheaper
from dataprof.decide.tune.causes import failure_cause
from dataprof.decide.tune.cost import asks_code, cost, cost_of, node_workers
from dataprof.decide.tune.memory import over_memory
from dataprof.decide.tune.noise import (
    MIN_RUNS,
    NEAR_BEST,
    Key,
    Runs,
    as_fast,
    bounds,
    faster,
    headspace_runs,
    key,
    key_of,
    label,
    pooled_noise,
    rate,
    rates,
)
from dataprof.results.knobs import KnobValues
from dataprof.results.stats import Noise
from dataprof.results.tune import TuneAnswer, TuneReport, TuneTrial
from dataprof.results.units import fmt_change
from dataprof.results.vocabulary import TuneVerdict


@dataclasses.dataclass(frozen=True)
class Choice:
    """What the runs show: the config chosen (None: cannot tell), the fastest it was held against, and why."""

    chosen: Runs | None
    fastest: Runs
    why: str
    once: Runs | None = None
    """A config run once, that beat the fastest, that the reason names."""


def choose(usable: Sequence[Runs], mine: Runs, noise: Noise, settings: KnobValues, nnodes: int = 1) -> Choice:
    """The config the runs show right: among the configs of processes (the script's own kind) run twice or more,
    the cheapest shown no slower than the script's own (:func:`as_fast`) and near (:data:`NEAR_BEST`) the fastest
    of them and each config run once that beat it; threads in their place only when shown faster than every
    config of processes; None when none is shown (cannot tell)."""
    kept = [runs for runs in usable if not asks_code(runs, settings) and not runs[0][1].node_knobs]
    eligible = [runs for runs in kept if runs is mine or len(runs) >= MIN_RUNS]
    fastest = max(eligible, key=rate)
    processes = max(kept, key=rate)  # those run once too: threads must beat every config of processes
    threads = [runs for runs in usable if asks_code(runs, settings) and len(runs) >= MIN_RUNS
               and faster(noise, runs, processes) and faster(noise, runs, fastest)]
    per_node = [runs for runs in usable if runs[0][1].node_knobs and not asks_code(runs, settings)
                and len(runs) >= MIN_RUNS and faster(noise, runs, processes) and faster(noise, runs, fastest)]
    for apart, what in ((threads, "threads in place of your worker processes, faster beyond the noise than the "
                                  "fastest config of processes"),
                        (per_node, "a config of its own for some nodes, faster beyond the noise than the fastest "
                                   "config for every node")):
        if apart:
            top = max(apart, key=rate)
            best = min((runs for runs in apart if as_fast(noise, runs, top)),
                       key=lambda r: cost(r, settings, nnodes))
            low, _ = bounds(noise, best, processes)
            return Choice(best, fastest, f"{what} ({label(processes[0][1])}: at least {fmt_change(low)})")
    shown = [runs for runs in eligible if as_fast(noise, runs, mine) and not _above(noise, runs, fastest, kept)]
    if not shown:
        above = _above(noise, fastest, fastest, kept)
        once = None if not as_fast(noise, fastest, mine) or not above else max(above, key=rate)
        return Choice(None, fastest, _cannot_tell(fastest, mine, noise, once), once)
    chosen = min(shown, key=lambda runs: (cost(runs, settings, nnodes), runs is not mine))
    return Choice(chosen, fastest, _reason(chosen, fastest, mine, noise, settings, nnodes))


def _above(noise: Noise, runs: Runs, fastest: Runs, kept: Sequence[Runs]) -> list[Runs]:
    """The configs ``runs`` is not shown near (:data:`NEAR_BEST`) that may be the best: the fastest run twice, and
    each run once whose run was as fast as its median or faster (one run that beat it, unconfirmed)."""
    return [other for other in kept if other is not runs
            and (other is fastest or (len(other) < MIN_RUNS and rate(other) >= rate(runs)))
            and not as_fast(noise, runs, other, NEAR_BEST)]


def unsettled(report: TuneReport) -> list[Runs]:
    """While the runs cannot tell: the fastest config of processes run twice or more, and what it is not shown as
    fast as (the script's own, a config run once that beat it): the runs that more runs of would settle the
    answer; none once it is settled."""
    if report.answer is None or report.answer.verdict != TuneVerdict.CANNOT_TELL or report.loader is None:
        return []
    noise = pooled_noise(report.trials)
    by_config = rates(report.trials)
    mine = by_config[key_of(report.by_role("current")[0])]
    kept = [runs for runs in by_config.values() if not asks_code(runs, report.loader.settings)
            and not runs[0][1].node_knobs]
    fastest = max((runs for runs in kept if runs is mine or len(runs) >= MIN_RUNS), key=rate)
    above = _above(noise, fastest, fastest, kept)
    return [fastest, *above] if as_fast(noise, fastest, mine) else [fastest, mine, *above]


def _cannot_tell(fastest: Runs, mine: Runs, noise: Noise, once: Runs | None) -> str:
    """Why no config is shown right: the fastest run twice against the script's own, or a config run once that
    beat it against it, with its range, and what would settle it."""
    one, other = (fastest, mine) if once is None else (once, fastest)
    low, high = bounds(noise, one, other)
    named = ("yours" if one is mine else label(one[0][1])) + (" (run once)" if len(one) == 1 else "")
    against = "yours" if other is mine else label(other[0][1])
    unshown = "shown no slower than yours by 5% and near the fastest" if once is None else \
        "confirmed near what ran faster once"
    return (f"cannot tell on this machine: {named} ran {fmt_change(rate(one) / rate(other) - 1)} against "
            f"{against} ({fmt_change(low)} to {fmt_change(high)} at a noise of ±{noise.relative:.0%} a run, "
            f"{len(one)} and {len(other)} runs): no config is {unshown}; more runs (a larger --budget), longer "
            "runs (--trial-seconds) or a quieter machine would settle it")


def decide_tune(report: TuneReport) -> TuneReport:
    """``report`` with its answer made from its runs (none without a completed run of the script as it is; no
    recommendation without another config completed, nor when the runs cannot show one right)."""
    current = report.by_role("current")
    by_config = rates(report.trials)
    if not current or not by_config:
        return dataclasses.replace(report, answer=None)
    settings = report.loader.settings if report.loader else KnobValues()
    noise = pooled_noise(report.trials)
    mine = by_config[key_of(current[0])]
    blocked = {key_of(runs[0][1]): problem for runs in by_config.values()
               if (problem := stream_problem(runs, mine, report)) is not None}
    usable = [runs for config, runs in by_config.items() if config not in blocked]
    leading = _leading(usable, noise, settings, report.nnodes)
    head = headspace_runs(report.trials)
    base = rate(mine)
    common: dict[str, Any] = {"noise": noise.relative, "noise_freedom": noise.freedom, "leading": leading[0][0],
                              "step_slowdown": _slowdowns(report.trials),
                              "data_cost_fraction": cost_of(base, rate(head) if head else None),
                              "data_cost_range": _cost_range(noise, mine, head),
                              "ceiling": rate(head) if head else None}
    if len(by_config) < 2:
        return dataclasses.replace(report, answer=TuneAnswer(
            recommended=None, gain_over_current=None, gain_range=None, recommended_data_cost_fraction=None,
            reason=no_comparison(report), verdict=TuneVerdict.NOTHING_COMPARED, **common))
    choice = choose(usable, mine, noise, settings, report.nnodes)
    reason = choice.why
    if blocked:
        reason += "; not recommended: " + "; ".join(sorted(blocked.values())[:2])
    reason += _capped(report, leading, settings)
    against = choice.chosen or choice.fastest
    ahead = max((runs for runs in usable if len(runs) < MIN_RUNS and rate(runs) > rate(against)), key=rate,
                default=None)
    if ahead is not None and ahead is not choice.once:  # faster on its one run: what a second run could change
        reason += (f"; {label(ahead[0][1])} ran once at {fmt_change(rate(ahead) / base - 1)}: not confirmed by a "
                   "second run (a larger --budget runs it again)")
    swept = _swept(report, by_config)
    ranked = sorted(by_config.values(), key=rate, reverse=True)
    chosen = choice.chosen
    if chosen is None:
        return dataclasses.replace(report, answer=TuneAnswer(
            recommended=None, gain_over_current=None, gain_range=None, recommended_data_cost_fraction=None,
            reason=reason, verdict=TuneVerdict.CANNOT_TELL,
            loader_sweep_rank=None if swept is None else (ranked.index(swept) + 1, len(ranked)), **common))
    chosen_rate = rate(chosen)
    return dataclasses.replace(report, answer=TuneAnswer(
        recommended=chosen[0][0], gain_over_current=chosen_rate / base - 1 if base else None,
        gain_range=bounds(noise, chosen, mine) if chosen is not mine else (0.0, 0.0),
        recommended_data_cost_fraction=cost_of(chosen_rate, rate(head) if head else None), reason=reason,
        verdict=TuneVerdict.KEEP if chosen is mine else TuneVerdict.CHANGE,
        loader_sweep_rank=None if swept is None else (ranked.index(swept) + 1, len(ranked)),
        loader_sweep_vs_recommended=None if swept is None or not chosen_rate else rate(swept) / chosen_rate - 1,
        **common))


def _leading(usable: Sequence[Runs], noise: Noise, settings: KnobValues, nnodes: int) -> Runs:
    """The config the search goes on from, counting configs run once: the cheapest within the noise of the fastest
    (not shown slower than it: where to look next, not an answer), threads only when they are that fastest."""
    fastest = max(usable, key=rate)
    within = [runs for runs in usable if bounds(noise, runs, fastest)[1] >= 0
              and (runs is fastest or not asks_code(runs, settings))]
    return min(within, key=lambda runs: cost(runs, settings, nnodes))


def _swept(report: TuneReport, by_config: dict[Key, Runs]) -> Runs | None:
    """The runs of the loader-only sweep's pick in the training, when it ran there."""
    picked = report.loader_sweep.config if report.loader_sweep is not None else None
    return by_config.get(key(picked)) if picked is not None else None


def _cost_range(noise: Noise, mine: Runs, head: Runs) -> tuple[float, float] | None:
    """The range of the data cost (:func:`cost_of`) at ``noise``: the script's own runs against the
    headspace's."""
    if not head or not mine:
        return None
    low, high = bounds(noise, mine, head)
    return max(0.0, -high), max(0.0, -low)


def _capped(report: TuneReport, leading: Runs, settings: KnobValues) -> str:
    """``; num_workers=16 not tried: …`` when the climb above the leading config stopped for memory."""
    config = settings | leading[0][1].config
    more = max(2, 2 * config.workers)
    ran = any((settings | t.config).workers == more for t in report.trials if t.role != "headspace")
    capped = None if ran or config.threads else over_memory(report, more)
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


def _slowdowns(trials: Sequence[TuneTrial]) -> dict[int, float]:
    """Each run's step p50 over the headspace's, less one: its workers competing with the step for CPUs."""
    head = next((t for t in trials if t.role == "headspace" and t.ok and t.step_ms), None)
    base = head.step_ms.p50 if head is not None and head.step_ms else None
    if not base:
        return {}
    return {i: t.step_ms.p50 / base - 1 for i, t in enumerate(trials)
            if t.ok and t.role != "headspace" and t.step_ms and t.step_ms.p50}


def _reason(chosen: Runs, fastest: Runs, mine: Runs, noise: Noise, settings: KnobValues, nnodes: int) -> str:
    """Why ``chosen`` is recommended, in words: what its runs show against the fastest and the script's own."""
    if chosen is mine:
        if mine is fastest:
            return "your own config is the fastest, or no other is shown as fast: nothing to change"
        low, _ = bounds(noise, mine, fastest)
        return (f"your own config is as fast as the fastest ({label(fastest[0][1])}: yours at least {fmt_change(low)} "
                f"against it, within {NEAR_BEST:.0%}) and no other as fast is cheaper: nothing to change")
    low, _ = bounds(noise, chosen, mine)
    shown = f"no slower than yours (at least {fmt_change(low)})"
    if chosen is fastest:
        return f"the fastest, {shown}"
    top, _ = bounds(noise, chosen, fastest)
    words = cheaper(cost(chosen, settings, nnodes), cost(fastest, settings, nnodes))
    return (f"as fast as the fastest ({label(fastest[0][1])}: at least {fmt_change(top)} against it, within "
            f"{NEAR_BEST:.0%}), {shown}, and {words}")
