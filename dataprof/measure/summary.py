"""A window's figures from the samples the parent took of a process tree and the machine (``summarize``): the
tree's CPU, memory and reads, the other processes' CPU, the GPU's, each None where nothing was measured."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from dataprof.measure.probes import TreeSample
from dataprof.measure.sampler import Samples
from dataprof.measure.system import SystemSample


def _in_window(items: list[Any], start: float | None, end: float | None) -> list[Any]:
    if start is None:
        return []
    stop = end if end is not None else float("inf")
    return [s for s in items if start <= s.t <= stop]


def _settled_uss(tree: list[TreeSample]) -> tuple[int | None, int | None]:
    """Workers' USS at the start and end of the window, ignoring transient peaks.

    A batch in flight or a temporary buffer lifts one reading; the least of the
    first and of the last third of the readings is what the workers keep. It
    takes two readings at least.
    """
    values = [s.workers_uss_bytes for s in tree if s.workers_uss_bytes is not None]
    if len(values) < 2:
        return None, None  # one reading says nothing about growth
    third = max(1, len(values) // 3)
    return min(values[:third]), min(values[-third:])


def _foreign(system: list[SystemSample], tree_percent: float | None) -> float | None:
    """CPU the other processes took on the usable CPUs over the window (100 per core): the usable CPUs' busy
    time less the measured tree's and dataprof's own; None when any of the three was not read."""
    if len(system) < 2 or tree_percent is None:
        return None
    first, last = system[0], system[-1]
    if None in (first.usable_busy_s, last.usable_busy_s, first.usable_total_s, last.usable_total_s,
                first.own_cpu_s, last.own_cpu_s, last.usable_cpus) or last.t <= first.t:
        return None
    total = last.usable_total_s - first.usable_total_s  # type: ignore[operator]
    if total <= 0:
        return None
    busy = 100.0 * (last.usable_cpus or 0) * (last.usable_busy_s - first.usable_busy_s) / total  # type: ignore[operator]
    own = 100.0 * (last.own_cpu_s - first.own_cpu_s) / (last.t - first.t)  # type: ignore[operator]
    return max(0.0, busy - tree_percent - own)


THREADS_KEPT = 32
"""The busiest threads whose CPU a trial keeps."""


def _thread_cpu(tree: Sequence[TreeSample]) -> tuple[float, ...] | None:
    """CPU (100 = one core) of each thread of the root process but its main one, busiest first, each over the part
    of the window it was seen in, from its first reading to its last, where that part is :data:`THREAD_SPAN` of the
    window or more: a pipeline that starts its threads again at each epoch (``torchdata.nodes``) has no thread that
    lives through a window of several epochs, and a thread seen for less is left out (a clock tick's rounding)."""
    seen: dict[int, list[tuple[float, float]]] = {}
    for sample in tree:
        for tid, cpu in sample.thread_cpu_s:
            seen.setdefault(tid, []).append((sample.t, cpu))
    least = THREAD_SPAN * (tree[-1].t - tree[0].t)
    each = sorted((100.0 * (read[-1][1] - read[0][1]) / (read[-1][0] - read[0][0]) for read in seen.values()
                   if read[-1][0] - read[0][0] >= least > 0), reverse=True)
    return tuple(round(value, 1) for value in each[:THREADS_KEPT]) if each else None


THREAD_SPAN = 0.25
"""The share of the window a thread's readings must span for its CPU to be read."""


def risen(counts: Sequence[int]) -> int:
    """How far a counter summed over the process tree rose across ``counts``, its readings in order: the sum of
    each reading's rise over the one before. The sum falls when a process leaves the tree with its count (one
    the script left running, reparented, then killed); a fall is no negative reading, so it counts nothing."""
    return sum(max(0, b - a) for a, b in zip(counts, counts[1:], strict=False))


def summarize(samples: Samples) -> dict[str, Any]:
    """Window figures for a TrialResult (None where nothing was measured)."""
    tree = _in_window(samples.tree, samples.window_start, samples.window_end)
    # The trial shuts its workers down right after the window: a last reading
    # taken while they exit misses their CPU time, so end on a complete tree.
    while len(tree) > 2 and tree[-1].processes < tree[0].processes:
        tree.pop()
    system = _in_window(samples.system, samples.window_start, samples.window_end)
    gpu = _in_window(samples.gpu, samples.window_start, samples.window_end)
    out: dict[str, Any] = {
        "cpu_percent": None, "main_cpu_percent": None, "main_thread_cpu_percent": None,
        "cpu_percent_system": None, "iowait_percent": None,
        "workers_uss_start_bytes": None, "workers_uss_end_bytes": None, "main_uss_bytes": None,
        "gpu_util_percent": None, "gpu_memory_bytes": None,
        "workers_inherited_growth_bytes": None, "workers_file_growth_bytes": None,
        "storage_read_bytes_per_s": None, "read_chars_per_s": None, "thread_cpu_percent": None,
    }
    if len(tree) >= 2 and tree[-1].t > tree[0].t:
        span = tree[-1].t - tree[0].t
        out["cpu_percent"] = 100.0 * (tree[-1].cpu_s - tree[0].cpu_s) / span
        if tree[0].main_cpu_s is not None and tree[-1].main_cpu_s is not None:
            out["main_cpu_percent"] = 100.0 * (tree[-1].main_cpu_s - tree[0].main_cpu_s) / span
        if tree[0].main_thread_cpu_s is not None and tree[-1].main_thread_cpu_s is not None:
            out["main_thread_cpu_percent"] = 100.0 * (tree[-1].main_thread_cpu_s - tree[0].main_thread_cpu_s) / span
        out["thread_cpu_percent"] = _thread_cpu(tree)
        out["workers_uss_start_bytes"], out["workers_uss_end_bytes"] = _settled_uss(tree)
        out["main_uss_bytes"] = next((s.main_uss_bytes for s in reversed(tree) if s.main_uss_bytes is not None),
                                     None)
        read = [s for s in tree if s.read_bytes is not None and s.read_chars is not None]
        if len(read) >= 2 and read[-1].t > read[0].t:
            io_span = read[-1].t - read[0].t
            out["storage_read_bytes_per_s"] = risen([s.read_bytes for s in read]) / io_span  # type: ignore[misc]
            out["read_chars_per_s"] = risen([s.read_chars for s in read]) / io_span  # type: ignore[misc]
        marks = [(s.processes, s.workers_private) for s in tree if s.workers_private is not None]
        # both marks must cover the same workers: one read as workers exit would show a loss, not a growth
        if len(marks) >= 2 and marks[0][0] == marks[-1][0]:
            (_, start), (_, end) = marks[0], marks[-1]
            out["workers_inherited_growth_bytes"] = end.inherited - start.inherited
            out["workers_file_growth_bytes"] = end.file - start.file
    if len(system) >= 2 and system[-1].total_s > system[0].total_s:
        total = system[-1].total_s - system[0].total_s
        out["cpu_percent_system"] = 100.0 * (system[-1].busy_s - system[0].busy_s) / total
        out["iowait_percent"] = 100.0 * (system[-1].iowait_s - system[0].iowait_s) / total
    out["foreign_cpu_percent"] = _foreign(system, out["cpu_percent"])
    peaks = [s.pss_bytes for s in samples.tree if s.pss_bytes is not None]
    out["peak_memory_bytes"] = max(peaks) if peaks else None
    out["available_memory_min_bytes"] = min((s.available_bytes for s in samples.system), default=None)
    util = [v for s in gpu for v in s.util_percent]
    if util:
        out["gpu_util_percent"] = statistics.fmean(util)
    used = [s.memory_used_bytes for s in gpu if s.memory_used_bytes is not None]
    out["gpu_memory_bytes"] = max(used) if used else None
    return out
