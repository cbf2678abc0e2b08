"""The command line's option text into typed values, and the sweep's options into SweepSettings (validated).

Pure: what the machine offers (its CPU budget, available RAM) is measured by
the caller and passed in, so every rule here is testable without it.
"""

from __future__ import annotations

import os
from typing import Any

from dataprof.backends.target import SPLITS, parse_kwarg, split_target
from dataprof.decide.settings import FRAMEWORK_OPTIONS, check_device, wrong_framework
from dataprof.errors import UsageError
from dataprof.results.environment import CpuBudget, RankInfo
from dataprof.results.settings import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_PREFETCH_FACTORS,
    EVIDENCE_KNOBS,
    FRAMEWORKS,
    KNOBS,
    START_METHODS,
    LoaderConfig,
    SearchSpace,
    SweepSettings,
    adaptive_workers,
    auto_workers,
)


def parse_percent(text: str, name: str) -> float:
    """``10%`` or ``10`` (percent) → 0.10; UsageError otherwise."""
    raw = text.strip().rstrip("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name}: {text!r} is not a percentage (e.g. 10%)") from None
    if not 0 <= value < 100:
        raise UsageError(f"{name}: {text!r} must be between 0% and 100%")
    return value / 100.0


def worker_space(text: str, budget: CpuBudget, strategy: str = "adaptive") -> tuple[tuple[int, ...], str]:
    """``auto`` (from ``budget``, each rank's share under torchrun) or an explicit list, with the reason shown
    in the report."""
    if text.strip().lower() == "auto":
        if strategy == "adaptive":
            values = adaptive_workers(budget.usable)
            return values, (f"auto: climbs 2, 4, 8, … up to {values[-1]} while throughput rises beyond noise "
                            f"and memory, /dev/shm and open files allow; {budget.explain()}")
        values = auto_workers(budget.usable)
        return values, (f"auto: 0, 1, 2, 4, … up to 2× the {budget.explain()}, plus the CPU count; "
                        "latency-bound loaders scale past the cores, CPU-bound ones stop at them")
    return parse_int_list(text, "--workers", minimum=0), "given with --workers"


def build_settings(*, target: str, args: tuple[str, ...], batch_size: int | None, workers: str,
                   prefetch_factor: str | None,
                   pin_memory: str | None, persistent_workers: str, step_ms: float, device: str, strategy: str,
                   trial_seconds: float, trial_timeout: float, memory_limit: str, collate_fn: str | None,
                   shuffle: bool, budget: CpuBudget, available_bytes: int, rules_of_thumb: bool = True,
                   cwd: str | None = None, framework: str = "auto",
                   use_shared_memory: str | None = None, use_buffer_reader: str | None = None,
                   autotune_steps: int = 50, require_gpu: bool = False,
                   rank: RankInfo | None = None, split: str = "train", current: str | None = None,
                   in_order: str | None = None, start_method: str | None = None) -> SweepSettings:
    """Validate the options. ``budget``: this process's CPUs (each rank's share under torchrun);
    ``available_bytes``: the node's available RAM, of which ``--memory-limit`` may be a percentage. The
    framework, the device and the knobs that depend on them are settled by :func:`resolve_settings` once
    the dataset is loaded. ``batch_size`` None: a DataLoader target's own, else 64. ``current``: the
    ``--current`` text, the user's settings for a Dataset target. ``prefetch_factor``, ``in_order``,
    ``start_method``: the ``--prefetch-factor``, ``--in-order`` and ``--start-method`` values (None: the
    defaults, a value other than PyTorch's tried where the measurements say it can matter)."""
    _check_names(target, collate_fn, framework, split)
    kwargs: dict[str, Any] = dict(parse_kwarg(item) for item in args)
    worker_values, reason = worker_space(workers, budget, strategy)
    check_device(device)
    given = {"pin_memory": pin_memory, "use_shared_memory": use_shared_memory, "use_buffer_reader": use_buffer_reader,
             "in_order": in_order, "multiprocessing_context": start_method}
    for name, value in given.items():
        if value is not None and framework not in ("auto", FRAMEWORK_OPTIONS[name]):
            raise UsageError(wrong_framework(name, framework))
    if trial_timeout <= trial_seconds:
        raise UsageError(f"--trial-timeout {trial_timeout:g} must be longer than --trial-seconds {trial_seconds:g}")
    return SweepSettings(
        target=target,
        space=_space(worker_values, reason, given, prefetch_factor=prefetch_factor,
                     persistent_workers=persistent_workers),
        batch_size=DEFAULT_BATCH_SIZE if batch_size is None else batch_size,
        batch_size_given=batch_size is not None,
        split=split,
        current=None if current is None else parse_current(current),
        current_source=None if current is None else "--current",
        target_kwargs=kwargs,
        collate_fn=collate_fn,
        step_ms=step_ms,
        device=device.strip().lower(),
        strategy=strategy,
        trial_seconds=trial_seconds,
        trial_timeout_s=trial_timeout,
        # ranks on a node share its RAM: a percentage is of each rank's share
        memory_limit_bytes=parse_size(memory_limit, available_bytes // (rank.local_world_size if rank else 1)),
        shuffle=shuffle,
        rules_of_thumb=rules_of_thumb,
        cwd=cwd or os.getcwd(),
        framework=framework,
        given=tuple(name for name, value in given.items() if value is not None),
        autotune_steps=autotune_steps,
        require_gpu=require_gpu,
        rank=rank.rank if rank else 0,
        world_size=rank.world_size if rank else 1,
        ranks_per_node=rank.local_world_size if rank else 1,
    )


def _space(workers: tuple[int, ...], reason: str, given: dict[str, str | None], prefetch_factor: str | None,
           persistent_workers: str) -> SearchSpace:
    """The search space the options give (``given``: the knob options that may be left out, by knob)."""
    evidence = {"prefetch_factor": prefetch_factor, **{name: given[name] for name in EVIDENCE_KNOBS}}
    return SearchSpace(
        workers=workers,
        prefetch_factors=parse_int_list(prefetch_factor or DEFAULT_PREFETCH_FACTORS, "--prefetch-factor", minimum=1),
        pin_memory=parse_onoff_list(given["pin_memory"] or "on,off", "--pin-memory"),
        persistent_workers=parse_onoff_list(persistent_workers, "--persistent-workers"),
        workers_reason=reason,
        use_shared_memory=parse_onoff_list(given["use_shared_memory"] or "on,off", "--use-shared-memory"),
        use_buffer_reader=parse_onoff_list(given["use_buffer_reader"] or "on,off", "--use-buffer-reader"),
        in_order=parse_onoff_list(given["in_order"] or "on", "--in-order"),
        start_methods=parse_start_methods(given["multiprocessing_context"]),
        forced=tuple(name for name, value in evidence.items() if value is not None),
    )


def _check_names(target: str, collate_fn: str | None, framework: str, split: str) -> None:
    """UsageError for a malformed TARGET or --collate-fn, or an unknown --framework or --split."""
    split_target(target)
    if collate_fn is not None:
        split_target(collate_fn)
    if framework not in ("auto", *FRAMEWORKS):
        raise UsageError(f"--framework {framework}: expected auto, torch or paddle")
    if split not in SPLITS:
        raise UsageError(f"--split {split}: expected one of {', '.join(SPLITS)}")


def parse_start_methods(text: str | None) -> tuple[str, ...]:
    """``--start-method fork,spawn``; empty when not given."""
    if text is None:
        return ()
    values = tuple(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    wrong = [v for v in values if v not in START_METHODS]
    if wrong or not values:
        raise UsageError(f"--start-method {text!r}: expected some of {', '.join(START_METHODS)}")
    return values


def parse_current(text: str) -> LoaderConfig:
    """``--current "num_workers=8,prefetch_factor=2,persistent_workers=true"``: the user's settings, as the
    DataLoader takes them (a knob left out at the DataLoader's default)."""
    values: dict[str, Any] = {}
    known = sorted({k for knobs in KNOBS.values() for k in knobs})
    for item in (part.strip() for part in text.split(",") if part.strip()):
        key, _, raw = item.partition("=")
        key = key.strip()
        if key not in known or not raw.strip():
            raise UsageError(f"--current {text!r}: expected KNOB=VALUE pairs, KNOB one of {', '.join(known)}")
        if key in ("num_workers", "prefetch_factor"):
            values[key] = parse_int_list(raw, f"--current {key}", minimum=0 if key == "num_workers" else 1)[0]
        else:
            values[key] = parse_onoff_list(raw, f"--current {key}")[0]
    if "num_workers" not in values:
        raise UsageError(f"--current {text!r}: give num_workers (e.g. num_workers=8,prefetch_factor=2)")
    paddle = "use_shared_memory" in values or "use_buffer_reader" in values
    space = SearchSpace(workers=(values["num_workers"],), framework="paddle" if paddle else "torch")
    return space.config(values["num_workers"], pin=values.get("pin_memory", False),
                        prefetch=values.get("prefetch_factor", 2), persistent=values.get("persistent_workers", False),
                        shared_memory=values.get("use_shared_memory", True),
                        buffer_reader=values.get("use_buffer_reader", True))


def parse_int_list(text: str, name: str, minimum: int) -> tuple[int, ...]:
    """Parse ``"0,2,4"``; raise UsageError naming the option on bad input."""
    items = [item.strip() for item in text.split(",")]
    values: list[int] = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise UsageError(
                f"{name}: {item!r} is not an integer (expected a comma-separated list like 2,4)"
            ) from None
        if value < minimum:
            raise UsageError(f"{name}: {value} is below the minimum of {minimum}")
        values.append(value)
    return tuple(dict.fromkeys(values))


_ON = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}


def parse_onoff_list(text: str, name: str) -> tuple[bool, ...]:
    """Parse ``"on,off"`` into booleans; raise UsageError on anything else."""
    values: list[bool] = []
    for item in (part.strip().lower() for part in text.split(",")):
        if item not in _ON:
            raise UsageError(f"{name}: {item!r} is not on or off (expected e.g. on,off)")
        values.append(_ON[item])
    return tuple(dict.fromkeys(values))


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str, available_bytes: int, name: str = "--memory-limit") -> int:
    """Parse ``3GB``, ``512MiB``, ``1e9`` or ``80%`` (of available RAM) into bytes."""
    raw = text.strip().upper().replace(" ", "")
    try:
        if raw.endswith("%"):
            percent = float(raw[:-1])
            if not 0 < percent <= 100:
                raise ValueError
            return int(available_bytes * percent / 100)
        number = raw.rstrip("KMGTIB")
        unit = raw[len(number):]
        value = float(number) * _UNITS[unit]
    except (ValueError, KeyError):
        raise UsageError(
            f"{name}: {text!r} is not a size (use bytes, 3GB, 512MiB or a percentage like 80%)"
        ) from None
    if value <= 0:
        raise UsageError(f"{name}: {text!r} must be positive")
    return int(value)
