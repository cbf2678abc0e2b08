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
import threading
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

from dataprof.backends.common import batch_size_of
from dataprof.backends.construction import loader_class, patch_loader_modules
from dataprof.backends.frameworks import in_package
from dataprof.measure.forked import PR_SET_PDEATHSIG, prctl
from dataprof.measure.protocol import Channel
from dataprof.measure.watch.changes import Changes, Replay, overridden, override_nodes, thread_epoch
from dataprof.measure.watch.factory import loader_factory, still_running
from dataprof.measure.watch.ranks import RankEnd
from dataprof.measure.watch.recorder import Recorder, WatchEnded
from dataprof.measure.watch.sites import HOME_ENV, site_of, user_frame
from dataprof.measure.watch.stderr import StderrTail

_MAIN_STOPPED = threading.Event()


def _stop_main_thread() -> None:
    """The watch ends a loop run in another thread (a background prefetcher such as ``BackgroundGenerator``): the
    main thread, waiting on that thread's queue, would wait for ever; it gets SIGINT (once), and its
    ``KeyboardInterrupt`` is taken as the watch's end."""
    if threading.current_thread() is threading.main_thread() or _MAIN_STOPPED.is_set():
        return
    _MAIN_STOPPED.set()
    ident = threading.main_thread().ident
    if ident is not None:
        signal.pthread_kill(ident, signal.SIGINT)


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
            _stop_main_thread()
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
        if self._index == 0:  # its workers named: killed at the end, they are no news
            self._recorder.channel.send({"ev": "epoch", "loader": self._number, "epoch": self._epoch,
                                         "first_batch_s": arrived - self._created,
                                         "workers": [w.pid for w in getattr(self._inner, "_workers", ())]})
        self._recorder.batch(self._number, self._epoch, self._index, arrived - start, step, batch_size_of(batch))
        self._index += 1
        self._returned = arrived
        return batch

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


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
                and changes.applies(site_of(user_frame(self))):
            kwargs, threads = overridden(original_init, self, args, kwargs, changes.knobs)
            args = ()
            if threads is not None:
                self.__dict__["_dataprof_threads"] = threads
            recorder.overridden += 1
        original_init(self, *args, **kwargs)
        if changes.knobs and not settable and "_dataprof_site" not in self.__dict__ \
                and not in_package(sys._getframe(1).f_code.co_filename, "dataprof") \
                and changes.applies(site_of(user_frame(self))):  # not the pipeline dataprof builds for threads
            override_nodes(self, changes.knobs)
            recorder.overridden += 1
        if "_dataprof_site" not in self.__dict__:  # a subclass's __init__ calls this once
            frame = user_frame(self)
            self.__dict__["_dataprof_site"] = site_of(frame)
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
        if os.environ.get(HOME_ENV):  # run elsewhere (tune --workdir): the module is found where the user is
            sys.path.insert(0, os.environ[HOME_ENV])
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
        if isinstance(exc, KeyboardInterrupt) and _MAIN_STOPPED.is_set():
            recorder.channel.send({"ev": "ended", "why": recorder.ended})  # the watch's own SIGINT
        else:
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
