"""Figures the rules share, derived from a Report. Pure functions, no I/O."""

from __future__ import annotations

import math

from dataprof.decide.budgets import available_cpus
from dataprof.decide.thresholds import Thresholds
from dataprof.results.knobs import LoaderConfig
from dataprof.results.stats import best_by_workers, noise_between, rate
from dataprof.results.sweep import Report
from dataprof.results.threads import gil_untold
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_change
from dataprof.results.vocabulary import Framework, Severity, TrialStatus


def ok_trials(report: Report) -> list[TrialResult]:
    """The trials that completed with a rate."""
    return [t for t in report.trials if t.status == TrialStatus.OK and t.samples_per_s]


def recommended_trial(report: Report) -> TrialResult | None:
    """The trial of the recommended config, if it completed."""
    if report.recommendation is None:
        return None
    return next((t for t in ok_trials(report) if t.config == report.recommendation.config), None)


def batch_size(report: Report) -> int:
    """Samples per batch: the sweep's ``--batch-size``; for a loader whose batch sampler makes its batches (of sizes
    that may vary: buckets of similar lengths, a token budget), the mean batch the trials' windows delivered
    (:func:`sampled_batch`); else the first batch's size, else 1."""
    return sampled_batch(report) or \
        int(report.settings.batch_size or (report.dataset.batch_samples if report.dataset else 1) or 1)


def sampled_batch(report: Report) -> int | None:
    """The mean batch of a loader whose batch sampler makes its batches: the completed trials' samples over their
    batches, rounded; None for any other target, or before a trial completed."""
    loader = report.dataset.loader if report.dataset is not None else None
    if loader is None or not loader.batch_sampler or report.settings.batch_size_given:
        return None
    counted = [(t.samples, t.batches) for t in ok_trials(report) if t.samples and t.batches]
    if not counted:
        return None
    return max(1, round(sum(samples for samples, _ in counted) / sum(batches for _, batches in counted)))


def iteration_ms(trial: TrialResult, batch: int) -> float:
    """Mean time per training iteration (wait + copy + step)."""
    if trial.window_s and trial.batches:
        return 1000.0 * trial.window_s / trial.batches
    return 1000.0 * batch / rate(trial) if rate(trial) else math.nan


def wait_share(trial: TrialResult) -> float:
    """Share of the window the loop was blocked in ``next()`` (0 when unknown)."""
    return trial.wait_fraction or 0.0


def copy_share(trial: TrialResult, batch: int) -> float:
    """Share of each iteration spent copying the batch to the device."""
    iteration = iteration_ms(trial, batch)
    return (trial.times.copy_ms_mean or 0.0) / iteration if iteration > 0 else 0.0


def severity_for(share: float, thresholds: Thresholds, report: Report) -> Severity:
    """By the share of each iteration spent waiting; without a model step there is nothing to wait against."""
    if share < thresholds.model_bound_wait or not report.settings.step_ms:
        return Severity.INFO
    return Severity.CRITICAL if share >= thresholds.critical_wait else Severity.WARNING


def cores(percent: float | None) -> float | None:
    """A CPU percentage (100 = one core) as cores; None kept."""
    return None if percent is None else percent / 100.0


def worker_cores(trial: TrialResult) -> float | None:
    """CPU of the worker processes alone (tree minus main process), in cores; of a thread config, the loader's
    threads (the main process's threads besides the loop's)."""
    if trial.config.threads:
        return side_thread_cores(trial)
    if trial.cpu.cpu_percent is None or trial.cpu.main_cpu_percent is None:
        return None
    return max(0.0, (trial.cpu.cpu_percent - trial.cpu.main_cpu_percent) / 100.0)


def side_thread_cores(trial: TrialResult) -> float | None:
    """CPU of the main process's threads other than the training loop (pin_memory's thread)."""
    if trial.cpu.main_cpu_percent is None or trial.cpu.main_thread_cpu_percent is None:
        return None
    return max(0.0, (trial.cpu.main_cpu_percent - trial.cpu.main_thread_cpu_percent) / 100.0)


def serial_loading(trial: TrialResult, batch: int) -> tuple[str, float, float] | None:
    """At num_workers=0: the thread that loads, the share of a core it computes, its CPU ms per batch.

    The main thread loads each batch in ``next()``, except with Paddle's buffer reader (on by default),
    whose thread in the main process loads batches ahead while the main thread only takes them.
    """
    config = trial.config
    if config.num_workers != 0:
        return None
    iteration = iteration_ms(trial, batch)
    if config.framework == Framework.PADDLE and config.use_buffer_reader is not False:
        side = side_thread_cores(trial)
        if side is None:
            return None
        share = min(1.0, side)
        return "Paddle's buffer-reader thread", share, share * iteration
    wait = trial.wait_ms.mean if trial.wait_ms is not None and trial.wait_ms.mean is not None \
        else wait_share(trial) * iteration
    if trial.times.wait_cpu_ms_mean is None or wait <= 0:
        return None
    return "the main thread", trial.times.wait_cpu_ms_mean / wait, trial.times.wait_cpu_ms_mean


def ranks(trial: TrialResult) -> int:
    """Ranks that measured the trial together (1 outside a distributed sweep)."""
    return max(1, len(trial.ranks))


def rank_rate(trial: TrialResult) -> float:
    """Samples/s of one rank: the trial's CPU, wait and copy figures are that (slowest) rank's."""
    return rate(trial) / ranks(trial)


def cpu_s_per_sample(trial: TrialResult, batch: int) -> float | None:
    """CPU seconds the loading costs per sample: workers + pinning + the main loop's share in ``next()``.

    Distributed: ranks sharing a node's CPUs take unequal shares of them, so the pace-setting rank's cost
    is scaled to all ranks' CPU over all ranks' samples.
    """
    if not rate(trial) or trial.times.wait_cpu_ms_mean is None:
        return None
    workers = worker_cores(trial) or 0.0
    side = 0.0 if trial.config.threads else side_thread_cores(trial) or 0.0  # threads: counted as the workers
    main = trial.times.wait_cpu_ms_mean / 1000.0 / batch
    return ((workers + side) / rank_rate(trial) + main) * _ranks_cost_scale(trial)


def _ranks_cost_scale(trial: TrialResult) -> float:
    """All ranks' CPU per sample over the pace-setting rank's (1 outside a distributed sweep)."""
    measured = [(r.cpu_percent, r.samples_per_s) for r in trial.ranks if r.cpu_percent and r.samples_per_s]
    if len(measured) < 2 or len(measured) != len(trial.ranks) or not trial.cpu.cpu_percent:
        return 1.0
    everyone = sum(cpu for cpu, _ in measured) / sum(samples for _, samples in measured)
    return everyone / (trial.cpu.cpu_percent / rank_rate(trial))


def cpu_ceiling(trial: TrialResult, batch: int, usable_cpus: int) -> float | None:
    """Samples/s the CPUs the trial had (each rank's, times the ranks) could load at its CPU cost per sample."""
    cost = cpu_s_per_sample(trial, batch)
    return ranks(trial) * available_cpus(trial, usable_cpus) / cost if cost else None


def break_even_ms(trial: TrialResult, batch: int) -> float:
    """Shortest model step (ms) this loader feeds without making it wait (each rank steps on its own batch)."""
    return max(0.0, 1000.0 * batch / rank_rate(trial) - (trial.times.copy_ms_mean or 0.0))


def faster(a: TrialResult, b: TrialResult) -> bool:
    """``a`` beats ``b`` by more than the measurement noise."""
    return rate(b) > 0 and (rate(a) - rate(b)) / rate(b) > noise_between(a, b)


def memory_budget(report: Report) -> tuple[int, str] | None:
    """Bytes the trial's process tree may use, and where that number comes from."""
    limit = report.settings.memory_limit_bytes
    if limit:
        return int(limit), "the --memory-limit"
    if report.environment.available_ram_bytes:
        return report.environment.available_ram_bytes, "available RAM"
    return None


def ms(value: float) -> str:
    """Milliseconds with the precision the size deserves: ``120``, ``4.2``, ``0.35``."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def cpus_text(report: Report) -> str:
    """``2 CPUs``; with several ranks, ``4 ranks × 2 CPUs`` (each rank's share, as the ceilings count them); on a
    busy machine, ``the 1.1 of 2 CPUs other processes left`` (at the recommended config, as its ceiling counts)."""
    env = report.environment
    cpus = f"{env.usable_cpus} CPU{'s' if env.usable_cpus != 1 else ''}"
    trial = recommended_trial(report)
    left = available_cpus(trial, env.usable_cpus) if trial is not None else float(env.usable_cpus)
    if left < env.usable_cpus:
        cpus = f"the {left:.1f} of {cpus} other processes left"
    return cpus if env.world_size == 1 else f"{env.world_size} ranks × {cpus}"


def pct(value: float) -> str:
    """A share (0.25) as ``25%``."""
    return f"{100 * value:.0f}%"


def rate_text(value: float) -> str:
    """Samples/s as ``1,234 samples/s``."""
    return f"{value:,.0f} samples/s"


def cold_twin(report: Report, config: LoaderConfig) -> TrialResult | None:
    """The completed cold trial of ``config``."""
    return next((t for t in report.cold_trials if t.config == config and t.status == TrialStatus.OK
                 and t.samples_per_s), None)


def slower_cold(warm: TrialResult, cold: TrialResult) -> float:
    """How much slower ``cold`` reads than ``warm`` (0.4 = 40% slower); 0 within the noise between them."""
    gap = 1 - (cold.samples_per_s or 0.0) / (warm.samples_per_s or 1.0)
    return gap if gap > noise_between(warm, cold) else 0.0


def loader_limited(report: Report, th: Thresholds) -> TrialResult | None:
    """The recommended trial, if the loop waits for data long enough for the loader to be the limit."""
    rec = recommended_trial(report)
    return rec if rec is not None and wait_share(rec) >= th.model_bound_wait else None


def mean_wait_ms(trial: TrialResult, batch: int) -> float:
    """The mean wait for a batch: as measured, else its share of an iteration."""
    if trial.wait_ms is not None and trial.wait_ms.mean is not None:
        return trial.wait_ms.mean
    return wait_share(trial) * iteration_ms(trial, batch)


def sustains_text(trial: TrialResult, batch: int) -> str:
    """The slowest model step this loader keeps fed, in a sentence."""
    return (f"This loader sustains any model whose step takes ≥ {ms(break_even_ms(trial, batch))} ms "
            f"at batch size {batch}.")


def lead_text(trial: TrialResult, report: Report) -> str:
    """How much the recommended config waits; without a model step, that it can only wait."""
    if not report.settings.step_ms:
        return (f"no model step was given (--step-ms 0), so {trial.config.label()} measures the loader's ceiling: "
                f"{rate_text(rate(trial))}")
    return f"{trial.config.label()} waits {pct(wait_share(trial))} of each iteration"


def growth_text(report: Report) -> str:
    """How throughput moves over the last worker counts tried, e.g. ``w4 → w8: +38%`` (``t8 → t16`` where
    threads are recommended)."""
    curve = worker_curve(report)
    if len(curve) < 2:
        return ""
    a, b = curve[-2], curve[-1]
    change = rate(b) / rate(a) - 1 if rate(a) else math.nan
    return f"{a.config.short_label} → {b.config.short_label}: {fmt_change(change)}"


def worker_curve(report: Report) -> list[TrialResult]:
    """The throughput curve of the recommended kind of workers (processes, or threads)."""
    rec = recommended_trial(report)
    return best_by_workers(ok_trials(report), threads=rec is not None and rec.config.threads)


def still_rising(report: Report) -> bool:
    """Whether the last worker count tried was faster than the one before, beyond the noise."""
    curve = worker_curve(report)
    return len(curve) >= 2 and faster(curve[-1], curve[-2])


def gil_cpus(report: Report, trial: TrialResult) -> tuple[float, float] | None:
    """For a thread config, where the GIL binds before the CPUs do: the share of a sample's time that releases it
    (the probe's, where its rounds settle it) and the CPUs one process's threads can use at most with it (the
    held part runs one thread at a time: 1 / the held share); None for processes, a free-threaded Python, a share
    not told, or one that leaves every usable CPU to the threads."""
    space = report.settings.space
    release = space.gil_release
    if not trial.config.threads or space.free_threaded or release is None or \
            gil_untold(release, space.gil_release_high) or release >= 1:
        return None
    most = 1.0 / (1.0 - release)
    return (release, most) if most < available_cpus(trial, report.environment.usable_cpus) else None
