"""The watched training process of ``dataprof run``: the user's script, run as ``python`` runs it, with its
DataLoaders' iterators timed.

Started as ``python -m dataprof.measure.watch.watched EVT_FD LIMITS_JSON (script|module) TARGET [ARGS...]``. The
script gets ``__main__``, its own ``sys.argv`` (``sys.argv[0]`` is the script) and ``sys.path[0]`` as under
``python script.py`` (the current directory for ``-m``). When ``torch.utils.data`` is imported, its
``DataLoader`` learns to record where it was created, and every iterator it gives out is wrapped: the same
batches in the same order, with the time blocked in ``next()`` (the data wait) and the time from a batch's
arrival to the next ``next()`` (the step) recorded and sent to the parent as JSON lines on EVT_FD. Nothing
here samples resources: the parent does, from outside.
"""

from __future__ import annotations

import inspect
import json
import os
import runpy
import signal
import sys
import time
import traceback
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

from dataprof.backends.common import batch_size_of
from dataprof.backends.construction import loader_class, patch_loader_modules
from dataprof.backends.frameworks import in_package
from dataprof.measure.forked import PR_SET_PDEATHSIG, prctl
from dataprof.measure.protocol import Channel
from dataprof.measure.watch.changes import (
    Changes,
    Replay,
    overridden,
    override_nodes,
    pipeline,
    streams,
    thread_epoch,
    threads_settings,
)
from dataprof.measure.watch.factory import loader_factory, still_running
from dataprof.measure.watch.ranks import RankEnd
from dataprof.measure.watch.stderr import StderrTail
from dataprof.results.vocabulary import WorkerKind

FLUSH_S = 0.5
"""How often each loader's new batch timings are sent to the parent."""
MAX_RECORDED = 200_000
"""Batches per loader whose timings are kept; past it, batches are counted only."""


class WatchEnded(BaseException):
    """Raised out of the script's loop when ``--max-steps`` or ``--seconds`` is reached: it stops the script."""


class Recorder:
    """Every watched loader's timings, sent to the parent in batches of events."""

    def __init__(self, channel: Channel, max_steps: int | None, seconds: float | None,
                 clock: Any = time.perf_counter, from_first_batch: bool = False,
                 ranks: RankEnd | None = None, from_replay: bool = False) -> None:
        self.channel = channel
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
        self.loaders: dict[int, dict[str, Any]] = {}
        self.pending: dict[int, list[list[float]]] = {}
        self.last_flush = clock()
        self.ended: str | None = None
        self.device_sent = False
        self.overridden = 0
        """Loaders built with the watch's knobs (``--override``)."""

    def register(self, loader: Any, site: str, factory: dict[str, Any]) -> int:
        """A new DataLoader: its identity, settings and the function that built it (:func:`loader_factory`),
        sent at once; its number."""
        number = len(self.loaders)
        settings = nodes_settings(loader) if hasattr(loader, "root") else {}
        dataset = settings.pop("dataset", None) if settings else getattr(loader, "dataset", None)
        info = {"loader": number, "site": site, "dataset": type(dataset).__name__,
                "dataset_module": type(dataset).__module__,
                "dataset_file": _source_file(type(dataset)),
                "loader_class": type(loader).__name__, "batch_size": getattr(loader, "batch_size", None),
                "num_workers": getattr(loader, "num_workers", None),
                "prefetch_factor": getattr(loader, "prefetch_factor", None),
                "persistent_workers": getattr(loader, "persistent_workers",
                                              getattr(loader, "_persistent_workers", None)),
                "framework": "paddle" if type(loader).__module__.startswith("paddle") else "torch",
                "pin_memory": getattr(loader, "pin_memory", None), "worker_kind": "process", **settings,
                "iterable": streams(loader), "start_method": _start_method(loader), **threads_settings(loader),
                **factory, "batches": 0}
        self.loaders[number] = info
        self.pending[number] = []
        self.channel.send({"ev": "loader", **{k: v for k, v in info.items() if k != "batches"}})
        return number

    def batch(self, number: int, epoch: int, index: int, wait_s: float, step_s: float | None, size: int) -> None:
        """One batch delivered: ``index`` within its epoch, the wait (s), the step before it (s), its samples,
        and when it arrived (s on this process's clock)."""
        info = self.loaders[number]
        info["batches"] += 1
        now = self.clock()
        if self.deadline is None and self.seconds is not None and not self.from_replay:
            self.deadline = now + self.seconds
        if info["batches"] <= MAX_RECORDED:
            self.pending[number].append([epoch, index, wait_s, -1.0 if step_s is None else step_s, size, now])
        if now - self.last_flush >= FLUSH_S:
            self.flush()
            self.report_device()
        if self.ended is None and (not self.from_replay or number in self.replay_from):
            if self.max_steps is not None and info["batches"] - self.replay_from.get(number, 0) >= self.max_steps:
                self.ended = f"--max-steps {self.max_steps} reached"
            elif self.ranks is not None:
                if self.ranks.reached(number, info["batches"], self.deadline is not None and now >= self.deadline):
                    self.ended = "--seconds reached"
            elif self.deadline is not None and now >= self.deadline:
                self.ended = "--seconds reached"

    def replayed(self, number: int) -> None:
        """Loader ``number``'s replay begins: the batches it delivered so far were loaded, not free."""
        self.flush()
        self.replay_from[number] = self.loaders[number]["batches"]
        if self.from_replay and self.seconds is not None:
            self.deadline = self.clock() + self.seconds
        self.channel.send({"ev": "replayed", "loader": number, "after": self.loaders[number]["batches"]})

    def report_device(self) -> None:
        """Once the script has initialised CUDA: which device it uses, for the parent's NVML probe."""
        cuda = getattr(sys.modules.get("torch"), "cuda", None)
        if self.device_sent or cuda is None or not cuda.is_initialized():
            return
        from dataprof.measure.consumer import torch_device_ids

        self.device_sent = True
        try:
            self.channel.send({"ev": "device", "device": f"cuda:{cuda.current_device()}",
                               **torch_device_ids(sys.modules["torch"], cuda.current_device())})
        except Exception:  # noqa: S110  (no device to name: the GPU fields stay null)
            pass

    def flush(self) -> None:
        """Send the batches recorded since the last flush."""
        self.last_flush = self.clock()
        for number, rows in self.pending.items():
            if rows:
                self.channel.send({"ev": "batches", "loader": number, "rows": rows})
                self.pending[number] = []


def nodes_settings(loader: Any) -> dict[str, Any]:
    """What a ``torchdata.nodes.Loader``'s pipeline says of its loading, as a DataLoader's attributes would: the
    ParallelMapper's workers and their kind (``thread`` or ``process``), the Prefetcher's depth per worker,
    PinMemory, the batch sampler's batch size and the dataset its sampler draws from."""
    found: dict[str, Any] = {"pin_memory": False, "num_workers": 0}
    for node in pipeline(loader):
        name = type(node).__name__
        if name == "ParallelMapper":
            found["num_workers"] = int(getattr(node, "num_workers", 0) or 0)
            found["worker_kind"] = "thread" if getattr(node, "method", "thread") == WorkerKind.THREAD else "process"
        elif name == "Prefetcher":
            found["prefetch_depth"] = getattr(node, "prefetch_factor", None)
        elif name == "PinMemory":
            found["pin_memory"] = True
        elif name == "SamplerWrapper":
            sampler = getattr(node, "sampler", None)
            found["batch_size"] = getattr(sampler, "batch_size", None)
            inner = getattr(sampler, "sampler", sampler)
            found["dataset"] = getattr(inner, "data_source", None)
    depth_total = found.pop("prefetch_depth", None)
    if depth_total and found["num_workers"]:
        found["prefetch_factor"] = max(1, depth_total // found["num_workers"])
    return found


def _start_method(loader: Any) -> str | None:
    """How a torch DataLoader starts its worker processes (its ``multiprocessing_context``, else the process's
    start method, else the platform's default, the process's left unset); None without worker processes."""
    if type(loader).__module__.startswith("paddle") or not getattr(loader, "num_workers", 0) \
            or "_dataprof_threads" in getattr(loader, "__dict__", {}):
        return None
    context = getattr(loader, "multiprocessing_context", None)
    if context is not None:
        return str(context.get_start_method()) if hasattr(context, "get_start_method") else str(context)
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


class WatchedIterator:
    """A DataLoader iterator that yields the same batches and times each ``next()``."""

    def __init__(self, inner: Any, recorder: Recorder, number: int, epoch: int, created: float) -> None:
        self._inner = inner
        self._created = created
        self._recorder = recorder
        self._number = number
        self._epoch = epoch
        self._index = 0
        self._returned: float | None = None

    def __iter__(self) -> WatchedIterator:
        return self

    def __next__(self) -> Any:
        if self._recorder.ended is not None:
            raise WatchEnded(self._recorder.ended)
        start = self._recorder.clock()
        try:
            batch = next(self._inner)
        except StopIteration:  # the epoch ends, as it would unwatched; when, for the time other loaders take
            self._recorder.flush()
            self._recorder.channel.send({"ev": "epoch_end", "loader": self._number, "epoch": self._epoch,
                                         "at": self._recorder.clock()})
            raise
        arrived = self._recorder.clock()
        step = None if self._returned is None else start - self._returned
        if self._index == 0:
            self._recorder.channel.send({"ev": "epoch", "loader": self._number, "epoch": self._epoch,
                                         "first_batch_s": arrived - self._created})
        self._recorder.batch(self._number, self._epoch, self._index, arrived - start, step, batch_size_of(batch))
        self._index += 1
        self._returned = arrived
        return batch

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _source_file(cls: type) -> str | None:
    """The file defining ``cls``, relative to the current directory when under it; None if unknown."""
    path = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if not path:
        return None
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


_NOT_THE_USERS = ("/torch/", "/paddle/", "<frozen")
"""Paths of the frames between the user's call and a DataLoader's construction (dataprof's own, where it is
installed)."""


def _user_frame(loader: Any) -> FrameType | None:
    """The first frame outside torch, paddle, dataprof and the loader's own constructors (a subclass's):
    where the user created the loader."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if not any(part in path for part in _NOT_THE_USERS) and not in_package(path, "dataprof") \
                and frame.f_locals.get("self") is not loader:
            return frame
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _site(frame: FrameType | None) -> str:
    """``file:line`` of ``frame``, ``?`` when there is none."""
    if frame is None:
        return "?"
    path = frame.f_code.co_filename
    return f"{os.path.relpath(path) if not path.startswith('<') else path}:{frame.f_lineno}"


def patch_dataloader(module: ModuleType, recorder: Recorder, changes: Changes | None = None) -> Callable[[], None]:
    """Make ``module.DataLoader`` (and so its subclasses; torchdata's ``Loader`` in ``torchdata.nodes.loader``)
    record its site and wrap every iterator it returns, with ``changes`` made; the function that puts the class
    back as it was."""
    cls = loader_class(module)
    original_init, original_iter = cls.__init__, cls.__iter__
    changes = changes or Changes()
    settable = "num_workers" in inspect.signature(original_init).parameters  # not torchdata.nodes' Loader

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if changes.knobs and settable and "_dataprof_site" not in self.__dict__ \
                and changes.applies(_site(_user_frame(self))):
            kwargs, threads = overridden(original_init, self, args, kwargs, changes.knobs)
            args = ()
            if threads is not None:
                self.__dict__["_dataprof_threads"] = threads
            recorder.overridden += 1
        original_init(self, *args, **kwargs)
        if changes.knobs and not settable and "_dataprof_site" not in self.__dict__ \
                and not in_package(sys._getframe(1).f_code.co_filename, "dataprof") \
                and changes.applies(_site(_user_frame(self))):  # not the pipeline dataprof builds for threads
            override_nodes(self, changes.knobs)
            recorder.overridden += 1
        if "_dataprof_site" not in self.__dict__:  # a subclass's __init__ calls this once
            frame = _user_frame(self)
            self.__dict__["_dataprof_site"] = _site(frame)
            self.__dict__["_dataprof_factory"] = loader_factory(frame)
            self.__dict__["_dataprof_frame"] = frame  # until the first iteration: did the function return it?

    def __iter__(self: Any) -> Any:
        created = recorder.clock()
        replay = self.__dict__.get("_dataprof_replay")
        kept = replay is not None and len(replay.kept) >= replay.count  # replayed: the loader is not asked again
        inner = None if kept else thread_epoch(self) if "_dataprof_threads" in self.__dict__ else original_iter(self)
        if isinstance(inner, WatchedIterator):
            return inner
        if "_dataprof_loader" not in self.__dict__:
            built_by = self.__dict__.pop("_dataprof_frame", None)
            factory = {} if built_by is not None and still_running(built_by) \
                else self.__dict__.get("_dataprof_factory") or {}  # a function iterating its own loader is no factory
            self.__dict__["_dataprof_loader"] = recorder.register(self, self.__dict__.get("_dataprof_site", "?"),
                                                                  factory)
            self.__dict__["_dataprof_epochs"] = 0
        self.__dict__["_dataprof_epochs"] += 1
        if changes.replay and changes.applies(self.__dict__.get("_dataprof_site", "?")):
            number = self.__dict__["_dataprof_loader"]
            replay = self.__dict__.setdefault("_dataprof_replay", Replay(
                changes.replay, _length(self), lambda: recorder.replayed(number)))
            inner = replay.epoch(inner)
        return WatchedIterator(inner, recorder, self.__dict__["_dataprof_loader"], self.__dict__["_dataprof_epochs"],
                               created)

    cls.__init__, cls.__iter__ = __init__, __iter__

    def restore() -> None:
        cls.__init__, cls.__iter__ = original_init, original_iter

    return restore


def _length(loader: Any) -> int | None:
    """Batches in one of ``loader``'s epochs; None when it cannot tell (a stream)."""
    try:
        return len(loader)
    except TypeError:
        return None


def run(mode: str, target: str, args: list[str]) -> None:
    """Run the script (``mode`` ``script``) or module (``module``) as ``python`` would, as ``__main__``."""
    if mode == "module":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


def _print_user_traceback(exc: BaseException) -> None:
    """The script's traceback as ``python`` prints it: without dataprof's and runpy's frames."""
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename == __file__
                              or tb.tb_frame.f_code.co_filename.endswith(("runpy.py", "<frozen runpy>"))):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def main(argv: list[str]) -> int:
    """Watch the script; its exit code (0 when the watch ended it). It ends with the watch (SIGTERM when the
    process watching it dies)."""
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    fd, limits, mode, target, args = int(argv[0]), json.loads(argv[1]), argv[2], argv[3], argv[4:]
    recorder = Recorder(Channel(fd), limits.get("max_steps"), limits.get("seconds"),
                        from_first_batch=bool(limits.get("seconds_from_first_batch")), ranks=RankEnd.of(),
                        from_replay=bool(limits.get("window_from_replay")))
    changes = Changes(limits.get("override"), limits.get("replay"), limits.get("loader"))
    patch_loader_modules(lambda module: patch_dataloader(module, recorder, changes))
    tail = StderrTail.install()
    code = 0
    try:
        run(mode, target, args)
    except WatchEnded as exc:
        recorder.channel.send({"ev": "ended", "why": str(exc)})
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # the script's own error: its traceback and exit code, as python gives them
        _print_user_traceback(exc)
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        recorder.flush()
        if changes.knobs:
            recorder.channel.send({"ev": "overridden", "loaders": recorder.overridden})
        recorder.channel.send({"ev": "exit", "code": code, "stderr_tail": tail.lines() if code else []})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
