"""Thread workers beside worker processes: how much of the work releases the GIL, whether threads return the
samples processes do, and the two kinds side by side. Stdlib only."""

from __future__ import annotations

from dataclasses import dataclass

from dataprof.results.knobs import LoaderConfig
from dataprof.results.vocabulary import ThreadVerdict

UNSETTLED = 0.5
"""How far the most a GIL share can be may lie above the share read before the share is not told."""
DISAGREE = 0.3
"""How far below the share read (the least time alone against the least time paired, each from its own round) one
round may read before the share is not told: the machine's speed moved between the rounds (a host that lends its
CPUs elsewhere for a moment), and the two least times, from two moments, would read held work as released."""


def gil_untold(release: float, high: float | None) -> bool:
    """Whether a GIL share read as ``release`` is not told: the most it can be (``high``) lies :data:`UNSETTLED`
    or more above it (other processes kept the measure's pair of threads waiting for a CPU)."""
    return high is not None and high - release >= UNSETTLED


@dataclass(frozen=True)
class GilShare:
    """How much of a piece of work releases the GIL (``measure.gil``)."""

    release: float | None
    """Share of its time two threads overlap (0: holds the GIL throughout, 1: releases it throughout), at least;
    None when it could not be told (``why``)."""
    calls: int
    """Calls timed alone, and by each of two threads."""
    alone_s: float
    """Seconds one thread took for them (less those it waited for a CPU)."""
    paired_s: float
    """Seconds two threads took, each doing them all."""
    free_threaded: bool = False
    """The interpreter runs without the GIL: threads always overlap."""
    why: str | None = None
    """Why ``release`` is None."""
    release_low: float | None = None
    release_high: float | None = None
    """The least any one round (alone, then paired) read, and the most one can have been (its pair's waits for a
    CPU taken off): the measure's spread."""

    @property
    def settled(self) -> float | None:
        """``release``, where the rounds settle it: None when not measured, when the most it can be is
        :data:`UNSETTLED` above it (other processes kept the pair's threads waiting for a CPU: released work
        could not overlap, held work waited beside its own), or when one round read :data:`DISAGREE` below it."""
        return None if self.release is None or gil_untold(self.release, self.release_high) \
            or self._rounds_disagree() else self.release

    def _rounds_disagree(self) -> bool:
        """Whether one round read :data:`DISAGREE` or more below ``release``."""
        return self.release is not None and self.release_low is not None and \
            self.release - self.release_low >= DISAGREE

    def words(self) -> str:
        """``releases the GIL 92% of its time (C code, I/O or sleep)`` / ``holds the GIL (pure Python, …)`` /
        why it was not told."""
        if self.free_threaded:
            return "runs without a GIL (free-threaded Python)"
        if self.release is None:
            return f"was not measured for the GIL ({self.why})"
        if self._rounds_disagree():
            return (f"read as releasing the GIL {self.release:.0%} of its time, one of its rounds "
                    f"{self.release_low:.0%}: the machine's speed moved between them, so the measure cannot tell")
        if self.settled is None:
            return (f"releases the GIL {100 * self.release:.0f}–{self.release_high:.0%} of its time: other "
                    "processes kept its threads waiting for a CPU, so the measure cannot tell")
        if self.release >= 0.8:
            return f"releases the GIL {self.release:.0%} of its time (C code, I/O or sleep)"
        if self.release <= 0.2:
            return f"holds the GIL (pure Python: {self.release:.0%} released)"
        return f"releases the GIL {self.release:.0%} of its time"


@dataclass(frozen=True)
class ThreadCheck:
    """Thread batches against the same indices loaded one by one, as a worker process does."""

    verdict: ThreadVerdict
    batches: int
    """Batches compared."""
    detail: str = ""
    """The first batch that differed, why it could not be told, or the error."""
    config: LoaderConfig | None = None
    """The thread config checked."""

    def failure(self) -> str | None:
        """The reason thread trials fail with after this check; None when they may run."""
        if self.verdict != ThreadVerdict.DIFFERS:
            return None
        return ("threads returned other samples than one process for the same indices: the dataset's "
                f"__getitem__ is not thread-safe ({self.detail}); threads need a thread-safe __getitem__ (no "
                "shared file handle or decoder state between calls)")


@dataclass(frozen=True)
class WorkerKinds:
    """The fastest thread config beside the fastest process config, when both were measured."""

    thread: LoaderConfig
    thread_samples_per_s: float
    thread_peak_memory_bytes: int | None
    process: LoaderConfig
    process_samples_per_s: float
    process_peak_memory_bytes: int | None
    winner: str
    """``thread`` or ``process``: the kind of the recommendation, else of the faster."""
    thread_cpu_percent: float | None = None
    """CPU of the thread config's process through its window (100 = one core)."""
    process_cpu_percent: float | None = None
    """CPU of the process config's tree (main process and workers) through its window."""
    busiest_thread_cpu_percent: float | None = None
    """CPU of the thread config's busiest thread besides the main one: near 100 with the others idle, the GIL
    lets one run at a time."""
