"""The primary bottleneck: exactly one verdict for the recommended config.

Rules run in :data:`PRIMARY_RULES` order and the first that fires wins; the
last (``io_bound``) fires whenever the loader is the limit and nothing more
specific explains it. Each is a pure function of the Report.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dataprof.decide.budgets import HEADROOM, available_cpus, memory_fit
from dataprof.decide.diagnose.cache import storage_bound
from dataprof.decide.diagnose.facts import (
    batch_size,
    cores,
    cpu_ceiling,
    cpu_s_per_sample,
    cpus_text,
    gil_cpus,
    growth_text,
    iteration_ms,
    lead_text,
    loader_limited,
    mean_wait_ms,
    memory_budget,
    ms,
    ok_trials,
    pct,
    rate_text,
    serial_loading,
    severity_for,
    side_thread_cores,
    still_rising,
    sustains_text,
    wait_share,
    worker_cores,
)
from dataprof.decide.diagnose.step import model_bound, transfer_bound
from dataprof.decide.thresholds import Thresholds
from dataprof.results.findings import Finding
from dataprof.results.stats import rate
from dataprof.results.sweep import Report
from dataprof.results.units import fmt_bytes
from dataprof.results.vocabulary import FindingId, TrialStatus


def main_process_bound(report: Report, th: Thresholds) -> Finding | None:
    """The main process is the limit: receiving batches, the sampler, or the pin-memory thread saturate it."""
    rec = loader_limited(report, th)
    if rec is None:
        return None
    batch = batch_size(report)
    wait = mean_wait_ms(rec, batch)
    busy = rec.times.wait_cpu_ms_mean
    iteration = iteration_ms(rec, batch)
    workers = rec.config.num_workers
    causes: list[str] = []
    changes: list[str] = []
    receive = rec.times.receive_ms_mean
    # Receiving must dominate the wait and be work, not a main thread starved of CPU by busy workers.
    working = busy is not None and receive is not None and busy >= th.receive_cpu_share * receive
    if workers > 0 and receive is not None and wait > 0 and receive >= th.main_busy * wait and working:
        dataset = report.dataset
        weight = ""
        if dataset is not None and dataset.batch_objects is not None:
            plural = "s" if dataset.batch_objects != 1 else ""
            weight = (f"; each batch holds {dataset.batch_tensors or 0:,} tensors (a file descriptor fetched from "
                      f"the worker for each) and {dataset.batch_objects:,} other Python object{plural}")
        cpu = f" ({ms(busy)} ms of it on CPU)" if busy is not None else ""
        causes.append(f"it spends {ms(receive)} ms per batch unpickling batches from the workers{cpu}, "
                      f"{pct(receive / wait)} of the {ms(wait)} ms it waits{weight}")
        pieces = (dataset.batch_tensors or 0) + (dataset.batch_objects or 0) if dataset is not None else 0
        if pieces > 8:
            changes.append("send fewer, larger objects: one tensor per field (concatenate small tensors, use "
                           "arrays instead of lists of Python numbers or strings)")
        changes.append("a larger batch_size spreads the fixed cost of each transfer over more samples")
    side = None if rec.config.threads else side_thread_cores(rec)  # a thread config's are its loader threads
    if rec.config.pin_memory and side is not None and side >= th.pin_thread_cores:
        causes.append(f"the pin-memory thread uses {pct(side)} of a core")
        changes.append("pin_memory=False, or fewer bytes per batch (uint8, crop before batching)")
    sampler = rec.times.sampler_ms_mean
    if sampler is not None and iteration > 0 and sampler >= th.sampler_share * iteration:
        causes.append(f"the sampler takes {ms(sampler)} ms per batch, {pct(sampler / iteration)} of the iteration")
        changes.append("make the sampler cheaper: precompute the index order once per epoch")
    tried_workers = any(t.config.num_workers > 0 for t in ok_trials(report))
    serial = serial_loading(rec, batch)
    if workers == 0 and tried_workers and serial is not None and serial[1] >= th.main_busy:
        thread, _, cpu_ms = serial
        causes.append(f"num_workers=0 was fastest: {thread} loads and collates each batch itself "
                      f"({ms(cpu_ms)} ms of CPU per batch) and worker processes cost more than they save")
        batched = report.dataset is not None and report.dataset.has_getitems
        changes.append("keep num_workers=0 and make the batch fetch (its __getitems__) and collate cheaper"
                       if batched else "keep num_workers=0 and make __getitem__ and collate cheaper, or load whole "
                       "batches at once (a batch sampler with __getitems__)")
    if not causes:
        return None
    return Finding(
        id=FindingId.MAIN_PROCESS_BOUND,
        severity=severity_for(wait_share(rec), th, report),
        evidence=(f"{lead_text(rec, report)}, and the main process is the limit: {'; '.join(causes)}. "
                  f"{sustains_text(rec, batch)}"),
        recommendation="; ".join(changes) + ".",
    )


def memory_bound(report: Report, th: Thresholds) -> Finding | None:
    """The workers that would pay do not fit in the memory budget (PSS per worker from the trials)."""
    rec = loader_limited(report, th)
    if rec is None:
        return None
    batch = batch_size(report)
    ok = ok_trials(report)
    top = max(t.config.num_workers for t in ok)
    stopped = [t for t in report.trials if t.config.num_workers > top and (
        t.status == TrialStatus.OOM or (t.status == TrialStatus.CRASHED and "SIGKILL" in (t.error or "")))]
    fit = memory_fit(ok)
    budget = memory_budget(report)
    fits: int | None = None
    if fit is not None and budget is not None and fit.per_worker > 0:
        fits = max(0, math.floor((HEADROOM * budget[0] - fit.base) / fit.per_worker))
    if stopped:
        first_stopped = min(t.config.num_workers for t in stopped)
        fits = first_stopped - 1 if fits is None else min(fits, first_stopped - 1)
    blocked = still_rising(report) and fits is not None and fits < top + max(1, top // 2)
    if not stopped and not blocked:
        return None
    parts = []
    if still_rising(report):
        parts.append(f"throughput still rises with workers ({growth_text(report)})")
    if fit is not None and budget is not None:
        parts.append(f"memory grows {fmt_bytes(fit.per_worker)} per worker (PSS fitted over {len(ok)} trials: "
                     f"{fmt_bytes(fit.base)} + {fmt_bytes(fit.per_worker)} × workers) against {budget[1]} of "
                     f"{fmt_bytes(budget[0])}: at most {fits} workers fit with {1 - HEADROOM:.0%} to spare")
    if stopped:
        trial = min(stopped, key=lambda t: t.config.num_workers)
        parts.append(f"{trial.config.label()} ran out: {trial.error}")
    return Finding(
        id=FindingId.MEMORY_BOUND,
        severity=severity_for(wait_share(rec), th, report),
        evidence=(f"{lead_text(rec, report)}; {'; '.join(parts)}. {sustains_text(rec, batch)}"),
        recommendation=("Cut memory per worker so more workers fit: keep the dataset in numpy/arrow arrays or a "
                        "memory-mapped file rather than Python objects, do not cache decoded samples in each "
                        "worker, open files lazily in the worker; or give the job more RAM."),
    )


def cpu_bound(report: Report, th: Thresholds) -> Finding | None:
    """The usable CPUs are saturated and more workers stop helping: the samples' CPU cost is the limit; for thread
    workers, the CPUs the GIL lets one process's threads use (``facts.gil_cpus``)."""
    rec = loader_limited(report, th)
    if rec is None:
        return None
    batch = batch_size(report)
    usable = report.environment.usable_cpus
    tree = cores(rec.cpu.cpu_percent)
    workers = rec.config.num_workers
    per_worker = None
    serial = serial_loading(rec, batch)
    if workers > 0 and worker_cores(rec) is not None:
        per_worker = (worker_cores(rec) or 0.0) / workers
    elif serial is not None:
        per_worker = serial[1]
    gil = gil_cpus(report, rec)
    cpus = available_cpus(rec, usable) if gil is None else min(available_cpus(rec, usable), gil[1])
    saturated = tree is not None and tree >= th.cpu_saturated * cpus
    computing = per_worker is not None and per_worker >= th.worker_busy
    machine = (rec.cpu.cpu_percent_system or 0.0) / 100.0
    # Other processes crowding the CPUs limit the loader only once more workers stop helping.
    crowded = machine >= th.machine_saturated and not still_rising(report)
    if not saturated and not computing and not crowded:
        return None
    capped = gil if gil is not None and saturated else None  # the GIL, not the CPUs, is what the threads filled
    parts = []
    if tree is not None:
        parts.append(f"the loader's processes use {tree:.1f} of {usable} usable CPUs ({pct(tree / usable)})")
    if capped is not None:
        parts.append(f"its threads take turns at the GIL: a sample releases it {pct(capped[0])} of its time, so the "
                     f"threads of one process can use at most {capped[1]:.1f} CPUs")
    if crowded:
        parts.append(f"the machine's CPUs are {pct(machine)} busy in all, other processes included, so the "
                     "loader cannot get more CPU time")
    if per_worker is not None:
        who = ("each loader thread" if rec.config.threads else "each worker") if workers > 0 or serial is None \
            else serial[0]
        parts.append(f"{who} computes {pct(per_worker)} of the time")
    cost = cpu_s_per_sample(rec, batch)
    ceiling = cpu_ceiling(rec, batch, usable) if capped is None else cost and capped[1] / cost
    if cost and ceiling:
        who = cpus_text(report) if capped is None else f"{capped[1]:.1f} CPUs"
        parts.append(f"loading costs {1000 * cost:.2f} ms of CPU per sample, so {who} can load at most "
                     f"{rate_text(ceiling)}; {rec.config.label()} reaches {rate_text(rate(rec))}, "
                     f"{pct(rate(rec) / ceiling)} of that ceiling")
    if growth_text(report) and not still_rising(report):
        parts.append(f"more workers stop helping ({growth_text(report)})")
    return Finding(
        id=FindingId.CPU_BOUND,
        severity=severity_for(wait_share(rec), th, report),
        evidence=(f"{lead_text(rec, report)}; {'; '.join(parts)}. "
                  f"{sustains_text(rec, batch)}"),
        recommendation=_cpu_change(saturated, crowded, workers, usable, capped is not None),
    )


def _cpu_change(saturated: bool, crowded: bool, workers: int, usable: int, gil: bool) -> str:
    """What to change when the CPU cost is the limit: cheaper samples, and what else the evidence leaves."""
    cheaper = ("find the costly transform (dataprof inspect), move augmentation to the GPU, cache decoded or resized "
               "data, use a faster decoder")
    if gil:
        return ("The GIL, not the CPUs, caps these threads: load in worker processes, each with a GIL of its own (the "
                "kinds line says what they measured here), or make the costly step release it (numpy and torch on "
                f"larger arrays, a decoder that does); or make each sample cheaper: {cheaper}.")
    change = f"Make each sample cheaper: {cheaper}; or get more CPUs."
    if crowded and not saturated:
        return change + " Or free the CPUs other processes take (see top) while training."
    if not saturated and workers < usable:
        return change + f" CPUs are left: try num_workers up to {usable}."
    return change + " More workers will not help."


def short_epoch(report: Report, th: Thresholds) -> Finding | None:
    """Epochs so short that the loop waits mostly at their starts, where the workers restart or refill."""
    rec = loader_limited(report, th)
    if rec is None or not rec.epochs.epoch_starts_in_window or not rec.epochs.epoch_start_wait_s or not rec.window_s:
        return None
    waited = wait_share(rec) * rec.window_s
    if rec.epochs.epoch_starts_in_window < 2 or rec.epochs.epoch_start_wait_s < th.epoch_start_share * waited:
        return None
    batch = batch_size(report)
    workers = rec.config.num_workers
    samples = rec.epochs.epoch_samples or (report.dataset.length if report.dataset else None)
    size = ""
    if samples:
        batches = -(-samples // batch)
        in_flight = workers * rec.config.prefetch
        fewer = f", fewer than the {in_flight} the workers keep in flight" if workers and batches < in_flight else ""
        size = f"an epoch is {batches:,} batch{'es' if batches != 1 else ''} ({samples:,} samples){fewer}; "
    per_start = rec.epochs.epoch_start_wait_s / rec.epochs.epoch_starts_in_window
    how = ("the workers start again (persistent_workers=False)" if workers and not rec.config.persistent_workers
           else "the workers begin the new epoch's indices with the pipeline empty" if workers
           else "the dataset begins a new epoch")
    return Finding(
        id=FindingId.SHORT_EPOCH,
        severity=severity_for(wait_share(rec), th, report),
        evidence=(f"{lead_text(rec, report)}; {size}{rec.epochs.epoch_starts_in_window} epochs began in the "
                  f"{rec.window_s:.1f} s window and the loop waited {ms(1000 * per_start)} ms for the first batch "
                  f"of each while {how}: {pct(rec.epochs.epoch_start_wait_s / waited)} of its waiting "
                  f"({pct(rec.epochs.epoch_start_wait_s / rec.window_s)} of the window). The epoch boundary is the "
                  "limit, not storage or CPU."),
        recommendation=("Make an epoch longer than the pipeline: draw more samples per epoch (e.g. "
                        "RandomSampler(dataset, replacement=True, num_samples=k * len(dataset))) or repeat the "
                        "dataset, or use a smaller batch; keep persistent_workers=True so workers are not started "
                        "again at every epoch."),
    )


def io_bound(report: Report, th: Thresholds) -> Finding | None:
    """The loader is the limit and the CPUs are not: samples wait on storage, network or locks."""
    rec = loader_limited(report, th)
    if rec is None:
        return None
    batch = batch_size(report)
    usable = report.environment.usable_cpus
    tree = cores(rec.cpu.cpu_percent)
    workers = rec.config.num_workers
    parts = []
    serial = serial_loading(rec, batch)
    if workers > 0 and worker_cores(rec) is not None:
        who = "each loader thread" if rec.config.threads else "each worker"
        parts.append(f"{who} computes only {pct((worker_cores(rec) or 0.0) / workers)} of the time")
    elif serial is not None:
        parts.append(f"{serial[0]} computes only {pct(serial[1])} of the time it loads")
    if tree is not None:
        parts.append(f"the loader's processes use {tree:.1f} of {usable} usable CPUs")
    parts.append("samples wait on something other than CPU (storage, network, sleeps, locks)")
    top = max(t.config.num_workers for t in ok_trials(report))
    if still_rising(report):
        parts.append(f"throughput still rises at the most workers tried ({growth_text(report)})")
        change = (f"Try more workers than {top} (--workers {top},{2 * max(1, top)},{4 * max(1, top)}): "
                  "latency-bound loaders scale past the CPU count. Also: local or faster storage, packed formats "
                  "(LMDB, WebDataset/TFRecord shards), caching, or concurrent reads inside __getitem__.")
    else:
        if growth_text(report):
            parts.append(f"throughput stopped rising ({growth_text(report)}) with CPUs idle")
        change = ("A shared resource sets the pace, not the worker count: check storage bandwidth, a server's "
                  "rate limit or a lock in __getitem__; copy data to local disk, use packed formats, or cache.")
    return Finding(
        id=FindingId.IO_BOUND,
        severity=severity_for(wait_share(rec), th, report),
        evidence=(f"{lead_text(rec, report)}; {'; '.join(parts)}. "
                  f"{sustains_text(rec, batch)}"),
        recommendation=change,
    )


PRIMARY_RULES: tuple[Callable[[Report, Thresholds], Finding | None], ...] = (
    storage_bound, transfer_bound, model_bound, main_process_bound, memory_bound, short_epoch, cpu_bound, io_bound,
)
