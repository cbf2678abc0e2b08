"""Model round trip, recommendation and renderers, on a recorded run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from dataprof.decide.recommend import recommend
from dataprof.render import console
from dataprof.results.settings import LoaderConfig
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult

RECORDED = Path(__file__).parent / "data" / "sweep" / "latency.json"


def recorded() -> Report:
    return Report.from_dict(json.loads(RECORDED.read_text()))


def trial(workers: int, rate: float, spread: float = 0.005, status: str = "ok", memory: int = 0) -> TrialResult:
    config = LoaderConfig(workers, False, 2 if workers else None, workers > 0)
    return TrialResult(config=config, status=status, samples_per_s=rate if status == "ok" else None,
                       samples_per_s_spread=spread, peak_memory_bytes=memory,
                       error=None if status == "ok" else "boom")


def test_json_round_trip_is_lossless() -> None:
    report = recorded()
    again = Report.from_dict(json.loads(report.to_json()))
    assert again == report


def test_json_has_the_documented_keys() -> None:
    data = json.loads(recorded().to_json())
    assert data["schema_version"] == 1
    for key in ("tool", "target", "environment", "settings", "trials", "baseline", "best", "diagnosis", "search"):
        assert key in data
    first = data["trials"][0]
    for key in ("config", "status", "error", "samples_per_s", "first_batch_s", "wait_fraction", "wait_ms",
                "cpu_percent", "peak_memory_bytes", "gpu_util_percent"):
        assert key in first
    assert data["baseline"]["config"]["num_workers"] == 0
    assert data["best"]["speedup_vs_baseline"] > 1


def test_nan_becomes_null() -> None:
    report = dataclasses.replace(recorded(), trials=(trial(2, float("nan")),))
    assert json.loads(report.to_json())["trials"][0]["samples_per_s"] is None


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


def test_console_report_shows_every_trial_the_winner_and_a_dataloader_line() -> None:
    text = console.render(recorded(), width=100)
    assert "Trials (steady state" in text
    assert text.count("persist") >= 2 and " w0 " in text
    assert "★ w4 pf2 persist" in text
    assert "DataLoader(dataset, batch_size=16, num_workers=4, prefetch_factor=2, persistent_workers=True, " \
           "pin_memory=False)" in text
    assert "simulated device" in text


def test_console_lists_failures_with_their_reason() -> None:
    report = dataclasses.replace(recorded(), trials=(trial(0, 100), trial(4, 0, status="timeout")))
    text = console.render(report, width=100)
    assert "w4 pf2 persist: timeout: boom" in text
    assert "status" in text


def test_console_fits_80_columns_except_the_line_to_copy() -> None:
    text = console.render(recorded(), width=80)
    assert "…" not in text
    lines = text.splitlines()
    assert max(len(line) for line in lines if not line.startswith("DataLoader(")) <= 80
    assert any(line.startswith("DataLoader(") and line.endswith("pin_memory=False)") for line in lines)
