"""The watched script's recorder: every loader's identity and settings, and each batch's timings, sent to the
parent (``measure.watch.watcher``) as JSON lines; it ends the script's loop at the watch's limits."""

from __future__ import annotations

import inspect
import multiprocessing
import operator
import os
import sys
import time
import weakref
from typing import Any

from dataprof.measure.protocol import Channel
from dataprof.measure.watch.changes import nodes_knobs, pipeline, streams
from dataprof.measure.watch.events import (
    Batches,
    BuiltLoader,
    Device,
    Factory,
    LoaderBuilt,
    Replayed,
    WindowEnd,
    WindowOpen,
    said,
)
from dataprof.measure.watch.handoff import Handoff
from dataprof.measure.watch.ranks import RankEnd
from dataprof.measure.watch.sites import Origin, library, relative
from dataprof.results.knobs import TORCH_THREAD_ARGUMENT, KnobValues, LoaderConfig
from dataprof.results.registry import REGISTRY
from dataprof.results.vocabulary import Framework, WorkerKind

FLUSH_S = 0.5
"""How often each loader's new batch timings are sent to the parent."""
MAX_RECORDED = 200_000
"""Batches per loader whose timings are kept; past it, batches are counted only."""


class Recorder:
    """Every watched loader's timings, sent to the parent in batches of events."""

    def __init__(self, channel: Channel, max_steps: int | None, seconds: float | None,
                 clock: Any = time.perf_counter, from_first_batch: bool = False,
                 ranks: RankEnd | None = None, from_replay: bool = False,
                 training: tuple[str | None, str | None] | None = None) -> None:
        self.channel = channel
        self.handoff = Handoff(self)
        """Batches a thread of the script's own hands the training through a queue: timed where it takes them."""
        self.pid = os.getpid()
        """The watched process (a process the script forks inherits the recorder, and records nothing)."""
        self.training = training
        """Where the window counts only the training's batches (``tune``): those of the loader at ``site`` (of
        ``split``) when it is named, else those of a loader its framework names the training split, or of no named
        split asked for with autograd on; an evaluation before the training neither opens nor ends the window.
        None: every loader's batches count (``run``)."""
        self.max_steps = max_steps
        self.seconds = seconds
        """With ``from_first_batch``, the deadline is set at the first batch: a window after the start-up."""
        self.from_replay = from_replay
        """The window (``seconds``, ``max_steps``) opens when a replay begins, not before: the headspace times
        replayed batches whatever it took to keep them."""
        self.replay_from: dict[int, int] = {}
        """Per replayed loader: the batches it had delivered when its replay began."""
        self.deadline = None if seconds is None or from_first_batch or from_replay else clock() + seconds
        self.clock = clock
        self.ranks = ranks if seconds is not None else None
        """In a job of several ranks: the time limit ends every rank at the batch rank 0 names (steps agree)."""
        self.loaders: dict[int, BuiltLoader] = {}
        self.batches: dict[int, int] = {}
        """Batches each loader delivered."""
        self.pending: dict[int, list[list[float]]] = {}
        self.last_flush = clock()
        self.ended: str | None = None
        self.opened = False
        """Whether a batch counted toward the window has come (the training's first)."""
        self.device_sent = False
        self.overridden = 0
        """Loaders built with the watch's knobs (``--override``)."""
        self.objects: dict[int, Any] = {}
        """Each loader number's latest object (a weak reference where it can be one)."""
        self.epochs: dict[int, int] = {}
        """Epochs begun per loader number."""
        self.replays: dict[int, Any] = {}
        """Each replayed loader number's kept batches (a loader built again each epoch keeps the first's)."""
        self.finished: set[int] = set()
        """Loader numbers whose last epoch ran out and none has begun since."""
        self.lost: dict[int, dict[str, Any]] = {}
        """Per loader number: the knobs the watch set that the loader no longer has when first iterated."""

    def number_of(self, loader: Any, site: str, split: str | None) -> int | None:
        """The number of a loader built at the same place before and gone since, or, of a split its framework
        named, done with its last epoch (a loader built again each epoch, a framework's for each evaluation, is
        one loader, its epochs counted on); None when there is none (two loaders built at one line stay two)."""
        for number, info in self.loaders.items():
            if info.site == site and info.split == split and \
                    (_gone(self.objects.get(number)) or (split is not None and number in self.finished)):
                self.objects[number] = _weak(loader)
                return number
        return None

    def register(self, loader: Any, where: Origin, factory: Factory, threads: LoaderConfig | None = None) -> int:
        """A new DataLoader: its identity, settings (``threads``: the watch's thread pipeline stands in for its
        workers), where it was built, the split it serves and the functions that built it (:func:`loader_factory`;
        the libraries on the way), sent at once; its number."""
        number = len(self.loaders)
        self.objects[number] = _weak(loader)
        self.epochs[number] = 0
        dataset, batch_size = _batching(loader)
        info = BuiltLoader(where.site, type(dataset).__name__, type(dataset).__module__, _source_file(type(dataset)),
                           type(loader).__name__, _framework(loader).value, batch_size=batch_size,
                           dataset_library=_library(type(dataset)),
                           iterable=streams(loader), start_method_chosen=_start_method_chosen(loader),
                           split=where.split, built_by=where.built_by, factory=factory, **loader_knobs(loader, threads))
        self.loaders[number], self.batches[number], self.pending[number] = info, 0, []
        self.channel.send(said(LoaderBuilt(number, info)))
        return number

    def batch(self, number: int, epoch: int, index: int, wait_s: float, step_s: float | None, size: int) -> None:
        """One batch delivered: ``index`` within its epoch, the wait (s), the step before it (s), its samples,
        when it arrived (s on this process's clock), and whether autograd was on as it was asked for (a training
        loop's, not an evaluation's under ``no_grad``)."""
        self.batches[number] += 1
        delivered = self.batches[number]
        now = self.clock()
        counted = self.counts(number)
        if counted and not self.opened:  # the training's first batch: the parent's start-up allowance is spent
            self.opened = True
            self.channel.send(said(WindowOpen()))
        if self.deadline is None and self.seconds is not None and not self.from_replay and counted:
            self.deadline = now + self.seconds
        if delivered <= MAX_RECORDED:
            self.pending[number].append([epoch, index, wait_s, -1.0 if step_s is None else step_s, size, now,
                                         _grad()])
        if now - self.last_flush >= FLUSH_S:
            self.flush()
            self.report_device()
        if self.ended is None and counted and (not self.from_replay or number in self.replay_from):
            if self.max_steps is not None and delivered - self.replay_from.get(number, 0) >= self.max_steps:
                self.ended = f"--max-steps {self.max_steps} reached"
            elif self.ranks is not None:
                if self.ranks.reached(number, delivered, self.deadline is not None and now >= self.deadline):
                    self.ended = "--seconds reached"
            elif self.deadline is not None and now >= self.deadline:
                self.ended = "--seconds reached"
            if self.ended is not None:  # the parent times how long the script takes to end from here
                self.channel.send(said(WindowEnd()))

    def counts(self, number: int) -> bool:
        """Whether loader ``number``'s batch, delivered now, counts toward the window (:attr:`training`)."""
        if self.training is None:
            return True
        info = self.loaders[number]
        site, split = self.training
        if site is not None:
            return (info.site == site or info.site.endswith("/" + site)) and (split is None or info.split == split)
        return info.split == "train" or (info.split is None and bool(_grad()))

    def replayed(self, number: int) -> None:
        """Loader ``number``'s replay begins: the batches it delivered so far were loaded, not free."""
        self.flush()
        self.replay_from[number] = self.batches[number]
        if self.from_replay and self.seconds is not None:
            self.deadline = self.clock() + self.seconds
        self.channel.send(said(Replayed(number, self.batches[number])))

    def report_device(self) -> None:
        """Once the script has initialised CUDA: which device it uses, for the parent's NVML probe."""
        cuda = getattr(sys.modules.get("torch"), "cuda", None)
        if self.device_sent or cuda is None or not cuda.is_initialized():
            return
        from dataprof.measure.consumer import torch_device_ids

        self.device_sent = True
        try:
            self.channel.send(said(Device(f"cuda:{cuda.current_device()}",
                                          **torch_device_ids(sys.modules["torch"], cuda.current_device()))))
        except Exception:  # noqa: S110  (no device to name: the GPU fields stay null)
            pass

    def flush(self) -> None:
        """Send the batches recorded since the last flush."""
        self.last_flush = self.clock()
        for number, rows in self.pending.items():
            if rows:
                self.channel.send(said(Batches(number, rows)))
                self.pending[number] = []


def _batching(loader: Any) -> tuple[Any, int | None]:
    """The dataset ``loader`` draws from and its batch size: a DataLoader's own, a ``torchdata.nodes`` pipeline's
    batch sampler's (its SamplerWrapper's)."""
    if not hasattr(loader, "root"):
        return getattr(loader, "dataset", None), _count(getattr(loader, "batch_size", None))
    wrapper = next((node for node in pipeline(loader) if type(node).__name__ == "SamplerWrapper"), None)
    sampler = getattr(wrapper, "sampler", None)  # a batch sampler, over the sampler of the dataset
    dataset = getattr(getattr(sampler, "sampler", sampler), "data_source", None)
    return dataset, _count(getattr(sampler, "batch_size", None))


def loader_knobs(loader: Any, threads: LoaderConfig | None) -> dict[str, Any]:
    """``loader``'s knobs as a run's loader record holds them (:class:`BuiltLoader`'s fields), each read as its
    record says: off a DataLoader, off the node of a ``torchdata.nodes`` pipeline its record places it in
    (:func:`nodes_knobs`), or the watch's thread pipeline's where that stands in for the loader's workers
    (``threads``). Each goes under its record's field (``Knob.reported``), else in ``other_knobs`` where it is
    away from the loader's default; on thread workers, only the knobs threads take. The start method is how
    worker processes start in effect: the loader's, else the process's, else the platform's default."""
    framework = _framework(loader)
    if threads is not None:
        values = {**{k.name: threads.value(k.name) for k in REGISTRY if k.threads}, "num_workers": threads.num_workers,
                  "prefetch_factor": threads.prefetch, "worker_kind": WorkerKind.THREAD.value}
    elif hasattr(loader, "root"):
        values = nodes_knobs(loader)
    else:
        values = {"num_workers": _count(getattr(loader, "num_workers", None)),
                  **{k.name: k.read_off(loader) for k in REGISTRY if k.keyword and framework in k.frameworks}}
        if getattr(loader, TORCH_THREAD_ARGUMENT, None) == WorkerKind.THREAD:
            values["worker_kind"] = WorkerKind.THREAD.value
    knobs = KnobValues(values)
    workers, idle = knobs.workers, REGISTRY.idle(knobs.workers)
    found: dict[str, Any] = {"num_workers": knobs.value("num_workers"), "prefetch_factor": None,
                             "persistent_workers": None, "pin_memory": None, "other_knobs": {}}
    for knob in REGISTRY:
        if knob.name not in knobs or (knobs.threads and not knob.threads and knob.name != "worker_kind"):
            continue
        value = knobs[knob.name]
        if knob.name == "multiprocessing_context":  # torch's, and read only for worker processes (not threads)
            found["start_method"] = None if not workers else \
                value or multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
        elif knob.reported is not None:
            found[knob.reported] = value
        elif value is not None and value != knob.loader_default and knob.name not in idle:
            found["other_knobs"][knob.name] = value
    return found


def _count(value: Any) -> int | None:
    """A loader's attribute as a count (its batch size, its workers); None where it is none (a subclass's own
    attribute of another kind)."""
    try:
        return None if value is None or isinstance(value, bool) else operator.index(value)
    except TypeError:
        return None


def _framework(loader: Any) -> Framework:
    """Whose DataLoader ``loader`` is, by the package its class comes from (PyTorch's, unless Paddle's)."""
    package = type(loader).__module__.partition(".")[0]
    return Framework.PADDLE if package == Framework.PADDLE else Framework.TORCH


def _start_method_chosen(loader: Any) -> bool:
    """Whether the script chose how ``loader``'s workers start: its ``multiprocessing_context``, or the process's
    start method set (``multiprocessing.set_start_method``), not left to the platform."""
    if getattr(loader, "multiprocessing_context", None) is not None:
        return True
    return multiprocessing.get_start_method(allow_none=True) is not None


def _source_file(cls: type) -> str | None:
    """The file defining ``cls``, relative to the current directory when under it; None if unknown."""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if not path:
        return None
    near = relative(path)
    return path if near.startswith("..") else near


def _library(cls: type) -> bool:
    """Whether ``cls`` is an installed library's (its file among the interpreter's and the packages' directories)
    whose constructor needs arguments (a Hugging Face ``datasets.Dataset``, torchvision's ``ImageFolder``,
    ``TensorDataset``): a sweep cannot build it from its name, as it can the script's own class or one that takes
    none."""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if not isinstance(path, str) or not library(path):
        return False
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind == p.VAR_POSITIONAL or  # TensorDataset(*tensors): its data
               p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               for p in parameters)


def _grad() -> int:
    """1 while torch's autograd is on (the training's loop), 0 under ``no_grad`` or ``inference_mode`` (an
    evaluation's), or without torch."""
    torch = sys.modules.get("torch")
    return int(bool(torch is not None and hasattr(torch, "is_grad_enabled") and torch.is_grad_enabled()))


def _weak(loader: Any) -> Any:
    """A weak reference to ``loader`` (the loader itself where it takes none)."""
    try:
        return weakref.ref(loader)
    except TypeError:
        return loader


def _gone(held: Any) -> bool:
    """Whether the loader held (by :func:`_weak`) no longer exists."""
    return isinstance(held, weakref.ref) and held() is None
