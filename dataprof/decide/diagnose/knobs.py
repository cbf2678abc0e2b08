"""What the sweep measured of ``in_order`` and the start methods, as the numbers the findings quote.

Each function compares trials that differ in that knob only, so a gain it states is one measured side by side.
"""

from __future__ import annotations

import dataclasses

from dataprof.decide.diagnose.facts import ok_trials, rate_text
from dataprof.results.stats import rate
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes, fmt_change


def in_order_gain(report: Report) -> tuple[float, TrialResult, TrialResult] | None:
    """The largest measured gain of ``in_order=False`` over the same config in order: (gain, unordered, ordered)."""
    ok = ok_trials(report)
    pairs = []
    for unordered in ok:
        if unordered.config.in_order is not False:
            continue
        ordered = next((t for t in ok if t.config == dataclasses.replace(unordered.config, in_order=None)), None)
        if ordered is not None and rate(ordered) > 0:
            pairs.append((rate(unordered) / rate(ordered) - 1, unordered, ordered))
    return max(pairs, key=lambda pair: pair[0]) if pairs else None


def in_order_text(report: Report) -> str:
    """``; in_order=False measured: w8 pf2 persist 576 → 1,868 samples/s (+224%)`` or empty."""
    found = in_order_gain(report)
    if found is None:
        return ""
    gain, unordered, ordered = found
    return (f"; in_order=False measured: {ordered.config.label()} {rate_text(rate(ordered))} → "
            f"{rate_text(rate(unordered))} ({fmt_change(gain)}) with {unordered.config.num_workers} workers")


def start_method_text(report: Report, trial: TrialResult) -> str:
    """How the same config started and weighed under each start method measured: ``; start methods measured
    at w4 pf2 persist: fork first batch 0.21 s, PSS 1.2GB; spawn 1.90 s, 2.9GB`` or empty."""
    ok = ok_trials(report)
    default = report.environment.start_method or "fork"
    same = [t for t in ok if dataclasses.replace(t.config, multiprocessing_context=None)
            == dataclasses.replace(trial.config, multiprocessing_context=None)]
    if len({t.config.multiprocessing_context for t in same}) < 2:
        return ""
    parts = [f"{t.config.multiprocessing_context or default} first batch {t.first_batch_s or 0:.2f} s, "
             f"PSS {fmt_bytes(t.memory.peak_memory_bytes)}, {rate_text(rate(t))}" for t in same]
    base = dataclasses.replace(trial.config, multiprocessing_context=None).label()
    return f"; start methods measured at {base}: {'; '.join(parts)}"



def threads_text(report: Report, spared: str) -> str:
    """`` Threads spare the workers' <spared>: t8 pf2 loaded 1,930 samples/s in 412MB of PSS here (w4 pf2 persist:
    1,880 samples/s, 1.9GB).`` when a thread config completed; where threads could load the dataset but none
    was measured, how to measure them; else empty."""
    kinds = report.worker_kinds
    if kinds is not None:
        memory = "" if not kinds.thread_peak_memory_bytes else f" in {fmt_bytes(kinds.thread_peak_memory_bytes)} of PSS"
        theirs = "" if not kinds.process_peak_memory_bytes else f", {fmt_bytes(kinds.process_peak_memory_bytes)}"
        return (f" Threads spare the workers' {spared}: {kinds.thread.label()} loaded "
                f"{rate_text(kinds.thread_samples_per_s)}{memory} here ({kinds.process.label()}: "
                f"{rate_text(kinds.process_samples_per_s)}{theirs}).")
    if report.settings.space.thread_loader and not any(t.config.threads for t in report.trials):
        return f" Threads spare the workers' {spared}: measure them with --worker-kind process,thread."
    return ""
