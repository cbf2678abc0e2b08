"""CI gates on a sweep: each passes or fails with the numbers it compared."""

from __future__ import annotations

import dataclasses

from dataprof.decide.gates import Gates, evaluate
from dataprof.results.sweep import Report
from dataprof.results.vocabulary import Severity
from tests.conftest import decided, scaled


def gate(report: Report, gates: Gates, baseline: Report | None = None) -> tuple[bool, str]:
    (result,) = evaluate(report, gates, baseline)
    return result.passed, result.message


def test_throughput_and_speedup_gates_pass_and_fail() -> None:
    report = decided("io_bound")
    rate = report.recommendation.samples_per_s  # type: ignore[union-attr]
    assert gate(report, Gates(min_throughput=rate * 0.9))[0]
    passed, message = gate(report, Gates(min_throughput=rate * 1.1))
    assert not passed and f"{rate:,.1f}" in message
    speedup = report.recommendation.speedup_vs_baseline  # type: ignore[union-attr]
    assert gate(report, Gates(min_speedup=speedup - 0.1))[0]
    assert not gate(report, Gates(min_speedup=speedup + 0.1))[0]


def test_fail_on_severity_gate() -> None:
    critical = decided("io_bound")  # critical: the loop waits most of each iteration
    assert not gate(critical, Gates(fail_on=Severity.CRITICAL))[0]
    healthy = decided("model_bound")
    assert gate(healthy, Gates(fail_on=Severity.WARNING))[0]
    assert "io_bound (critical)" in gate(critical, Gates(fail_on=Severity.WARNING))[1]


def test_regression_gate_against_a_baseline() -> None:
    report = decided("io_bound")
    assert gate(report, Gates(max_regression=0.1), report)[0]
    passed, message = gate(report, Gates(max_regression=0.1), scaled(report, 1.5))
    assert not passed and "-33.3%" in message
    assert gate(report, Gates(max_regression=0.1), scaled(report, 0.5))[0]  # an improvement passes
    elsewhere = dataclasses.replace(scaled(report, 1.5), environment=dataclasses.replace(
        report.environment, usable_cpus=16, cpu_count=16))
    assert "different environments: usable CPUs: 16 → 2" in gate(report, Gates(max_regression=0.1), elsewhere)[1]
