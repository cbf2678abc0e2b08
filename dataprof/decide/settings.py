"""Settle a sweep's settings once its dataset is loaded: the framework found, the device, and the knobs that
exist for both.

Pure: what the machine offers (the CUDA devices) and what loading the dataset
found are measured by the caller and passed in, so every rule here is testable without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from dataprof.errors import UsageError
from dataprof.results.environment import RankInfo
from dataprof.results.settings import EVIDENCE_KNOBS, KNOBS, START_METHODS, LoaderConfig, SearchSpace, SweepSettings

FRAMEWORK_OPTIONS = {"pin_memory": "torch", "use_shared_memory": "paddle", "use_buffer_reader": "paddle",
                     "in_order": "torch", "multiprocessing_context": "torch"}
"""Options that exist for one framework's DataLoader only."""


def wrong_framework(option: str, framework: str) -> str:
    """Why ``option`` cannot be given to a ``framework`` sweep, in one line."""
    flag = "--start-method" if option == "multiprocessing_context" else "--" + option.replace("_", "-")
    if option == "pin_memory":
        return (f"{flag}: paddle.io.DataLoader has no pin_memory argument (Paddle pins batches itself when it "
                "runs on a GPU); sweep use_shared_memory and use_buffer_reader instead")
    owner = "paddle.io.DataLoader" if FRAMEWORK_OPTIONS[option] == "paddle" else "torch.utils.data.DataLoader"
    return f"{flag}: an argument of {owner} only; this is a {framework} sweep"


def resolve_settings(settings: SweepSettings, host_info: dict[str, Any], count_devices: Callable[[str], int],
                     rank: RankInfo | None = None) -> SweepSettings:
    """Settle the framework the host found, the device, and the knobs that exist for both.

    ``host_info``: what loading the dataset reported (``framework``, the
    DataLoader's ``loader_arguments``); ``count_devices(framework)``: the CUDA devices it sees
    (``measure.environment.cuda_devices``). On the simulated device pin_memory is
    not swept; a Paddle knob the installed DataLoader lacks is skipped. Under
    torchrun (``rank``), ``auto`` and ``cuda`` mean the device of ``LOCAL_RANK``.
    """
    framework = host_info.get("framework", "torch")
    if rank is not None and framework != "torch":
        raise UsageError("a distributed sweep runs torch.distributed ranks; sweep a Paddle dataset without "
                         "torchrun or --nproc-per-node")
    for name in settings.given:
        if FRAMEWORK_OPTIONS[name] != framework:
            raise UsageError(wrong_framework(name, framework))
    requested = settings.device
    if rank is not None and requested in ("auto", "cuda"):
        count = count_devices(framework)
        requested = f"cuda:{rank.local_rank % count}" if count else ("cpu" if requested == "auto" else requested)
    device = resolve_device(requested, lambda: count_devices(framework))
    if settings.current is not None and settings.current.framework != framework:
        raise UsageError(f"--current: {settings.current.label()} names {settings.current.framework}'s knobs; "
                         f"this is a {framework} DataLoader")
    if host_info.get("loader"):
        settings = settle_loader(settings, host_info["loader"], host_info.get("batch_samples"))
    if settings.require_gpu and not device.startswith("cuda"):
        raise UsageError(f"--require-gpu: no CUDA device is used (--device {settings.device} resolved to "
                         f"{device}); check the driver, CUDA_VISIBLE_DEVICES and the {framework} build")
    space = settings.space
    if framework == "paddle":
        accepted = set(host_info.get("loader_arguments") or KNOBS["paddle"])
        skipped = tuple(k for k in KNOBS["paddle"] if k not in accepted)
        space = dataclasses.replace(
            space, framework="paddle", pin_memory=(False,), skipped=skipped,
            prefetch_factors=(2,) if "prefetch_factor" in skipped else space.prefetch_factors,
            persistent_workers=(False,) if "persistent_workers" in skipped else space.persistent_workers,
            use_shared_memory=(True,) if "use_shared_memory" in skipped else space.use_shared_memory,
            use_buffer_reader=(True,) if "use_buffer_reader" in skipped else space.use_buffer_reader)
    else:
        space = _torch_space(space, host_info, device)
    return dataclasses.replace(settings, framework=framework, device=device, space=space)


def _torch_space(space: SearchSpace, host_info: dict[str, Any], device: str) -> SearchSpace:
    """PyTorch's space on this machine: pin_memory only with a GPU; ``in_order`` and ``multiprocessing_context``
    skipped where the installed DataLoader lacks them (a forced one is reported skipped, not faked); the
    start method in effect and those the platform offers; a forced start method it lacks is a UsageError."""
    accepted = set(host_info.get("loader_arguments") or KNOBS["torch"])
    skipped = tuple(k for k in EVIDENCE_KNOBS if k not in accepted)
    available = tuple(host_info.get("start_methods") or START_METHODS)
    missing = [m for m in space.start_methods if m not in available]
    if missing and "multiprocessing_context" not in skipped:
        raise UsageError(f"--start-method {','.join(missing)}: not offered here (this platform has "
                         f"{', '.join(available)})")
    return dataclasses.replace(
        space, framework="torch", use_shared_memory=(True,), use_buffer_reader=(True,),
        pin_memory=space.pin_memory if device != "cpu" else (False,), skipped=skipped,
        in_order=(True,) if "in_order" in skipped else space.in_order,
        start_methods=() if "multiprocessing_context" in skipped else space.start_methods,
        forced=tuple(k for k in space.forced if k not in skipped),
        start_method=host_info.get("start_method"), available_start_methods=available)


def settle_loader(settings: SweepSettings, loader: dict[str, Any], batch_samples: int | None) -> SweepSettings:
    """A DataLoader target's own batch size, order and settings (``loader``: the probe's ``loader`` block);
    a UsageError for an option that would contradict what the loader keeps."""
    name = loader["class"].rpartition(".")[2]
    if settings.current is not None:
        raise UsageError(f"--current: {name} carries its own settings; --current is for a Dataset target")
    for flag, value in (("--shuffle", settings.shuffle), ("--drop-last", settings.drop_last)):
        if value:
            raise UsageError(f"{flag}: {name} keeps its own sampler and drop_last; set them where the loader "
                             "is built")
    if settings.batch_size_given and loader.get("batch_sampler"):
        raise UsageError(f"--batch-size {settings.batch_size}: {name} takes its batches from its batch_sampler "
                         f"({loader['batch_sampler']}), which decides their size and wins; drop --batch-size")
    batch_size = settings.batch_size if settings.batch_size_given else \
        loader.get("batch_size") or batch_samples or 1
    return dataclasses.replace(settings, batch_size=batch_size, shuffle=bool(loader.get("shuffle")),
                               drop_last=bool(loader.get("drop_last")),
                               current=LoaderConfig.from_dict(loader["current"]),
                               current_source=loader.get("origin") or name)


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


def resolve_device(requested: str, count_devices: Callable[[], int]) -> str:
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


