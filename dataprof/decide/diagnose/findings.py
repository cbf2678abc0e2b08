"""Findings beside the primary verdict: each rule returns a Finding or None."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dataprof.decide.budgets import shm_fits, shm_in_flight
from dataprof.decide.diagnose.facts import (
    batch_size,
    faster,
    ms,
    ok_trials,
    pct,
    rate_text,
    recommended_trial,
    wait_share,
)
from dataprof.decide.diagnose.knobs import in_order_gain, in_order_text, start_method_text, threads_text
from dataprof.decide.diagnose.shards import iterable_duplicates, rank_duplicates, rank_imbalance
from dataprof.decide.thresholds import Thresholds, heavy_tail
from dataprof.results.findings import Finding
from dataprof.results.stats import rate
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import FindingId, Framework, Severity, StartMethod, TrialStatus


def copy_on_read(report: Report, th: Thresholds) -> Finding | None:
    """Workers' copies of the main process's pages growing through the window.

    Only dirty pages of mappings inherited from the main process count: clean
    pages of a memory-mapped file (Arrow, numpy memmap) are data read, not
    copies, and memory a worker allocates itself is not the parent's.
    """
    growth: list[tuple[float, TrialResult]] = []
    for trial in ok_trials(report):
        workers = trial.config.num_workers
        respawned = not trial.config.persistent_workers and (trial.epochs.epochs_started or 1) > 1
        if workers == 0 or trial.memory.workers_inherited_growth_bytes is None or respawned:
            continue
        growth.append((trial.memory.workers_inherited_growth_bytes / workers, trial))
    if not growth:
        return None
    per_worker, trial = max(growth, key=lambda item: item[0])
    if per_worker < th.growth_per_worker_bytes:
        return None
    workers = trial.config.num_workers
    window = trial.window_s or 0.0
    speed = f" (+{fmt_bytes(per_worker / window)}/s each)" if window > 0 else ""
    uss = ""
    if trial.memory.workers_uss_start_bytes is not None and trial.memory.workers_uss_end_bytes is not None:
        total = (trial.memory.workers_uss_end_bytes - trial.memory.workers_uss_start_bytes) / workers
        file = (trial.memory.workers_file_growth_bytes or 0) / workers
        uss = (f"; of each worker's private memory (USS) growth of {fmt_bytes(max(total, per_worker))}, "
               f"{fmt_bytes(per_worker)} are such copies and {fmt_bytes(max(0.0, file))} pages of memory-mapped "
               "files")
    return Finding(
        id=FindingId.COPY_ON_READ,
        severity=Severity.WARNING,
        evidence=(f"{trial.config.label()}: each worker copied {fmt_bytes(per_worker)} of the main process's memory "
                  f"in the {window:.1f} s window{speed}{uss}: reading Python objects writes their reference counts, "
                  "so the pages they sit on are copied into every worker" + start_method_text(report, trial)),
        recommendation=("Hold the dataset's records in numpy/arrow arrays or one bytes buffer (with offsets) instead "
                        "of lists/dicts of Python objects; over an epoch each worker would otherwise copy all of it."
                        + threads_text(report, "copies (one heap)")),
    )


STARTUP_SPARED = "start-up (a thread starts in microseconds, in the one process)"


def worker_startup(report: Report, th: Thresholds) -> Finding | None:
    """Worker start-up (first batch, or each epoch's restart without persistent workers) as a share of an epoch."""
    ok = ok_trials(report)
    gains: list[tuple[float, TrialResult, TrialResult]] = []
    for on in ok:
        if not on.config.persistent_workers or on.config.num_workers == 0:
            continue
        respawn = dataclasses.replace(on.config, persistent_workers=False)
        off = next((t for t in ok if t.config == respawn), None)
        if off is not None and faster(on, off):
            gains.append((rate(on) / rate(off) - 1, on, off))
    rec = recommended_trial(report)
    if gains:
        gain, on, off = max(gains, key=lambda item: item[0])
        using = rec is not None and rec.config.persistent_workers
        return Finding(
            id=FindingId.WORKER_STARTUP,
            severity=Severity.INFO if using else Severity.WARNING,
            evidence=(f"keeping {on.config.num_workers} workers alive across epochs loads {gain + 1:.1f}× as fast: "
                      f"{on.config.label()} {rate_text(rate(on))} vs {off.config.label()} {rate_text(rate(off))}, "
                      f"which restarts them every epoch (first batch after {off.first_batch_s or 0:.2f} s)"),
            recommendation=("Keep persistent_workers=True (the recommendation does)" if using else
                            "Set persistent_workers=True") + ": workers start once, not every epoch."
            + threads_text(report, STARTUP_SPARED),
        )
    length = report.dataset.length if report.dataset else None
    if rec is None or rec.config.num_workers == 0 or not length or not rec.first_batch_s:
        return None
    epoch_s = length / rate(rec)
    share = rec.first_batch_s / epoch_s
    if share < th.startup_share:
        return None
    method = report.environment.start_method or "fork"
    slow_start = "" if method == StartMethod.FORK else f" ({method} pickles the dataset into each worker)"
    return Finding(
        id=FindingId.WORKER_STARTUP,
        severity=Severity.INFO if rec.config.persistent_workers else Severity.WARNING,
        evidence=(f"starting {rec.config.num_workers} workers takes {rec.first_batch_s:.2f} s before the first "
                  f"batch{slow_start}, {pct(share)} of a {epoch_s:.1f} s epoch of {length:,} samples"
                  + start_method_text(report, rec)),
        recommendation=("persistent_workers=True pays this once per run rather than once per epoch"
                        + (" (the recommendation has it)" if rec.config.persistent_workers else "")
                        + "; a smaller dataset object or the fork start method starts workers faster."
                        + threads_text(report, STARTUP_SPARED)),
    )


def stragglers(report: Report, th: Thresholds) -> Finding | None:
    """A heavy-tailed batch time at num_workers=0 that workers and prefetching can hide."""
    serial = [t for t in ok_trials(report) if t.config.num_workers == 0 and t.wait_ms is not None
              and t.wait_ms.p99 is not None and t.wait_ms.max is not None]
    if not serial:
        return None
    trial = serial[0]
    waits = trial.wait_ms
    assert waits is not None and waits.p99 is not None and waits.max is not None and waits.mean is not None
    if not heavy_tail(trial, th.straggler_ratio, th.straggler_min_ms, th.straggler_tail_share):
        return None
    tail = 1 - waits.p50 / waits.mean
    rec = recommended_trial(report)
    felt = rec is not None and wait_share(rec) >= th.model_bound_wait
    prefetch = rec.config.prefetch_factor if rec is not None else None
    more = f"prefetch_factor above {prefetch}" if prefetch else "a larger prefetch_factor"
    return Finding(
        id=FindingId.STRAGGLERS,
        severity=Severity.WARNING if felt else Severity.INFO,
        evidence=(f"at num_workers=0 a batch of {batch_size(report)} loads in {waits.p50:.1f} ms at the median but "
                  f"{waits.p99:.1f} ms at p99 (max {ms(waits.max)} ms); time above the median is {pct(tail)} of the "
                  "loading time: some samples are far slower than the rest"
                  + ("" if felt else "; the recommended config hides them") + in_order_text(report)),
        recommendation=(f"{more.capitalize()} buffers through slow samples"
                        + (", and in_order=False lets ready batches overtake a slow one (the same batches, in "
                           "another order)" if in_order_gain(report) else "")
                        + "; find them with `dataprof inspect` (slowest indices) and fix or pre-process them."),
    )


def shm_risk(report: Report, th: Thresholds) -> Finding | None:
    """The recommended config's batches in flight do not fit in /dev/shm by the search's rule, or a trial died
    by SIGBUS (what a full /dev/shm does to a worker)."""
    free = report.environment.shm_free_bytes
    size = report.dataset.batch_bytes if report.dataset else None
    if not free or not size:
        return None
    bus_errors = [t for t in report.trials if t.status == TrialStatus.CRASHED and "SIGBUS" in (t.error or "")]
    rec = recommended_trial(report)
    candidates = [t for t in ([rec] if rec and rec.config.use_shared_memory is not False else []) + bus_errors
                  if t.config.num_workers > 0]
    if not candidates:
        return None
    trial = max(candidates, key=lambda t: t.config.num_workers * t.config.prefetch)
    in_flight = shm_in_flight(trial.config, size)
    if shm_fits(trial.config, size, free) and not bus_errors:
        return None
    crashed = f"; {bus_errors[0].config.label()} died by SIGBUS" if bus_errors else ""
    recommendation = ("Give the container more shared memory (docker run --shm-size=8g, or a memory-backed "
                      "emptyDir on Kubernetes), or keep fewer batches in flight (lower prefetch_factor or fewer "
                      "workers)." + threads_text(report, "/dev/shm (batches stay in the one process)"))
    if trial.config.framework == Framework.PADDLE:
        piped = next((t for t in ok_trials(report)
                      if t.config == dataclasses.replace(trial.config, use_shared_memory=False)), None)
        cost = "" if piped is None or trial.status != TrialStatus.OK else (
            f" (measured here: {piped.config.label()} {rate_text(rate(piped))} vs {rate_text(rate(trial))})")
        recommendation += (" Or use_shared_memory=False: Paddle's workers then send batches through a pipe and "
                           f"/dev/shm is not used{cost}.")
    return Finding(
        id=FindingId.SHM_RISK,
        severity=Severity.CRITICAL if bus_errors or in_flight >= free else Severity.WARNING,
        evidence=(f"{trial.config.label()} keeps about {fmt_bytes(in_flight)} of batches in shared memory "
                  f"({fmt_bytes(size)} per batch × {trial.config.num_workers} workers × prefetch "
                  f"{trial.config.prefetch}); /dev/shm has {fmt_bytes(free)} free{crashed}"),
        recommendation=recommendation,
    )


def single_process(report: Report, th: Thresholds) -> Finding | None:
    """Trials asked for workers but none started: the framework loaded in the main process."""
    alone = [t for t in ok_trials(report) if t.config.num_workers > 0 and not t.config.threads
             and t.worker_processes == 0]
    if not alone:
        return None
    platform = report.environment.platform or "this platform"
    paddle = report.environment.framework == Framework.PADDLE
    why = (f"paddle.io.DataLoader forces num_workers=0 on macOS and Windows ({platform})" if paddle else
           f"the DataLoader started no worker process ({platform})")
    labels = ", ".join(t.config.label() for t in alone[:4]) + ("…" if len(alone) > 4 else "")
    return Finding(
        id=FindingId.SINGLE_PROCESS,
        severity=Severity.WARNING,
        evidence=f"{len(alone)} trial(s) asked for workers but loaded in the main process ({labels}): {why}",
        recommendation=("Worker counts change nothing here: make each sample cheaper, or run on Linux "
                        "(a Linux container or WSL2) to load in parallel." if paddle else
                        "Check the platform's multiprocessing support; worker counts change nothing here."),
    )


def oversubscribed(report: Report, th: Thresholds) -> Finding | None:
    """More busy threads than usable CPUs (workers × the framework's intra-op threads)."""
    usable = report.environment.usable_cpus
    ok = ok_trials(report)
    worst: tuple[float, TrialResult, TrialResult] | None = None
    for over in ok:
        if over.config.num_workers <= usable:
            continue
        peers = [t for t in ok if 0 < t.config.num_workers <= usable
                 and t.config == dataclasses.replace(over.config, num_workers=t.config.num_workers)]
        if not peers:
            continue
        best = max(peers, key=rate)
        if faster(best, over):
            loss = 1 - rate(over) / rate(best)
            if worst is None or loss > worst[0]:
                worst = (loss, over, best)
    if worst is None:
        return None
    loss, over, best = worst
    rec = recommended_trial(report)
    ranks = report.environment.local_world_size
    where = (f"{usable} usable CPUs" if ranks == 1 else
             f"{usable} usable CPUs per rank ({ranks} ranks × {over.config.num_workers} workers = "
             f"{ranks * over.config.num_workers} on the node's {usable * ranks})")
    return Finding(
        id=FindingId.OVERSUBSCRIBED,
        severity=Severity.WARNING if rec is not None and rec.config.num_workers > usable else Severity.INFO,
        evidence=(f"{over.config.label()} on {where} loads {rate_text(rate(over))}, {100 * loss:.0f}% "
                  f"less than {best.config.label()} ({rate_text(rate(best))}): more workers than CPUs "
                  "compete for them"),
        recommendation=(f"Keep num_workers ≤ {usable} for this dataset; if each worker runs threads (OpenCV, "
                        "OpenMP, numpy BLAS), limit them to one (cv2.setNumThreads(0), OMP_NUM_THREADS=1)."),
    )


def ipc_overhead(report: Report, th: Thresholds) -> Finding | None:
    """num_workers=0 wins because moving a batch between processes costs about as much as loading it."""
    ok = ok_trials(report)
    serial = next((t for t in ok if t.config.is_baseline), None)
    parallel = [t for t in ok if t.config.num_workers > 0
                and (t.times.receive_ms_mean is not None or t.times.wait_cpu_ms_mean is not None)]
    if serial is None or not parallel or wait_share(serial) < th.model_bound_wait or serial.wait_ms is None:
        return None
    best = max(parallel, key=rate)
    work = serial.wait_ms.mean
    smallest = min(parallel, key=lambda t: (t.config.num_workers, -rate(t)))
    times = smallest.times
    transfer = times.receive_ms_mean if times.receive_ms_mean is not None else times.wait_cpu_ms_mean or 0.0
    if faster(best, serial) or work is None or transfer < th.ipc_share * work:
        return None
    rec = recommended_trial(report)
    return Finding(
        id=FindingId.IPC_OVERHEAD,
        severity=Severity.INFO if rec is None or wait_share(rec) < th.model_bound_wait else Severity.WARNING,
        evidence=(f"num_workers=0 loads {rate_text(rate(serial))}, the best with workers ({best.config.label()}) "
                  f"{rate_text(rate(best))}: loading a batch in the main process takes {ms(work)} ms, and receiving "
                  f"one from a worker costs the main process {ms(transfer)} ms ({smallest.config.label()}), "
                  "so worker processes cost about as much as they save"),
        recommendation=(f"Use num_workers=0, or a larger batch_size than {batch_size(report)} so each transfer "
                        "carries more work; fewer Python objects per batch (arrays instead of lists) cut the "
                        "transfer cost."),
    )


def no_gpu(report: Report, th: Thresholds) -> Finding | None:
    """The device was simulated (no GPU): copies and pin_memory are not measured."""
    if not report.environment.simulated_device:
        return None
    step = report.settings.step_ms
    torch = report.environment.framework == Framework.TORCH
    return Finding(
        id=FindingId.NO_GPU,
        severity=Severity.INFO,
        evidence=("no CUDA device: " + (f"each model step slept {step:g} ms on a simulated device" if step else
                                         "the simulated device ran no model step (--step-ms 0)")
                  + ", so there was no host-to-device copy to time, "
                  + ("pin_memory was not swept and " if torch else "") + "GPU columns are empty"),
        recommendation=("Loader throughput, CPU and memory figures hold for a GPU machine with the same CPUs; "
                        "re-run on the GPU machine (--device cuda) to measure copies"
                        + (" and pin_memory." if torch else ".")),
    )


FINDING_RULES: tuple[Callable[[Report, Thresholds], Finding | None], ...] = (
    iterable_duplicates, rank_duplicates, shm_risk, single_process, rank_imbalance, copy_on_read, worker_startup,
    stragglers, oversubscribed, ipc_overhead, no_gpu,
)
