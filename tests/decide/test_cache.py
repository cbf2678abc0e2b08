"""Cold data decisions on recorded runs: which configs to measure cold, which case the training is in, and the
``storage_bound`` verdict."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from dataprof.decide.cache import (
    cold_climb_end,
    next_cold,
    read_from_storage,
    steady_case,
    warm_again,
    warm_misses,
    warmed_note,
    why_no_cold,
)
from dataprof.decide.diagnose import diagnose
from dataprof.decide.sweep import decide
from dataprof.results.cache import DataFootprint, ReadBack
from dataprof.results.codec import decode, encode
from dataprof.results.sweep import Report
from dataprof.results.vocabulary import FindingId

DATA = Path(__file__).resolve().parent.parent / "data" / "sweep"


def recorded(name: str) -> Report:
    return decide(Report.from_dict(json.loads((DATA / f"{name}.json").read_text())))


def with_(report: Report, **changes: object) -> Report:
    return decide(dataclasses.replace(report, **changes))  # type: ignore[arg-type]


def cached(report: Report, **settings: object) -> Report:
    return with_(report, settings=dataclasses.replace(report.settings, **settings))


def test_a_dataset_that_fits_is_warm_after_its_first_epoch() -> None:
    report = recorded("cold_fits")
    assert report.data_footprint is not None and report.data_footprint.fits_in_page_cache
    assert steady_case(report) == ("warm", "the dataset is 1.1GB, 4% of the 24.4GB page cache: it stays cached "
                                           "after epoch 1")
    assert report.recommendation is not None and report.recommendation.cache == "warm"
    assert report.storage is not None and report.storage.first_epoch_s is not None
    assert report.storage.later_epoch_s is not None and report.storage.later_epoch_s < report.storage.first_epoch_s


def test_a_dataset_bigger_than_the_page_cache_is_recommended_cold() -> None:
    report = recorded("cold_fits")
    assert report.data_footprint is not None
    small = dataclasses.replace(report.data_footprint, page_cache_bytes=report.data_footprint.bytes // 2)
    bigger = with_(report, data_footprint=small)
    steady, why = steady_case(bigger) or ("", "")
    assert steady == "cold" and "2.0× the 537MB page cache" in why
    assert bigger.recommendation is not None and bigger.recommendation.cache == "cold"
    fastest_cold = max(bigger.cold_trials, key=lambda t: t.samples_per_s or 0.0)
    assert bigger.recommendation.config == fastest_cold.config
    assert bigger.recommended_pool == bigger.cold_trials


def test_cold_starts_at_the_warm_recommendation_then_climbs_while_it_pays() -> None:
    report = recorded("cold_fits")
    none_yet = with_(report, cold_trials=())
    first = next_cold(none_yet)
    assert first is not None and first[0] == none_yet.recommendation.config  # type: ignore[union-attr]
    w2 = next(t for t in report.cold_trials if t.config.num_workers == 2)
    after_w2 = next_cold(with_(report, cold_trials=(w2,)))
    assert after_w2 is not None and after_w2[0].num_workers == 4 and "more workers" in after_w2[1]
    assert after_w2[1].startswith(f"cold {w2.config.label()} reads ")
    threads = dataclasses.replace(w2, config=dataclasses.replace(w2.config, worker_kind="thread",
                                                                 persistent_workers=None),
                                  samples_per_s=2 * (w2.samples_per_s or 0.0))
    after_t2 = next_cold(with_(report, cold_trials=(w2, threads)))
    assert after_t2 is not None and after_t2[1].startswith("cold t2 ")  # threads, not worker processes
    assert next_cold(report) is None  # w4 is the most workers the space holds


def test_the_cold_climb_stops_before_a_config_whose_warm_up_fills_the_dataset_s_first_pass() -> None:
    report = recorded("cold_fits")
    w2 = next(t for t in report.cold_trials if t.config.num_workers == 2)
    assert report.dataset is not None and report.settings.batch_size == 32
    # w4 pf2 drains 4 × 2 + 4 = 12 batches before its window opens: a pass of 12 batches leaves it none
    for length, climbs in ((12 * 32, False), (11 * 32 + 1, False), (12 * 32 + 1, True)):
        small = with_(report, cold_trials=(w2,), dataset=dataclasses.replace(report.dataset, length=length))
        step = next_cold(small)
        assert (step is not None and step[0].num_workers == 4) is climbs, length
        end = cold_climb_end(small)
        assert (end is None) is climbs
    assert cold_climb_end(with_(report, cold_trials=(w2,))) is None  # 4,096 samples: 128 batches
    short = with_(report, cold_trials=(w2,), dataset=dataclasses.replace(report.dataset, length=12 * 32))
    assert cold_climb_end(short) == ("w4 pf2 persist was not measured cold: its 12 warm-up batches (the batches its "
                                     "workers prefetch, and a round more) fill the dataset's first pass of 12 "
                                     "batches, so no cold window could open")
    stream = with_(short, dataset=dataclasses.replace(short.dataset, kind="iterable"))  # type: ignore[arg-type]
    assert next_cold(stream) is not None  # no warm trial ended an epoch: a stream's pass is not known

    def epochs(*samples: int) -> Report:
        return with_(stream, trials=tuple(dataclasses.replace(t, epochs=dataclasses.replace(t.epochs, epoch_samples=n))
                                          for t, n in zip(stream.trials, samples, strict=True)))

    counts = [12 * 32] * len(stream.trials)
    assert next_cold(epochs(*counts)) is None and cold_climb_end(epochs(*counts)) == cold_climb_end(short)
    counts[-1] *= 2  # a stream each worker yields whole: its pass depends on the workers
    assert next_cold(epochs(*counts)) is not None


def test_a_climb_that_lost_stops() -> None:
    report = recorded("storage_bound")
    trials = tuple(t if t.config.num_workers < 8 else dataclasses.replace(t, samples_per_s=100.0)
                   for t in report.cold_trials)
    assert next_cold(with_(report, cold_trials=trials)) is None


def test_both_measures_every_warm_config_cold_and_warm_none() -> None:
    report = recorded("cold_fits")
    both = cached(with_(report, cold_trials=()), cache="both")
    seen = []
    while (step := next_cold(both)) is not None:
        seen.append(step[0])
        twin = next(t for t in report.trials if t.config == step[0])
        both = with_(both, cold_trials=(*both.cold_trials, dataclasses.replace(twin, cache="cold")))
    assert sorted(seen, key=lambda c: c.num_workers) == sorted((t.config for t in report.trials),
                                                               key=lambda c: c.num_workers)
    assert next_cold(cached(with_(report, cold_trials=()), cache="warm")) is None


def test_no_data_file_or_tmpfs_gets_no_cold_trial_and_says_why() -> None:
    report = with_(recorded("cold_fits"), cold_trials=())
    without = with_(report, data_footprint=None)
    assert next_cold(without) is None and why_no_cold(without) is None  # auto: quiet
    asked = cached(without, cache="cold")
    assert next_cold(asked) is None and "no data file" in (why_no_cold(asked) or "")
    assert without.storage is None
    footprint = report.data_footprint
    assert footprint is not None
    tmpfs = with_(report, data_footprint=dataclasses.replace(footprint, filesystem="tmpfs", evictable=False))
    assert next_cold(tmpfs) is None and "tmpfs" in (why_no_cold(tmpfs) or "")


def test_cold_asked_on_tmpfs_tells_one_story() -> None:
    report = recorded("cold_fits")
    footprint = report.data_footprint
    assert footprint is not None
    tmpfs = cached(with_(report, cold_trials=(), data_footprint=dataclasses.replace(
        footprint, filesystem="tmpfs", evictable=False)), cache="cold")
    case = steady_case(tmpfs)
    assert case is not None and case[0] == "warm"
    assert "its files live in memory; --cache cold cannot make them cold" in case[1]
    assert "reads it from storage" not in case[1]


def test_storage_bound_fires_when_every_epoch_is_cold_and_cold_is_slower() -> None:
    report = recorded("storage_bound")
    assert report.primary == FindingId.STORAGE_BOUND
    finding = report.findings[0]
    assert "cold against" in finding.evidence and "MB/s" in finding.evidence
    assert "pack the 4,096 files" in finding.recommendation  # one file per sample of 262KB
    assert "try more than 8" in finding.recommendation  # reads rose from w4 to w8


def test_storage_bound_stays_quiet_when_the_data_stays_cached_or_cold_is_as_fast() -> None:
    assert recorded("cold_fits").primary != FindingId.STORAGE_BOUND
    report = recorded("storage_bound")
    fast = max(t.samples_per_s or 0.0 for t in report.trials)
    as_fast = tuple(dataclasses.replace(t, samples_per_s=fast) for t in report.cold_trials)
    primary, _ = diagnose(with_(report, cold_trials=as_fast))
    assert primary != FindingId.STORAGE_BOUND


def test_the_footprint_reads_back_with_its_derived_fields() -> None:
    footprint = DataFootprint(bytes=10, files=2, read_files=1, read_bytes=5, resident_fraction=1.0,
                              page_cache_bytes=100)
    data = encode(footprint)
    assert data["fits_in_page_cache"] is True and data["cache_ratio"] == 0.1
    assert decode(DataFootprint, data) == footprint


def test_a_warm_trial_that_read_from_storage_is_named() -> None:
    report = recorded("storage_bound")
    assert warm_misses(report.trials, report.cold_trials) is None  # warm trials read ~0 from storage
    first = report.trials[0].replaced(read_bytes_per_sample=100_000.0)
    note = warm_misses((first, *report.trials[1:]), report.cold_trials)
    assert note is not None and note.startswith(f"warm trials that read from storage: {first.config.label()} (100KB")


def test_a_warm_trial_that_read_from_storage_is_measured_again_only_when_its_data_fits() -> None:
    report = recorded("storage_bound")
    calm = report.trials[0]
    missed = calm.replaced(read_bytes_per_sample=100_000.0, read_chars_per_sample=120_000.0)
    assert read_from_storage(missed) and not read_from_storage(calm)
    assert warm_again(missed, data_bytes=10**9, page_cache_bytes=10**10)
    assert not warm_again(missed, data_bytes=10**10, page_cache_bytes=10**10)  # bigger than the cache: stays
    assert not warm_again(calm, data_bytes=10**9, page_cache_bytes=10**10)


def test_a_warm_trial_whose_few_storage_reads_cost_it_time_is_measured_again() -> None:
    """Right after the page cache was dropped, a w0 trial read 5% of its bytes from storage, under the byte
    threshold, and those reads took a quarter of its time: the CPUs waited on storage through its window."""
    calm = recorded("storage_bound").trials[0]
    waited = calm.replaced(read_bytes_per_sample=5_400.0, read_chars_per_sample=70_000.0, iowait_percent=3.0)
    assert read_from_storage(waited, cpus=2)  # 3% of 2 CPUs: a process waited on storage 6% of its window
    assert warm_again(waited, data_bytes=10**9, page_cache_bytes=10**10, cpus=2)
    assert not read_from_storage(waited, cpus=1)  # 3% of one CPU: 3% of its window
    idle = waited.replaced(iowait_percent=0.5)
    assert not read_from_storage(idle, cpus=2)  # 8% of its bytes, and no time waiting for them: warm enough
    crumbs = waited.replaced(read_bytes_per_sample=100.0)
    assert not read_from_storage(crumbs, cpus=2)  # iowait from elsewhere, with almost nothing read from storage


def test_a_trial_measured_again_says_which_files_were_read_back_and_names_none_when_the_dataset_read_none() -> None:
    back = ReadBack(files=3, bytes=3 << 20, left_files=0, left_bytes=0, took_s=0.1)
    assert warmed_note([]) is None
    note = warmed_note([("w2 pf2 persist", back)])
    assert note is not None and "w2 pf2 persist read from storage" in note and "the 3 data files" in note
    nothing = warmed_note([("w2 pf2 persist", ReadBack(files=0, bytes=0, left_files=0, left_bytes=0, took_s=0.0))])
    assert nothing is not None and "data files read so far" not in nothing
    assert "the dataset had read no data file" in nothing and "measured again" in nothing


def test_a_directory_too_big_to_walk_is_estimated_from_the_samples_of_an_epoch() -> None:
    report = recorded("cold_fits")
    footprint = report.data_footprint
    assert footprint is not None and report.dataset is not None
    # the walk stopped after 100 files; the epoch's 4,096 samples each read one 262KB file: 1.1GB
    cut = dataclasses.replace(footprint, bytes=100 * 262_272, files=100, walk_cut=True,
                              page_cache_bytes=500_000_000)
    steady, why = steady_case(with_(report, data_footprint=cut)) or ("", "")
    assert steady == "cold" and why.startswith("the dataset is ≈ 1.1GB (its directory held more files")


def test_eviction_is_said_to_have_had_no_effect_only_when_the_cold_trials_read_nothing_from_storage() -> None:
    from dataprof.decide.cache import cold_notes
    from dataprof.results.cache import Eviction

    partly = Eviction(files=3000, bytes=3 * 10**9, resident_before=3 * 10**9, resident_after=660_000_000)
    calm = recorded("storage_bound").trials[0]
    read_cold = calm.replaced(read_bytes_per_sample=1_000_000.0, read_chars_per_sample=1_000_000.0)
    cold = " ".join(cold_notes([partly], [read_cold]))
    assert "eviction had no effect" not in cold
    assert "22% of the files were still in the page cache after the eviction, but the cold trials read 1.0MB" in cold
    warm = " ".join(cold_notes([partly], [calm.replaced(read_bytes_per_sample=0.0)]))
    assert "eviction had no effect: 22% of the files stayed" in warm and "the cold figures are warm" in warm
