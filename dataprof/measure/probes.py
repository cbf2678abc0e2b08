"""Probes read resources from outside the measured processes.

Each probe returns plain numbers or ``None``; a missing GPU or NVML library is
data, never an exception.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TreeSample:
    """One reading of the trial's process tree (main + DataLoader workers)."""

    t: float
    cpu_s: float
    """CPU seconds used so far by the tree, exited workers included."""
    main_cpu_s: float | None
    """CPU seconds of the root process's own threads."""
    main_thread_cpu_s: float | None
    """CPU seconds of the root process's main thread."""
    pss_bytes: int | None
    """Proportional set size of the tree: shared pages counted once."""
    main_uss_bytes: int | None
    workers_uss_bytes: int | None
    processes: int


class ProcessTreeProbe:
    """psutil reader for one process and its descendants."""

    def __init__(self, pid: int, with_memory: bool = True) -> None:
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.with_memory = with_memory

    def sample(self, now: float, memory: bool = True) -> TreeSample | None:
        """CPU times of every process, then their PSS/USS unless ``memory`` is False (the costly part).

        All CPU times are read before any memory, so they stay one instant however long memory takes.
        """
        psutil = self.psutil
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        cpu_s = 0.0
        main_cpu: float | None = None
        main_thread: float | None = None
        for proc in procs:
            try:
                times = proc.cpu_times()
                # children_* holds workers already exited and reaped (respawned per epoch).
                cpu_s += times.user + times.system + times.children_user + times.children_system
                if proc is self.root:
                    main_cpu = times.user + times.system
                    main_thread = next((t.user_time + t.system_time for t in proc.threads() if t.id == proc.pid),
                                       None)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
        pss = main_uss = workers_uss = 0
        memory_ok = self.with_memory and memory
        for proc in procs if memory_ok else ():
            try:
                info = proc.memory_full_info()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            except psutil.AccessDenied:
                memory_ok = False
                break
            pss += getattr(info, "pss", info.uss)
            if proc is self.root:
                main_uss = info.uss
            else:
                workers_uss += info.uss
        return TreeSample(
            t=now,
            cpu_s=cpu_s,
            main_cpu_s=main_cpu,
            main_thread_cpu_s=main_thread,
            pss_bytes=pss if memory_ok else None,
            main_uss_bytes=main_uss if memory_ok else None,
            workers_uss_bytes=workers_uss if memory_ok else None,
            processes=len(procs),
        )


@dataclass(frozen=True)
class SystemSample:
    t: float
    busy_s: float
    """System-wide non-idle CPU seconds (all CPUs)."""
    total_s: float
    iowait_s: float
    available_bytes: int


class SystemProbe:
    def __init__(self) -> None:
        import psutil

        self.psutil = psutil

    def sample(self, now: float) -> SystemSample:
        times = self.psutil.cpu_times()
        total = sum(times)
        idle = times.idle + getattr(times, "iowait", 0.0)
        return SystemSample(
            t=now, busy_s=total - idle, total_s=total, iowait_s=getattr(times, "iowait", 0.0),
            available_bytes=self.psutil.virtual_memory().available,
        )


@dataclass(frozen=True)
class GpuSample:
    t: float
    util_percent: list[float]
    """Utilisation samples NVML recorded since the previous reading."""
    memory_used_bytes: int | None


class NullGpuProbe:
    """No GPU, or no NVML: every reading is empty."""

    available = False
    reason = "no GPU"

    def sample(self, now: float) -> GpuSample | None:
        return None

    def close(self) -> None:
        pass


class NvmlProbe:
    """GPU utilisation from NVML's sample buffer, for the device torch uses.

    The handle is matched by UUID (or PCI bus id), not by index: CUDA's and
    NVML's device orders differ when ``CUDA_VISIBLE_DEVICES`` reorders them.
    """

    available = True
    reason = ""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self.last_timestamp = 0

    @classmethod
    def open(cls, uuid: str | None, pci_bus_id: str | None, nvml: Any = None) -> NvmlProbe | NullGpuProbe:
        """Open NVML and find the device; a NullGpuProbe (with a reason) on any failure."""
        try:
            if nvml is None:
                import pynvml

                nvml = pynvml
            nvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, driver missing
            null = NullGpuProbe()
            null.reason = f"NVML unavailable ({type(exc).__name__})"
            return null
        handle = None
        try:
            if uuid:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
            elif pci_bus_id:
                handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        except Exception:
            handle = None
        if handle is None:
            nvml.nvmlShutdown()
            null = NullGpuProbe()
            null.reason = "NVML could not match the CUDA device (no UUID or PCI id)"
            return null
        probe = cls(nvml, handle)
        probe.last_timestamp = probe._now_us()
        return probe

    @staticmethod
    def _now_us() -> int:
        return int(time.time() * 1e6)

    def sample(self, now: float) -> GpuSample | None:
        nvml = self.nvml
        values: list[float] = []
        try:
            _kind, samples = nvml.nvmlDeviceGetSamples(self.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES,
                                                       self.last_timestamp)
            for item in samples:
                values.append(float(item.sampleValue.uiVal))
                self.last_timestamp = max(self.last_timestamp, int(item.timeStamp))
        except Exception:
            try:
                values = [float(nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)]
            except Exception:
                values = []
        try:
            memory: int | None = int(nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        except Exception:
            memory = None
        return GpuSample(t=now, util_percent=values, memory_used_bytes=memory)

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass
