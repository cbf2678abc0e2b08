"""Turn the sweep command's option strings into SweepSettings (validated)."""

from __future__ import annotations

import os
from typing import Any

from dataprof.config import (
    SearchSpace,
    SweepSettings,
    adaptive_workers,
    auto_workers,
    cpu_budget,
    parse_int_list,
    parse_onoff_list,
    parse_size,
)
from dataprof.errors import UsageError
from dataprof.measure.environment import resolve_device
from dataprof.target import parse_kwarg, split_target


def worker_space(text: str, strategy: str = "adaptive") -> tuple[tuple[int, ...], str]:
    """``auto`` or an explicit list, with the reason shown in the report."""
    if text.strip().lower() == "auto":
        budget = cpu_budget()
        if strategy == "adaptive":
            values = adaptive_workers(budget.usable)
            return values, (f"auto: climbs 2, 4, 8, … up to {values[-1]} while throughput rises beyond noise "
                            f"and memory, /dev/shm and open files allow; {budget.explain()}")
        values = auto_workers(budget.usable)
        return values, (f"auto: 0, 1, 2, 4, … up to 2× the {budget.explain()}, plus the CPU count; "
                        "latency-bound loaders scale past the cores, CPU-bound ones stop at them")
    return parse_int_list(text, "--workers", minimum=0), "given with --workers"


def build_settings(*, target: str, args: tuple[str, ...], batch_size: int, workers: str, prefetch_factor: str,
                   pin_memory: str, persistent_workers: str, step_ms: float, device: str, strategy: str,
                   trial_seconds: float, trial_timeout: float, memory_limit: str, collate_fn: str | None,
                   shuffle: bool, rules_of_thumb: bool = True, cwd: str | None = None,
                   available_bytes: int | None = None) -> SweepSettings:
    split_target(target)
    if collate_fn is not None:
        split_target(collate_fn)
    kwargs: dict[str, Any] = dict(parse_kwarg(item) for item in args)
    worker_values, reason = worker_space(workers, strategy)
    resolved = resolve_device(device)
    pins = parse_onoff_list(pin_memory, "--pin-memory") if resolved != "cpu" else (False,)
    if available_bytes is None:
        import psutil

        available_bytes = int(psutil.virtual_memory().available)
    if trial_timeout <= trial_seconds:
        raise UsageError(f"--trial-timeout {trial_timeout:g} must be longer than --trial-seconds {trial_seconds:g}")
    return SweepSettings(
        target=target,
        space=SearchSpace(
            workers=worker_values,
            prefetch_factors=parse_int_list(prefetch_factor, "--prefetch-factor", minimum=1),
            pin_memory=pins,
            persistent_workers=parse_onoff_list(persistent_workers, "--persistent-workers"),
            workers_reason=reason,
        ),
        batch_size=batch_size,
        target_kwargs=kwargs,
        collate_fn=collate_fn,
        step_ms=step_ms,
        device=resolved,
        strategy=strategy,
        trial_seconds=trial_seconds,
        trial_timeout_s=trial_timeout,
        memory_limit_bytes=parse_size(memory_limit, available_bytes),
        shuffle=shuffle,
        rules_of_thumb=rules_of_thumb,
        cwd=cwd or os.getcwd(),
    )
