"""The notes a sweep's report carries, worded from what the runner recorded."""

from __future__ import annotations

from dataprof.decide.sweep import build_note
from dataprof.results.environment import DatasetBuilds


def test_how_the_trials_got_their_dataset_is_told_by_what_decided_it_last() -> None:
    assert build_note(DatasetBuilds()) is None
    assert build_note(DatasetBuilds(build_s=0.08)) == ("every trial builds the dataset (0.08 s) in a fresh process "
                                                       "before its DataLoader, as a training script does")
    assert build_note(DatasetBuilds(given=True)) == \
        "every trial is forked from the process holding the dataset object given"
    shared = DatasetBuilds(shared_after_s=12.3, build_s=12.3)
    assert build_note(shared).startswith("building the dataset took 12.3 s in a trial, so from then on it is built "
                                         "once")
    fell_back = build_note(DatasetBuilds(shared_after_s=12.3, fallback=("w4 pf2 persist", "crashed", "boom")))
    assert fell_back == ("every trial builds the dataset in a fresh process: w4 pf2 persist forked from the process "
                         "that built it ended crashed (boom), and completed when the trial built its own")
