"""What a sweep report shows of cold data: the dataset against the page cache, the epoch forecast, and the cold
trials beside the warm ones, as plain text the console and HTML share."""

from __future__ import annotations

from dataprof.decide.crashes import explained
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import CacheMode, TrialStatus


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def storage_text(report: Report) -> str | None:
    """``4,096 files (ext4, /data/npy); the dataset is 1.1GB, 4% of the 24GB page cache: it stays cached after
    epoch 1; epoch 1 ≈ 1.8 s cold (2,330 samples/s), later epochs ≈ 0.8 s warm (5,294 samples/s)``; None without
    data files."""
    footprint, storage = report.data_footprint, report.storage
    if footprint is None or storage is None:
        return None
    where = ", ".join(p for p in (footprint.filesystem, footprint.directory) if p)
    text = f"{footprint.files:,} files" + (f" ({where})" if where else "") + f"; {storage.reason}"
    epochs = []
    if storage.first_epoch_s is not None and storage.cold_samples_per_s and storage.steady == CacheMode.WARM:
        epochs.append(f"epoch 1 ≈ {_duration(storage.first_epoch_s)} cold ({storage.cold_samples_per_s:,.0f} "
                      "samples/s)")
    if storage.later_epoch_s is not None:
        rate = storage.cold_samples_per_s if storage.steady == CacheMode.COLD else storage.warm_samples_per_s
        epochs.append(f"{'every' if storage.steady == CacheMode.COLD else 'later'} epoch"
                      f"{'' if storage.steady == CacheMode.COLD else 's'} ≈ {_duration(storage.later_epoch_s)} "
                      f"{storage.steady} ({rate or 0:,.0f} samples/s)")
    return text + ("; " + ", ".join(epochs) if epochs else "")


COLD_COLUMNS = ("config", "cold/s", "warm/s", "c÷w", "storage/s", "per sample", "files", "window")
"""The cold trials' table."""


def cold_rows(report: Report) -> list[tuple[list[str], bool]]:
    """Each cold trial beside its warm twin: cells by :data:`COLD_COLUMNS` (samples/s cold and warm, their ratio,
    storage's bytes per second, bytes and data files read per sample, the window), and whether it is the
    recommendation."""
    warm = {t.config: t for t in report.trials if t.status == TrialStatus.OK}
    chosen = report.recommendation.config if report.recommendation and report.recommendation.cache == CacheMode.COLD \
        else None
    rows = []
    for t in sorted(report.cold_trials, key=lambda t: t.config.num_workers):
        twin: TrialResult | None = warm.get(t.config)
        ratio = (t.samples_per_s / twin.samples_per_s) if twin is not None and twin.samples_per_s \
            and t.samples_per_s else None
        if t.status != TrialStatus.OK:
            rows.append(([t.config.label(), str(t.status), "", "", "", "", "", explained(t.error) or ""], False))
            continue
        reads = t.storage
        rows.append(([("★ " if t.config == chosen else "  ") + t.config.label(), f"{t.samples_per_s or 0:,.0f}",
                      "–" if twin is None else f"{twin.samples_per_s or 0:,.0f}",
                      "–" if ratio is None else f"{ratio:.2f}",
                      "–" if reads.storage_read_bytes_per_s is None
                      else f"{fmt_bytes(reads.storage_read_bytes_per_s)}/s",
                      fmt_bytes(reads.read_bytes_per_sample),
                      "–" if reads.files_per_sample is None else f"{reads.files_per_sample:.2f}",
                      "–" if t.window_s is None else f"{t.window_s:.1f} s" + (" ◂" if reads.first_pass_end else "")],
                     t.config == chosen))
    return rows
