"""Background sampling of the trial's process tree, from the parent process.

A thread in the parent (never in the measured process) reads the probes
every ``interval_s``; ``summarize`` turns the readings into window figures and
is a pure function, tested on hand-made samples.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dataprof.measure.probes import GpuSample, SystemSample, TreeSample


@dataclass
class Samples:
    """Every reading a sampler took, and when the window started and ended."""
    tree: list[TreeSample] = field(default_factory=list)
    system: list[SystemSample] = field(default_factory=list)
    gpu: list[GpuSample] = field(default_factory=list)
    window_start: float | None = None
    window_end: float | None = None


MAX_DUTY = 0.05
"""Share of one core the sampler may spend: reading the memory of many workers is not free."""
MAX_INTERVAL_S = 2.0
"""Longest gap between readings, however costly, so the memory limit is still enforced."""
MARK_MEMORY_COST_S = 0.05
"""A memory reading at the window's start is always affordable below this; above, the window's length sets it."""


class Sampler:
    """Reads tree, system and GPU probes on a thread until stopped.

    The interval stretches with the cost of a reading (PSS of 100 workers
    takes a while) so the sampler never uses more than :data:`MAX_DUTY` of a
    core, up to :data:`MAX_INTERVAL_S`. The window's own start and end are
    always read, memory included (how much the workers' memory grew depends on
    them): the end's always, since the window has closed (the trial keeps its
    workers a moment for this reading, so it costs the measurement nothing);
    the start's, which runs inside the window, while it costs at most
    :data:`MAX_DUTY` of the expected window ``window_s``, and at least up to
    :data:`MARK_MEMORY_COST_S`.
    """

    def __init__(
        self,
        tree_probe: Any,
        system_probe: Any,
        gpu_probe: Any,
        interval_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        on_sample: Callable[[TreeSample], None] | None = None,
        window_s: float = 0.0,
    ) -> None:
        self.tree_probe = tree_probe
        self.system_probe = system_probe
        self.gpu_probe = gpu_probe
        self.interval_s = interval_s
        self.clock = clock
        self.on_sample = on_sample
        self.mark_memory_cost_s = max(MARK_MEMORY_COST_S, MAX_DUTY * window_s)
        self.samples = Samples()
        self.full_cost_s = 0.0
        """Wall time of the last reading with memory: PSS of many workers is slow to read."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dataprof-sampler", daemon=True)

    def start(self) -> Sampler:
        """Start sampling in a thread of this (the parent) process."""
        self.sample_now()
        self._thread.start()
        return self

    def sample_now(self, memory: bool = True, breakdown: bool = False) -> None:
        """Take one reading now: the tree's CPU, its memory when ``memory`` (``breakdown``: the workers'
        private pages too), the machine and the GPU."""
        with self._lock:
            now = self.clock()
            started = time.perf_counter()
            tree = self.tree_probe.sample(now, memory, breakdown)
            if memory:
                self.full_cost_s = time.perf_counter() - started
            if tree is not None:
                self.samples.tree.append(tree)
            self.samples.system.append(self.system_probe.sample(now))
            gpu = self.gpu_probe.sample(now)
            if gpu is not None:
                self.samples.gpu.append(gpu)
        if tree is not None and self.on_sample is not None:
            self.on_sample(tree)

    def mark_window_start(self) -> None:
        """The trial's window opened: read everything, memory included, now."""
        self.sample_now(memory=self.full_cost_s < self.mark_memory_cost_s, breakdown=True)
        self.samples.window_start = self.samples.tree[-1].t if self.samples.tree else self.clock()

    def mark_window_end(self) -> None:
        """The trial's window closed: read everything, memory included (whatever it costs), now."""
        self.sample_now(memory=True, breakdown=True)
        self.samples.window_end = self.samples.tree[-1].t if self.samples.tree else self.clock()

    def stop(self) -> Samples:
        """Stop the sampling thread and wait for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.samples

    def _run(self) -> None:
        wait = self.interval_s
        while not self._stop.wait(wait):
            self.sample_now()
            cost = self.full_cost_s
            wait = min(MAX_INTERVAL_S, max(self.interval_s, cost / MAX_DUTY - cost))


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
    }
    if len(tree) >= 2 and tree[-1].t > tree[0].t:
        span = tree[-1].t - tree[0].t
        out["cpu_percent"] = 100.0 * (tree[-1].cpu_s - tree[0].cpu_s) / span
        if tree[0].main_cpu_s is not None and tree[-1].main_cpu_s is not None:
            out["main_cpu_percent"] = 100.0 * (tree[-1].main_cpu_s - tree[0].main_cpu_s) / span
        if tree[0].main_thread_cpu_s is not None and tree[-1].main_thread_cpu_s is not None:
            out["main_thread_cpu_percent"] = 100.0 * (tree[-1].main_thread_cpu_s - tree[0].main_thread_cpu_s) / span
        out["workers_uss_start_bytes"], out["workers_uss_end_bytes"] = _settled_uss(tree)
        out["main_uss_bytes"] = next((s.main_uss_bytes for s in reversed(tree) if s.main_uss_bytes is not None),
                                     None)
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
