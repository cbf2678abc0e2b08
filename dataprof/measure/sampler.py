"""Background sampling of the trial's process tree, from the parent process.

A thread in the parent (never in the measured process) reads the probes
every ``interval_s``; ``summarize`` turns the readings into window figures and
is a pure function, tested on hand-made samples.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataprof.measure.gpu import GpuSample
from dataprof.measure.probes import TreeSample
from dataprof.measure.system import SystemSample


@dataclass
class Samples:
    """Every reading a sampler took, and when the window started and ended."""
    tree: list[TreeSample] = field(default_factory=list)
    system: list[SystemSample] = field(default_factory=list)
    gpu: list[GpuSample] = field(default_factory=list)
    window_start: float | None = None
    window_end: float | None = None


MAX_DUTY = 0.05
"""Share of one core the sampler may spend, on average: reading memory is not free. PSS of 64 workers with
CUDA PyTorch loaded takes about a second of CPU, which a loader on two cores would otherwise have had."""
WINDOW_MEMORY_DUTY = 0.01
"""Share of one core memory readings may spend inside the window. A reading walks the trial's address spaces
(``smaps``) and holds each one's memory-map lock while it does: a trial that maps and unmaps memory as it loads
(decoded images, tensors) waits on it, and on a loader that fills the CPUs every reading's CPU is the loader's.
An in-memory JPEG decode at ``num_workers=0`` against a bare loop, 8 interleaved rounds twice: at 5% of a core
−7.4% and −7.2% (medians), at 1% +3.4% and −1.4%."""
MARK_MEMORY_COST_S = 0.25
"""A memory reading inside the window may always take this long (the start's, with the breakdown, of two
workers over a million Python dicts takes 0.14 s); above, the window's length sets it."""
HEADROOM_SHARE = 0.5
"""Memory is read early, whatever the duty, once the machine's available memory has fallen by this share of
the room the last reading left below the memory limit: the guard must see a growing tree in time."""


class Sampler:
    """Reads tree, system and GPU probes on a thread until stopped.

    Every ``interval_s`` it reads CPU times (the tree's, the machine's) and the
    GPU; the tree's memory at the start, then none while the workers start
    (that start-up is timed) unless the machine's available memory falls
    towards the memory limit (:data:`HEADROOM_SHARE`); inside the window as
    often as :data:`WINDOW_MEMORY_DUTY` allows and only as the start mark may
    (below), after it as often as :data:`MAX_DUTY` allows, however costly it is
    to read (PSS of 100 workers takes a while). The window's marks read memory with the
    workers' private pages broken down (how much their memory grew depends on
    them): the start's, which runs inside the window, while it should take at
    most :data:`MAX_DUTY` of the expected window ``window_s`` (at least
    :data:`MARK_MEMORY_COST_S`; the last reading's cost per process times the
    processes now), cut off past that (``window_s`` unbounded, as for a
    watched run whose window is its whole life: the duty alone); the end's always, since
    the window has closed and the trial waits for this reading (``end_threads``
    processes at a time; the breakdown only when the start had one: a growth
    needs both).
    """

    def __init__(
        self,
        tree_probe: Any,
        system_probe: Any,
        gpu_probe: Any,
        interval_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        on_sample: Callable[[TreeSample], None] | None = None,
        window_s: float = math.inf,
        memory_limit_bytes: int | None = None,
        end_threads: int = 1,
    ) -> None:
        self.tree_probe = tree_probe
        self.system_probe = system_probe
        self.gpu_probe = gpu_probe
        self.interval_s = interval_s
        self.clock = clock
        self.on_sample = on_sample
        self.mark_memory_cost_s = max(MARK_MEMORY_COST_S, MAX_DUTY * window_s)
        self.memory_limit_bytes = memory_limit_bytes
        self.end_threads = end_threads
        """Processes the end mark reads at once: the window has closed and the workers are idle."""
        self.samples = Samples()
        self.memory_cost_s = 0.0
        """Wall time of the last reading with memory: PSS of many workers is slow to read."""
        self.cpu_cost_s = 0.0
        """Wall time of the last reading without memory."""
        self._memory_at: float | None = None
        """When memory was last read (or its reading cut off)."""
        self._per_process_s = 0.0
        """Wall time of the last memory reading per process it read: what the next one will cost."""
        self._guard_base: tuple[int, int] | None = None
        """The tree's PSS at the last reading that had it, and the machine's available memory then."""
        self._start_breakdown = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dataprof-sampler", daemon=True)

    def start(self) -> Sampler:
        """Start sampling in a thread of this (the parent) process."""
        self.sample_now()
        self._thread.start()
        return self

    def sample_now(self, memory: bool | None = True, breakdown: bool = False, budget_s: float | None = None,
                   threads: int = 1) -> None:
        """Take one reading now: the machine, the tree's CPU, its memory when ``memory`` (None: when the
        guard needs it, :meth:`_limit_near`, or the duty allows it, :meth:`_duty_allows`) and, with
        ``breakdown``, the workers' private pages too, cut off past ``budget_s``, ``threads`` processes at a
        time; then the GPU."""
        with self._lock:
            now = self.clock()
            system = self.system_probe.sample(now)
            self.samples.system.append(system)
            if memory is None:
                memory = self._limit_near(system.available_bytes)
                if not memory and self._duty_allows(now):
                    memory = True
                    if self._in_window():  # cut off as the start mark's is
                        budget_s = self.mark_memory_cost_s
            started = self.clock()
            deadline = None if budget_s is None else started + budget_s
            tree = self.tree_probe.sample(now, memory, breakdown, deadline, threads)
            cost = self.clock() - started
            if memory:
                self.memory_cost_s, self._memory_at = cost, now
                if tree is not None and tree.processes:
                    self._per_process_s = cost / tree.processes
                if tree is not None and tree.pss_bytes is not None:
                    self._guard_base = (tree.pss_bytes, system.available_bytes)
            else:
                self.cpu_cost_s = cost
            if tree is not None:
                self.samples.tree.append(tree)
            gpu = self.gpu_probe.sample(now)
            if gpu is not None:
                self.samples.gpu.append(gpu)
        if tree is not None and self.on_sample is not None:
            self.on_sample(tree)

    def _in_window(self) -> bool:
        return self.samples.window_start is not None and self.samples.window_end is None

    def _limit_near(self, available: int) -> bool:
        """Whether the machine's available memory has fallen by :data:`HEADROOM_SHARE` of the room the last
        reading left below the memory limit: the guard needs a reading now, whatever it costs."""
        if self._guard_base is None or self.memory_limit_bytes is None:
            return False
        pss, available_then = self._guard_base
        return available_then - available >= HEADROOM_SHARE * (self.memory_limit_bytes - pss)

    def _affordable(self) -> bool:
        """Whether a memory reading of the tree as the last reading found it should cost within the window's
        budget, at the cost per process the last memory reading had."""
        processes = self.samples.tree[-1].processes if self.samples.tree else 1
        return self._per_process_s * processes < self.mark_memory_cost_s

    def _duty_allows(self, now: float) -> bool:
        """Whether the last memory reading's cost, spread since it was taken, is within :data:`MAX_DUTY`, once
        the window has opened (before it, worker start-up is being timed); inside the window, within
        :data:`WINDOW_MEMORY_DUTY`, and only while the reading should cost within the start mark's budget too."""
        if self._memory_at is None:
            return True
        if self.samples.window_start is None:
            return False
        if self._in_window():
            return self._affordable() and now - self._memory_at >= self.memory_cost_s / WINDOW_MEMORY_DUTY
        return now - self._memory_at >= self.memory_cost_s / MAX_DUTY

    def mark_window_start(self) -> None:
        """The trial's window opened: read everything now, memory while affordable (see the class)."""
        memory = self._affordable()
        self.sample_now(memory=memory, breakdown=True, budget_s=self.mark_memory_cost_s)
        last = self.samples.tree[-1] if self.samples.tree else None
        self._start_breakdown = memory and last is not None and last.workers_private is not None
        self.samples.window_start = last.t if last is not None else self.clock()

    def mark_window_end(self) -> None:
        """The trial's window closed: read everything, memory included (whatever it costs), now; then the files the
        tree holds open or has mapped, where the tree probe lists them."""
        self.sample_now(memory=True, breakdown=self._start_breakdown, threads=self.end_threads)
        self.samples.window_end = self.samples.tree[-1].t if self.samples.tree else self.clock()
        list_files = getattr(self.tree_probe, "list_files", None)
        if list_files is not None:
            list_files()

    def stop(self) -> Samples:
        """Stop the sampling thread and wait for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.samples

    def _run(self) -> None:
        wait = self.interval_s
        while not self._stop.wait(wait):
            self.sample_now(memory=None)
            wait = max(self.interval_s, self.cpu_cost_s / MAX_DUTY - self.cpu_cost_s)


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


def _thread_cpu(first: TreeSample, last: TreeSample) -> tuple[float, ...] | None:
    """CPU (100 = one core) of each thread of the root process but its main one over the window, busiest first;
    threads that ran through the window only (a thread started or ended within it is partly counted: left out)."""
    span = last.t - first.t
    start = dict(first.thread_cpu_s)
    each = sorted((100.0 * (cpu - start[tid]) / span for tid, cpu in last.thread_cpu_s if tid in start),
                  reverse=True)
    return tuple(round(value, 1) for value in each[:THREADS_KEPT]) if each else None


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
        out["thread_cpu_percent"] = _thread_cpu(tree[0], tree[-1])
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
