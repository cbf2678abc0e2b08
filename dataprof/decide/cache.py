"""Cold data: which configs to measure cold, which case the training is in, and the epoch forecast (pure).

A cold trial reads what storage serves: the data files the trials read were evicted from the page cache right
before it, and its window ended with the dataset's first pass. Whether that figure or the warm one is the
training's steady state depends on whether the dataset fits in the page cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dataprof.decide.diagnose.facts import batch_size
from dataprof.decide.recommend import recommend
from dataprof.decide.search.common import climb_config
from dataprof.results.cache import FITS_SHARE, Eviction, ReadBack, StorageOutlook
from dataprof.results.knobs import LoaderConfig, warmup_batches
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import CacheMode, DatasetKind, TrialStatus

MAX_COLD_TRIALS = 4
"""Cold trials the climb may run besides ``--cache both``'s twins: each reads the dataset's first pass from
storage."""


def _ok(trials: Sequence[TrialResult]) -> list[TrialResult]:
    return [t for t in trials if t.status == TrialStatus.OK and t.samples_per_s]


def why_no_cold(report: Report) -> str | None:
    """Why the sweep measures nothing cold (a note), or None when it does, when the cache mode says not to, or
    when ``auto`` found no data file to make cold (an in-memory dataset needs no word about it)."""
    mode = report.settings.cache
    footprint = report.data_footprint
    if mode == CacheMode.WARM:
        return None
    if footprint is None:
        if not _ok(report.trials) or mode == "auto":
            return None  # --cache auto stays quiet on a dataset that reads no file
        return ("no cold trial: the trials read no data file (an in-memory, generated or remote dataset, or files "
                "opened by C code between samples), so there is nothing to evict")
    if footprint.evictable is False:
        return (f"no cold trial: the data lives on {footprint.filesystem}, whose files are held in memory; evicting "
                "them has no effect, so cold is warm here")
    return None


def next_cold(report: Report) -> tuple[LoaderConfig, str] | None:
    """The next config to measure cold and why, or None when the cold search is done.

    ``both``: every config measured warm. Otherwise the warm recommendation first, then more workers while
    they pay: cold reads that wait on storage's latency often want more workers than warm ones.
    """
    mode = report.settings.cache
    if mode == CacheMode.WARM or why_no_cold(report) is not None or report.data_footprint is None:
        return None
    measured = {t.config for t in report.cold_trials}
    if mode == CacheMode.BOTH:
        return next(((t.config, f"measured warm at {t.samples_per_s:,.0f} samples/s; now cold")
                     for t in _ok(report.trials) if t.config not in measured), None)
    warm = recommend(report.trials)
    if warm is None:
        return None
    if warm.config not in measured:
        return warm.config, "the warm recommendation, measured cold"
    step = _more_workers(report)
    return None if step is None or no_cold_window(report, step[0]) else step


def _more_workers(report: Report) -> tuple[LoaderConfig, str] | None:
    """The cold climb's next config: the fastest cold config's workers doubled (the next count the space has),
    while no config with more workers was measured cold (so it is never one measured) and the climb has trials
    left; None else."""
    cold = _ok(report.cold_trials)
    if not cold or len(report.cold_trials) >= MAX_COLD_TRIALS:
        return None
    best = max(cold, key=lambda t: t.samples_per_s or 0.0)
    if any(t.config.num_workers > best.config.num_workers for t in report.cold_trials):
        return None  # more workers were tried cold and did not pay
    space = report.settings.space
    workers = best.config.num_workers
    above = sorted(w for w in space.workers if w >= max(2 * workers, workers + 1))
    if not above:
        return None
    config = dataclasses.replace(best.config, num_workers=above[0]) if workers else climb_config(space, above[0])
    return config, (f"cold {best.config.label()} reads {best.samples_per_s:,.0f} samples/s; do more workers "
                    "hide the storage's latency?")


def no_cold_window(report: Report, config: LoaderConfig) -> str | None:
    """Why ``config`` can have no cold window, or None: a cold window opens once the workers' prefetched batches are
    drained (:func:`~dataprof.results.knobs.warmup_batches`) and ends with the dataset's first pass, so a pass that
    holds no more batches than that warm-up leaves none (its run would fail)."""
    length = _pass_samples(report)
    if not length:
        return None
    batches = -(-length // batch_size(report))
    warmup = warmup_batches(config.num_workers, config.prefetch_factor)
    if batches > warmup:
        return None
    return (f"{config.label()} was not measured cold: its {warmup} warm-up batches (the batches its workers "
            f"prefetch, and a round more) fill the dataset's first pass of {batches} batches, so no cold window "
            "could open")


def _pass_samples(report: Report) -> int | None:
    """The samples of the dataset's one pass: a map-style dataset's length; a stream's first epoch as every warm
    trial that ended one counted it alike (split among the workers, whatever their number); else None."""
    if report.dataset is None:
        return None
    if report.dataset.kind == DatasetKind.MAP:
        return report.dataset.length or None
    counted = {t.epochs.epoch_samples for t in _ok(report.trials) if t.epochs.epoch_samples}
    return counted.pop() if len(counted) == 1 else None  # a stream each worker yields whole grows with them


def cold_climb_end(report: Report) -> str | None:
    """A note when the cold climb stopped short of the config it would have measured next (:func:`next_cold`):
    that config could have no cold window (:func:`no_cold_window`)."""
    if report.settings.cache == CacheMode.BOTH or not report.cold_trials:
        return None
    step = _more_workers(report)
    return None if step is None else no_cold_window(report, step[0])


def dataset_bytes(report: Report) -> tuple[int, bool]:
    """The dataset's size on storage, and whether it is estimated: when the walk of its directory stopped short,
    the mean size of the files read × the data files a sample opens × the samples of an epoch, if larger."""
    footprint = report.data_footprint
    assert footprint is not None
    length = report.dataset.length if report.dataset is not None else None
    if not footprint.walk_cut or not length or not footprint.read_files:
        return footprint.bytes, False
    opened = [t.storage.files_per_sample for t in _ok(report.trials) if t.storage.files_per_sample]
    per_sample = max(opened) if opened else 1.0
    estimate = round(footprint.read_bytes / footprint.read_files * per_sample * length)
    return max(footprint.bytes, estimate), True


def steady_case(report: Report) -> tuple[str, str] | None:
    """``("cold"|"warm", why)``: which figure is the training's steady state; None without data files."""
    footprint = report.data_footprint
    if footprint is None:
        return None
    total, estimated = dataset_bytes(report)
    size = f"the dataset is {'≈ ' if estimated else ''}{fmt_bytes(total)}" + (
        " (its directory held more files than dataprof walks: estimated from the files read and the samples of "
        "an epoch)" if estimated else "")
    if footprint.evictable is False:
        asked = "; --cache cold cannot make them cold" if report.settings.cache == CacheMode.COLD else ""
        return "warm", f"{size} on {footprint.filesystem}: its files live in memory{asked}"
    if report.settings.cache == CacheMode.COLD:
        return "cold", f"{size}; --cache cold: the training reads it from storage"
    footprint = dataclasses.replace(footprint, bytes=total)
    ratio = footprint.cache_ratio
    cache = fmt_bytes(footprint.page_cache_bytes)
    if footprint.fits_in_page_cache:
        return "warm", f"{size}, {100 * (ratio or 0):.0f}% of the {cache} page cache: it stays cached after epoch 1"
    return "cold", (f"{size}, {ratio or 0:.1f}× the {cache} page cache (fits under {FITS_SHARE:.0%}): every epoch "
                    "reads from storage")


def outlook(report: Report, warm: TrialResult | None, cold: TrialResult | None) -> StorageOutlook | None:
    """The steady case and how long an epoch takes cold (the first) and after, from the warm and cold trials of
    the recommended configs."""
    case = steady_case(report)
    if case is None:
        return None
    steady, why = case
    samples = report.dataset.length if report.dataset is not None and report.dataset.kind == DatasetKind.MAP else None
    if samples is not None:
        samples = -(-samples // max(1, report.settings.world_size))
    cold_rate = cold.samples_per_s if cold is not None else None
    warm_rate = warm.samples_per_s if warm is not None else None
    first = samples / cold_rate if samples and cold_rate else None
    later_rate = cold_rate if steady == CacheMode.COLD else warm_rate
    return StorageOutlook(steady=steady, reason=why, samples_per_epoch=samples, cold_samples_per_s=cold_rate,
                          warm_samples_per_s=warm_rate, first_epoch_s=first,
                          later_epoch_s=samples / later_rate if samples and later_rate else None)


WARM_MISS_SHARE = 0.1
"""A warm trial that read this share of its bytes from storage was not warm."""
WARM_MISS_FLOOR = 0.01
"""A warm trial that read less than this share of its bytes from storage read too little to be judged by time."""
WARM_WAIT_SHARE = 0.05
"""A warm trial that read from storage while a process of its waited on storage this share of its window (the
machine's iowait, in CPUs) paid for those reads in time, whatever their share of its bytes."""


def read_from_storage(trial: TrialResult, cold_trials: Sequence[TrialResult] = (), cpus: int = 1) -> bool:
    """Whether a warm trial's figure mixes cold and warm reads: what storage served it cost it time (CPUs idle
    waiting on storage, ``cpus`` of them on the machine, :data:`WARM_WAIT_SHARE` of its window or more), or a share
    of its bytes (:data:`WARM_MISS_SHARE` or more) large enough to. A few percent of the bytes can take a quarter
    of the time: a read from storage is that much slower than one from the page cache."""
    if trial.status != TrialStatus.OK or not trial.storage.read_bytes_per_sample:
        return False
    cold_bytes = max((t.storage.read_bytes_per_sample or 0.0 for t in _ok(cold_trials)), default=0.0)
    read = max(trial.storage.read_chars_per_sample or 0.0, cold_bytes)
    if not read:
        return False
    share = trial.storage.read_bytes_per_sample / read
    waited = (trial.cpu.iowait_percent or 0.0) / 100.0 * cpus >= WARM_WAIT_SHARE
    return share >= WARM_MISS_SHARE or (share >= WARM_MISS_FLOOR and waited)


def warm_again(trial: TrialResult, data_bytes: int, page_cache_bytes: int, cpus: int = 1) -> bool:
    """Whether a warm trial that read from storage is measured again once the data files read so far
    (``data_bytes``) are read into the page cache: only when they fit it, as they will in the training after its
    first epoch. A dataset bigger than the cache reads from storage in every epoch: that figure stays."""
    return read_from_storage(trial, cpus=cpus) and data_bytes <= FITS_SHARE * page_cache_bytes


def warm_misses(trials: Sequence[TrialResult], cold_trials: Sequence[TrialResult]) -> str | None:
    """A note naming the warm trials that read a share of their data from storage (the page cache did not hold
    it all: a dataset bigger than the cache): their figures mix cold and warm reads."""
    missed = [f"{t.config.label()} ({fmt_bytes(t.storage.read_bytes_per_sample or 0)} per sample)"
              for t in _ok(trials) if read_from_storage(t, cold_trials)]
    if not missed:
        return None
    return ("warm trials that read from storage: " + ", ".join(missed) + "; the page cache did not hold all "
            "their data, so their figures mix cold and warm reads")


def cold_notes(evictions: Sequence[Eviction], cold: Sequence[TrialResult],
               restored: ReadBack | None = None) -> tuple[str, ...]:
    """What the cold trials' evictions did, what their windows were, and whether the files were read back into
    the page cache after them: the notes a cold figure needs."""
    if not evictions:
        return ()
    last = evictions[-1]
    before = "" if last.resident_before is None or not last.bytes else \
        f"; {100 * last.resident_before / last.bytes:.0f}% of them were cached before the last one"
    notes = [f"cold trials: before each, the {last.files:,} data files ({fmt_bytes(last.bytes)}) the trials had "
             "read were evicted from the page cache (posix_fadvise DONTNEED: no root, nothing written), and "
             f"nothing else, in {last.took_s:.1f} s{before}"]
    stayed = [e for e in evictions if e.effective is False]
    read_cold = [t for t in _ok(cold) if read_from_storage(t)]
    if stayed:
        share = (stayed[-1].resident_after or 0) / max(1, stayed[-1].bytes)
        if read_cold:  # what stayed was not what they read: the figures say they were cold
            per_sample = max(t.storage.read_bytes_per_sample or 0.0 for t in read_cold)
            notes.append(f"{100 * share:.0f}% of the files were still in the page cache after the eviction, but the "
                         f"cold trials read {fmt_bytes(per_sample)} a sample from storage: their figures are cold")
        else:
            notes.append(f"eviction had no effect: {100 * share:.0f}% of the files stayed in the page cache (a "
                         "filesystem held in memory, pages mapped by a running process, or pages written moments "
                         "ago and not yet on storage, which dataprof never writes back), and the cold trials read "
                         "nothing from storage; the cold figures are warm")
    skipped = [s for e in evictions for s in e.skipped]
    if skipped:
        notes.append(f"{len(skipped)} file(s) could not be evicted and were skipped (e.g. {skipped[0]})")
    short = [t for t in cold if t.storage.first_pass_end and t.window_s is not None]
    if short:
        notes.append("the dataset's first pass ended the cold window of " + ", ".join(
            f"{t.config.label()} after {t.window_s:.1f} s" for t in short) + ": past it the data read is cached, "
            "so a cold window is no longer than the first pass (its figure is noisier for it)")
    if restored is not None and restored.left_files:
        notes.append(f"the data was left cold: {restored.left_files:,} of the files cached before the cold trials "
                     f"({fmt_bytes(restored.left_bytes)}) were not read back in the {restored.took_s:.0f} s allowed; "
                     "the training's next epoch reads them from storage")
    elif restored is not None and restored.files:
        notes.append(f"after the cold trials, the {restored.files:,} files cached before them "
                     f"({fmt_bytes(restored.bytes)}) were read back into the page cache in {restored.took_s:.1f} s")
    return tuple(notes)


def warmed_note(warmed: Sequence[tuple[str, ReadBack]]) -> str | None:
    """Which warm trials read from storage and were measured again once their data was read into the page cache
    (a sweep started on data not yet cached: after a reboot, or another job's eviction)."""
    if not warmed:
        return None
    files = sum(r.files for _, r in warmed)
    size = sum(r.bytes for _, r in warmed)
    labels = ", ".join(label for label, _ in warmed)
    if not files:
        return (f"{labels} read from storage though the dataset had read no data file (libraries or other files "
                "not yet in the page cache, as on a first run after a reboot): each was measured again, its warm "
                "figure is the second")
    return (f"{labels} read from storage (the data was not all cached when the sweep started): the {files:,} data "
            f"files read so far ({fmt_bytes(size)}) were read into the page cache, and each was measured again: its "
            "warm figure is the second")
