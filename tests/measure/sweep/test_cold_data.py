"""Cold trials on real worker trees: the data files they read are found, evicted, and read again from storage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dataprof
from dataprof.measure.cache.files import NO_EVICTION, filesystem_of
from tests.conftest import ROOT, Invoke

FILES = f"{ROOT}/examples/files.py:NpyFiles"
KIB = 64


@pytest.mark.slow
def test_a_cold_trial_reads_from_storage_what_the_warm_ones_read_from_the_page_cache(tmp_path: Path) -> None:
    report = dataprof.sweep(FILES, args={"root": str(tmp_path), "count": 1024, "kib": KIB}, batch_size=16,
                            workers=[0, 2], trial_seconds=1.0, rules_of_thumb=False, cache="cold",
                            worker_kind="process")
    warm = [t for t in report.trials if t.status == "ok"]
    assert warm and all(t.cache == "warm" and t.storage.files_read for t in warm)
    footprint = report.data_footprint
    assert footprint is not None and footprint.directory == str(tmp_path / f"{KIB}k")
    assert footprint.files == 1024 and footprint.read_files == max(t.storage.files_read or 0 for t in warm)
    if filesystem_of(str(tmp_path)) in NO_EVICTION:
        assert report.cold_trials == () and any("no cold trial" in note for note in report.notes)
        return
    cold = [t for t in report.cold_trials if t.status == "ok"]
    assert cold and all(t.cache == "cold" and t.storage.evicted_files for t in cold)
    file_bytes = KIB * 1024
    for trial in cold:
        assert trial.storage.resident_after_eviction is not None and trial.storage.resident_after_eviction <= 0.1
        # each sample is one file read once: storage serves about a file per sample
        assert 0.5 * file_bytes <= (trial.storage.read_bytes_per_sample or 0) <= 1.5 * file_bytes
        assert trial.storage.files_per_sample is not None and 0.5 <= trial.storage.files_per_sample <= 1.5
    assert all((t.storage.read_bytes_per_sample or 0) < 0.5 * file_bytes for t in warm[1:])  # after the first, cached
    assert report.recommendation is not None and report.recommendation.cache == "cold"
    assert report.storage is not None and report.storage.steady == "cold"


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["auto", "cold"])
def test_a_dataset_that_reads_no_file_gets_no_cold_trial(datasets: str, cache: str) -> None:
    report = dataprof.sweep(f"{datasets}:Tiny", batch_size=8, workers=[0, 2], trial_seconds=0.3,
                            rules_of_thumb=False, cache=cache, worker_kind="process")
    assert report.cold_trials == () and report.data_footprint is None and report.storage is None
    assert all(t.storage.files_read is None for t in report.trials)
    said = any("no cold trial: the trials read no data file" in note for note in report.notes)
    assert said == (cache == "cold")  # auto stays quiet; a cold sweep asked for says why it has none


def _evictable_or_skip(path: Path) -> None:
    if filesystem_of(str(path)) in NO_EVICTION:
        pytest.skip(f"{path} is on {filesystem_of(str(path))}: eviction has no effect there")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_cold_trials_evict_what_workers_read_under_every_start_method(tmp_path: Path, cli: Invoke,
                                                                     quick: list[str], method: str) -> None:
    _evictable_or_skip(tmp_path)
    out = tmp_path / "run.json"
    # the main process builds the dataset (it writes the files) but never opens one to read: only workers do
    code, _, stderr = cli("sweep", FILES, "--arg", f"root={tmp_path}", "--arg", "count=512", "--arg", f"kib={KIB}",
                          "--batch-size", "16", "--workers", "2", "--start-method", method, "--cache", "cold",
                          "--strategy", "grid", "--no-rules-of-thumb", *quick, "--json", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    warm = [t for t in doc["trials"] if t["status"] == "ok"]
    cold = [t for t in doc["cold_trials"] if t["status"] == "ok"]
    assert warm and cold, doc["notes"]
    workers = next(t for t in warm if t["config"]["num_workers"] == 2)
    assert workers["config"]["multiprocessing_context"] in (method, None)
    read = workers["files_read"] or 0
    assert read >= 32  # the workers' own opens were logged: far more than a reading catches open
    assert all(t["evicted_files"] >= read for t in cold)
    for trial in cold:  # the cold trial read its samples from storage, as a fork trial does
        assert 0.5 * KIB * 1024 <= (trial["read_bytes_per_sample"] or 0) <= 1.5 * KIB * 1024


@pytest.mark.slow
def test_a_sweep_started_on_uncached_data_measures_warm_trials_warm(tmp_path: Path) -> None:
    from dataprof.measure.cache.page_cache import evict, resident_bytes

    _evictable_or_skip(tmp_path)
    from examples.files import generate

    args = {"root": str(tmp_path), "count": 512, "kib": KIB}
    paths = [str(p) for p in generate(tmp_path, 512, KIB)]
    evict(paths)  # on storage, not in the page cache: as after a reboot
    assert all((resident_bytes(p) or (1, 0))[0] == 0 for p in paths[:8])
    report = dataprof.sweep(FILES, args=args, batch_size=16, workers=[0, 2], trial_seconds=0.5,
                            rules_of_thumb=False, strategy="grid", cache="warm", worker_kind="process")
    first = report.trials[0]
    assert first.status == "ok" and first.config.num_workers == 0
    note = next((n for n in report.notes if "read from storage (the data was not all cached" in n), None)
    assert note is not None and note.startswith(first.config.label())
    # the figure kept is the second measure, warm: next to nothing from storage
    assert all((t.storage.read_bytes_per_sample or 0) < 0.1 * KIB * 1024 for t in report.trials if t.status == "ok")


@pytest.mark.slow
def test_the_files_cached_before_the_cold_trials_are_cached_after(tmp_path: Path) -> None:
    from dataprof.measure.cache.page_cache import residency

    _evictable_or_skip(tmp_path)
    report = dataprof.sweep(FILES, args={"root": str(tmp_path), "count": 512, "kib": KIB}, batch_size=16,
                            workers=[2], trial_seconds=0.5, rules_of_thumb=False, cache="cold",
                            worker_kind="process")
    assert [t for t in report.cold_trials if t.status == "ok"]
    note = next((n for n in report.notes if n.startswith("after the cold trials, the ")), None)
    assert note is not None and "were read back into the page cache" in note
    paths = [str(p) for p in sorted((tmp_path / f"{KIB}k").glob("*.npy"))]
    resident, size = residency(paths)
    assert resident >= 0.9 * size  # the sweep read them all (count 512 at batch 16) and left them cached


@pytest.mark.slow
def test_without_posix_fadvise_a_sweep_runs_warm_and_says_why_there_is_no_cold_trial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.delattr(os, "posix_fadvise")  # as on macOS: the sweep's own process cannot evict
    report = dataprof.sweep(FILES, args={"root": str(tmp_path), "count": 64, "kib": KIB}, batch_size=16,
                            workers=[0], trial_seconds=0.3, rules_of_thumb=False, cache="cold",
                            worker_kind="process")
    assert [t.status for t in report.trials] == ["ok"] and report.cold_trials == ()
    assert "no cold trial: this platform has no posix_fadvise (macOS, Windows): a file cannot be evicted from the " \
           "page cache" in report.notes
