"""CI gates on a finished sweep: pure checks of the Report, each passing or failing with its numbers.

A failed gate makes ``dataprof sweep`` exit 1 after the report and the JSON
are written; the JSON keeps every gate's result under ``gates``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.compare import compare
from dataprof.model import GateResult, Report

SEVERITY_ORDER = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class Gates:
    """The thresholds given on the command line (None: that gate is off)."""

    min_throughput: float | None = None
    min_speedup: float | None = None
    fail_on: str | None = None
    """``warning`` or ``critical``: fail on a finding at least this severe."""
    max_regression: float | None = None
    """Largest allowed fall of the recommended throughput against ``baseline`` (0.1 = 10%)."""

    def any(self) -> bool:
        """Whether any gate is on."""
        return any(v is not None for v in (self.min_throughput, self.min_speedup, self.fail_on, self.max_regression))


def evaluate(report: Report, gates: Gates, baseline: Report | None = None) -> tuple[GateResult, ...]:
    """Each gate that is on, passed or failed, with the numbers it compared."""
    results = []
    rec = report.recommendation
    rate = rec.samples_per_s if rec else None
    if gates.min_throughput is not None:
        ok = rate is not None and rate >= gates.min_throughput
        results.append(GateResult(
            "min_throughput", ok, rate, gates.min_throughput,
            f"recommended throughput {_num(rate)} samples/s {'≥' if ok else '<'} {gates.min_throughput:,.1f}"))
    if gates.min_speedup is not None:
        speedup = rec.speedup_vs_baseline if rec else None
        ok = speedup is not None and speedup >= gates.min_speedup
        what = f"{speedup:.2f}×" if speedup is not None else "unknown (num_workers=0 did not complete)"
        results.append(GateResult(
            "min_speedup", ok, speedup, gates.min_speedup,
            f"speedup over num_workers=0 {what} {'≥' if ok else '<'} {gates.min_speedup:.2f}×"))
    if gates.fail_on is not None:
        level = SEVERITY_ORDER[gates.fail_on]
        bad = [f for f in report.findings if SEVERITY_ORDER.get(f.severity, 0) >= level]
        worst = max((SEVERITY_ORDER[f.severity] for f in bad), default=None)
        listed = ", ".join(f"{f.id} ({f.severity})" for f in bad)
        results.append(GateResult(
            "fail_on", not bad, worst, level,
            f"findings at {gates.fail_on} or worse: {listed}" if bad else f"no finding at {gates.fail_on} or worse"))
    if gates.max_regression is not None and baseline is not None:
        comparison = compare(baseline, report)
        change = comparison.change
        ok = not comparison.regressed(gates.max_regression)
        machines = "" if comparison.same_machine else \
            f" (different environments: {'; '.join(comparison.environment_changes)})"
        results.append(GateResult(
            "max_regression", ok, change, -gates.max_regression,
            f"recommended throughput {_num(comparison.old_rate)} → {_num(comparison.new_rate)} samples/s "
            f"({_pct(change)}; allowed −{100 * gates.max_regression:g}%){machines}"))
    return tuple(results)


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return "no throughput" if value is None else f"{100 * value:+.1f}%"
