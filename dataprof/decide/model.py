"""Fit a model of the pipeline from a sweep's trials, and predict from it the rate of any worker count on any
number of CPUs, at any model step. Pure.

A worker spends ``c`` seconds of CPU and waits ``d`` seconds on something else per sample, so ``W`` workers
deliver at most ``W / (c + d)`` samples/s; the CPUs, of which the processes reach a share ``u``, allow at most
``u × C / (c + main CPU per sample)``; the main process, receiving a batch in ``m`` seconds, at most
``batch / m``; and the training loop takes a batch only every ``m + copy + step``. At ``num_workers=0`` the main
process loads each batch itself, in a time measured once. The fit takes each figure from the trials that show
it, and gives every trial's rate back, so that a trial the assumptions do not hold for shows as a residual.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

from dataprof.decide.budgets import available_cpus, memory_fit
from dataprof.decide.diagnose.facts import batch_size, ok_trials
from dataprof.decide.thresholds import Thresholds
from dataprof.results.pipeline import Estimate, PipelineModel, Residual
from dataprof.results.stats import MIN_NOISE, line_fit
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import Framework

CONTENDED = 0.75
"""A trial whose processes used this share of its CPUs or more shows CPU time, not the wait beside it."""

REACHABLE_CPU_SHARE = 0.95
"""The share of its CPUs a pipeline is taken to reach when no trial used them up (one that did says its own)."""

LIMITS = {"workers": "too few workers: each waits on its samples", "cpus": "the CPUs are used up",
          "main": "the main process receiving batches", "serial": "num_workers=0: the main process loads",
          "step": "the training step: the loader keeps up"}
"""What holds a predicted rate back, in words."""


@dataclass(frozen=True)
class Prediction:
    """A predicted rate (samples/s), its range, and what holds it back (a key of :data:`LIMITS`)."""

    samples_per_s: float
    low: float
    high: float
    limit: str


def fit(report: Report) -> PipelineModel | None:
    """The model of ``report``'s pipeline over worker processes (thread trials are not in it); None when its
    trials cannot give one: fewer than two configs completed, or none with workers whose CPU was read."""
    completed = [t for t in ok_trials(report) if not t.config.threads]  # a model of the worker processes
    ok = [t for t in completed if _steady(t)]
    serial = [t for t in ok if t.config.num_workers == 0]
    workers = [t for t in ok if t.config.num_workers > 0 and _worker_cpu(t) is not None]
    if not workers or len({t.config for t in ok}) < 2:
        return None
    batch = batch_size(report)
    cpus = min(available_cpus(t, report.environment.usable_cpus) for t in ok)
    work = Estimate.of([cpu for t in workers if (cpu := _worker_cpu(t)) is not None])
    used = _most_used(ok, cpus)
    share = used if used >= CONTENDED else REACHABLE_CPU_SHARE  # the most a trial used, once one used them up
    waits = [w for t in ok if (w := _wait(t, batch, cpus, share)) is not None]
    memory = memory_fit(ok)
    startup = line_fit([(t.config.num_workers, t.first_batch_s) for t in ok if t.first_batch_s is not None])
    model = PipelineModel(
        batch_size=batch, cpus=cpus, worker_cpu_s_per_sample=work, wait_s_per_sample=Estimate.of(waits),
        serial_s_per_batch=Estimate.of([_serial(t) for t in serial]),
        serial_overlaps_step=bool(serial) and _overlaps(serial[0]),
        main_s_per_batch=_receiving(workers),
        main_cpu_s_per_batch=Estimate.of([t.cpu.main_cpu_percent / 100 * batch / (t.samples_per_s or 1)
                                          for t in workers if t.cpu.main_cpu_percent is not None]),
        copy_s_per_batch=statistics.median((t.times.copy_ms_mean or 0.0) / 1000 for t in ok),
        cpu_share=share,
        memory_base_bytes=memory.base if memory else None,
        memory_per_worker_bytes=memory.per_worker if memory else None,
        worker_growth_bytes_per_s=Estimate.of([
            t.memory.workers_inherited_growth_bytes / t.config.num_workers / t.window_s
            for t in workers if t.memory.workers_inherited_growth_bytes is not None and t.window_s]),
        shm_bytes_per_batch=report.dataset.batch_bytes if report.dataset else None,
        startup_base_s=startup[0] if startup else None, startup_per_worker_s=startup[1] if startup else None,
        measured_workers=tuple(sorted({t.config.num_workers for t in ok})),
        noise=max(MIN_NOISE, statistics.median(t.samples_per_s_spread or 0.0 for t in ok)),
        cpus_used=used * cpus,
        notes=_notes(serial, waits, len(completed) - len(ok), used, cpus))
    step_s = float(report.settings.step_ms) / 1000
    residuals = tuple(Residual(t.config.label(), t.samples_per_s or 0.0,
                               predict(model, t.config.num_workers, cpus, step_s, batch).samples_per_s)
                      for t in completed)
    return PipelineModel(**{**model.__dict__, "residuals": residuals})


def _receiving(trials: list[TrialResult]) -> Estimate | None:
    """The main process's time to receive a batch: its least reading. Longer ones wait on something else: a CPU
    (the CPU limit counts that) or a busy worker handing over its tensors' file descriptors."""
    least = min((_receive(t) for t in trials), default=None)
    return None if least is None else Estimate(least, least, least, len(trials))


def _steady(trial: TrialResult) -> bool:
    """A trial whose workers lived through its window: workers started again at each epoch cost what the
    epoch's length decides, which the model does not know."""
    return trial.config.num_workers == 0 or trial.config.persistent_workers is not False \
        or (trial.epochs.epochs_started or 1) <= 1


def _most_used(trials: list[TrialResult], cpus: float) -> float:
    """The largest share of its CPUs a trial's processes used."""
    return min(1.0, max((t.cpu.cpu_percent or 0.0) / 100 / cpus for t in trials))


def _worker_cpu(trial: TrialResult) -> float | None:
    """CPU seconds the workers spent per sample: the tree's CPU less the main process's, over the rate."""
    if trial.cpu.cpu_percent is None or trial.cpu.main_cpu_percent is None or not trial.samples_per_s:
        return None
    return max(0.0, trial.cpu.cpu_percent - trial.cpu.main_cpu_percent) / 100 / trial.samples_per_s


def _serial(trial: TrialResult) -> float:
    """``num_workers=0``: the main process's time to load (and copy) a batch: an iteration less its step (the
    whole iteration when a reader thread loads beside the loop)."""
    per_batch = (trial.window_s or 0.0) / max(1, trial.batches or 1)
    return per_batch if _overlaps(trial) else max(0.0, per_batch - (trial.times.step_ms_mean or 0.0) / 1000)


def _overlaps(trial: TrialResult) -> bool:
    """Paddle's buffer reader loads batches in a thread beside the loop, even at ``num_workers=0``."""
    return trial.config.framework == Framework.PADDLE and trial.config.use_buffer_reader is not False


def _receive(trial: TrialResult) -> float:
    """The main process's time per batch taking it from a worker (unpickling, the sampler)."""
    times = trial.times
    return ((times.receive_ms_mean or times.wait_cpu_ms_mean or 0.0) + (times.sampler_ms_mean or 0.0)) / 1000


def _wait(trial: TrialResult, batch: int, cpus: float, share: float) -> float | None:
    """What a sample waited on besides CPU in this trial, read only where the loop waited for data (the workers
    were the limit) and the CPUs were not contended: at ``num_workers=0``, a batch's load less its CPU; with
    workers, the wait at which :func:`delivered` gives the trial's rate (a worker's wall time per sample less
    its CPU, less the time its samples queued for a CPU another worker held)."""
    rate = trial.samples_per_s or 0.0
    if not rate or (trial.wait_fraction or 0.0) < 0.05 or (trial.cpu.cpu_percent or 0.0) / 100 >= CONTENDED * cpus:
        return None
    workers = trial.config.num_workers
    if workers == 0:
        if _overlaps(trial) or trial.times.wait_cpu_ms_mean is None:
            return None
        return max(0.0, _serial(trial) - trial.times.wait_cpu_ms_mean / 1000) / batch
    cpu = _worker_cpu(trial)
    if cpu is None:
        return None
    left = share * cpus - (trial.cpu.main_cpu_percent or 0.0) / 100  # the CPUs the main process left the workers
    low, high = 0.0, workers / rate
    if left <= 0 or delivered(workers, left, cpu, low) <= rate:
        return 0.0  # the CPUs alone explain the rate
    for _ in range(40):  # the rate falls as the wait grows: halve the bracket
        middle = (low + high) / 2
        low, high = (middle, high) if delivered(workers, left, cpu, middle) > rate else (low, middle)
    return (low + high) / 2


def _notes(serial: list[TrialResult], waits: list[float], respawned: int, used: float,
           cpus: float) -> tuple[str, ...]:
    notes = []
    if used < CONTENDED:
        notes.append(f"no trial used the CPUs up (at most {used * cpus:.1f} of {cpus:g}): the share of them the "
                     f"processes reach is taken as {REACHABLE_CPU_SHARE:.0%}: a plan's CPU limit rests on it")
    if respawned:
        notes.append(f"{respawned} trial(s) started their workers again at each epoch: not fitted (what that "
                     "costs depends on the epoch's length), only predicted back")
    if not serial:
        notes.append("num_workers=0 did not complete: its rate is not predicted")
    if not waits:
        notes.append("no trial showed the wait beside the CPU (each was contended or kept up with its loop): "
                     "taken as none")
    return tuple(notes)


@dataclass(frozen=True)
class _Costs:
    """The model's figures at one end of their ranges."""

    work: float
    wait: float
    main: float
    main_cpu: float
    serial: float | None


def _costs(model: PipelineModel, end: str) -> _Costs:
    """The figures at ``value``, ``low`` (the fastest pipeline) or ``high`` (the slowest)."""
    def pick(estimate: Estimate | None) -> float:
        return 0.0 if estimate is None else float(getattr(estimate, end))

    serial = None if model.serial_s_per_batch is None else pick(model.serial_s_per_batch)
    return _Costs(pick(model.worker_cpu_s_per_sample), pick(model.wait_s_per_sample), pick(model.main_s_per_batch),
                  pick(model.main_cpu_s_per_batch), serial)


def _rate(model: PipelineModel, costs: _Costs, workers: int, cpus: float, step_s: float,
          batch: int) -> tuple[float, str]:
    """The loop's rate at ``workers`` on ``cpus`` with ``costs``, and what holds it back."""
    scale = batch / model.batch_size  # per-batch costs grow with the batch
    consumer = step_s + model.copy_s_per_batch * scale
    if workers == 0:
        if costs.serial is None:
            return math.nan, "serial"
        load = costs.serial * scale / min(1.0, cpus)  # its copy included
        per_batch = max(load, step_s) if model.serial_overlaps_step else load + step_s
        return batch / per_batch, ("step" if model.serial_overlaps_step and step_s >= load else "serial")
    loop = costs.main * scale + consumer  # the loop takes a batch every `loop`
    main_cpu = costs.main_cpu * scale / batch  # the main process's CPU per sample
    usable = model.cpu_share * cpus
    asymptotes = {"workers": workers / (costs.work + costs.wait) if costs.work + costs.wait > 0 else math.inf,
                  "cpus": usable / (costs.work + main_cpu) if costs.work + main_cpu > 0 else math.inf}
    # the workers queue for the CPUs the main process leaves them at the rate the bounds allow
    left = usable - main_cpu * min(asymptotes.values()) if main_cpu else usable
    loader = delivered(workers, left, costs.work, costs.wait)
    looping = batch / loop if loop > 0 else math.inf
    if looping < loader:
        return looping, _loop_limit(costs.main * scale, consumer)
    return loader, min(asymptotes, key=lambda name: asymptotes[name])


def delivered(workers: int, cpus: float, demand: float, wait: float) -> float:
    """Samples/s of ``workers`` that each wait ``wait`` s away from the CPUs, then take ``demand`` s of one of
    ``cpus`` CPUs, in turn: the machine-repairman queue (W sources, C servers). With W workers it lies below
    both ``W / (demand + wait)`` and ``C / demand``, most near where they meet: a worker ready to compute waits
    for a CPU another holds. Its stationary law does not depend on how the wait is distributed; the CPU time
    is taken as exponential. Below one CPU, the share is a slower CPU; above, a fraction counts pro rata
    between its neighbours."""
    if workers <= 0:
        return 0.0
    if demand <= 0:
        return workers / wait if wait > 0 else math.inf
    if wait <= 0:
        return min(workers, cpus) / demand
    if cpus < 1:
        return delivered(workers, 1, demand / cpus, wait)  # a share of a CPU is a slower CPU
    whole = math.floor(cpus)
    rate = _repairman(workers, whole, demand / wait) / demand
    if cpus == whole:
        return rate
    return rate + (cpus - whole) * (_repairman(workers, whole + 1, demand / wait) / demand - rate)


@functools.lru_cache(maxsize=4096)
def _repairman(workers: int, servers: int, ratio: float) -> float:
    """The mean number of busy servers: ``p(k) ∝ W! / (W - k)! × ratio^k / (k! for k ≤ C, else C! C^(k-C))``.
    Kept by its arguments: a plan's searches ask it again and again for the same workers and whole CPUs at one
    model's ratio, and with many workers each answer sums up to that many terms."""
    if workers <= servers:  # no worker ever queues: each computes a ratio / (1 + ratio) share of its time
        return workers * ratio / (1 + ratio)
    term = total = 1.0  # k = 0
    busy = 0.0
    for k in range(1, workers + 1):  # k workers at the CPUs: min(k, C) computing, the rest queued
        term *= (workers - k + 1) * (ratio / k if k <= servers else ratio / servers)
        total += term
        busy += (k if k <= servers else servers) * term
        if total > 1e250:
            term, total, busy = term / 1e250, total / 1e250, busy / 1e250
        elif k > servers and term < 1e-12 * total and (workers - k) * ratio < servers:
            break  # past the mode, the rest is negligible
    return busy / total


def _loop_limit(main: float, consumer: float) -> str:
    """What holds back a loop that takes a batch every ``main + consumer``: the step, when the main process's
    receiving is under the model-bound wait (5%) of each iteration; else the main process."""
    return "step" if consumer > 0 and main <= Thresholds().model_bound_wait * (main + consumer) else "main"


def predict(model: PipelineModel, workers: int, cpus: float, step_s: float, batch: int | None = None) -> Prediction:
    """The loop's samples/s at ``workers`` on ``cpus`` CPUs with a ``step_s`` model step and ``batch`` samples
    per batch (the sweep's by default); its range spans the fitted figures' and the trials' noise."""
    noise = model.noise
    batch = batch or model.batch_size
    value, limit = _rate(model, _costs(model, "value"), workers, cpus, step_s, batch)
    fast, _ = _rate(model, _costs(model, "low"), workers, cpus, step_s, batch)
    slow, _ = _rate(model, _costs(model, "high"), workers, cpus, step_s, batch)
    return Prediction(value, min(value, slow) * (1 - noise), max(value, fast) * (1 + noise), limit)
