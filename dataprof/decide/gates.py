"""CI gates on a finished sweep: pure checks of the Report, each passing or failing with its numbers.

A failed gate makes ``dataprof sweep`` exit 1 after the report and the JSON
are written; the JSON keeps every gate's result under ``gates``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.decide.compare import compare
from dataprof.results.findings import GateResult
from dataprof.results.run import RunReport
from dataprof.results.sweep import Report
from dataprof.results.units import fmt_change
from dataprof.results.vocabulary import Severity


@dataclass(frozen=True)
class Gates:
    """The thresholds given on the command line (None: that gate is off)."""

    min_throughput: float | None = None
    min_speedup: float | None = None
    fail_on: Severity | None = None
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
        level = gates.fail_on.rank
        bad = [f for f in report.findings if f.severity.rank >= level]
        worst = max((f.severity.rank for f in bad), default=None)
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
    return "no throughput" if value is None else fmt_change(value, 1)


@dataclass(frozen=True)
class RunGates:
    """The thresholds ``dataprof run`` was given (None: that gate is off); they judge the busiest loader."""

    max_data_wait: float | None = None
    """Largest allowed steady-state data-wait share (0.1 = 10% of each iteration)."""
    min_gpu_util: float | None = None
    """Smallest allowed mean GPU utilisation (%)."""
    min_throughput: float | None = None
    """Smallest allowed steady-state samples/s."""
    max_regression: float | None = None
    """Largest allowed fall of samples/s against the ``--baseline`` run (0.1 = 10%)."""

    def any(self) -> bool:
        """Whether any gate is on."""
        return any(v is not None for v in (self.max_data_wait, self.min_gpu_util, self.min_throughput,
                                           self.max_regression))


def evaluate_run(report: RunReport, gates: RunGates, baseline: RunReport | None = None) -> tuple[GateResult, ...]:
    """Each gate that is on, passed or failed, with the numbers it compared (a figure not measured fails)."""
    loader = report.loaders[0] if report.loaders else None
    rate = loader.samples_per_s if loader else None
    results = []
    if gates.max_data_wait is not None:
        wait = loader.data_wait_fraction if loader else None
        ok = wait is not None and wait <= gates.max_data_wait
        what = "not measured (no steady-state batch)" if wait is None else f"{100 * wait:.1f}%"
        results.append(GateResult("max_data_wait", ok, wait, gates.max_data_wait,
                                  f"data wait {what} {'≤' if ok else '>'} {100 * gates.max_data_wait:g}%"))
    if gates.min_gpu_util is not None:
        util = report.resources.gpu_util_percent
        ok = util is not None and util >= gates.min_gpu_util
        what = "not measured (no NVIDIA GPU used)" if util is None else f"{util:.1f}%"
        results.append(GateResult("min_gpu_util", ok, util, gates.min_gpu_util,
                                  f"GPU utilisation {what} {'≥' if ok else '<'} {gates.min_gpu_util:g}%"))
    if gates.min_throughput is not None:
        ok = rate is not None and rate >= gates.min_throughput
        results.append(GateResult("min_throughput", ok, rate, gates.min_throughput,
                                  f"throughput {_num(rate)} samples/s {'≥' if ok else '<'} "
                                  f"{gates.min_throughput:,.1f}"))
    if gates.max_regression is not None and baseline is not None:
        old = baseline.loaders[0].samples_per_s if baseline.loaders else None
        change = rate / old - 1 if rate is not None and old else None
        ok = change is not None and change >= -gates.max_regression
        results.append(GateResult("max_regression", ok, change, -gates.max_regression,
                                  f"throughput {_num(old)} → {_num(rate)} samples/s ({_pct(change)}; allowed "
                                  f"−{100 * gates.max_regression:g}%)"))
    return tuple(results)
