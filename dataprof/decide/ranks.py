"""Several ranks' measures of one config, made one (pure): a synchronous data-parallel step waits for the slowest
rank, and a failure on any rank fails the config for all."""

from __future__ import annotations

import dataclasses

from dataprof.results.environment import RankInfo
from dataprof.results.trial import RankResult, TrialResult
from dataprof.results.vocabulary import TrialStatus

GRAVITY = {TrialStatus.CRASHED: 0, TrialStatus.OOM: 1, TrialStatus.TIMEOUT: 2, TrialStatus.FAILED: 3,
           TrialStatus.SKIPPED: 4, TrialStatus.OK: 5}
"""Which rank's failure names a config's: the gravest (a rank without a rate fails it too, last)."""


def aggregate_ranks(measured: list[tuple[RankInfo, TrialResult]]) -> TrialResult:
    """One trial from every rank's: a failure on any rank fails the config for all.

    Synchronous data-parallel training steps at the pace of its slowest rank,
    so the figures are that rank's and ``samples_per_s`` is world size × its
    rate; each rank's own figures are kept in ``ranks``.
    """
    ranks = tuple(RankResult.of(trial, info.rank, info.node, info.local_rank, info.host) for info, trial in measured)
    failed = [(info, trial) for info, trial in measured if trial.status != TrialStatus.OK or not trial.samples_per_s]
    if failed:
        info, trial = min(failed, key=lambda item: GRAVITY[item[1].status])
        return dataclasses.replace(trial, status=TrialStatus.FAILED if trial.status == TrialStatus.OK else trial.status,
                                   error=f"rank {info.rank} (node {info.node}): {trial.error or 'no rate measured'}",
                                   samples_per_s=None, ranks=ranks)
    _, slowest = min(measured, key=lambda item: item[1].samples_per_s or 0.0)
    shared = shared_batches([trial.epochs.batch_marks for _, trial in measured])
    return slowest.replaced(samples_per_s=len(measured) * (slowest.samples_per_s or 0.0), ranks=ranks,
                            rank_repeat_fraction=shared)


def shared_batches(marks: list[tuple[int, ...]]) -> float | None:
    """Share of the ranks' first batches that another rank loaded too (None without fingerprints).

    Ranks that split a stream between them load different batches; a stream that ignores the rank
    gives every rank the same ones.
    """
    if sum(1 for m in marks if m) < 2:
        return None
    shared = total = 0
    for i, mine in enumerate(marks):
        others = {mark for j, theirs in enumerate(marks) if j != i for mark in theirs}
        shared += sum(mark in others for mark in mine)
        total += len(mine)
    return shared / total if total else None
