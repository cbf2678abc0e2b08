"""A watched run's resources, from its sampler's readings: the process tree's CPU and memory, the machine's
iowait, the GPU's utilisation and what storage served, each over the watch and as a timeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dataprof.measure.cache.footprint import DataFiles
from dataprof.measure.cache.page_cache import residency
from dataprof.measure.gpu import GpuSample
from dataprof.measure.sampler import Sampler
from dataprof.measure.summary import risen
from dataprof.results.codec import decode
from dataprof.results.run import RunResources

TIMELINE_SLICES = 60


def gpu_timeline(samples: Sequence[GpuSample], slices: int = TIMELINE_SLICES) -> tuple[float, ...]:
    """Mean GPU utilisation (%) in each of up to ``slices`` equal slices of the readings' time span."""
    return timeline([(s.t, sum(s.util_percent) / len(s.util_percent)) for s in samples if s.util_percent], slices)


def timeline(points: Sequence[tuple[float, float]], slices: int = TIMELINE_SLICES) -> tuple[float, ...]:
    """The mean of ``(time, value)`` points in each of up to ``slices`` equal slices of their time span."""
    if len(points) < 2:
        return tuple(value for _, value in points)
    start, span = points[0][0], (points[-1][0] - points[0][0]) or 1.0
    count = min(slices, len(points))
    buckets: list[list[float]] = [[] for _ in range(count)]
    for t, value in points:
        buckets[min(count - 1, int((t - start) / span * count))].append(value)
    return tuple(round(sum(b) / len(b), 1) for b in buckets if b)


def storage_of(sampler: Sampler, slices: int = TIMELINE_SLICES) -> dict[str, Any]:
    """Storage's bytes per second over the watch (up to ``slices`` equal slices), and the data files the tree held
    open or mapped with how much of them the page cache holds now."""
    read = [s for s in sampler.samples.tree if s.read_bytes is not None]
    rates = [(b.t, risen([a.read_bytes, b.read_bytes]) / (b.t - a.t))  # type: ignore[list-item]
             for a, b in zip(read, read[1:], strict=False) if b.t > a.t]
    files = DataFiles()
    files.add(sampler.tree_probe.held)
    resident, size = residency(files.sizes)
    return {"storage_timeline": tuple(round(v) for v in timeline(rates, slices)),
            "data_files": len(files.sizes) or None,
            "data_bytes": sum(files.sizes.values()) if files.sizes else None,
            "data_resident_fraction": resident / size if size else None}


def resources_of(figures: dict[str, Any]) -> RunResources:
    """The tree's CPU, memory, the machine's iowait and the GPU over the watch, from the sampler's summary (with
    the storage and GPU timelines): each figure a field of the run's resources takes, by its name; the workers'
    CPU the tree's less the main process's."""
    cpu, main = figures["cpu_percent"], figures["main_cpu_percent"]
    workers = None if cpu is None or main is None else max(0.0, cpu - main)
    return decode(RunResources, {**figures, "workers_cpu_percent": workers})
