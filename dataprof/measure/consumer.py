"""The dummy model that consumes batches, calibrated to a step time.

On CUDA it runs real matmuls on the device and synchronises every step, as a
``loss.item()`` would. Without a GPU the device is simulated: the step sleeps,
leaving the CPU free as a GPU would.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Protocol

from dataprof.results.vocabulary import Framework


class Consumer(Protocol):
    """The dummy model a trial feeds: a copy to the device, then a step of the calibrated length."""
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
        """No copy: the batch stays where it is."""
        return batch

    def step(self, batch: Any) -> None:
        """Sleep ``step_ms``, leaving the CPU free as a GPU would."""
        if self.step_s > 0:
            self._sleep(self.step_s)


def _map_tensors(batch: Any, is_tensor: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    if is_tensor(batch):
        return fn(batch)
    if isinstance(batch, dict):
        return {k: _map_tensors(v, is_tensor, fn) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        mapped = [_map_tensors(v, is_tensor, fn) for v in batch]
        return type(batch)(*mapped) if hasattr(batch, "_fields") else type(batch)(mapped)
    return batch


class _MatmulConsumer(ABC):
    """A step of ``iterations`` square matmuls on the device, calibrated to ``step_ms``, then a sync."""

    iterations = 0

    @abstractmethod
    def _matmul(self) -> None: ...

    @abstractmethod
    def _sync(self) -> None: ...

    def _calibrate(self, step_ms: float) -> int:
        for _ in range(3):
            self._matmul()
        self._sync()
        trials = 20
        start = time.perf_counter()
        for _ in range(trials):
            self._matmul()
        self._sync()
        per_matmul_ms = (time.perf_counter() - start) * 1000.0 / trials
        return max(1, round(step_ms / per_matmul_ms))


class CudaConsumer(_MatmulConsumer):
    """PyTorch: real kernels on a CUDA device, calibrated so one step takes ``step_ms``."""

    def __init__(self, device: str, step_ms: float, matrix_size: int = 2048) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        torch.cuda.set_device(self.device)
        self.matrix = torch.randn(matrix_size, matrix_size, device=self.device)
        self.scratch = torch.empty_like(self.matrix)
        self.iterations = self._calibrate(step_ms) if step_ms > 0 else 0

    def _matmul(self) -> None:
        self.torch.mm(self.matrix, self.matrix, out=self.scratch)

    def _sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def _is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, self.torch.Tensor)

    def to_device(self, batch: Any) -> Any:
        """Copy the batch's tensors to the GPU (non-blocking for pinned ones)."""
        return _map_tensors(batch, self._is_tensor, lambda t: t.to(self.device, non_blocking=t.is_pinned()))

    def step(self, batch: Any) -> None:
        """Run the calibrated matmuls on the batch's device and wait for them."""
        touched = self.torch.zeros((), device=self.device)

        def reduce(t: Any) -> Any:
            nonlocal touched
            if t.is_floating_point():
                touched = touched + t.sum()
            return t

        _map_tensors(batch, self._is_tensor, reduce)
        for _ in range(self.iterations):
            self._matmul()
        (touched + self.scratch[0, 0] * 0).item()

    def device_ids(self) -> dict[str, str | None]:
        """UUID and PCI bus id, to match the NVML handle to this torch device."""
        return torch_device_ids(self.torch, self.device)


def torch_device_ids(torch: Any, device: Any) -> dict[str, str | None]:
    """A torch CUDA device's UUID, PCI bus id and name: what NVML matches its handle by."""
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    bus = getattr(props, "pci_bus_id", None)
    domain = getattr(props, "pci_domain_id", None)
    device_id = getattr(props, "pci_device_id", None)
    pci = None if bus is None else f"{domain or 0:08x}:{bus:02x}:{device_id or 0:02x}.0"
    return {"uuid": None if uuid is None else str(uuid), "pci_bus_id": pci, "name": props.name}


class PaddleCudaConsumer(_MatmulConsumer):
    """Paddle: the same calibrated matmuls on ``gpu:N``, batches copied with ``Tensor.cuda``."""

    def __init__(self, device: str, step_ms: float, matrix_size: int = 2048) -> None:
        from dataprof.backends.frameworks import import_paddle

        paddle = self.paddle = import_paddle()
        self.index = int(device.partition(":")[2] or 0)
        paddle.device.set_device(f"gpu:{self.index}")
        self.matrix = paddle.randn([matrix_size, matrix_size])
        self.scratch = paddle.matmul(self.matrix, self.matrix)
        self.iterations = self._calibrate(step_ms) if step_ms > 0 else 0

    def _matmul(self) -> None:
        self.scratch = self.paddle.matmul(self.matrix, self.matrix)

    def _sync(self) -> None:
        self.paddle.device.cuda.synchronize(self.index)

    def _is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, self.paddle.Tensor)

    def to_device(self, batch: Any) -> Any:
        """Copy the batch's tensors to the GPU (non-blocking)."""
        return _map_tensors(batch, self._is_tensor, lambda t: t.cuda(self.index, blocking=False))

    def step(self, batch: Any) -> None:
        """Run the calibrated matmuls on the GPU and wait for them."""
        touched = self.paddle.zeros([])

        def reduce(t: Any) -> Any:
            nonlocal touched
            if t.dtype in (self.paddle.float16, self.paddle.bfloat16, self.paddle.float32, self.paddle.float64):
                touched = touched + t.sum().astype("float32")
            return t

        _map_tensors(batch, self._is_tensor, reduce)
        for _ in range(self.iterations):
            self._matmul()
        float(touched + self.scratch[0, 0] * 0)

    def device_ids(self) -> dict[str, str | None]:
        """The NVML identity of ``gpu:N``: its UUID, looked up through CUDA_VISIBLE_DEVICES."""
        name = self.paddle.device.cuda.get_device_properties(self.index).name
        return {"uuid": visible_gpu_uuid(self.index), "pci_bus_id": None, "name": name}


def visible_gpu_uuid(index: int, nvml: Any = None) -> str | None:
    """UUID of the ``index``-th visible CUDA device (CUDA_VISIBLE_DEVICES order); None if NVML cannot say."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    entry = visible[index] if index < len(visible) else (None if visible else str(index))
    if entry is None:
        return None
    if entry.startswith(("GPU-", "MIG-")):
        return entry
    if not entry.isdigit():
        return None
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
        try:
            uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
        finally:
            nvml.nvmlShutdown()
    except Exception:
        return None
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def make_cuda_consumer(framework: str, device: str, step_ms: float) -> CudaConsumer | PaddleCudaConsumer:
    """The GPU consumer of the framework that loads the batches."""
    if framework == Framework.PADDLE:
        return PaddleCudaConsumer(device, step_ms)
    return CudaConsumer(device, step_ms)
