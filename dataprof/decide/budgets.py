"""Budgets a configuration must fit, one rule each: the share of a budget it may plan to use, the CPUs other
processes left, the memory each worker adds, the batches it keeps in /dev/shm.

The search, the diagnosis and ``dataprof inspect`` apply the same rules, so they tell the same story.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dataprof.results.knobs import LoaderConfig
from dataprof.results.stats import line_fit
from dataprof.results.trial import TrialResult

HEADROOM = 0.8
"""Share of a budget (memory limit, /dev/shm, open files) a configuration may plan to use.

The search never proposes a config predicted past it, and the diagnosis and
``dataprof inspect`` count the workers that fit with the same margin, so all
three tell the same story.
"""


FOREIGN_CPUS = 0.25
"""CPU (cores) other processes take during a trial from which it counts: the CPUs it had are fewer."""


def available_cpus(trial: TrialResult, usable_cpus: int) -> float:
    """The CPUs the trial had: the usable ones less what other processes took of them in its window (once that
    competition reaches :data:`FOREIGN_CPUS`), never below one."""
    foreign = (trial.cpu.foreign_cpu_percent or 0.0) / 100.0
    return float(usable_cpus) if foreign < FOREIGN_CPUS else max(1.0, usable_cpus - foreign)


@dataclass(frozen=True)
class MemoryLine:
    """Peak memory (PSS, bytes) against worker processes: the least-squares line through measured points."""

    base: float
    per_worker: float
    mean_workers: float
    """The points' mean worker count: the line passes through their means."""

    def at(self, workers: int) -> float:
        """The peak ``workers`` worker processes would take: along the line where it rises with workers, flat at
        the points' mean where it does not (a line that falls is noise: fewer workers take no more). The sweep's
        budget and ``tune`` ask it alike."""
        mean_peak = self.base + self.per_worker * self.mean_workers
        return mean_peak + max(0.0, self.per_worker) * (workers - self.mean_workers)


def memory_line(points: Sequence[tuple[int, int]]) -> MemoryLine | None:
    """The :class:`MemoryLine` through ``points`` (worker count, peak PSS); None under 2 counts."""
    fit = line_fit(points)
    return None if fit is None else MemoryLine(*fit, sum(w for w, _ in points) / len(points))


def memory_fit(trials: Sequence[TrialResult]) -> MemoryLine | None:
    """:func:`memory_line` over the trials with worker processes (a thread weighs no process); None under 2
    counts."""
    return memory_line([(t.config.num_workers, t.memory.peak_memory_bytes) for t in trials
                        if t.memory.peak_memory_bytes and not t.config.threads])


def shm_in_flight(config: LoaderConfig, batch_bytes: int) -> int:
    """Bytes of batches ``config`` keeps in /dev/shm: workers × prefetch_factor (2 when unset) × batch bytes;
    0 without workers, with threads (one heap) or with Paddle's ``use_shared_memory=False`` (batches go through
    a pipe)."""
    if config.num_workers == 0 or config.threads or config.use_shared_memory is False:
        return 0
    return config.num_workers * config.prefetch * batch_bytes


def shm_workers(shm_free_bytes: int, batch_bytes: int, prefetch_factor: int) -> int:
    """The one /dev/shm rule: how many workers' batches in flight fit in :data:`HEADROOM` of the free space."""
    return int(HEADROOM * shm_free_bytes // (batch_bytes * prefetch_factor))


def shm_fits(config: LoaderConfig, batch_bytes: int, shm_free_bytes: int) -> bool:
    """Whether ``config``'s batches in flight fit in /dev/shm by :func:`shm_workers`' rule."""
    if shm_in_flight(config, batch_bytes) == 0:
        return True
    return config.num_workers <= shm_workers(shm_free_bytes, batch_bytes, config.prefetch)
