"""Search strategies on synthetic throughput curves: no DataLoader runs here."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable

import pytest

from dataprof.decide.recommend import recommend
from dataprof.decide.search import AdaptiveStrategy, Budget, GridStrategy, Proposal, rules_of_thumb
from dataprof.decide.search.common import pooled
from dataprof.decide.search.evidence import first_dip
from dataprof.decide.workers import adaptive_workers, auto_workers
from dataprof.results.knobs import LoaderConfig
from dataprof.results.space import SearchSpace
from dataprof.results.trial import Percentiles, TrialResult

Curve = Callable[[LoaderConfig], TrialResult]


def trial(config: LoaderConfig, rate: float, cpu: float = 10.0, spread: float = 0.01, memory: int | None = None,
          status: str = "ok") -> TrialResult:
    if status != "ok":
        return TrialResult(config=config, status=status, error="synthetic")
    return TrialResult.of(config, "ok", samples_per_s=rate, samples_per_s_spread=spread,
                          cpu_percent=cpu, peak_memory_bytes=memory, samples=int(rate * 2), window_s=2.0)


def run(strategy: AdaptiveStrategy | GridStrategy, curve: Curve, limit: int = 60) -> tuple[list[TrialResult], str]:
    history: list[TrialResult] = []
    for _ in range(limit):
        proposal = strategy.propose(history)
        if proposal.config is None:
            return history, proposal.why
        measured = next((i for i, t in enumerate(history) if t.config == proposal.config), None)
        if proposal.repeat:  # as the sweeper does: the re-measure pools with the earlier trial
            assert measured is not None, "re-measured a config never measured"
            history[measured] = pooled(history[measured], curve(proposal.config))
            continue
        assert measured is None, "proposed a config twice"
        history.append(curve(proposal.config))
    raise AssertionError("the search did not stop")


def reasons(strategy: AdaptiveStrategy, history: list[TrialResult]) -> dict[LoaderConfig, str]:
    """Why the strategy proposed each trial of a history it ran (no re-measures in it)."""
    return {t.config: strategy.propose(history[:n]).why for n, t in enumerate(history)}


def space(usable: int = 2, **kwargs: object) -> SearchSpace:
    values: dict[str, object] = {"workers": adaptive_workers(usable), "prefetch_factors": (2, 4)}
    values.update(kwargs)
    return SearchSpace(**values)  # type: ignore[arg-type]


def workers_tried(history: list[TrialResult]) -> set[int]:
    return {t.config.num_workers for t in history}


def best(history: list[TrialResult]) -> LoaderConfig:
    rec = recommend(history)
    assert rec is not None
    return rec.config


def latency_bound(config: LoaderConfig) -> TrialResult:
    """4 ms per sample, waiting: W workers give W / 4 ms (main process caps at 20k samples/s)."""
    w = max(1, config.num_workers)
    return trial(config, min(250.0 * w, 20_000.0), cpu=5.0 + 0.5 * w)


def test_latency_bound_keeps_climbing_far_past_the_cpu_count() -> None:
    history, why = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), latency_bound)
    assert max(workers_tried(history)) >= 64
    assert best(history).num_workers >= 64
    assert "top of the worker range" in why or "not beyond" in why


def cpu_bound(config: LoaderConfig) -> TrialResult:
    """2 CPUs, 3 ms of CPU per sample: flat from 2 workers on, CPU saturated."""
    w = config.num_workers
    used = min(max(w, 1), 2)
    return trial(config, 330.0 * used * (0.98 if w > 2 else 1.0), cpu=96.0 * used)


def test_cpu_bound_stops_at_the_cpu_count() -> None:
    history, why = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), cpu_bound)
    assert max(workers_tried(history)) <= 4  # one rung past the saturated CPUs, then no gain
    assert best(history).num_workers == 2
    assert "already used 1.9 of 2 usable CPUs" in why
    assert len(history) <= 6


def peaked(config: LoaderConfig) -> TrialResult:
    """Rises to a peak at 12 workers, then oversubscription costs 15% per doubling."""
    w = max(1, config.num_workers)
    rate = 100.0 * w if w <= 12 else 1200.0 * 0.85 ** ((w - 12) / 12)
    return trial(config, rate, cpu=50.0)


def test_peak_then_decline_is_refined_around_the_peak() -> None:
    history, _ = run(AdaptiveStrategy(space(32, workers=adaptive_workers(32)), Budget(usable_cpus=32)), peaked)
    tried = workers_tried(history)
    assert 12 in tried or {8, 16} <= tried
    assert max(tried) <= 64  # one rung past the decline at most
    assert 8 <= best(history).num_workers <= 16
    assert any(w not in adaptive_workers(32) for w in tried), "no refinement between rungs"


def test_noisy_flat_stops_early_and_recommends_the_cheapest() -> None:
    rng = random.Random(3)

    def flat(config: LoaderConfig) -> TrialResult:
        return trial(config, 1000.0 * rng.uniform(0.985, 1.015), cpu=30.0, spread=0.02)

    history, why = run(AdaptiveStrategy(space(8), Budget(usable_cpus=8)), flat)
    assert max(workers_tried(history)) <= 8
    assert "not beyond" in why
    assert best(history).num_workers <= 2


def test_a_failing_config_is_routed_around() -> None:
    def ooms_from_24(config: LoaderConfig) -> TrialResult:
        if config.num_workers >= 24:
            return trial(config, 0.0, status="oom")
        return latency_bound(config)

    history, why = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), ooms_from_24)
    failed = [t for t in history if t.status != "ok"]
    assert failed and max(t.config.num_workers for t in failed) == 32
    assert max(workers_tried(history)) == 32
    assert 16 <= best(history).num_workers < 24
    assert "oom" in why


def test_memory_budget_caps_the_climb_before_any_trial_is_killed() -> None:
    def per_worker_200mb(config: LoaderConfig) -> TrialResult:
        return trial(config, 250.0 * max(1, config.num_workers), memory=500_000_000 + 200_000_000 * config.num_workers)

    budget = Budget(usable_cpus=2, memory_bytes=8_000_000_000)
    history, why = run(AdaptiveStrategy(space(2), budget), per_worker_200mb)
    assert max(workers_tried(history)) <= 29  # 0.8 × 8 GB at 200 MB per worker over 0.5 GB
    assert "memory limit" in why


def test_the_sweep_s_budget_and_tune_read_one_memory_line_flat_where_memory_does_not_grow_with_workers() -> None:
    from dataprof.decide.budgets import memory_fit
    from dataprof.decide.tune.memory import memory_at
    from dataprof.results.tune import TunedLoader, TuneReport, TuneTrial
    from dataprof.results.vocabulary import TrialStatus

    peaks = {0: 2_600_000_000, 2: 2_400_000_000, 4: 2_350_000_000, 8: 2_300_000_000}  # falls: no growth
    line = memory_fit([trial(LoaderConfig(w, False, 2 if w else None, bool(w)), 100.0, memory=m)
                       for w, m in peaks.items()])
    assert line is not None and line.per_worker < 0 and line.at(64) == pytest.approx(2_412_500_000)
    assert line.base > 2_500_000_000  # the line's value at no workers: not what more workers take
    budget = Budget(usable_cpus=2, memory_bytes=3_100_000_000)
    history = [trial(LoaderConfig(w, False, 2 if w else None, bool(w)), 100.0, memory=m) for w, m in peaks.items()]
    assert budget.forbids(LoaderConfig(64, False, 2, True), history) is None  # the mean, 2.41 GB, fits 2.48
    runs = tuple(TuneTrial({"num_workers": w}, TrialStatus.OK, "candidate", iterations_per_s=1.0,
                           peak_memory_bytes=m) for w, m in peaks.items())
    tuned = TuneReport("0", (), TunedLoader("train.py:41", "DataLoader", 8, {"num_workers": 0}), runs, 1.0)
    assert memory_at(tuned, 64) == line.at(64)
    rising = memory_fit([trial(LoaderConfig(w, False, 2 if w else None, bool(w)), 100.0,
                               memory=500_000_000 + 200_000_000 * w) for w in (0, 2, 4)])
    assert rising is not None and rising.at(10) == pytest.approx(2_500_000_000)


def test_shm_and_open_file_budgets_forbid_configs() -> None:
    shm = Budget(usable_cpus=2, shm_free_bytes=1_000_000_000, batch_bytes=50_000_000)
    assert shm.forbids(LoaderConfig(16, False, 2, True), []) is not None
    assert shm.forbids(LoaderConfig(4, False, 2, True), []) is None
    files = Budget(usable_cpus=2, open_files=1024, batch_tensors=8)
    assert "open files" in (files.forbids(LoaderConfig(64, False, 2, True), []) or "")
    assert Budget(usable_cpus=2, open_files=1024, batch_tensors=8, shares_fds=False).forbids(
        LoaderConfig(64, False, 2, True), []) is None


def test_paddle_climbs_past_a_small_dev_shm_with_use_shared_memory_false() -> None:
    paddle = space(2, framework="paddle", use_shared_memory=(True, False), use_buffer_reader=(True,))
    budget = Budget(usable_cpus=2, shm_free_bytes=64_000_000, batch_bytes=8_000_000)  # holds 6 batches
    history, _ = run(AdaptiveStrategy(paddle, budget), latency_bound)
    in_shm = [t.config for t in history if t.config.num_workers and t.config.use_shared_memory]
    assert in_shm and all(budget.shm_forbids(c) is None for c in in_shm)
    assert max(workers_tried(history)) >= 16  # latency-bound: the climb went on, through the pipe
    assert best(history).use_shared_memory is False
    piped = next(s for s in history if s.config.num_workers > 2)
    assert piped.config.use_shared_memory is False
    torch_like = run(AdaptiveStrategy(space(2), budget), latency_bound)[1]
    assert "/dev/shm" in torch_like  # PyTorch has no such switch: the budget stops the climb


def test_other_knobs_are_tuned_only_at_the_best_worker_count() -> None:
    history, _ = run(AdaptiveStrategy(space(2, pin_memory=(True, False)), Budget(usable_cpus=2)), cpu_bound)
    tuned = [t.config for t in history if t.config.prefetch_factor == 4 or
             (t.config.num_workers and not t.config.pin_memory)]
    assert tuned and {c.num_workers for c in tuned} == {2}


def test_rules_of_thumb_are_measured_at_the_end() -> None:
    rules = dict(rules_of_thumb(8, space(8)))
    assert rules["0.75 × usable CPUs"] == LoaderConfig(6, False, 2, True)
    assert rules["usable CPUs − 1"] == LoaderConfig(7, False, 2, True)
    history, _ = run(AdaptiveStrategy(space(8), Budget(usable_cpus=8)), latency_bound)
    assert {6, 7} <= workers_tried(history)
    grid_space = SearchSpace(workers=auto_workers(8), prefetch_factors=(2,))
    grid_history, _ = run(GridStrategy(grid_space, Budget(usable_cpus=8)), latency_bound)
    assert {6, 7} <= workers_tried(grid_history)
    assert rules_of_thumb(2, space(2, pin_memory=(True, False)))[0][1].pin_memory


def test_the_same_history_gives_the_same_step() -> None:
    strategy = AdaptiveStrategy(space(2), Budget(usable_cpus=2))
    history, _ = run(strategy, peaked)
    for n in range(len(history)):
        first: Proposal = strategy.propose(history[:n])
        assert first == strategy.propose(history[:n]) and first.config == history[n].config


def test_one_worker_no_faster_than_none_does_not_stop_the_climb() -> None:
    history, _ = run(AdaptiveStrategy(SearchSpace(workers=(1, 2, 4)), Budget(usable_cpus=2)), latency_bound)
    assert [t.config.num_workers for t in history][:4] == [0, 1, 2, 4]


def test_persistent_workers_off_is_not_tuned() -> None:
    history, _ = run(AdaptiveStrategy(space(2, persistent_workers=(True, False)), Budget(usable_cpus=2)), cpu_bound)
    assert all(t.config.persistent_workers for t in history if t.config.num_workers)
    only_off = space(2, persistent_workers=(False,))
    history, _ = run(AdaptiveStrategy(only_off, Budget(usable_cpus=2)), cpu_bound)
    assert any(t.config.num_workers and not t.config.persistent_workers for t in history)


def straggling(config: LoaderConfig) -> TrialResult:
    """Every fourth batch stalls 200 ms: in order, the stall holds the others up; out of order, they overtake it."""
    w = max(1, config.num_workers)
    rate = 160.0 * w * (3.0 if config.in_order is False and w > 1 else 1.0)
    waits = Percentiles(p50=0.5, p95=150.0, p99=200.0, max=210.0, mean=50.0)
    return dataclasses.replace(trial(config, min(rate, 4000.0)), wait_ms=waits)


def test_a_heavy_wait_tail_gets_in_order_off_tried_and_recommended_with_the_order_caveat() -> None:
    searched = space(2, workers=(0, 2, 4, 8))
    history, _ = run(AdaptiveStrategy(searched, Budget(usable_cpus=2)), straggling)
    assert any(t.config.in_order is False for t in history)
    rec = recommend(history)
    assert rec is not None and rec.config.in_order is False
    assert "in_order=False: batches come as they are ready, not in the sampler's order" in rec.reason
    quiet, _ = run(AdaptiveStrategy(searched, Budget(usable_cpus=2)), latency_bound)
    assert not any(t.config.in_order is False for t in quiet)  # no tail, no trial of it
    lacking = dataclasses.replace(searched, skipped=("in_order",))
    older, _ = run(AdaptiveStrategy(lacking, Budget(usable_cpus=2)), straggling)
    assert not any(t.config.in_order is False for t in older)  # the DataLoader has no in_order: never faked


def steady(config: LoaderConfig) -> TrialResult:
    """Latency-bound, every batch in about the same time: the baseline's wait has no tail."""
    waits = Percentiles(p50=64.0, p95=66.0, p99=68.0, max=70.0, mean=64.2)
    return dataclasses.replace(latency_bound(config), wait_ms=waits)


def test_a_deeper_prefetch_buffer_is_tried_only_behind_stragglers_unless_given() -> None:
    searched = space(2, workers=(0, 2, 4, 8))
    quiet, why = run(AdaptiveStrategy(searched, Budget(usable_cpus=2)), steady)
    assert {t.config.prefetch_factor for t in quiet if t.config.num_workers} == {2}
    assert "prefetch_factor 4 not tried: batches at num_workers=0 have no stragglers (p99 68.0 ms, median " \
           "64.0 ms) nor do they come in bursts at w8 pf2 persist (wait p99 68.0 ms, median 64.0 ms)" in why
    assert "--prefetch-factor 2,4 to measure it anyway" in why
    strategy = AdaptiveStrategy(searched, Budget(usable_cpus=2))
    tail, why = run(strategy, straggling)
    deeper = [t.config for t in tail if t.config.prefetch_factor == 4]
    assert deeper and {c.num_workers for c in deeper} == {best(tail).num_workers} and "not tried" not in why
    assert reasons(strategy, tail)[deeper[0]] == "try prefetch_factor=4 at the pick so far: the batches at " \
                                                 "num_workers=0 have stragglers (p99 200.0 ms, median 0.5 ms)"
    given = dataclasses.replace(searched, forced=("prefetch_factor",))
    asked, why = run(AdaptiveStrategy(given, Budget(usable_cpus=2)), steady)
    assert any(t.config.prefetch_factor == 4 for t in asked) and "not tried" not in why

    def bursty(config: LoaderConfig) -> TrialResult:
        """Steady batches, but 64 workers on 2 CPUs hand them over in bursts (as measured at w64 pf2)."""
        if not config.num_workers:
            return steady(config)
        return dataclasses.replace(latency_bound(config), wait_ms=Percentiles(p50=1.0, p95=4.2, p99=7.3, max=24.6,
                                                                           mean=1.4))

    strategy = AdaptiveStrategy(searched, Budget(usable_cpus=2))
    burst, why = run(strategy, bursty)
    assert "not tried" not in why
    assert reasons(strategy, burst)[LoaderConfig(8, False, 4, True)] == "try prefetch_factor=4 at the pick so " \
        "far: batches reach w8 pf2 persist in bursts (wait p99 7.3 ms, median 1.0 ms)"
    lacking = dataclasses.replace(searched, framework="paddle", prefetch_factors=(2,), skipped=("prefetch_factor",))
    older, why = run(AdaptiveStrategy(lacking, Budget(usable_cpus=2)), straggling)
    assert {t.config.prefetch_factor for t in older if t.config.num_workers} == {None}  # never faked


def test_a_deeper_buffer_on_a_flat_top_is_tried_at_the_best_count_where_the_bursts_were_measured() -> None:
    """Linear to w32, then a ceiling the batches reach in bursts: w64 reads best, w128 within noise of it. A
    deeper buffer is tried at w64, whose bursts are the evidence: the same depth as w128 pf2 in half the
    processes sharing the CPUs, and a cheaper trial than at w128. When w128 reads 2.7% faster at a ±8.5% noise,
    w64 is not shown within the 5% a cheaper config may cost: the recommendation would take w128, and the buffer
    is tried there."""
    bursts = Percentiles(p50=1.0, p95=4.2, p99=7.3, max=24.6, mean=1.4)

    def ceiling(drop: float) -> Curve:
        def curve(config: LoaderConfig) -> TrialResult:
            if not config.num_workers:
                return steady(config)
            w, deeper = config.num_workers, (config.prefetch_factor or 2) > 2
            rate = min(250.0 * w, 11_000.0 - (drop if w > 64 else 0.0) + (1_500.0 if deeper and w >= 64 else 0.0))
            return dataclasses.replace(trial(config, rate, cpu=150.0, spread=0.03), wait_ms=bursts)
        return curve

    strategy = AdaptiveStrategy(space(2), Budget(usable_cpus=2))
    flat, _ = run(strategy, ceiling(drop=300.0))
    deeper = [t.config for t in flat if t.config.prefetch_factor == 4]
    assert deeper == [LoaderConfig(64, False, 4, True)] and best(flat) == deeper[0]
    assert reasons(strategy, flat)[deeper[0]] == "try prefetch_factor=4 at the pick so far: batches reach w64 " \
        "pf2 persist in bursts (wait p99 7.3 ms, median 1.0 ms)"
    peak, _ = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), ceiling(drop=2_000.0))
    assert {t.config.num_workers for t in peak if t.config.prefetch_factor == 4} == {best(peak).num_workers} \
        and best(peak).num_workers < 128  # w128 clearly worse: the buffer is tried at the peak
    rising, _ = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), ceiling(drop=-300.0))
    climbed = [t for t in rising if t.config.prefetch_factor == 2]
    assert max(climbed, key=lambda t: t.samples_per_s or 0.0).config.num_workers == 128  # w64 reads 2.7% slower
    assert [t.config for t in rising if t.config.prefetch_factor == 4] == [LoaderConfig(128, False, 4, True)]
    # at the count the recommendation takes: w64 may be up to 9.5% slower, more than the 5% it may trade


def test_bursts_on_cpus_used_up_get_no_deeper_buffer() -> None:
    """CPU-bound on 2 CPUs: the workers take turns on them and hand batches over in bursts, but no worker waits
    for a free slot while a CPU idles, so a deeper buffer cannot load faster and is not tried."""
    def turns(config: LoaderConfig) -> TrialResult:
        if not config.num_workers:
            return steady(config)
        return dataclasses.replace(cpu_bound(config), wait_ms=Percentiles(p50=1.0, p95=40.0, p99=90.0, max=120.0,
                                                                         mean=12.0))

    history, why = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), turns)
    assert {t.config.prefetch_factor for t in history if t.config.num_workers} == {2}
    assert "prefetch_factor 4 not tried: batches at num_workers=0 have no stragglers (p99 68.0 ms, median " \
           "64.0 ms), and they reach w2 pf2 persist in bursts (wait p99 90.0 ms, median 1.0 ms) as its workers " \
           "take turns on the 1.9 CPUs it used up: a deeper buffer adds no CPU" in why


def test_start_methods_are_tried_only_where_they_can_matter() -> None:
    fork = space(2, workers=(0, 2, 4), start_method="fork", available_start_methods=("fork", "spawn", "forkserver"))
    history, _ = run(AdaptiveStrategy(fork, Budget(usable_cpus=2)), latency_bound)
    assert {t.config.multiprocessing_context for t in history} == {None}

    def slow_start(config: LoaderConfig) -> TrialResult:
        return dataclasses.replace(latency_bound(config), first_batch_s=2.5 if config.num_workers else 0.01)

    started, _ = run(AdaptiveStrategy(fork, Budget(usable_cpus=2)), slow_start)
    assert {t.config.multiprocessing_context for t in started} == {None}  # fork starts fastest already

    def copying(config: LoaderConfig) -> TrialResult:
        return latency_bound(config).replaced(workers_inherited_growth_bytes=64 << 20)

    strategy = AdaptiveStrategy(fork, Budget(usable_cpus=2))
    copied, _ = run(strategy, copying)
    assert {t.config.multiprocessing_context for t in copied} == {None, "spawn", "forkserver"}
    spawned = next(t.config for t in copied if t.config.multiprocessing_context == "spawn")
    assert reasons(strategy, copied)[spawned].endswith(": each worker copied 16.8MB of the main process's pages "
                                                       "(copy-on-read)")  # 64 MiB over w4's four workers
    python_314 = dataclasses.replace(fork, start_method="forkserver")
    strategy = AdaptiveStrategy(python_314, Budget(usable_cpus=2))
    default, _ = run(strategy, latency_bound)
    assert {t.config.multiprocessing_context for t in default} == {None, "fork"}
    forked = next(t.config for t in default if t.config.multiprocessing_context == "fork")
    assert reasons(strategy, default)[forked].endswith(": workers start by forkserver here")
    forced = dataclasses.replace(fork, start_methods=("spawn",), forced=("multiprocessing_context",))
    given, _ = run(AdaptiveStrategy(forced, Budget(usable_cpus=2)), latency_bound)
    assert {t.config.multiprocessing_context for t in given if t.config.num_workers} == {"spawn"}


def test_linear_to_the_top_wastes_no_trial_refining_below_it() -> None:
    def linear(config: LoaderConfig) -> TrialResult:
        return trial(config, 250.0 * max(1, config.num_workers), cpu=5.0 + 0.5 * config.num_workers)

    history, why = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), linear)
    ladder = set(adaptive_workers(2))
    assert best(history).num_workers == 128 and "top of the worker range" in why
    refined = [t.config.num_workers for t in history if t.config.num_workers not in ladder | {1}]
    assert refined == []  # each jump scaled near-linearly: no count between two rungs could beat the higher one
    assert len(history) <= 9
    strategy = AdaptiveStrategy(space(2), Budget(usable_cpus=2))
    after_jump = strategy.propose([linear(c) for c in (LoaderConfig(0), LoaderConfig(2, False, 2, True),
                                                       LoaderConfig(8, False, 2, True))])
    assert after_jump.config is not None and after_jump.config.num_workers == 32
    assert after_jump.rival is not None and after_jump.rival.config.num_workers == 8 and after_jump.either_way
    # whether w32 beats w8 beyond the noise decides the climb either way: the trial may stop once it knows


def test_a_trial_may_stop_once_it_trails_the_one_its_decision_weighs_it_against() -> None:
    """Climb, refinement, tuning and the rules of thumb each ask "does this beat the best so far?": each such
    proposal names that trial as its rival (the trial's window may end once it is slower beyond the noise, a
    climb's once it is faster too); the baseline has none, and a re-measure, which needs the figure itself,
    none."""
    given = space(32, workers=adaptive_workers(32), forced=("prefetch_factor",))  # --prefetch-factor 2,4
    strategy = AdaptiveStrategy(given, Budget(usable_cpus=32))
    history: list[TrialResult] = []
    steps = []
    while (proposal := strategy.propose(history)).config is not None:
        fastest = max(history, key=lambda t: t.samples_per_s or 0.0, default=None)
        steps.append(proposal.why.split(":")[0].split(" (")[0].split(" at ")[0])
        assert (proposal.rival.config if proposal.rival else None) == (fastest.config if fastest else None), \
            proposal.why
        assert proposal.either_way == steps[-1].startswith("climb")  # only a climb goes on when it pays
        history.append(peaked(proposal.config))
    assert {"baseline", "climb", "try prefetch_factor=4", "rule of thumb"} <= set(steps)
    assert any(step.startswith("refine between") for step in steps)

    noisy = [trial(LoaderConfig(0), 600.0, spread=0.02), trial(LoaderConfig(2, False, 2, True), 450.0, spread=0.16)]
    again = AdaptiveStrategy(space(2, workers=(0, 2, 4, 8)), Budget(usable_cpus=2)).propose(noisy)
    assert again.repeat and again.rival is None


def test_a_step_the_noise_decides_is_measured_again_before_the_climb_stops() -> None:
    """On a busy machine w2 first reads 25% below w0 with ±23% noise; measured again, it is 1.5× w0."""
    readings: dict[LoaderConfig, int] = {}

    def busy_then_quiet(config: LoaderConfig) -> TrialResult:
        readings[config] = readings.get(config, 0) + 1
        w = config.num_workers
        if w == 2 and readings[config] == 1:
            return trial(config, 450.0, spread=0.16)  # the first reading, taken while another job ran
        return trial(config, {0: 600.0, 1: 600.0}.get(w, 900.0 + 10.0 * w), spread=0.02)

    history, _ = run(AdaptiveStrategy(space(2, workers=(0, 2, 4, 8)), Budget(usable_cpus=2)), busy_then_quiet)
    w2 = next(t for t in history if t.config.num_workers == 2 and t.config.prefetch_factor == 2)
    assert w2.repeats == 2 and w2.samples_per_s == 920.0  # the quiet reading settled it
    assert 4 in workers_tried(history)  # the climb went on past w2 (and stopped where the curve is flat)
    assert best(history).num_workers in (2, 4)

    def steady(config: LoaderConfig) -> TrialResult:
        return trial(config, 600.0 if config.num_workers < 2 else 610.0, spread=0.01)

    quiet, _ = run(AdaptiveStrategy(space(2, workers=(0, 2, 4, 8)), Budget(usable_cpus=2)), steady)
    assert all(t.repeats == 1 for t in quiet)  # a close call within ±3% is measured once: no gain worth taking hides

    def loud(config: LoaderConfig) -> TrialResult:
        return trial(config, 600.0 if config.num_workers < 2 else 610.0, spread=0.025)

    noisy, _ = run(AdaptiveStrategy(space(2, workers=(0, 2, 4, 8)), Budget(usable_cpus=2)), loud)
    assert any(t.repeats == 2 for t in noisy)  # ±7%: wider than the 5% the recommendation may trade


def test_pooling_keeps_the_noise_that_separated_two_readings() -> None:
    first = trial(LoaderConfig(2, False, 2, True), 400.0, spread=0.01)
    again = trial(LoaderConfig(2, False, 2, True), 600.0, spread=0.01)
    both = pooled(first, again)
    assert both.samples_per_s == pytest.approx(500.0) and both.repeats == 2
    assert both.samples_per_s_spread == pytest.approx(0.2)  # half their relative difference
    failed = pooled(first, trial(first.config, 0.0, status="crashed"))
    assert failed.samples_per_s == 400.0 and failed.repeats == 2
    loud = pooled(trial(first.config, 450.0, spread=0.16), trial(first.config, 920.0, spread=0.02))
    assert (loud.samples_per_s, loud.samples_per_s_spread, loud.repeats) == (920.0, 0.02, 2)


def test_a_flat_top_spends_no_trial_below_it() -> None:
    """Linear to w32, then the main process's ceiling: w64 and w128 load alike, so nothing below w64 can beat it."""
    def ceiling(config: LoaderConfig) -> TrialResult:
        w = max(1, config.num_workers)
        return trial(config, min(250.0 * w, 9_800.0 - 0.4 * w), cpu=5.0 + 0.5 * w)

    history, _ = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), ceiling)
    assert best(history).num_workers == 64
    assert not [w for w in workers_tried(history) if 32 < w < 64]
    saturated, _ = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), cpu_bound)
    assert not [w for w in workers_tried(saturated) if 2 < w < 4]  # at the CPU ceiling already: w3 cannot pay


def test_a_rising_top_gets_one_probe_below_it() -> None:
    """Near-linear to w32, then bending but still rising to the top of the range (the main process nearing its
    ceiling): one probe between w32 and w128 comes out clearly worse, so the counts between lie on the rise."""
    def bending(config: LoaderConfig) -> TrialResult:
        w = max(1, config.num_workers)
        return trial(config, 250.0 * w / (1 + (w / 100) ** 2) ** 0.5, cpu=5.0 + 0.5 * w)

    history, why = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), bending)
    assert best(history).num_workers == 128 and "top of the worker range" in why
    assert sorted(w for w in workers_tried(history) if 32 < w < 128) == [64]  # one probe, no bisection after it


def test_no_count_above_a_saturated_best_is_refined() -> None:
    """CPU-bound on 2 CPUs: w4 is best with the CPUs used up, w8 is clearly worse (contention): the climb's rung
    past saturation measured what more workers do, so no count between w4 and w8 is tried."""
    def contended(config: LoaderConfig) -> TrialResult:
        w = config.num_workers
        rate = {0: 450.0, 1: 450.0, 2: 780.0, 4: 900.0}.get(w, 900.0 * 0.9 ** math.log2(max(w, 4) / 4))
        return trial(config, rate, cpu=110.0 if w == 0 else 186.0)

    history, _ = run(AdaptiveStrategy(space(2, workers=(0, 2, 4, 8, 16)), Budget(usable_cpus=2)), contended)
    assert best(history).num_workers == 4 and 8 in workers_tried(history)
    assert not [w for w in workers_tried(history) if 4 < w < 8]


@pytest.mark.parametrize("above", [860.0, 930.0])
def test_a_step_from_saturated_cpus_is_not_measured_again(above: float) -> None:
    """w4 has used up the 2 CPUs; w8 reads 4% lower or 3% higher within a ±11% noise: more workers only share
    the same CPUs, so that reading is not taken again. The same step from unsaturated CPUs is measured again,
    unless w8 is the top of the range: no climb is left for the noise to decide."""
    def shared(cpu: float) -> Curve:
        def curve(config: LoaderConfig) -> TrialResult:
            rate = {0: 400.0, 1: 400.0, 2: 700.0, 4: 900.0}.get(config.num_workers, above)
            return trial(config, rate, cpu=cpu, spread=0.04)
        return curve

    searched = space(2, workers=(0, 2, 4, 8, 16))
    saturated, _ = run(AdaptiveStrategy(searched, Budget(usable_cpus=2)), shared(186.0))
    assert all(t.repeats == 1 for t in saturated)
    idle, _ = run(AdaptiveStrategy(searched, Budget(usable_cpus=2)), shared(60.0))
    assert [t.config.num_workers for t in idle if t.repeats == 2] == [8]  # the noisier reading (a tie: the newer)
    top, _ = run(AdaptiveStrategy(space(2, workers=(0, 2, 4, 8)), Budget(usable_cpus=2)), shared(60.0))
    assert all(t.repeats == 1 for t in top) and 8 in workers_tried(top)


@pytest.mark.parametrize("top_spread", [0.01, 0.05])
def test_a_best_past_the_knee_spends_no_trial_above_it_nor_below_it_within_the_noise(top_spread: float) -> None:
    """Linear at 235 samples/s per worker, then a ceiling near w46 and 1,700 samples/s lost per doubling past it
    (the latency example's shape on 2 CPUs): w64 loads under 90% of the rise, so it is past the knee and no
    count above it can load faster; below it the curve peaks +8% at most. A quiet top has a trial to spend
    there; a top as noisy as the latency example's (±5% a trial) has not."""
    def bent(config: LoaderConfig) -> TrialResult:
        w = max(1, config.num_workers)
        rate = min(235.0 * w, 9_900.0 - 1_700.0 * math.log2(w / 64))
        return trial(config, rate, cpu=5.0 + 0.5 * w, spread=top_spread if w >= 64 else 0.01)

    strategy = AdaptiveStrategy(space(2), Budget(usable_cpus=2))
    history, why = run(strategy, bent)
    assert best(history).num_workers <= 64
    assert not [w for w in workers_tried(history) if 64 < w < 128]
    between = [w for w in workers_tried(history) if 32 < w < 64]
    if top_spread > 0.01:
        assert between == [] and "past the knee" in why and "refining cannot pay" in why
    else:
        assert between, "a quiet top left the +8% the knee allows below w64 untried"


def test_a_dip_in_the_curve_is_measured_again_before_it_steers_the_pick() -> None:
    """Linear at 230 samples/s per worker to w32, a peak at w64, w128 12% lower: the refinement's first
    reading of w64 was taken while the machine drifted (a fifth low, cut short). Below both w32 and w128 it
    contradicts the curve's one peak, so it is measured again, and the pooled w64 is recommended."""
    readings: dict[LoaderConfig, int] = {}

    def drifted(config: LoaderConfig) -> TrialResult:
        readings[config] = readings.get(config, 0) + 1
        w = max(1, config.num_workers)
        rate = min(230.0 * w, 8_500.0 - 1_000.0 * math.log2(w / 64))
        if w == 64 and readings[config] == 1:
            return dataclasses.replace(trial(config, 6_500.0, spread=0.02), samples=int(6_500 * 1.5), window_s=1.5)
        return dataclasses.replace(trial(config, rate, cpu=5.0 + 0.5 * w, spread=0.02), window_s=3.0,
                                   samples=int(rate * 3.0))

    strategy = AdaptiveStrategy(space(2), Budget(usable_cpus=2))
    history, _ = run(strategy, drifted)
    w64 = next(t for t in history if t.config == LoaderConfig(64, False, 2, True))
    assert w64.repeats == 2 and w64.samples_per_s is not None and w64.samples_per_s > 7_800.0
    assert best(history).num_workers == 64

    flat = [trial(LoaderConfig(w, False, 2, True), rate, spread=0.02)
            for w, rate in ((2, 780.0), (4, 900.0), (8, 870.0), (16, 880.0))]
    declining = [trial(LoaderConfig(w, False, 2, True), rate, spread=0.02)
                 for w, rate in ((4, 900.0), (8, 500.0), (16, 400.0))]
    dip = [trial(LoaderConfig(w, False, 2, True), rate, spread=0.02)
           for w, rate in ((8, 1_800.0), (32, 7_300.0), (64, 6_500.0), (128, 8_000.0))]
    assert first_dip(flat, 0.05) is None  # a flat top within the 5% the recommendation may trade
    assert first_dip(declining, 0.05) is None  # a fall, however steep, is no dip
    found = first_dip(dip, 0.05)
    assert found is not None and found[0].config.num_workers == 64 and "14% below the line from w32 to w128" \
        in found[1]
    assert first_dip([*dip[:2], dataclasses.replace(dip[2], repeats=2), dip[3]], 0.05) is None  # measured twice


def test_a_count_above_a_best_still_on_its_linear_rise_is_refined_however_noisy() -> None:
    """w32 loads 230 samples/s per worker, the fastest rate per worker measured, so the curve has not bent at
    w32; w128 reads within a ±20% noise of it, so the curve bent between them and its peak, at w64, lies
    between: refined, although w32 is not beyond the noise above w128."""
    def noisy_top(config: LoaderConfig) -> TrialResult:
        w = max(1, config.num_workers)
        if w == 128:
            return trial(config, 6_800.0, spread=0.20)
        return trial(config, min(230.0 * w, 8_500.0 - 500.0 * math.log2(w / 64)), cpu=5.0 + 0.5 * w,
                     spread=0.02)

    history, _ = run(AdaptiveStrategy(space(2), Budget(usable_cpus=2)), noisy_top)
    assert 64 in workers_tried(history) and best(history).num_workers == 64
