"""The storage verdict: every epoch reads from storage, and cold reads hold the recommended config back."""

from __future__ import annotations

from dataprof.decide.diagnose.facts import cold_twin, ok_trials, pct, rate_text, slower_cold, wait_share
from dataprof.decide.thresholds import Thresholds
from dataprof.results.cache import FITS_SHARE
from dataprof.results.findings import Finding
from dataprof.results.stats import rate
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import CacheMode, FindingId, Severity, TrialStatus


def _per_second(value: float | None) -> str:
    return f"{fmt_bytes(value)}/s" if value is not None else "–"


def _storage_curve(cold: list[TrialResult]) -> tuple[str, bool | None]:
    """How storage's MB/s moved as workers grew over the cold trials (``w2 24MB/s → w4 25MB/s``), and whether
    it stayed flat (None with fewer than two)."""
    read = sorted((t for t in cold if t.storage.storage_read_bytes_per_s), key=lambda t: t.config.num_workers)
    if len(read) < 2:
        return "", None
    a, b = read[-2], read[-1]
    flat = (b.storage.storage_read_bytes_per_s or 0.0) <= FLAT_READS * (a.storage.storage_read_bytes_per_s or 0.0)
    return (f"storage read {_per_second(a.storage.storage_read_bytes_per_s)} at w{a.config.num_workers} and "
            f"{_per_second(b.storage.storage_read_bytes_per_s)} at w{b.config.num_workers}"), flat


FLAT_READS = 1.15
"""Storage's bytes per second that grow less than this with twice the workers are its limit, not latency's."""
SMALL_FILE = 4_000_000
"""Files smaller than this, read one or more per sample, pay a request each: packed shards read them in bulk."""


def storage_bound(report: Report, th: Thresholds) -> Finding | None:
    """Every epoch reads from storage, and cold reads hold the recommended config back: cold well below warm
    (``storage_gap``), the loop waiting on the reads."""
    storage, footprint = report.storage, report.data_footprint
    rec = report.recommendation
    if storage is None or footprint is None or storage.steady != CacheMode.COLD or rec is None:
        return None
    cold = cold_twin(report, rec.config)
    warm = max(ok_trials(report), key=rate, default=None)
    if cold is None or warm is None or wait_share(cold) < th.model_bound_wait:
        return None
    gap = slower_cold(warm, cold)
    if gap < th.storage_gap:
        return None
    parts = [f"{cold.config.label()} reads {rate_text(rate(cold))} cold against {rate_text(rate(warm))} warm "
             f"({warm.config.label()}, −{100 * gap:.0f}%) and waits {pct(wait_share(cold))} of each iteration",
             f"{storage.reason}"]
    reads = [f"storage {_per_second(cold.storage.storage_read_bytes_per_s)}"]
    if cold.storage.read_bytes_per_sample:
        reads.append(f"{fmt_bytes(cold.storage.read_bytes_per_sample)} per sample")
    if cold.storage.files_per_sample:
        reads.append(f"{cold.storage.files_per_sample:.2g} files per sample")
    if cold.cpu.iowait_percent is not None:
        reads.append(f"iowait {cold.cpu.iowait_percent:.0f}% of the CPUs")
    parts.append(", ".join(reads))
    curve, flat = _storage_curve([t for t in report.cold_trials if t.status == TrialStatus.OK])
    if curve:
        parts.append(curve)
    advice = []
    mean_file = footprint.bytes / footprint.files if footprint.files else None
    per_sample = cold.storage.files_per_sample
    if per_sample and per_sample >= 0.5 and mean_file is not None and mean_file < SMALL_FILE:
        advice.append(f"pack the {footprint.files:,} files (≈ {fmt_bytes(mean_file)} each) into shards read "
                      "sequentially (WebDataset, LitData, MosaicML MDS)")
    if flat:
        advice.append("storage's bandwidth is the limit, not the worker count: copy the dataset to local NVMe, "
                      "store it smaller (compression, lower resolution), or read larger blocks")
    elif flat is False or len([t for t in report.cold_trials if t.status == TrialStatus.OK]) < 2:
        top = cold.config.num_workers
        advice.append(f"reads still scale with workers: try more than {top} (--workers {top},{2 * max(1, top)},"
                      f"{4 * max(1, top)} --cache cold); network storage's latency hides behind concurrency")
    if not footprint.fits_in_page_cache and footprint.cache_ratio is not None and footprint.cache_ratio < 2:
        more = footprint.bytes / FITS_SHARE - footprint.page_cache_bytes
        advice.append(f"{fmt_bytes(max(0.0, more))} more page cache (RAM not held by the training) would keep the "
                      "dataset cached after epoch 1")
    return Finding(
        id=FindingId.STORAGE_BOUND,
        severity=Severity.CRITICAL if gap >= 2 * th.storage_gap else Severity.WARNING,
        evidence="; ".join(parts) + ".",
        recommendation="Storage sets the pace: " + "; ".join(advice) + ".",
    )
