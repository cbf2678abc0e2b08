"""Cold trials on real worker trees: the data files they read are found, evicted, and read again from storage."""

from __future__ import annotations

from pathlib import Path

import pytest

import dataprof
from dataprof.measure.storage import NO_EVICTION, filesystem_of
from tests.conftest import ROOT

FILES = f"{ROOT}/examples/files.py:NpyFiles"
KIB = 64


@pytest.mark.slow
def test_a_cold_trial_reads_from_storage_what_the_warm_ones_read_from_the_page_cache(tmp_path: Path) -> None:
    report = dataprof.sweep(FILES, args={"root": str(tmp_path), "count": 1024, "kib": KIB}, batch_size=16,
                            workers=[0, 2], trial_seconds=1.0, rules_of_thumb=False, cache="cold")
    warm = [t for t in report.trials if t.status == "ok"]
    assert warm and all(t.cache == "warm" and t.files_read for t in warm)
    footprint = report.data_footprint
    assert footprint is not None and footprint.directory == str(tmp_path / f"{KIB}k")
    assert footprint.files == 1024 and footprint.read_files == max(t.files_read or 0 for t in warm)
    if filesystem_of(str(tmp_path)) in NO_EVICTION:
        assert report.cold_trials == () and any("no cold trial" in note for note in report.notes)
        return
    cold = [t for t in report.cold_trials if t.status == "ok"]
    assert cold and all(t.cache == "cold" and t.evicted_files for t in cold)
    file_bytes = KIB * 1024
    for trial in cold:
        assert trial.resident_after_eviction is not None and trial.resident_after_eviction <= 0.1
        # each sample is one file read once: storage serves about a file per sample
        assert 0.5 * file_bytes <= (trial.read_bytes_per_sample or 0) <= 1.5 * file_bytes
        assert trial.files_per_sample is not None and 0.5 <= trial.files_per_sample <= 1.5
    assert all((t.read_bytes_per_sample or 0) < 0.5 * file_bytes for t in warm[1:])  # after the first, cached
    assert report.recommendation is not None and report.recommendation.cache == "cold"
    assert report.storage is not None and report.storage.steady == "cold"


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["auto", "cold"])
def test_a_dataset_that_reads_no_file_gets_no_cold_trial(datasets: str, cache: str) -> None:
    report = dataprof.sweep(f"{datasets}:Tiny", batch_size=8, workers=[0, 2], trial_seconds=0.3,
                            rules_of_thumb=False, cache=cache)
    assert report.cold_trials == () and report.data_footprint is None and report.storage is None
    assert all(t.files_read is None for t in report.trials)
    said = any("no cold trial: the trials read no data file" in note for note in report.notes)
    assert said == (cache == "cold")  # auto stays quiet; a cold sweep asked for says why it has none
