"""The dummy model that consumes batches, calibrated to a step time.

On CUDA it runs real matmuls on the device and synchronises every step, as a
``loss.item()`` would. Without a GPU the device is simulated: the step sleeps,
leaving the CPU free as a GPU would.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class Consumer(Protocol):
    def to_device(self, batch: Any) -> Any:
        """Move the batch to the device (host-to-device copy)."""

    def step(self, batch: Any) -> None:
        """One model step on the batch, finished when this returns."""


class SimulatedDevice:
    """CPU-only machines: no copy, and a step that sleeps ``step_ms``."""

    def __init__(self, step_ms: float, sleep: Any = time.sleep) -> None:
        self.step_s = step_ms / 1000.0
        self._sleep = sleep

    def to_device(self, batch: Any) -> Any:
        return batch

    def step(self, batch: Any) -> None:
        if self.step_s > 0:
            self._sleep(self.step_s)


def _map_tensors(batch: Any, fn: Any) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: _map_tensors(v, fn) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        mapped = [_map_tensors(v, fn) for v in batch]
        return type(batch)(*mapped) if hasattr(batch, "_fields") else type(batch)(mapped)
    return batch


class CudaConsumer:
    """Real kernels on a CUDA device, calibrated so one step takes ``step_ms``."""

    def __init__(self, device: str, step_ms: float, matrix_size: int = 2048) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        torch.cuda.set_device(self.device)
        self.matrix = torch.randn(matrix_size, matrix_size, device=self.device)
        self.scratch = torch.empty_like(self.matrix)
        self.iterations = self._calibrate(step_ms) if step_ms > 0 else 0

    def _calibrate(self, step_ms: float) -> int:
        torch = self.torch
        for _ in range(3):
            torch.mm(self.matrix, self.matrix, out=self.scratch)
        torch.cuda.synchronize(self.device)
        trials = 20
        start = time.perf_counter()
        for _ in range(trials):
            torch.mm(self.matrix, self.matrix, out=self.scratch)
        torch.cuda.synchronize(self.device)
        per_matmul_ms = (time.perf_counter() - start) * 1000.0 / trials
        return max(1, round(step_ms / per_matmul_ms))

    def to_device(self, batch: Any) -> Any:
        return _map_tensors(batch, lambda t: t.to(self.device, non_blocking=t.is_pinned()))

    def step(self, batch: Any) -> None:
        torch = self.torch
        touched = torch.zeros((), device=self.device)

        def reduce(t: Any) -> Any:
            nonlocal touched
            if t.is_floating_point():
                touched = touched + t.sum()
            return t

        _map_tensors(batch, reduce)
        for _ in range(self.iterations):
            torch.mm(self.matrix, self.matrix, out=self.scratch)
        (touched + self.scratch[0, 0] * 0).item()

    def device_ids(self) -> dict[str, str | None]:
        """UUID and PCI bus id, to match the NVML handle to this torch device."""
        props = self.torch.cuda.get_device_properties(self.device)
        uuid = getattr(props, "uuid", None)
        bus = getattr(props, "pci_bus_id", None)
        domain = getattr(props, "pci_domain_id", None)
        device_id = getattr(props, "pci_device_id", None)
        pci = None if bus is None else f"{domain or 0:08x}:{bus:02x}:{device_id or 0:02x}.0"
        return {"uuid": None if uuid is None else str(uuid), "pci_bus_id": pci, "name": props.name}
