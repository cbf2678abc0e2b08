"""Facts about the machine: usable CPUs, RAM, /dev/shm, the device to use."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import sys
from collections.abc import Callable

from dataprof.config import CpuBudget, cpu_budget
from dataprof.distributed import RankInfo
from dataprof.errors import UsageError
from dataprof.model import Environment


def cuda_devices(framework: str = "torch") -> int:
    """CUDA devices the framework can use; 0 without a driver (checked before importing the framework).

    Asked in the parent process, never in the host that forks the trials:
    CUDA initialised before a fork is unusable after it.
    """
    if sys.platform.startswith("linux") and not os.path.exists("/dev/nvidiactl"):
        return 0
    if framework == "paddle":
        from dataprof.backends.paddle_backend import available, import_paddle

        if not available():
            return 0
        paddle = import_paddle()
        return int(paddle.device.cuda.device_count()) if paddle.is_compiled_with_cuda() else 0
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_device(requested: str) -> None:
    """UsageError unless ``requested`` is auto, cpu, cuda or cuda:N (whether it exists is checked later)."""
    text = requested.strip().lower()
    if text in ("auto", "cpu"):
        return
    if text == "cuda" or text.startswith("cuda:"):
        if not (text.partition(":")[2] or "0").isdigit():
            raise UsageError(f"--device {requested}: expected cuda or cuda:N with N a number")
        return
    raise UsageError(f"--device {requested}: expected auto, cpu, cuda or cuda:N")


def resolve_device(requested: str, count_devices: Callable[[], int] = cuda_devices) -> str:
    """``auto`` → ``cuda:0`` or ``cpu``; validate ``cuda``/``cuda:N`` against the visible devices."""
    check_device(requested)
    text = requested.strip().lower()
    if text == "cpu":
        return "cpu"
    count = count_devices()
    if text == "auto":
        return "cuda:0" if count > 0 else "cpu"
    index = int(text.partition(":")[2] or "0")
    if count == 0:
        raise UsageError(f"--device {requested}: no CUDA device is visible (use --device cpu or auto)")
    if index >= count:
        raise UsageError(f"--device {requested}: only {count} CUDA device(s) visible (cuda:0..cuda:{count - 1})")
    return f"cuda:{index}"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_environment(device: str, budget: CpuBudget | None = None, gpu_name: str | None = None,
                      start_method: str | None = None, framework: str = "torch",
                      rank: RankInfo | None = None) -> Environment:
    """The machine; under torchrun (``rank``), usable CPUs are this rank's share of its node's."""
    import psutil

    budget = budget or cpu_budget(ranks_per_node=rank.local_world_size if rank else 1)
    memory = psutil.virtual_memory()
    try:
        shm_free: int | None = shutil.disk_usage("/dev/shm").free
    except OSError:
        shm_free = None
    return Environment(
        cpu_count=budget.cpu_count,
        usable_cpus=budget.usable,
        cpu_reason=budget.explain(),
        ram_bytes=memory.total,
        available_ram_bytes=memory.available,
        python=platform.python_version(),
        torch=_version("torch"),
        framework=framework,
        paddle=_version("paddlepaddle") or _version("paddlepaddle-gpu"),
        world_size=rank.world_size if rank else 1,
        nodes=rank.nodes if rank else 1,
        local_world_size=rank.local_world_size if rank else 1,
        device=device,
        gpu_name=gpu_name,
        platform=platform.platform(terse=True),
        start_method=start_method,
        shm_free_bytes=shm_free,
        open_files_limit=open_files_limit()[0],
    )


def open_files_limit() -> tuple[int | None, int | None]:
    """Soft and hard RLIMIT_NOFILE (None: unlimited, or not POSIX)."""
    try:
        import resource
    except ImportError:
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    return (None if soft == unlimited else soft), (None if hard == unlimited else hard)
