"""A sweep's settings: planned from what the user asked for (:func:`plan`), then settled once its dataset is
loaded (:func:`resolve_settings`: the framework found, the device, the knobs that exist for both).

Pure: what the machine offers (its CPU budget, its RAM, the CUDA devices) and what loading the dataset found
are measured by the caller and passed in, so every rule here is testable without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from dataprof.decide.threads import INSTALL
from dataprof.decide.workers import at_least, worker_space
from dataprof.errors import UsageError
from dataprof.results.codec import encode
from dataprof.results.document import kept
from dataprof.results.environment import CpuBudget, ProbeReply, RankInfo, UserLoader
from dataprof.results.knobs import DEFAULT_BATCH_SIZE
from dataprof.results.registry import FRAMEWORKS, KNOBS, REGISTRY, START_METHODS, Knob, record_of
from dataprof.results.request import SPLITS, MemoryLimit, SweepOptions, SweepRequest, split_target
from dataprof.results.settings import CACHE_MODES, SweepSettings
from dataprof.results.space import SearchSpace
from dataprof.results.sweep import Report
from dataprof.results.trial import TrialResult
from dataprof.results.vocabulary import DatasetKind, Framework, WorkerKind

FRAMEWORK_OPTIONS = {knob.name: knob.frameworks[0] for knob in REGISTRY if len(knob.frameworks) == 1}
"""Options that exist for one framework's DataLoader only (from the knobs' records)."""


def wrong_framework(option: str, framework: str) -> str:
    """Why ``option`` cannot be given to a ``framework`` sweep, in one line."""
    flag = record_of(option).flag
    if option == "pin_memory":
        return (f"{flag}: paddle.io.DataLoader has no pin_memory argument (Paddle pins batches itself when it "
                "runs on a GPU); sweep use_shared_memory and use_buffer_reader instead")
    if option == "worker_kind":
        return f"{flag}: thread workers load PyTorch datasets (torchdata.nodes); this is a {framework} sweep"
    owner = "paddle.io.DataLoader" if FRAMEWORK_OPTIONS[option] == Framework.PADDLE else "torch.utils.data.DataLoader"
    return f"{flag}: an argument of {owner} only; this is a {framework} sweep"


def settings_for(request: SweepRequest, budget: CpuBudget, available_bytes: int,
                 rank: RankInfo | None = None) -> SweepSettings:
    """The settings a sweep starts with, or a UsageError for what cannot be asked. ``budget``: this process's CPUs
    (each rank's share under torchrun); ``available_bytes``: the node's available RAM, of which a memory limit
    may be a share. The framework, the device and the knobs that depend on them are settled by
    :func:`resolve_settings` once the dataset is loaded."""
    load, options, budgets = request.load, request.sweep, request.budgets
    _check_names(load.target, load.collate_fn, load.framework, load.split)
    budget = pinned(budget, budgets.cpus)
    check_device(budgets.device)
    given = {k.name: getattr(options, k.space_key) for k in REGISTRY if k.name in FRAMEWORK_OPTIONS}
    if WorkerKind.THREAD not in (options.worker_kinds or ()):
        given["worker_kind"] = None  # processes alone: every framework's
    for name, value in given.items():
        if value is not None and load.framework not in ("auto", FRAMEWORK_OPTIONS[name]):
            raise UsageError(wrong_framework(name, load.framework))
    if budgets.cache not in CACHE_MODES:
        raise UsageError(f"--cache {budgets.cache!r}: one of {', '.join(CACHE_MODES)}")
    if budgets.trial_timeout_s <= budgets.trial_seconds:
        raise UsageError(f"--trial-timeout {budgets.trial_timeout_s:g} must be longer than --trial-seconds "
                         f"{budgets.trial_seconds:g}")
    ranks = rank.local_world_size if rank else 1
    return SweepSettings(
        target=load.target, space=_space(options, budget),
        batch_size=DEFAULT_BATCH_SIZE if load.batch_size is None else load.batch_size,
        batch_size_given=load.batch_size is not None, split=load.split, current=options.current,
        current_source=None if options.current is None else "--current", target_kwargs=dict(load.kwargs),
        collate_fn=load.collate_fn, step_ms=budgets.step_ms, device=budgets.device.strip().lower(),
        strategy=options.strategy, trial_seconds=budgets.trial_seconds, trial_timeout_s=budgets.trial_timeout_s,
        memory_limit_bytes=_memory_bytes(budgets.memory_limit, available_bytes // ranks),  # the node's RAM, shared
        shuffle=load.shuffle, rules_of_thumb=options.rules_of_thumb, cwd=load.cwd, framework=load.framework,
        given=tuple(name for name, value in given.items() if value is not None),
        autotune_steps=options.autotune_steps, require_gpu=budgets.require_gpu, rank=rank.rank if rank else 0,
        world_size=rank.world_size if rank else 1, ranks_per_node=ranks, cpus=budgets.cpus,
        cache=budgets.cache)


def pinned(budget: CpuBudget, cpus: int | None) -> CpuBudget:
    """``budget`` with the trials pinned to ``cpus`` of its usable CPUs (``--cpus``): a UsageError for more
    than it has, or fewer than one."""
    if cpus is None:
        return budget
    if not 1 <= cpus <= budget.usable:
        raise UsageError(f"--cpus {cpus}: this process may use {budget.explain()}; give 1 to {budget.usable}")
    return budget.pin(cpus)


def _checked(record: Knob, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """``values`` given for ``record``'s knob, as its record allows: at least its minimum, words among its
    choices (put in their order where its record says), not empty."""
    if record.minimum is not None:
        return at_least(values, record.flag, record.minimum)
    if record.choices and (not values or any(value not in record.choices for value in values)):
        raise UsageError(f"{record.flag} {','.join(values)!r}: expected some of {', '.join(record.choices)}")
    return tuple(v for v in record.choices if v in values) if record.ordered else values


def _space(options: SweepOptions, budget: CpuBudget) -> SearchSpace:
    """The search space the options ask for: each knob's values given (checked), else the values its record
    tries."""
    workers, reason = worker_space(options.workers, budget, options.strategy)
    values: dict[str, Any] = {}
    for record in REGISTRY:
        given = getattr(options, record.space_key)
        values[record.space_key] = tuple(record.tried) if given is None else _checked(record, given)
    forced = tuple(k.name for k in REGISTRY if k.evidence and getattr(options, k.space_key) is not None)
    return SearchSpace(workers=workers, workers_reason=reason, forced=forced, **values)


def _memory_bytes(limit: MemoryLimit, available_bytes: int) -> int:
    """The limit in bytes: as given, or its share of ``available_bytes``."""
    if limit.bytes is not None and limit.bytes > 0:
        return limit.bytes
    if limit.share is not None and 0 < limit.share <= 1:
        return int(available_bytes * limit.share)
    raise UsageError(f"--memory-limit: {limit} is not a size (use bytes, 3GB, 512MiB or a percentage like 80%)")


def _check_names(target: str, collate_fn: str | None, framework: str, split: str) -> None:
    """UsageError for a malformed TARGET or --collate-fn, or an unknown --framework or --split."""
    split_target(target)
    if collate_fn is not None:
        split_target(collate_fn)
    if framework not in ("auto", *FRAMEWORKS):
        raise UsageError(f"--framework {framework}: expected auto, torch or paddle")
    if split not in SPLITS:
        raise UsageError(f"--split {split}: expected one of {', '.join(SPLITS)}")


def resolve_settings(settings: SweepSettings, reply: ProbeReply, count_devices: Callable[[str], int],
                     rank: RankInfo | None = None) -> SweepSettings:
    """Settle the framework the host found, the device, and the knobs that exist for both.

    ``reply``: what the probe found (the framework, the DataLoader's arguments, a DataLoader target's own
    block); ``count_devices(framework)``: the CUDA devices it sees
    (``measure.environment.cuda_devices``). On the simulated device pin_memory is
    not swept; a Paddle knob the installed DataLoader lacks is skipped. Under
    torchrun (``rank``), ``auto`` and ``cuda`` mean the device of ``LOCAL_RANK``.
    """
    framework = reply.framework
    if rank is not None and framework != Framework.TORCH:
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
    if reply.loader:
        settings = settle_loader(settings, reply.loader, reply.batch_samples)
    if settings.require_gpu and not device.startswith("cuda"):
        raise UsageError(f"--require-gpu: no CUDA device is used (--device {settings.device} resolved to "
                         f"{device}); check the driver, CUDA_VISIBLE_DEVICES and the {framework} build")
    space = settings.space
    if framework == Framework.PADDLE:
        accepted = set(reply.loader_arguments or KNOBS["paddle"])
        space = held_where_absent(dataclasses.replace(space, framework="paddle",
                                                      skipped=tuple(k for k in KNOBS["paddle"] if k not in accepted)))
    else:
        # threads are not swept across ranks yet (decide.threads.thread_notes says so)
        space = _torch_space(space, reply if rank is None else dataclasses.replace(reply, thread_loader=None), device)
    if settings.current is not None and settings.current.threads and space.thread_loader is None:
        raise UsageError(f"--current {settings.current.label()}: nothing here loads this target by threads (a "
                         f"map-style Dataset, one rank, and {INSTALL}); give the workers as processes")
    return dataclasses.replace(settings, framework=framework, device=device, space=space)


def held_where_absent(space: SearchSpace) -> SearchSpace:
    """``space`` with every knob its framework lacks, or its installed loader does (``skipped``), held at one
    value: its record's (none for a knob whose values are searched on evidence alone)."""
    held: dict[str, Any] = {knob.space_key: (() if not knob.tried else (knob.held,)) for knob in REGISTRY
            if space.framework not in knob.frameworks or knob.name in space.skipped}
    return dataclasses.replace(space, **held)


def _torch_space(space: SearchSpace, reply: ProbeReply, device: str) -> SearchSpace:
    """PyTorch's space on this machine: pin_memory only with a GPU; ``in_order`` and ``multiprocessing_context``
    skipped where the installed DataLoader lacks them (a forced one is reported skipped, not faked); the
    start method in effect and those the platform offers; a forced start method it lacks is a UsageError."""
    accepted = set(reply.loader_arguments or KNOBS["torch"])
    skipped = tuple(k.name for k in REGISTRY
                    if k.keyword and Framework.TORCH in k.frameworks and k.name not in accepted)
    available = reply.start_methods or START_METHODS
    missing = [m for m in space.start_methods if m not in available]
    if missing and "multiprocessing_context" not in skipped:
        raise UsageError(f"--start-method {','.join(missing)}: not offered here (this platform has "
                         f"{', '.join(available)})")
    space = held_where_absent(dataclasses.replace(space, framework="torch", skipped=skipped))
    return dataclasses.replace(
        space, pin_memory=space.pin_memory if device != "cpu" else (False,),  # pinning needs an accelerator
        forced=tuple(k for k in space.forced if k not in skipped),
        start_method=reply.start_method, available_start_methods=available,
        **thread_facts(space, reply))


def thread_facts(space: SearchSpace, reply: ProbeReply) -> dict[str, Any]:
    """What the probe found for thread workers (what builds them, how much of a sample releases the GIL), and
    the worker kinds left to sweep: threads are dropped where nothing can load the target by threads (an
    IterableDataset, a DataLoader target, neither library installed: the report's notes say why), and a sweep
    of threads alone sweeps processes then."""
    mapped = reply.kind == DatasetKind.MAP and not reply.loader
    loader = reply.thread_loader if mapped else None  # threads load a map-style Dataset target
    kinds = space.worker_kinds if loader is not None else tuple(k for k in space.worker_kinds if k != WorkerKind.THREAD)
    return {"thread_loader": loader, "gil_release": reply.gil_release, "gil_release_high": reply.gil_release_high,
            "free_threaded": reply.free_threaded,
            "worker_kinds": kinds if kinds or not space.worker_kinds else ("process",)}


def settle_loader(settings: SweepSettings, loader: UserLoader, batch_samples: int | None) -> SweepSettings:
    """A DataLoader target's own batch size, order and settings (``loader``: the probe's ``loader`` block);
    a UsageError for an option that would contradict what the loader keeps."""
    name = loader.name
    if settings.current is not None:
        raise UsageError(f"--current: {name} carries its own settings; --current is for a Dataset target")
    for flag, value in (("--shuffle", settings.shuffle), ("--drop-last", settings.drop_last)):
        if value:
            raise UsageError(f"{flag}: {name} keeps its own sampler and drop_last; set them where the loader "
                             "is built")
    if settings.batch_size_given and loader.batch_sampler:
        raise UsageError(f"--batch-size {settings.batch_size}: {name} takes its batches from its batch_sampler "
                         f"({loader.batch_sampler}), which decides their size and wins; drop --batch-size")
    batch_size = settings.batch_size if settings.batch_size_given else loader.batch_size or batch_samples or 1
    return dataclasses.replace(settings, batch_size=batch_size, shuffle=loader.shuffle, drop_last=loader.drop_last,
                               current=loader.current, current_source=loader.origin or name)


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


RESUME_KEYS = ("framework", "batch_size", "step_ms", "device", "trial_seconds", "shuffle", "drop_last", "collate_fn",
               "target_kwargs", "cpus")
"""Settings that change what a trial measures: a resumed sweep must match them."""


def resumable_trials(previous: Report, settings: SweepSettings) -> tuple[TrialResult, ...]:
    """The saved trials, if they were measured with the same target and settings."""
    if previous.target != settings.target:
        raise UsageError(f"--resume: the saved run profiled {previous.target}, not {settings.target}")
    current = encode(settings)
    # a document saved before Paddle support holds no framework: PyTorch's
    saved = {"framework": "torch", **kept(encode(previous.settings), previous.settings_keys)}
    for key in RESUME_KEYS:
        if saved.get(key) != current[key]:
            raise UsageError(f"--resume: the saved run used {key}={saved.get(key)!r}, "
                             f"this one {current[key]!r}; start a new sweep or match it")
    return previous.trials
