"""What a user asks a sweep for, as typed data: what to load, what to sweep, the budgets of each trial.

The command line (its click ParamTypes) and the Python API both build a :class:`SweepRequest`; nothing below
them parses option text. ``decide.settings.plan`` checks it and turns it, with what the machine offers, into
the :class:`~dataprof.results.settings.SweepSettings` the sweep runs with.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dataprof.errors import UsageError
from dataprof.results.knobs import LoaderConfig
from dataprof.results.registry import KNOBS, REGISTRY, WORKER_KINDS
from dataprof.results.space import SearchSpace
from dataprof.results.vocabulary import Framework, WorkerKind


def split_target(text: str) -> tuple[str, str]:
    """Split ``module_or_file:attr``; raise UsageError when malformed."""
    where, sep, attr = text.rpartition(":")
    if not sep or not where or not attr:
        raise UsageError(
            f"target {text!r}: expected MODULE:ATTR or path/to/file.py:ATTR, e.g. mypkg.data:MyDataset"
        )
    return where, attr


SPLITS = {"train": "fit", "val": "fit", "test": "test", "predict": "predict"}
"""``--split``: the DataModule's ``<split>_dataloader()``, and the stage its ``setup`` is called with (as
Lightning's Trainer does: ``fit`` prepares both the train and the val loaders)."""



@dataclass(frozen=True)
class LoadOptions:
    """What to load and how to batch it (TARGET, ``--arg``, ``--collate-fn``, ``--framework``, ``--split``,
    ``--batch-size``, ``--shuffle``)."""

    target: str
    """Import path ``pkg.mod:attr`` or ``path/file.py:attr``, or the name of an object the Python API hands over."""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for a class or factory target."""
    collate_fn: str | None = None
    framework: str = "auto"
    split: str = "train"
    batch_size: int | None = None
    """None: a DataLoader target's own, else 64."""
    shuffle: bool = False
    cwd: str = field(default_factory=os.getcwd)
    """Directory put first on ``sys.path`` when the target is imported."""


@dataclass(frozen=True)
class SweepOptions:
    """What to sweep: each knob's values (None: the default, tried on evidence where the search does so), the
    strategy, and what is measured beside it for comparison."""

    workers: tuple[int, ...] | None = None
    """None: ``auto``, from the usable CPUs."""
    prefetch_factors: tuple[int, ...] | None = None
    pin_memory: tuple[bool, ...] | None = None
    persistent_workers: tuple[bool, ...] = (True,)
    use_shared_memory: tuple[bool, ...] | None = None
    use_buffer_reader: tuple[bool, ...] | None = None
    in_order: tuple[bool, ...] | None = None
    reader_buffer_sizes: tuple[int, ...] | None = None
    start_methods: tuple[str, ...] | None = None
    """``multiprocessing_context`` values."""
    worker_kinds: tuple[str, ...] | None = None
    """``--worker-kind``: ``process``, ``thread`` or both; None: threads where the evidence calls for them."""
    strategy: str = "adaptive"
    rules_of_thumb: bool = True
    autotune_steps: int = 50
    """Paddle: ``tuning_steps`` of Paddle's own autotune, run for comparison."""
    current: LoaderConfig | None = None
    """The user's own settings for a Dataset target (``--current``)."""


@dataclass(frozen=True)
class MemoryLimit:
    """A trial's memory limit: bytes, or a share of the available RAM (of each rank's share under torchrun)."""

    bytes: int | None = None
    share: float | None = None


@dataclass(frozen=True)
class TrialBudgets:
    """How each trial runs and what ends it: the model step, the device, the window, the timeout, the memory."""

    step_ms: float = 0.0
    device: str = "auto"
    require_gpu: bool = False
    trial_seconds: float = 3.0
    trial_timeout_s: float = 60.0
    memory_limit: MemoryLimit = MemoryLimit(share=0.8)
    cpus: int | None = None
    """Pin the trials to this many of the usable CPUs (``--cpus``); None: all of them."""
    cache: str = "auto"
    """``--cache``: when to measure cold (``SweepSettings.cache``)."""


@dataclass(frozen=True)
class SweepRequest:
    """Everything a sweep is asked for (its CI gates apart: ``decide.gates.Gates``)."""

    load: LoadOptions
    sweep: SweepOptions = SweepOptions()
    budgets: TrialBudgets = TrialBudgets()


def current_config(values: Mapping[str, Any]) -> LoaderConfig:
    """The user's own settings (``--current``, or the API's ``current``), as the DataLoader takes them: a knob
    left out at the DataLoader's default; a Paddle knob makes them Paddle's; ``worker_kind=thread``, PyTorch's
    workers as threads of the one process (:meth:`LoaderConfig.as_threads`)."""
    known = sorted({k for knobs in KNOBS.values() for k in knobs} | {"worker_kind"})
    unknown = [key for key in values if key not in known]
    if unknown:
        raise UsageError(f"--current: {', '.join(unknown)} is not a knob (one of {', '.join(known)})")
    if "num_workers" not in values:
        raise UsageError("--current: give num_workers (e.g. num_workers=8,prefetch_factor=2)")
    minimums = {"num_workers": 0, **{k.name: k.minimum for k in REGISTRY if k.minimum is not None}}
    for key, minimum in minimums.items():
        if key in values and values[key] < minimum:
            raise UsageError(f"--current {key}: {values[key]} is below the minimum of {minimum}")
    paddle = any(knob.frameworks == (Framework.PADDLE,) for knob in REGISTRY if knob.name in values)
    kind = values.get("worker_kind", WorkerKind.PROCESS.value)
    if kind not in WORKER_KINDS:
        raise UsageError(f"--current worker_kind: {kind!r} is not one of {', '.join(WORKER_KINDS)}")
    thread = kind == WorkerKind.THREAD
    apart = [k for k in ("persistent_workers", "multiprocessing_context") if thread and values.get(k)]
    if thread and paddle:
        raise UsageError("--current worker_kind=thread: thread workers load PyTorch datasets; these are Paddle's knobs")
    if apart:
        raise UsageError(f"--current worker_kind=thread: threads of the one process take no {' nor '.join(apart)} "
                         f"(worker processes' settings); drop {'it' if len(apart) == 1 else 'them'}")
    space = SearchSpace(workers=(values["num_workers"],), framework=Framework.PADDLE if paddle else Framework.TORCH)
    return space.config(values["num_workers"], thread=thread, **{
        "persistent_workers": False,  # the DataLoader's default
        **{k: v for k, v in values.items() if k not in ("num_workers", "worker_kind")}})
