"""Where each rule draws its line: the thresholds of the sweep's diagnosis and of ``dataprof run``'s verdict.

Documented in docs/diagnosis.md and docs/run.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.decide.budgets import FOREIGN_CPUS
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import TrialStatus

STRAGGLER_RATIO = 3.0
STRAGGLER_MIN_MS = 2.0
STRAGGLER_TAIL_SHARE = 0.2
"""A batch wait whose p99 is this many times its median, at least this much above it, and whose time above the
median is this share of its mean, has stragglers (a heavy tail; rare scheduler hiccups do not count)."""


@dataclass(frozen=True)
class Thresholds:
    """Where each rule draws its line, for every kind of document: a sweep's diagnosis (docs/diagnosis.md),
    ``dataprof run``'s verdict (docs/run.md) and ``dataprof inspect``'s checks (docs/inspect.md)."""

    model_bound_wait: float = 0.05
    """Wait share under which the loader keeps up (TF profiler: < 5% is not input-bound)."""
    critical_wait: float = 0.20
    """Wait share from which a verdict is critical."""
    storage_gap: float = 0.2
    """A config cold this much slower than warm (or more) is held back by storage."""
    transfer_share: float = 0.20
    """Host-to-device copy share of the iteration that makes a run transfer-bound."""
    main_busy: float = 0.5
    """Share of the time in ``next()`` the main thread spends on CPU: above, it is the one working."""
    receive_cpu_share: float = 0.33
    """Share of the receiving time the main thread must spend on CPU for receiving to be its load."""
    pin_thread_cores: float = 0.8
    """CPU of the main process's other threads (the pin-memory thread) that saturates it."""
    sampler_share: float = 0.3
    """Share of the iteration spent in the sampler that makes it the main process's load."""
    cpu_saturated: float = 0.75
    """Share of the usable CPUs the process tree uses when CPU-bound."""
    main_saturated: float = 0.9
    """``dataprof run``: CPU of the training process (cores) from which its own loop is the limit."""
    machine_saturated: float = 0.9
    """Share of all the machine's CPUs busy (the loader and any other process) that also makes a waiting
    loader CPU-bound: it cannot get more CPU time."""
    worker_busy: float = 0.7
    """CPU per worker (share of a core) from which workers compute rather than wait."""
    growth_per_worker_bytes: int = 8 * 1024 * 1024
    """Worker USS growth over the window that counts as copy-on-read."""
    startup_share: float = 0.10
    """Worker start-up as a share of one epoch that is worth a finding."""
    epoch_start_share: float = 0.5
    """Share of the loop's waiting spent on the first batch of each epoch that makes short epochs the limit."""
    straggler_ratio: float = STRAGGLER_RATIO
    """p99 / p50 batch load time at num_workers=0 that makes a heavy tail."""
    straggler_min_ms: float = STRAGGLER_MIN_MS
    """…and the excess of p99 over p50 must be at least this (ignores scheduler jitter)."""
    straggler_tail_share: float = STRAGGLER_TAIL_SHARE
    """…and the time above the median must be this share of the mean (rare allocator spikes are not)."""
    duplicate_ratio: float = 1.5
    """Epoch length with workers / without that betrays an unsharded IterableDataset."""
    repeat_fraction: float = 0.25
    """Share of repeated batches with workers (and none without) that does too."""
    ipc_share: float = 0.5
    """Main-thread CPU to receive a batch, as a share of loading it at num_workers=0, that makes workers lose."""
    rank_slower: float = 0.15
    """A rank (or node) this much slower than the ranks' median, beyond noise, sets a slower pace for all."""
    rank_critical: float = 0.30
    foreign_cpus: float = FOREIGN_CPUS
    """CPU (cores) other processes take during trials from which the machine counts as busy: the report says so
    and the CPU ceilings count only what they left (``budgets.available_cpus``)."""
    foreign_warning: float = 0.25
    """…and the share of the usable CPUs they take from which the figures are called noisy (a warning)."""
    waiting_cpu_share: float = 0.5
    """``dataprof inspect``: below this share of CPU in a sample's wall time, samples mostly wait."""
    computing_cpu_share: float = 0.8
    """…from this share, samples are CPU work."""
    dominant_stage_share: float = 0.3
    """Share of the sample time one transform stage takes that makes it the one to start with."""
    straggler_max_ratio: float = 10.0
    """A slowest sample this many times the median is a straggler too (``straggler_ratio`` holds for p99)."""
    repeat_ratio: float = 0.5
    """A re-fetch at least this fraction of the first time makes the index itself slow."""
    collate_share: float = 0.2
    """Share of loading a sample that collation may take before it is worth a warning."""
    fd_headroom: float = 0.5
    """Share of the open-file limit that tensors in flight may take."""
    workers_to_check: int = 8
    """A capacity check warns when fewer workers than max(this, 2 × usable CPUs) fit."""


def heavy_tail(trial: TrialResult, ratio: float = STRAGGLER_RATIO, min_ms: float = STRAGGLER_MIN_MS,
               share: float = STRAGGLER_TAIL_SHARE) -> bool:
    """Whether the trial's wait for a batch has stragglers (see :data:`STRAGGLER_RATIO`)."""
    waits = trial.wait_ms
    if trial.status != TrialStatus.OK or waits is None or waits.p99 is None:
        return False
    if not waits.mean or waits.p99 < ratio * waits.p50 or waits.p99 - waits.p50 < min_ms:
        return False
    return 1 - waits.p50 / waits.mean >= share
