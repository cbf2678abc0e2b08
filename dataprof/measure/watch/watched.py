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

import dataclasses
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

from dataprof.backends.common import batch_size_of, footprint
from dataprof.backends.construction import loader_class, patch_loader_modules
from dataprof.backends.frameworks import in_package
from dataprof.measure.forked import PR_SET_PDEATHSIG, freeze_own_objects, prctl
from dataprof.measure.protocol import QueuedChannel, read
from dataprof.measure.watch.changes import Replay, lost_knobs, overridden, override_nodes, thread_epoch
from dataprof.measure.watch.events import Ended, EpochEnded, EpochStarted, Exit, Factory, Overridden, RanksStarted, said
from dataprof.measure.watch.factory import loader_factory, still_running
from dataprof.measure.watch.handoff import WatchEnded, quiet_thread_ends
from dataprof.measure.watch.launchers import (
    SPAWN_MODULE,
    OwnRanks,
    watch_processes,
    watch_spawns,
    watch_subprocesses,
)
from dataprof.measure.watch.ranks import RankEnd
from dataprof.measure.watch.recorder import Recorder
from dataprof.measure.watch.settings import WatchLimits
from dataprof.measure.watch.sites import HOME_ENV, TAG, Origin, Tag, origin, retag, tag_of
from dataprof.measure.watch.stderr import StderrTail
from dataprof.results.run import RunChanges
from dataprof.results.tune import CAUSE_WORDS

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


_END = object()
"""What ``next`` gives a :class:`WatchedIterator` at its epoch's end. Not caught as a StopIteration there: a caught
one holds the frames of the loader's own iterator, so a torchdata pipeline's last epoch (and its threads) would
outlive the reset that joins them unwatched, and the script would run faster watched than alone."""


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
            if self._number not in self._recorder.handoff.consumed:  # else the training stops where it takes them
                _stop_main_thread()
            raise WatchEnded(self._recorder.ended)
        start = self._recorder.clock()
        batch = next(self._inner, _END)
        if batch is _END:  # the epoch ends, as it would unwatched; when, for the time other loaders take
            self._recorder.finished.add(self._number)
            self._recorder.flush()
            self._recorder.channel.send(said(EpochEnded(self._number, self._epoch, self._recorder.clock())))
            raise StopIteration
        arrived = self._recorder.clock()
        step = None if self._returned is None else start - self._returned
        if self._index == 0:  # its workers named: killed at the end, they are no news
            self._recorder.channel.send(said(EpochStarted(
                self._number, self._epoch, arrived - self._created,
                tuple(w.pid for w in getattr(self._inner, "_workers", ())),
                footprint(batch)["bytes"] if self._epoch == 1 else None)))
        size = batch_size_of(batch)
        if threading.current_thread() is threading.main_thread() or \
                not self._recorder.handoff.produced(self._number, self._epoch, self._index, batch, size):
            self._recorder.batch(self._number, self._epoch, self._index, arrived - start, step, size)
        self._index += 1
        self._returned = arrived
        return batch

    def __len__(self) -> int:
        return len(self._inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def patch_dataloader(module: ModuleType, recorder: Recorder, changes: RunChanges | None = None) -> Callable[[], None]:
    """Make ``module.DataLoader`` (and so its subclasses; torchdata's ``Loader`` in ``torchdata.nodes.loader``)
    record its site and wrap every iterator it returns, with ``changes`` made; the function that puts the class
    back as it was."""
    cls = loader_class(module)
    original_init, original_iter = cls.__init__, cls.__iter__
    changes = changes or RunChanges()
    settable = "num_workers" in inspect.signature(original_init).parameters  # not torchdata.nodes' Loader

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        applies = False
        if tag_of(self) is None:  # a subclass's __init__ calls this once more
            where = origin(self)
            own = in_package(sys._getframe(1).f_code.co_filename, "dataprof")  # the pipeline dataprof builds
            self.__dict__[TAG] = Tag(where, loader_factory(where.frame), own=own)
            applies = bool(changes.knobs) and changes.applies(where.site, where.split) and not own
        if applies and settable:
            kwargs, threads = overridden(original_init, self, args, kwargs, changes.knobs)
            args = ()
            retag(self, threads=threads)
            recorder.overridden += 1
        original_init(self, *args, **kwargs)
        if applies and not settable:
            override_nodes(self, changes.knobs)
            recorder.overridden += 1
        if applies:
            retag(self, asked=changes.knobs)

    def __iter__(self: Any) -> Any:
        tag = tag_of(self)
        if os.getpid() != recorder.pid or (tag is not None and tag.own):  # a process of the script's own, forked:
            return original_iter(self)  # its loaders are not watched here; nor is the pipeline dataprof built
        created = recorder.clock()
        tag = tag or Tag(Origin(None, "?"))  # a loader whose constructor the watch did not see
        number = tag.number if tag.number is not None else _registered(self, tag, recorder)
        replay = recorder.replays.get(number)  # a loader built again each epoch keeps the first's kept batches
        kept = replay is not None and len(replay.kept) >= replay.count  # replayed: the loader is not asked again
        inner = None if kept else thread_epoch(self) if tag.threads else original_iter(self)
        if isinstance(inner, WatchedIterator):
            return inner
        recorder.epochs[number] += 1
        recorder.finished.discard(number)
        if changes.replay and changes.applies(tag.origin.site, tag.origin.split):
            replay = recorder.replays.setdefault(number, Replay(changes.replay, _length(self),
                                                                lambda: recorder.replayed(number)))
            inner = replay.epoch(inner)
        return WatchedIterator(inner, recorder, number, recorder.epochs[number], created)

    cls.__init__, cls.__iter__ = __init__, __iter__

    def restore() -> None:
        cls.__init__, cls.__iter__ = original_init, original_iter

    return restore


def _registered(loader: Any, tag: Tag, recorder: Recorder) -> int:
    """``loader``'s number at its first iteration: that of a loader built at the same place before and gone since
    (a loader built again each epoch), else a new one, registered; what the watch set on it and the loader no
    longer has (the script changed it after construction) is noted. Its tag keeps the number, and lets go of the
    frame that built it."""
    where = tag.origin
    number = recorder.number_of(loader, where.site, where.split)
    if number is None:
        building = where.frame is not None and still_running(where.frame)  # a function iterating its own loader
        number = recorder.register(loader, where, Factory() if building else tag.factory, tag.threads)
        where = dataclasses.replace(where, frame=None)
    loader.__dict__[TAG] = dataclasses.replace(tag, number=number, origin=where)
    lost = lost_knobs(loader, tag.asked, tag.threads is not None)
    if lost:
        recorder.lost[number] = lost
    return number


def _length(loader: Any) -> int | None:
    """Batches in one of ``loader``'s epochs; None when it cannot tell (a stream)."""
    try:
        return len(loader)
    except TypeError:
        return None


def run(mode: str, target: str, args: list[str]) -> None:
    """Run the script (``mode`` ``script``) or module (``module``) as ``python`` would, as ``__main__``, with
    dataprof's objects out of its collector's books (:func:`~dataprof.measure.forked.freeze_own_objects`)."""
    freeze_own_objects()
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
    fd, limits, mode, target, args = int(argv[0]), read(WatchLimits, json.loads(argv[1])), argv[2], argv[3], argv[4:]
    channel = QueuedChannel(fd)
    recorder = Recorder(channel, limits.max_steps, limits.seconds, from_first_batch=limits.seconds_from_first_batch,
                        ranks=RankEnd.of(), from_replay=limits.window_from_replay, training=limits.training)
    changes, own_ranks = limits.changes, limits.stop_own_ranks

    def launched(how: str, processes: int, site: str) -> None:
        recorder.channel.send(said(RanksStarted(how, processes, site)))

    watch_subprocesses(target, mode == "module", launched, own_ranks)
    watch_processes(fd, own_ranks)
    patch_loader_modules(lambda module: patch_dataloader(module, recorder, changes))
    patch_loader_modules(lambda module: watch_spawns(module, launched, own_ranks), (SPAWN_MODULE,))
    recorder.handoff.install()
    quiet_thread_ends()
    tail = StderrTail.install(word for words in CAUSE_WORDS.values() for word in words)
    code = 0
    try:
        run(mode, target, args)
    except WatchEnded as exc:
        recorder.channel.send(said(Ended(str(exc))))
    except OwnRanks:  # under tune: the ranks it would start would run unwatched, with its own knobs
        recorder.channel.send(said(Ended("the script started ranks of its own")))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # the script's own error: its traceback and exit code, as python gives them
        if isinstance(exc, KeyboardInterrupt) and _MAIN_STOPPED.is_set():
            recorder.channel.send(said(Ended(str(recorder.ended))))  # the watch's own SIGINT
        else:
            _print_user_traceback(exc)
            code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        recorder.flush()
        if changes.knobs:
            recorder.channel.send(said(Overridden(recorder.overridden,
                                                  {str(n): knobs for n, knobs in recorder.lost.items()})))
        recorder.channel.send(said(Exit(code, tuple(tail.lines()) if code else (),
                                        tuple(tail.causes) if code else ())))
        channel.close()
        if recorder.ranks is not None:
            recorder.ranks.close()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
