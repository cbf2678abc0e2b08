"""``dataprof inspect``'s decisions: every figure and check of an Inspection, from its measurements alone.

Pure: :func:`analyse` turns :class:`~dataprof.results.inspect.InspectionData` into
the :class:`~dataprof.results.inspect.Inspection` the renderers read; each check
returns a Finding or None (``inspect_checks``); :func:`fatal` says which makes the command fail.
"""

from __future__ import annotations

import dataclasses

from dataprof.decide.budgets import shm_workers
from dataprof.decide.inspect_checks import CHECKS
from dataprof.decide.thresholds import Thresholds
from dataprof.results.findings import Finding
from dataprof.results.inspect import InspectedMachine, InspectedSamples, Inspection, SlowSample, TimedStage
from dataprof.results.inspect_data import InspectionData, StageTiming, slowest_positions, to_ms
from dataprof.results.stats import percentile
from dataprof.results.vocabulary import FindingId, Severity


def _tree(stage: StageTiming, samples: int, total_s: float) -> TimedStage:
    """``stage`` and what it holds, timed per sample."""
    timed = TimedStage(stage.name, stage.path, 1000.0 * stage.total_seconds() / samples,
                       stage.total_seconds() / total_s if total_s else None)
    if stage.composite:
        return dataclasses.replace(timed, children=tuple(_tree(child, samples, total_s) for child in stage.children))
    return dataclasses.replace(timed, calls=stage.calls, gil_release=stage.gil_release)


def analyse(data: InspectionData, thresholds: Thresholds | None = None) -> Inspection:
    """The document of an inspection: every figure of its report from the measurements, then its checks."""
    count = len(data.wall_s)
    total_s = sum(data.wall_s)
    wall_ms = [1000.0 * s for s in data.wall_s]
    latency = {} if not count else {
        "p50": percentile(wall_ms, 50), "p95": percentile(wall_ms, 95), "p99": percentile(wall_ms, 99),
        "max": max(wall_ms), "mean": total_s * 1000.0 / count}
    slowest = tuple(SlowSample(data.indices[pos], wall_ms[pos], to_ms(data.repeat_s.get(data.indices[pos])))
                    for pos in slowest_positions(data.wall_s))
    cpu_total = sum(data.cpu_s)
    leaves = [leaf for root in data.stages for leaf in root.leaves()]
    ranked = sorted(leaves, key=lambda leaf: -leaf.seconds) if count and total_s else []
    staged_s = sum(root.total_seconds() for root in data.stages)
    outside = (1000.0 * (total_s - staged_s) / count, (total_s - staged_s) / total_s) \
        if data.stages and count and total_s else (None, None)
    batch = data.dataset.batch_samples or 0
    collate_s = percentile(list(data.collate_s), 50) if data.collate_s else None
    collate_cpu = percentile(list(data.collate_cpu_s), 50) if data.collate_cpu_s else 0.0
    # a dataset that fetches a batch at once is fetched so by a DataLoader: its cost per sample is the batch's
    fetch_s = percentile(list(data.getitems_s), 50) if data.getitems_s else (total_s / count if count else None)
    fetch_cpu = percentile(list(data.getitems_cpu_s), 50) if data.getitems_cpu_s else \
        (cpu_total / count if count else None)
    cpu_per_sample = fetch_cpu + (collate_cpu / batch if batch else 0.0) if fetch_cpu is not None else None
    samples = InspectedSamples(
        count=count, requested=data.settings.samples, stopped=data.stopped, first_ms=to_ms(data.first_s),
        latency_ms=latency, cpu_ms_mean=cpu_total * 1000.0 / count if count else None,
        cpu_share=cpu_total / total_s if total_s else None, slowest=slowest, errors=data.errors)
    return decide_inspection(Inspection(
        target=data.target, tool_version=data.tool_version, settings=data.settings,
        environment=InspectedMachine.of(data), dataset=data.dataset, samples=samples,
        transforms=tuple(TimedStage(leaf.name, leaf.path, 1000.0 * leaf.seconds / count, leaf.seconds / total_s,
                                    leaf.calls, leaf.gil_release) for leaf in ranked),
        tree=tuple(_tree(root, count, total_s) for root in data.stages) if count else (),
        notes=data.pipeline_notes, outside_ms=outside[0], outside_share=outside[1], collate_ms=to_ms(collate_s),
        collate_error=data.collate_error,
        bytes_per_sample=sum(data.sample_bytes) / len(data.sample_bytes) if data.sample_bytes else None,
        pickle_bytes=data.pickle_bytes, pickle_s=data.pickle_s, pickle_error=data.pickle_error,
        cpu_s_per_sample=cpu_per_sample,
        cpu_ceiling=data.environment.usable_cpus / cpu_per_sample if cpu_per_sample else None,
        worker_rate=1 / (fetch_s + (collate_s or 0.0) / max(batch, 1)) if fetch_s else None,
        batched_ms=to_ms(fetch_s) if data.getitems_s else None,
        max_workers_shm=None, max_workers_files=None, storage=data.storage, gil=data.gil), thresholds)


def decide_inspection(ins: Inspection, thresholds: Thresholds | None = None) -> Inspection:
    """``ins`` with its decisions made again from its figures alone: the kind of sample, the workers that fit
    in /dev/shm and in the open-file limit, and every check (``dataprof diagnose`` re-applies improved rules)."""
    th = thresholds or Thresholds()
    env, ds = ins.environment, ins.dataset
    prefetch = ins.settings.prefetch
    shm_fit = shm_workers(env.shm_free_bytes, ds.batch_bytes, prefetch) \
        if env.shm_free_bytes is not None and ds.batch_bytes else None
    file_workers = None
    if env.sharing_strategy == "file_descriptor" and env.open_files_limit and ds.batch_tensors:
        file_workers = _fits(int(env.open_files_limit * th.fd_headroom), ds.batch_tensors, prefetch)
    decided = dataclasses.replace(
        ins, samples=dataclasses.replace(ins.samples, kind=_sample_kind(ins.samples.cpu_share, th)),
        max_workers_shm=shm_fit, max_workers_files=file_workers, checks=())
    found = [check(decided, th) for check in CHECKS]
    return dataclasses.replace(decided, checks=tuple(c for c in found if c is not None))


def _sample_kind(cpu_share: float | None, th: Thresholds) -> str | None:
    """``waiting`` below the waiting share, ``computing`` from the computing share, else ``mixed``."""
    if cpu_share is None:
        return None
    if cpu_share < th.waiting_cpu_share:
        return "waiting"
    return "computing" if cpu_share >= th.computing_cpu_share else "mixed"


def _fits(budget: int | None, per_batch: int | None, prefetch: int) -> int | None:
    """Workers whose ``prefetch`` batches in flight each fit in ``budget``."""
    if budget is None or not per_batch:
        return None
    return int(budget // (per_batch * prefetch))


FATAL = (FindingId.SAMPLE_ERRORS, FindingId.COLLATE)
"""Checks whose critical finding makes ``dataprof inspect`` exit 3: a DataLoader over this dataset would fail."""


def fatal(ins: Inspection) -> Finding | None:
    """The critical finding that means the dataset cannot be loaded as it is, if any."""
    return next((c for c in ins.checks if c.id in FATAL and c.severity == Severity.CRITICAL), None)
