"""A model of the pipeline, fitted from a sweep's trials: what a sample and a batch cost, in CPU and in wall
time, where the loader waits, what the processes weigh. Data only: ``decide.model`` fits it, ``decide.plan``
predicts from it, and a sweep's document holds it (``model``).

The assumptions behind it (docs/plan.md):

- a sample costs a worker the same CPU time whatever the worker count and the machine (CPUs are
  interchangeable);
- what a sample waits on besides CPU (I/O, sleeps, locks) does not depend on the worker count;
- the main process receives a batch in a constant time, and loads one at ``num_workers=0`` in a constant time;
- the processes use at most the share of their CPUs the trials reached;
- memory grows linearly with the worker count.

Each trial's rate, predicted back from the model, shows where a trial contradicts them (``residuals``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Estimate:
    """A figure fitted from several trials: the value the model uses, and the least and most the trials gave."""

    value: float
    low: float
    high: float
    trials: int
    """How many trials it came from."""

    @classmethod
    def of(cls, values: list[float]) -> Estimate | None:
        """The median of ``values`` (None without any) and their range."""
        if not values:
            return None
        ordered = sorted(values)
        middle = len(ordered) // 2
        median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        return cls(median, ordered[0], ordered[-1], len(ordered))


@dataclass(frozen=True)
class Residual:
    """One trial's measured rate against the rate the model gives it back."""

    config: str
    """The trial's config label."""
    measured_samples_per_s: float
    predicted_samples_per_s: float
    JSON_DERIVED: ClassVar[tuple[str, ...]] = ("error",)

    @property
    def error(self) -> float:
        """Measured over predicted, less one (+0.05: the trial was 5% faster than the model says)."""
        return self.measured_samples_per_s / self.predicted_samples_per_s - 1


@dataclass(frozen=True)
class PipelineModel:
    """What the pipeline costs, per sample and per batch, fitted from a sweep's completed trials (seconds,
    bytes); None where the trials could not say."""

    batch_size: int
    cpus: float
    """The CPUs the trials had (the usable ones, less what other processes took)."""
    worker_cpu_s_per_sample: Estimate | None
    """CPU a worker spends on a sample (with workers: the workers' CPU over their rate)."""
    wait_s_per_sample: Estimate | None
    """Wall time a sample waits on something other than CPU (storage, network, sleeps, locks)."""
    serial_s_per_batch: Estimate | None
    """``num_workers=0``: the main process loading a batch (wall time)."""
    serial_overlaps_step: bool
    """``num_workers=0`` loads in a thread beside the training loop (Paddle's buffer reader)."""
    main_s_per_batch: Estimate | None
    """With workers: the main process receiving a batch (wall time, the least reading of ``trials``)."""
    main_cpu_s_per_batch: Estimate | None
    """With workers: the main process's CPU per batch (its loop and its other threads)."""
    copy_s_per_batch: float
    """Host-to-device copy per batch, as measured (0 on the simulated device)."""
    cpu_share: float
    """The largest share of their CPUs the trials' processes used: what the model lets them use."""
    memory_base_bytes: float | None
    memory_per_worker_bytes: float | None
    """Peak PSS = base + per worker × num_workers, fitted over the trials."""
    worker_growth_bytes_per_s: Estimate | None
    """A worker's copies of the main process's pages, growing through a window (copy-on-read)."""
    shm_bytes_per_batch: int | None
    """What one batch in flight keeps in /dev/shm."""
    startup_base_s: float | None
    startup_per_worker_s: float | None
    """Loader creation to first batch = base + per worker × num_workers."""
    measured_workers: tuple[int, ...]
    """The worker counts the trials measured."""
    noise: float = 0.03
    """The trials' typical relative spread (their median, at least 3%): a prediction's range widens by it."""
    cpus_used: float | None = None
    """The most CPUs a trial's processes used (None in documents older than it)."""
    residuals: tuple[Residual, ...] = ()
    """Each completed trial's rate against the model's: where a trial contradicts the assumptions."""
    notes: tuple[str, ...] = ()
    """What the trials could not say, and why."""

    @property
    def worst_residual(self) -> Residual | None:
        """The trial the model fits worst."""
        return max(self.residuals, key=lambda r: abs(r.error), default=None)
