"""The recommendation: the cheapest config within noise of the fastest."""

from __future__ import annotations

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
    assert "within noise" in rec.reason and "4 fewer workers" in rec.reason


def test_noisy_trials_widen_the_noise_band() -> None:
    quiet = recommend([trial(0, 100), trial(4, 385), trial(8, 400)])
    noisy = recommend([trial(0, 100), trial(4, 385, spread=0.05), trial(8, 400, spread=0.05)])
    assert quiet is not None and quiet.config.num_workers == 8
    assert noisy is not None and noisy.config.num_workers == 4


def test_noise_never_trades_more_than_five_percent_for_fewer_workers() -> None:
    rec = recommend([trial(0, 100), trial(4, 360, spread=0.05), trial(8, 400, spread=0.05)])
    assert rec is not None and rec.config.num_workers == 8
    assert "within the ±14.1% noise, but more than the 5%" in rec.reason


def test_failed_trials_are_never_recommended() -> None:
    rec = recommend([trial(0, 100), trial(8, 0, status="crashed")])
    assert rec is not None and rec.config.num_workers == 0
    assert recommend([trial(2, 0, status="timeout")]) is None
