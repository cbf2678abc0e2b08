"""A trial's figures are grouped by what they are about in Python, and flat in the JSON, as schema v1 has them."""

from __future__ import annotations

import json

import pytest

from dataprof.results.codec import decode, encode
from dataprof.results.knobs import LoaderConfig
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import TrialStatus
from tests.conftest import DATA


def test_a_recorded_trial_reads_into_its_groups_and_writes_back_the_same_keys_in_the_same_order() -> None:
    recorded = json.loads((DATA / "sweep" / "threads_lose.json").read_text())["trials"]
    for data in recorded:
        trial = decode(TrialResult, data)
        assert trial.memory.peak_memory_bytes == data["peak_memory_bytes"]
        assert trial.cpu.thread_cpu_percent == (None if data["thread_cpu_percent"] is None
                                                else tuple(data["thread_cpu_percent"]))
        assert list(encode(trial)) == list(data) and json.loads(json.dumps(encode(trial))) == data


def test_flat_figures_go_to_their_groups_and_a_name_that_is_no_figure_is_an_error() -> None:
    config = LoaderConfig(2, False, 2, True)
    trial = TrialResult.of(config, TrialStatus.OK, samples_per_s=100.0, copy_ms_mean=0.5, epoch_samples=64,
                           cpu_percent=50.0, peak_memory_bytes=7, gpu_util_percent=30.0, files_read=3)
    assert (trial.times.copy_ms_mean, trial.epochs.epoch_samples, trial.cpu.cpu_percent, trial.memory.peak_memory_bytes,
            trial.gpu.gpu_util_percent, trial.storage.files_read) == (0.5, 64, 50.0, 7, 30.0, 3)
    changed = trial.replaced(peak_memory_bytes=9, samples_per_s=80.0)
    assert (changed.memory.peak_memory_bytes, changed.samples_per_s, changed.cpu.cpu_percent) == (9, 80.0, 50.0)
    data = encode(trial)
    assert "memory" not in data and data["peak_memory_bytes"] == 7 and "batch_marks" not in data
    assert decode(TrialResult, {**data, "memory": {"peak_memory_bytes": 1}, "a_later_key": 1}) == trial
    with pytest.raises(TypeError):
        TrialResult.of(config, TrialStatus.OK, peak_memory_byte=1)
    with pytest.raises(TypeError):
        trial.replaced(memory_peak=1)
