"""The machine's probe: its CPU times (all CPUs, and the usable ones), available RAM, and the CPU of dataprof's own
processes, read from outside the measured processes (psutil)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SystemSample:
    """One reading of the whole machine: CPU seconds busy and in iowait (all CPUs), available RAM (bytes)."""
    t: float
    busy_s: float
    """System-wide non-idle CPU seconds (all CPUs)."""
    total_s: float
    iowait_s: float
    available_bytes: int
    usable_busy_s: float | None = None
    """Non-idle CPU seconds of the CPUs this process may run on (its affinity), whoever used them."""
    usable_total_s: float | None = None
    usable_cpus: int | None = None
    """How many CPUs ``usable_*`` cover."""
    own_cpu_s: float | None = None
    """CPU seconds of dataprof's own processes (``own_pids``): what is neither the measured tree nor others."""


class SystemProbe:
    """psutil reader of the machine's CPU times (all CPUs, and those of this process's affinity), available RAM,
    and the CPU time of dataprof's own processes: with the measured tree's, what the other processes took."""
    def __init__(self, own_pids: Sequence[int] = (), cpus: Sequence[int] | None = None) -> None:
        import psutil

        self.psutil = psutil
        self.own = [psutil.Process(pid) for pid in own_pids if psutil.pid_exists(pid)]
        self.cpus: list[int] | None = None if cpus is None else sorted(cpus)
        """The usable CPUs: those the trials are pinned to (``--cpus``), else this process's affinity."""
        if self.cpus is None:
            try:
                self.cpus = sorted(psutil.Process().cpu_affinity() or [])
            except (AttributeError, psutil.Error, OSError):  # no affinity on this platform
                self.cpus = None

    def sample(self, now: float) -> SystemSample:
        """The machine's CPU times and available RAM now."""
        times = self.psutil.cpu_times()
        total = sum(times)
        idle = times.idle + getattr(times, "iowait", 0.0)
        per_cpu = self.psutil.cpu_times(percpu=True)
        chosen = [per_cpu[i] for i in self.cpus if i < len(per_cpu)] if self.cpus else per_cpu
        return SystemSample(
            t=now, busy_s=total - idle, total_s=total, iowait_s=getattr(times, "iowait", 0.0),
            available_bytes=self.psutil.virtual_memory().available,
            usable_busy_s=sum(sum(c) - c.idle - getattr(c, "iowait", 0.0) for c in chosen),
            usable_total_s=sum(sum(c) for c in chosen), usable_cpus=len(chosen),
            own_cpu_s=self._own_cpu_s(),
        )

    def _own_cpu_s(self) -> float | None:
        total = 0.0
        for proc in self.own:
            try:
                times = proc.cpu_times()
            except self.psutil.Error:
                return None  # one of them is gone: no figure rather than a part of one
            total += times.user + times.system
        return total
