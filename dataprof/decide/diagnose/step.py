"""Primary verdicts where the loader is not the limit: the model step is (``model_bound``), or the copies to the
device are (``transfer_bound``). Pure functions of the Report, among ``primary.PRIMARY_RULES``."""

from __future__ import annotations

import dataclasses

from dataprof.decide.diagnose.facts import (
    batch_size,
    copy_share,
    iteration_ms,
    mean_wait_ms,
    ms,
    ok_trials,
    pct,
    rate_text,
    recommended_trial,
    severity_for,
    side_thread_cores,
    sustains_text,
    wait_share,
)
from dataprof.decide.thresholds import Thresholds
from dataprof.results.findings import Finding
from dataprof.results.stats import rate
from dataprof.results.sweep import Report
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import FindingId, Severity


def model_bound(report: Report, th: Thresholds) -> Finding | None:
    """The loop waits under ``model_bound_wait`` of the time: the model, not the loader, is the limit."""
    rec = recommended_trial(report)
    if rec is None or wait_share(rec) >= th.model_bound_wait:
        return None
    batch = batch_size(report)
    step = rec.times.step_ms_mean or 0.0
    return Finding(
        id=FindingId.MODEL_BOUND,
        severity=Severity.INFO,
        evidence=(f"{rec.config.label()} waits {pct(wait_share(rec))} of each iteration for data "
                  f"({ms(mean_wait_ms(rec, batch))} ms of {ms(iteration_ms(rec, batch))} ms) at "
                  f"{rate_text(rate(rec))}. "
                  f"It keeps up with the {ms(step)} ms step: this loader sustains any model whose step takes "
                  f"≥ {ms(step)} ms at batch size {batch} (its own limit is higher; a smaller --step-ms finds it)."),
        recommendation=("The loader is not your bottleneck: use the recommended DataLoader(...) and spend your "
                        "effort on the model step."),
    )


def transfer_bound(report: Report, th: Thresholds) -> Finding | None:
    """Host-to-device copies take at least ``transfer_share`` of each iteration."""
    rec = recommended_trial(report)
    if rec is None or report.environment.simulated_device:
        return None
    batch = batch_size(report)
    share = copy_share(rec, batch)
    copy = rec.times.copy_ms_mean or 0.0
    wait = mean_wait_ms(rec, batch)
    receiving = min(wait, rec.times.wait_cpu_ms_mean or 0.0)
    # The copy must outweigh both parts of the wait: idle (workers too slow) and the main
    # thread's own work inside next() (receiving the same bytes it will copy).
    if share < th.transfer_share or copy < max(wait - receiving, receiving):
        return None
    size = report.dataset.batch_bytes if report.dataset else None
    speed = f", {fmt_bytes(size)} per batch at {fmt_bytes(size / (copy / 1000))}/s" if size and copy else ""
    changes = []
    pinned = next((t for t in ok_trials(report) if t.config == dataclasses.replace(rec.config, pin_memory=True)), None)
    if not rec.config.pin_memory and pinned is None:
        changes.append("pin_memory=True with .to(device, non_blocking=True) so copies overlap the step")
    elif pinned is not None and pinned is not rec:
        thread = side_thread_cores(pinned)
        busy = f", its thread busy {pct(thread)} of a core copying each batch once more" if thread else ""
        changes.append(f"pin_memory=True did not help here ({pinned.config.label()}: {rate_text(rate(pinned))}"
                       f"{busy})")
    changes.append("send fewer bytes: uint8 images (or float16) and convert and normalise on the GPU, "
                   "crop before the copy")
    return Finding(
        id=FindingId.TRANSFER_BOUND,
        severity=severity_for(wait_share(rec) + share, th, report),
        evidence=(f"copying each batch to {report.environment.device} takes {ms(copy)} ms, {pct(share)} of the "
                  f"{ms(iteration_ms(rec, batch))} ms iteration{speed}; waiting for the loader takes "
                  f"{ms(wait)} ms ({ms(receiving)} ms of it the main thread receiving batches). "
                  f"{sustains_text(rec, batch)}"),
        recommendation="; ".join(changes) + ".",
    )
