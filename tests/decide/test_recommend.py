"""The recommendation: the cheapest config its trials show within 5% of the fastest."""

from __future__ import annotations

import pytest

from dataprof.decide.recommend import recommend
from tests.conftest import trial


def test_recommends_fastest_when_clearly_faster() -> None:
    rec = recommend([trial(0, 100), trial(2, 200), trial(4, 400)])
    assert rec is not None and rec.config.num_workers == 4
    assert rec.speedup_vs_baseline == 4.0
    assert "50.0% slower" in rec.reason


def test_recommends_cheaper_config_within_noise() -> None:
    rec = recommend([trial(0, 100), trial(4, 398), trial(8, 400)])
    assert rec is not None and rec.config.num_workers == 4 and rec.fastest.num_workers == 8
    assert "within 5% of the fastest (w8 pf2 persist: −0.5%, at worst −3.0% at the ±3.0% noise)" in rec.reason
    assert "4 fewer workers" in rec.reason


def test_a_cheaper_config_must_be_shown_within_five_percent_not_only_read_within_it() -> None:
    quiet = recommend([trial(0, 100), trial(4, 390), trial(8, 400)])  # 2.5% slower, at worst 4.9%
    noisy = recommend([trial(0, 100), trial(4, 390, spread=0.05), trial(8, 400, spread=0.05)])
    assert quiet is not None and quiet.config.num_workers == 4
    assert noisy is not None and noisy.config.num_workers == 8  # read 2.5% slower, but it may be 14% slower
    assert "not shown within the 5% a cheaper config may cost (it may be 13.8% slower; longer trials" in noisy.reason
    floor = recommend([trial(0, 100), trial(4, 389), trial(8, 400)])  # 2.75% slower at the 3% floor: at worst 5.1%
    assert floor is not None and floor.config.num_workers == 8 and floor.reason.endswith("(it may be 5.1% slower)")
    assert "fastest, and the cheapest of those within 5% of it" in recommend(
        [trial(0, 100), trial(4, 400), trial(8, 398)]).reason  # type: ignore[union-attr]


def test_noise_never_trades_more_than_five_percent_for_fewer_workers() -> None:
    rec = recommend([trial(0, 100), trial(4, 360, spread=0.05), trial(8, 400, spread=0.05)])
    assert rec is not None and rec.config.num_workers == 8
    assert "within the ±14.1% noise, but not shown within the 5%" in rec.reason


def test_failed_trials_are_never_recommended() -> None:
    rec = recommend([trial(0, 100), trial(8, 0, status="crashed")])
    assert rec is not None and rec.config.num_workers == 0
    assert recommend([trial(2, 0, status="timeout")]) is None


def test_the_model_settles_a_gap_within_noise_that_the_cap_leaves_open() -> None:
    at_the_cpus = {4: (400.0, "cpus"), 8: (400.0, "cpus")}
    model = lambda t: at_the_cpus.get(t.config.num_workers, (100.0, "serial"))  # noqa: E731
    noisy = [trial(0, 100), trial(4, 360, spread=0.1), trial(8, 400, spread=0.1)]  # 10% apart, ±14% noise
    rec = recommend(noisy, model)
    assert rec is not None and rec.config.num_workers == 4
    assert "the model of the pipeline puts it at 400 samples/s against 400" in rec.reason
    more_workers_pay = {4: (360.0, "workers"), 8: (400.0, "workers")}
    rec = recommend(noisy, lambda t: more_workers_pay.get(t.config.num_workers, (100.0, "serial")))
    assert rec is not None and rec.config.num_workers == 8  # the model says the gap is real
    quiet = [trial(0, 100), trial(4, 360), trial(8, 400)]  # 10% apart beyond the noise: measured, not settled
    rec = recommend(quiet, model)
    assert rec is not None and rec.config.num_workers == 8


def test_the_model_settles_nothing_between_two_configs_of_one_worker_count() -> None:
    import dataclasses

    model = lambda t: (400.0, "cpus") if t.config.num_workers == 8 else (100.0, "serial")  # noqa: E731
    fastest = trial(8, 400, spread=0.1)
    pinned = dataclasses.replace(fastest, config=dataclasses.replace(fastest.config, prefetch_factor=4))
    lighter = dataclasses.replace(trial(8, 360, spread=0.1), config=dataclasses.replace(fastest.config,
                                                                                       prefetch_factor=1))
    rec = recommend([trial(0, 100), pinned, lighter], model)  # 10% apart, within the ±14% noise
    assert rec is not None and rec.config.prefetch_factor == 4  # the model cannot see prefetch: not settled
    assert "model" not in rec.reason and "noise, but not shown within the 5% a cheaper config may cost" in rec.reason


def test_the_sweep_s_model_settles_a_cpu_bound_tie() -> None:
    import dataclasses

    from dataprof.decide.sweep import decide
    from tests.conftest import recorded

    report = recorded("sweep", "cpu_bound")  # 2 CPUs used up from w2 on
    noisy = tuple(dataclasses.replace(t, samples_per_s=650.0 if t.config.num_workers == 4 else t.samples_per_s,
                                      samples_per_s_spread=0.2) for t in report.trials)
    decided = decide(dataclasses.replace(report, trials=noisy))
    assert decided.recommendation is not None and decided.recommendation.config.num_workers == 2
    assert decided.recommendation.fastest.num_workers == 4
    assert "the CPUs are used up" in decided.recommendation.reason


def test_the_sweep_and_tune_take_a_config_as_fast_by_one_rule() -> None:
    from dataprof.decide.recommend import MAX_TRADE
    from dataprof.decide.tune.noise import as_fast
    from dataprof.results.stats import Noise, noise_of_ratio, ratio_range, shown_within
    from dataprof.results.tune import TuneTrial
    from dataprof.results.vocabulary import TrialStatus

    # the sweep: 2.5% slower, at a ±14% noise band (a 7.1% standard deviation of the ratio, judged over many batches)
    cheaper, fastest = trial(4, 390, spread=0.05), trial(8, 400, spread=0.05)
    noise = noise_of_ratio(cheaper, fastest)
    assert noise.relative == pytest.approx(0.0707, abs=1e-4)
    low, high = ratio_range(390 / 400, noise)
    assert low == pytest.approx(0.975 * (1 - 1.645 * noise.relative) - 1) and high > 0
    assert not shown_within(390 / 400, noise, MAX_TRADE)
    assert recommend([trial(0, 100), cheaper, fastest]).config.num_workers == 8  # type: ignore[union-attr]
    # tune: one run's noise of 3%, by the same rule: 2.5% slower is not shown over one run each (at worst 7.3%),
    # and is over four (the medians wander half as far: at worst 4.9%)
    runs = {rate: [(i, TuneTrial({}, TrialStatus.OK, "candidate", iterations_per_s=rate)) for i in range(4)]
            for rate in (39.0, 40.0)}
    tune_noise = Noise(0.03, 61)
    assert not shown_within(39 / 40, tune_noise, MAX_TRADE) and shown_within(39 / 40, tune_noise, MAX_TRADE, runs=4)
    assert not as_fast(tune_noise, runs[39.0][:1], runs[40.0][:1], MAX_TRADE)
    assert as_fast(tune_noise, runs[39.0], runs[40.0], MAX_TRADE)
