"""GPU probes: NVML read from outside the measured processes; no GPU, or no NVML library, is data, never an
exception."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuSample:
    """One NVML reading: the utilisation samples since the last one (%), memory used (bytes)."""
    t: float
    util_percent: list[float]
    """Utilisation samples NVML recorded since the previous reading."""
    memory_used_bytes: int | None


class NullGpuProbe:
    """No GPU, or no NVML: every reading is empty."""

    available = False
    reason = "no GPU"

    def sample(self, now: float) -> GpuSample | None:
        """Nothing to read."""
        return None

    def close(self) -> None:
        """Nothing to release."""


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
        """Utilisation samples since the last reading and memory used, or None if NVML fails."""
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
        """Shut NVML down."""
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass
