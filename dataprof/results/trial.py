"""What a trial measured: the result data below a Report. Stdlib only."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dataprof.results.codec import FLAT, HIDDEN, written_if
from dataprof.results.knobs import LoaderConfig
from dataprof.results.vocabulary import TrialStatus


@dataclass(frozen=True)
class Percentiles:
    """A time per batch (ms) over a window: the wait in ``next(loader)``, the model's step. A sweep's trial has
    them all (null where one was not measured); a run's loader its median, p95 and mean;
    a tune run its median and p95: each writes its own."""

    p50: float
    p95: float
    max: float | None = field(default=None, metadata=written_if(lambda stats: stats.max is not None))
    p99: float | None = field(default=None, metadata=written_if(lambda stats: stats.max is not None))
    mean: float | None = field(default=None,
                               metadata=written_if(lambda stats: stats.max is not None or stats.mean is not None))


@dataclass(frozen=True)
class RankResult:
    """One rank's share of a distributed trial (rank 0 aggregates them)."""

    rank: int
    node: int
    local_rank: int
    host: str
    status: TrialStatus
    error: str | None = None
    samples_per_s: float | None = None
    samples_per_s_spread: float | None = None
    wait_fraction: float | None = None
    first_batch_s: float | None = None
    cpu_percent: float | None = None
    """CPU of this rank's loader processes (main + workers); 100 = one core."""
    peak_memory_bytes: int | None = None

    @classmethod
    def of(cls, trial: TrialResult, rank: int, node: int, local_rank: int, host: str) -> RankResult:
        """One rank's figures from its trial."""
        return cls(rank=rank, node=node, local_rank=local_rank, host=host, status=trial.status, error=trial.error,
                   samples_per_s=trial.samples_per_s, samples_per_s_spread=trial.samples_per_s_spread,
                   wait_fraction=trial.wait_fraction, first_batch_s=trial.first_batch_s,
                   cpu_percent=trial.cpu.cpu_percent, peak_memory_bytes=trial.memory.peak_memory_bytes)


@dataclass(frozen=True)
class BatchTimes:
    """Where each batch's time went in the trial's main process, per batch (ms)."""

    wait_cpu_ms_mean: float | None = None
    """Main-thread CPU inside ``next()`` per batch: receiving and unpickling a
    worker's batch, or the whole load when ``num_workers=0``."""
    receive_ms_mean: float | None = None
    """Main-process time per batch unpickling it from a worker (rebuilding its tensors and objects)."""
    sampler_ms_mean: float | None = None
    """Time in the batch sampler per batch (it runs in the main process)."""
    copy_ms_mean: float | None = None
    """Host-to-device copy per batch (0 on the simulated device)."""
    step_ms_mean: float | None = None
    """Dummy model step per batch."""


@dataclass(frozen=True)
class EpochFacts:
    """The epochs a trial saw, and what its first batches repeated."""

    epochs_started: int | None = None
    """Epochs begun from loader creation to the end of the window."""
    epoch_samples: int | None = None
    """Samples the first epoch yielded, when it ended within the trial."""
    epoch_starts_in_window: int | None = None
    """Epochs begun inside the timed window."""
    epoch_start_wait_s: float | None = None
    """Time the loop waited for the first batch of those epochs: workers restarting or refilling at each start."""
    repeat_fraction: float | None = None
    """IterableDataset only: share of the warm-up batches (first epoch) identical to an earlier one."""
    rank_repeat_fraction: float | None = None
    """Distributed, IterableDataset only: share of the ranks' first batches that another rank loaded too."""
    batch_marks: tuple[int, ...] = field(default=(), metadata=HIDDEN)
    """IterableDataset only: fingerprints of the first batches, to compare ranks' streams (not in the JSON)."""


@dataclass(frozen=True)
class CpuUse:
    """CPU in the trial's window: its process tree, its main process and threads, the machine."""

    cpu_percent: float | None = None
    """CPU of the trial's process tree in the window; 100 = one core busy."""
    main_cpu_percent: float | None = None
    """CPU of the main process alone (all its threads, e.g. pin_memory's)."""
    main_thread_cpu_percent: float | None = None
    """CPU of the main process's main thread (the training loop)."""
    thread_cpu_percent: tuple[float, ...] | None = None
    """CPU of each other thread of the main process through the window, busiest first, 100 = one core: a thread
    config's loader threads (how many the GIL lets run at once), torch's own, pin_memory's."""
    cpu_percent_system: float | None = None
    """Whole-machine CPU in the window, % of all CPUs."""
    foreign_cpu_percent: float | None = None
    """CPU other processes took on the usable CPUs in the window, 100 per core (neither the trial's processes nor
    dataprof's own): the competition the loader met. None when not read."""
    iowait_percent: float | None = None


@dataclass(frozen=True)
class MemoryUse:
    """Memory of the trial's processes (PSS, USS) and of the machine."""

    peak_memory_bytes: int | None = None
    """Peak PSS of main process + workers (shared pages counted once)."""
    main_uss_bytes: int | None = None
    workers_uss_start_bytes: int | None = None
    """Sum of worker USS at the first sample of the window."""
    workers_uss_end_bytes: int | None = None
    """Sum of worker USS at the last sample."""
    workers_inherited_growth_bytes: int | None = None
    """Growth over the window of the workers' dirty private pages in mappings inherited from the main process:
    its pages copied as they are written (copy-on-read when reading Python objects writes their refcounts)."""
    workers_file_growth_bytes: int | None = None
    """Growth over the window of the workers' clean private pages of memory-mapped files (data read, not
    copied)."""
    available_memory_min_bytes: int | None = None


@dataclass(frozen=True)
class GpuUse:
    """The GPU beside the trial (NVML); None without an NVIDIA GPU."""

    gpu_util_percent: float | None = None
    """NVML utilisation over the window; None without an NVIDIA GPU."""
    gpu_memory_bytes: int | None = None


@dataclass(frozen=True)
class StorageReads:
    """What the trial read from storage and the page cache, and a cold trial's eviction."""

    storage_read_bytes_per_s: float | None = None
    """Bytes per second the trial's processes read from storage in the window (``/proc/PID/io`` ``read_bytes``:
    page-cache misses, exited workers included)."""
    storage_read_bytes: int | None = None
    """``storage_read_bytes_per_s`` over the window: what its samples took from storage."""
    read_bytes_per_sample: float | None = None
    """``storage_read_bytes`` per sample."""
    read_chars_per_s: float | None = None
    """Bytes per second read through ``read()`` in the window, from the page cache or storage (``rchar``; the
    workers' pipes too; a memory-mapped file's pages are not counted)."""
    read_chars_per_sample: float | None = None
    files_read: int | None = None
    """Distinct data files the trial's processes opened or mapped (None when none could be seen)."""
    files_per_sample: float | None = None
    """Data files opened per sample of the window (through Python's ``open``; C code's opens are not counted)."""
    first_pass_end: bool = False
    """A cold trial's window ended because the dataset's first pass did: what came after would be warm."""
    evicted_files: int | None = None
    """A cold trial: the files evicted from the page cache before it."""
    evicted_bytes: int | None = None
    resident_after_eviction: float | None = None
    """Share of the evicted bytes still in the page cache after the eviction (1.0 on tmpfs)."""


@dataclass(frozen=True)
class TrialResult:
    """One configuration, measured in its own process."""

    config: LoaderConfig
    status: TrialStatus
    error: str | None = None
    """One-line reason when status is not ``ok``."""
    samples_per_s: float | None = None
    """Samples delivered in the steady-state window / window wall time."""
    samples_per_s_spread: float | None = None
    """Relative standard error of the rate across sub-windows (0.02 = ±2%)."""
    first_batch_s: float | None = None
    """Loader creation to first batch: worker start-up, reported apart."""
    wait_fraction: float | None = None
    """Share of the window the loop was blocked waiting for data."""
    wait_ms: Percentiles | None = None
    times: BatchTimes = field(default=BatchTimes(), metadata=FLAT)
    """Where a batch's time went in the main process."""
    batches: int | None = None
    """Batches in the timed window."""
    samples: int | None = None
    """Samples in the timed window."""
    window_s: float | None = None
    worker_processes: int | None = None
    """Worker processes the loader really started (0 when the framework loaded in the main process)."""
    epochs: EpochFacts = field(default=EpochFacts(), metadata=FLAT)
    cpu: CpuUse = field(default=CpuUse(), metadata=FLAT)
    memory: MemoryUse = field(default=MemoryUse(), metadata=FLAT)
    gpu: GpuUse = field(default=GpuUse(), metadata=FLAT)
    duration_s: float | None = None
    """Whole trial, process start to exit."""
    build_s: float | None = None
    """Seconds the trial spent building the dataset before its DataLoader; None when it was forked with the
    dataset built (see ``DatasetInfo.build``)."""
    ranks: tuple[RankResult, ...] = ()
    """Distributed sweeps: each rank's measurement; the figures above are the pace-setting (slowest) rank's,
    and ``samples_per_s`` is world size × its rate, as synchronous training would run."""
    cache: str = "warm"
    """``warm``: the trial read what the page cache held; ``cold``: the data files the trials read were evicted from
    the page cache right before it, and its window ended before the dataset's first pass did."""
    storage: StorageReads = field(default=StorageReads(), metadata=FLAT)
    repeats: int = 1
    """Trials of this config the rate pools: a close call the noise decided is measured again (the search's
    re-measure), and the rate is then the samples of both windows over their time."""

    @classmethod
    def of(cls, config: LoaderConfig, status: TrialStatus, **figures: Any) -> TrialResult:
        """A trial from flat figures (the JSON's keys, as a trial and the sampler report them): each goes to its
        group's field; a name that is no field of the trial or of a group is a TypeError."""
        grouped = {name: kind(**{k: figures.pop(k) for k in _names(kind) if k in figures})
                   for name, kind in GROUPS.items()}
        return cls(config=config, status=status, **grouped, **figures)

    def replaced(self, **figures: Any) -> TrialResult:
        """A copy with ``figures`` changed, by their flat names (as :meth:`of` takes them)."""
        groups = {name: dataclasses.replace(getattr(self, name), **{k: figures.pop(k) for k in mine})
                  for name, kind in GROUPS.items() if (mine := _names(kind) & set(figures))}
        return dataclasses.replace(self, **groups, **figures)


GROUPS: dict[str, type] = {"times": BatchTimes, "epochs": EpochFacts, "cpu": CpuUse, "memory": MemoryUse,
                           "gpu": GpuUse, "storage": StorageReads}
"""The trial's groups of figures by field name; the JSON holds their figures flat, by the same names."""


def _names(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}
