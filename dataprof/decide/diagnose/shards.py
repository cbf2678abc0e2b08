"""Findings on how the work divides: samples an epoch repeats across workers or ranks (a stream that does not
shard), and a rank slower than the rest (it sets the job's pace). Each rule returns a Finding or None."""

from __future__ import annotations

import statistics

from dataprof.decide.diagnose.facts import ok_trials, pct, rate_text, recommended_trial
from dataprof.decide.thresholds import Thresholds
from dataprof.results.findings import Finding
from dataprof.results.sweep import Report
from dataprof.results.vocabulary import DatasetKind, FindingId, Severity


def iterable_duplicates(report: Report, th: Thresholds) -> Finding | None:
    """An IterableDataset not split among workers: more workers repeat its samples."""
    if report.dataset is None or report.dataset.kind != DatasetKind.ITERABLE:
        return None
    ok = ok_trials(report)
    serial = next((t for t in ok if t.config.num_workers == 0), None)
    if serial is None:
        return None
    for trial in ok:
        workers = trial.config.num_workers
        if workers < 2:
            continue
        one, many = serial.epochs, trial.epochs
        if one.epoch_samples and many.epoch_samples and many.epoch_samples >= th.duplicate_ratio * one.epoch_samples:
            evidence = (f"one epoch yields {one.epoch_samples:,} samples with num_workers=0 but "
                        f"{many.epoch_samples:,} with {workers} workers "
                        f"({many.epoch_samples / one.epoch_samples:.1f}×)")
        elif (many.repeat_fraction or 0.0) >= th.repeat_fraction and (one.repeat_fraction or 0.0) < 0.05:
            evidence = (f"with {workers} workers {pct(many.repeat_fraction or 0.0)} of the batches repeat an earlier "
                        f"batch of the same epoch; with num_workers=0, {pct(one.repeat_fraction or 0.0)}")
        else:
            continue
        return Finding(
            id=FindingId.ITERABLE_DUPLICATES,
            severity=Severity.CRITICAL,
            evidence=evidence + ": every worker yields the whole stream, and the throughputs above count the "
                     "duplicates",
            recommendation=("Shard the stream in __iter__: read torch.utils.data.get_worker_info() and yield only "
                            "every num_workers-th item (or file) starting at its id."),
        )
    return None


def rank_duplicates(report: Report, th: Thresholds) -> Finding | None:
    """Distributed: ranks load the same batches of an IterableDataset that does not split its stream by rank."""
    if report.dataset is None or report.dataset.kind != DatasetKind.ITERABLE:
        return None
    shared = [t for t in ok_trials(report) if (t.epochs.rank_repeat_fraction or 0.0) >= th.repeat_fraction]
    if not shared:
        return None
    trial = max(shared, key=lambda t: t.epochs.rank_repeat_fraction or 0.0)
    world = report.environment.world_size
    return Finding(
        id=FindingId.RANK_DUPLICATES,
        severity=Severity.CRITICAL,
        evidence=(f"at {trial.config.label()}, {pct(trial.epochs.rank_repeat_fraction or 0.0)} of the first "
                  f"batches the {world} ranks loaded were loaded by another rank too: the stream is not split by "
                  "rank, so every rank trains on the same samples and the aggregate samples/s counts them once per "
                  "rank"),
        recommendation=("Split the stream by rank as well as by worker: in __iter__, yield every (world_size × "
                        "num_workers)-th item (or file) starting at rank × num_workers + the worker's id. dataprof's "
                        "trials run apart from the ranks' process group, so read the rank from the RANK and "
                        "WORLD_SIZE environment variables (torchrun sets them), or from torch.distributed only when "
                        "it is initialised, falling back to them."),
    )


def rank_imbalance(report: Report, th: Thresholds) -> Finding | None:
    """One rank (or node) loads much slower than the others: in synchronous training, all go at its pace."""
    trial = recommended_trial(report)
    ranks = [r for r in trial.ranks if r.samples_per_s] if trial is not None else []
    if trial is None or len(ranks) < 2:
        return None
    median = statistics.median(r.samples_per_s or 0.0 for r in ranks)
    slow = min(ranks, key=lambda r: r.samples_per_s or 0.0)
    gap = 1 - (slow.samples_per_s or 0.0) / median
    noise = 2 * max((r.samples_per_s_spread or 0.0) for r in ranks)
    if gap < max(th.rank_slower, noise):
        return None
    nodes = sorted({r.node for r in ranks})
    node_rates = {n: statistics.median(r.samples_per_s or 0.0 for r in ranks if r.node == n) for n in nodes}
    slow_node = min(nodes, key=lambda n: node_rates[n])
    node_gap = 1 - node_rates[slow_node] / statistics.median(node_rates.values()) if len(nodes) > 1 else 0.0
    on_node = (f"; node {slow_node} as a whole loads {100 * node_gap:.0f}% below the nodes' median"
               if node_gap >= th.rank_slower else "")
    wait = statistics.median(r.wait_fraction or 0.0 for r in ranks)
    world = len(ranks)
    return Finding(
        id=FindingId.RANK_IMBALANCE,
        severity=Severity.CRITICAL if gap >= th.rank_critical else Severity.WARNING,
        evidence=(f"at {trial.config.label()}, rank {slow.rank} (node {slow.node}, {slow.host or '?'}) loads "
                  f"{rate_text(slow.samples_per_s or 0.0)}, {100 * gap:.0f}% below the ranks' median "
                  f"{rate_text(median)}; it waits {pct(slow.wait_fraction or 0.0)} of each iteration (median "
                  f"{pct(wait)}){on_node}. Synchronous training steps at the slowest rank's pace: "
                  f"{world} ranks × {rate_text(slow.samples_per_s or 0.0)} = "
                  f"{rate_text(world * (slow.samples_per_s or 0.0))} instead of {rate_text(world * median)} at the "
                  "median"),
        recommendation=(f"Find what differs on rank {slow.rank}: its node's storage or network, other processes "
                        "taking its CPUs, or a shard of costlier samples (dataprof inspect on that node); a "
                        "per-node fix beats more workers, which every rank would get."),
    )
