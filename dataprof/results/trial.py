"""What a trial measured: the result data below a Report. Stdlib only."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dataprof.results.knobs import LoaderConfig
from dataprof.results.vocabulary import TrialStatus


@dataclass(frozen=True)
class WaitStats:
    """Time the training loop spent blocked in ``next(loader)``, per batch (ms)."""

    p50: float
    p95: float
    max: float
    p99: float | None = None
    mean: float | None = None


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
                   cpu_percent=trial.cpu_percent, peak_memory_bytes=trial.peak_memory_bytes)


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
    wait_ms: WaitStats | None = None
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
    batches: int | None = None
    """Batches in the timed window."""
    samples: int | None = None
    """Samples in the timed window."""
    window_s: float | None = None
    worker_processes: int | None = None
    """Worker processes the loader really started (0 when the framework loaded in the main process)."""
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
    batch_marks: tuple[int, ...] = ()
    """IterableDataset only: fingerprints of the first batches, to compare ranks' streams (not in the JSON)."""
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
    gpu_util_percent: float | None = None
    """NVML utilisation over the window; None without an NVIDIA GPU."""
    gpu_memory_bytes: int | None = None
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
    repeats: int = 1
    """Trials of this config the rate pools: a close call the noise decided is measured again (the search's
    re-measure), and the rate is then the samples of both windows over their time."""

    def to_dict(self) -> dict[str, Any]:
        """The trial as the JSON document holds it (``config`` by the framework's names, no fingerprints)."""
        data = dataclasses.asdict(self)
        data["config"] = self.config.to_dict()
        data["ranks"] = [dataclasses.asdict(r) for r in self.ranks]
        del data["batch_marks"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        """Read :meth:`to_dict` back (unknown keys are ignored)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["config"] = LoaderConfig.from_dict(data["config"])
        if values.get("wait_ms") is not None:
            values["wait_ms"] = WaitStats(**values["wait_ms"])
        values["status"] = TrialStatus(data["status"])
        if values.get("thread_cpu_percent") is not None:
            values["thread_cpu_percent"] = tuple(values["thread_cpu_percent"])
        values["ranks"] = tuple(RankResult(**{**r, "status": TrialStatus(r["status"])})
                                for r in data.get("ranks") or ())
        return cls(**values)


