"""Background sampling of the trial's process tree, from the parent process.

A thread in the parent (never in the measured process) reads the probes
every ``interval_s``; ``measure.summary.summarize`` turns the readings into window figures and
is a pure function, tested on hand-made samples.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
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
