"""The console report of a sweep."""

from __future__ import annotations

import dataclasses

from dataprof.render.documents import ConsoleRenderer
from tests.conftest import decided, recorded, trial


def test_console_report_shows_every_trial_the_winner_and_a_dataloader_line() -> None:
    text = ConsoleRenderer(100).render(recorded("sweep", "latency"))
    assert "Trials (steady state" in text
    assert text.count("persist") >= 2 and " w0 " in text
    assert "★ w4 pf2 persist" in text
    assert "DataLoader(dataset, batch_size=16, num_workers=4, prefetch_factor=2, persistent_workers=True, " \
           "pin_memory=False)" in text
    assert "simulated device" in text


def test_console_lists_failures_with_their_reason() -> None:
    report = dataclasses.replace(recorded("sweep", "latency"), trials=(trial(0, 100), trial(4, 0, status="timeout")))
    text = ConsoleRenderer(100).render(report)
    assert "w4 pf2 persist: timeout: boom" in text
    assert "status" in text


def test_console_fits_80_columns_except_the_line_to_copy() -> None:
    text = ConsoleRenderer(80).render(recorded("sweep", "latency"))
    assert "…" not in text
    lines = text.splitlines()
    assert max(len(line) for line in lines if not line.startswith("DataLoader(")) <= 80
    assert any(line.startswith("DataLoader(") and line.endswith("pin_memory=False)") for line in lines)


def test_terminal_chart_shows_the_curve() -> None:
    text = ConsoleRenderer().render(decided("io_bound"))
    assert "Throughput by num_workers" in text
    bars = [line for line in text.splitlines() if "│" in line and line.strip().startswith("w")]
    lengths = [line.count("█") for line in bars]
    assert len(bars) >= 3 and lengths == sorted(lengths)  # io-bound: more workers, longer bars


def test_a_trial_that_died_by_a_signal_is_shown_with_what_the_signal_usually_means() -> None:
    import io

    from dataprof.render.progress import plain_observer
    from dataprof.results.vocabulary import Event

    died = dataclasses.replace(trial(4, 0, status="crashed"), error="a DataLoader worker died by SIGBUS")
    report = dataclasses.replace(recorded("sweep", "latency"), trials=(trial(0, 100), died))
    text = " ".join(ConsoleRenderer(100).render(report).split())
    assert "w4 pf2 persist: crashed: a DataLoader worker died by SIGBUS: a bus error in a worker usually means " \
           "/dev/shm is too small" in text
    stream = io.StringIO()
    plain_observer(stream)(Event.TRIAL_DONE, {"index": 1, "result": died})
    assert "crashed · a DataLoader worker died by SIGBUS: a bus error" in stream.getvalue()


def test_a_rule_of_thumb_is_called_right_only_where_it_picks_the_recommended_config() -> None:
    from dataprof.render.view import rules_of_thumb
    from dataprof.results.sweep import RuleOfThumb

    report = decided("cpu_bound")
    assert report.recommendation is not None
    other = dataclasses.replace(report.recommendation.config, num_workers=4)
    rows = (RuleOfThumb("usable CPUs", report.recommendation.config, "ok", 588.2, 1.0, within_noise=True),
            RuleOfThumb("2 × usable CPUs", other, "ok", 569.0, 1.03, within_noise=True))
    lines = [line for line, _ in rules_of_thumb(dataclasses.replace(report, rules_of_thumb=rows))]
    assert lines[0].endswith("588.2 samples/s, within noise of the recommendation: the advice is right here")
    assert lines[1].endswith("569.0 samples/s, within noise of the recommendation (these trials cannot tell them "
                             "apart)")
