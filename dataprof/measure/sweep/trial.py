"""The trial: runs in its own process, builds one DataLoader and times it.

It reports through ``emit`` (JSON events relayed to the parent): ``ready``,
``first_batch``, ``window_start``, ``progress`` heartbeats, and finally
``result`` or ``error``. Resource sampling is not done here: the parent
samples this process tree from outside so the measurement does not compete
for this process's GIL.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from dataprof.backends import Backend
from dataprof.backends.common import batch_size_of, dataset_length
from dataprof.backends.loaders import LoaderTemplate
from dataprof.backends.target import describe_exception
from dataprof.measure.cache.open_log import log_workers, pause_installed
from dataprof.measure.consumer import Consumer, SimulatedDevice, make_cuda_consumer
from dataprof.measure.probes import helper_pids, only_children, process_reads
from dataprof.measure.protocol import TrialFigures, TrialSettings, error_event
from dataprof.measure.sweep.events import (
    FirstBatch,
    LogPaused,
    Progress,
    Ready,
    WindowEnd,
    WindowStart,
    Workers,
    answer,
    said,
)
from dataprof.measure.sweep.failures import (
    DeadWorkerWatch,
    Live,
    ThreadFailure,
    classify_loader_error,
    locate_failure,
    may_be_a_dead_worker,
    quiet_worker_ends,
    worker_pids,
    worker_signals,
)
from dataprof.measure.sweep.fingerprints import BATCH_MARKS, fingerprint
from dataprof.measure.sweep.receive import ReceiveTimer
from dataprof.measure.timing import (
    MIN_WINDOW_S,
    STEADY_CHECK_S,
    BatchLog,
    Rival,
    rate_spread,
    summarize,
    window_done,
    window_unit,
)
from dataprof.results.knobs import LoaderConfig, warmup_batches
from dataprof.results.vocabulary import DatasetKind, TrialStatus

Emit = Callable[[dict[str, Any]], None]

HEARTBEAT_S = 0.5
FORK_CLEAN = """The trial collects its garbage once before the DataLoader forks its workers.

Workers inherit the main process's garbage-collector counters. Left as the
trial's own allocations happen to leave them, a worker's first full collection,
which writes to every object the main process holds (and so copies their pages),
fell at a different point of each trial, sometimes inside the timed window,
where it read as copy-on-read growth. After one collection before the fork, a
worker's first full collection comes only once it has made many objects of its
own, as in a long-running training process.
"""
LOG_WINDOW_S = 0.5
"""A warm trial logs the files it opens through warm-up and this much of its window (its files per sample), then
pauses the log: the rest of the window pays no log (a cold trial logs to its end)."""
END_MARK_WAIT_S = 30.0
"""At the window's end the parent reads the workers' memory (a second or more for many workers): the trial
keeps them until it has, at most this long."""


def hold_for_the_end_mark(emit: Callable[[dict[str, Any]], None]) -> None:
    """Announce the window's end and keep the workers until the parent has read them: it removes the file the
    ``window_end`` event names once it has (or :data:`END_MARK_WAIT_S` passes)."""
    handle, path = tempfile.mkstemp(prefix="dataprof-end-mark-")
    os.close(handle)
    emit(said(WindowEnd(path)))
    deadline = time.monotonic() + END_MARK_WAIT_S
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def run_trial(
    backend: Backend,
    dataset: Any,
    collate_fn: Callable[[list[Any]], Any] | None,
    config: LoaderConfig,
    settings: TrialSettings,
    emit: Emit,
    clock: Callable[[], float] = time.perf_counter,
    template: LoaderTemplate | None = None,
) -> None:
    """Measure one config and emit its result (or error). Never raises.

    ``template``: a DataLoader target, rebuilt with ``config``'s knobs (its own sampler, collate_fn and
    batch size kept; ``collate_fn`` and a given batch size replace them).
    """
    # The trial runs in its own process group; Ctrl-C is the parent's to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        consumer: Consumer
        ids: dict[str, Any] = {}
        if settings.device.startswith("cuda"):
            cuda = make_cuda_consumer(backend.name, settings.device, settings.step_ms)
            consumer, ids = cuda, cuda.device_ids()
        else:
            consumer = SimulatedDevice(settings.step_ms)
        emit(said(Ready(**ids)))
        shard = (settings.rank, settings.world_size)
        if template is not None:
            loader, recorder = template.build(config, settings.batch_size if settings.batch_size_given else None,
                                              collate_fn, shard), None
        else:
            loader, recorder = backend.build_loader(dataset, config, settings.batch_size, collate_fn,
                                                    settings.shuffle, settings.drop_last, shard)
        if settings.opens_dir:
            log_workers(loader, settings.opens_dir)
    except Exception as exc:
        emit(error_event(TrialStatus.FAILED, describe_exception(exc), traceback.format_exc()))
        return
    live = Live()

    def report(exc: BaseException, wait_s: float = 0.0) -> None:
        status, message = classify_loader_error(exc, worker_signals(live.iterator, wait_s),
                                                backend.internal_paths)
        if recorder is not None and config.num_workers == 0:
            message = locate_failure(dataset, recorder.last) or message
        emit(error_event(status, message, "".join(traceback.format_exception(exc))))

    failure = ThreadFailure(report).install()
    DeadWorkerWatch(live, report, failure.handled).start()
    try:
        loop = TimedLoop(config, settings.trial_seconds, emit, consumer, clock, recorder, ReceiveTimer.install(),
                         backend.dataset_kind(dataset) == DatasetKind.ITERABLE, settings.rival, settings.first_pass)
        figures = loop.run(loader, live, backend)
    except Exception as exc:
        failure.end(exc, dead_peer=may_be_a_dead_worker(exc, backend.internal_paths))
        return
    failure.handled.set()
    emit(answer(figures))


def started(iterator: Any, emit: Emit) -> Any:
    """``iterator``, its worker processes told to the host, which removes what they leave behind (a killed
    loader's batches in shared memory) once the trial ended."""
    pids = worker_pids(iterator)
    if pids:
        emit(said(Workers(tuple(pids))))
    return iterator


class TimedLoop:
    """The training loop a trial times: warm-up until the prefetch buffer is drained, then the window.

    Per iteration it records the wait in ``next()`` (and the main thread's CPU
    in it), the copy to the device and the model step; it crosses epochs as
    training does, and ends the window once the rate is steady, or has
    settled the question ``rival`` stands for, or ``trial_s`` has passed. ``recorder``: the batch sampler's timer;
    ``receiver``: the unpickling timer; ``iterable``: fingerprint the warm-up
    batches (to catch workers repeating a stream).
    """

    def __init__(self, config: LoaderConfig, trial_s: float, emit: Emit, consumer: Consumer,
                 clock: Callable[[], float], recorder: Any, receiver: ReceiveTimer, iterable: bool,
                 rival: Rival | None = None, first_pass: bool = False) -> None:
        self.config, self.trial_s, self.emit, self.consumer, self.clock = config, trial_s, emit, consumer, clock
        self.rival = rival
        self.first_pass = first_pass
        self.first_pass_end = False
        self.recorder, self.receiver, self.iterable = recorder, receiver, iterable
        self.log = BatchLog()
        self.warmup = warmup_batches(config.num_workers, config.prefetch_factor)
        self.epochs = 1
        self.epoch_samples: int | None = None
        self.marks: list[int] = []
        self.repeats = 0
        self.window_first: int | None = None
        self.sampler_start = self.receive_start = 0.0
        self.log_until: float | None = None
        self.pids: set[int] = set()
        self.reads_start: tuple[int, int] | None = None

    def run(self, loader: Any, live: Live, backend: Backend) -> TrialFigures:
        """Iterate ``loader`` through warm-up and the window; the trial's figures.

        ``live.iterator`` always holds the current iterator, so a failure can name its workers' signals.
        """
        gc.collect()  # see FORK_CLEAN
        length = None if self.iterable else dataset_length(loader) or None  # batches an epoch
        created = self.clock()
        iterator = live.iterator = self._started(iter(loader))
        first_batch_s: float | None = None
        last_beat = last_check = end = created
        while True:
            start = end
            cpu_start = time.thread_time()
            try:
                batch = next(iterator)
            except StopIteration:
                if self.first_pass:
                    self._end_of_first_pass()
                    break
                iterator = live.iterator = self._next_epoch(loader)
                batch = next(iterator)
            wait_cpu = time.thread_time() - cpu_start
            arrived = self.clock()
            if first_batch_s is None:
                first_batch_s = arrived - created
                self.emit(said(FirstBatch(first_batch_s)))
            end = self._consume(batch, start, arrived, wait_cpu)
            if end - last_beat >= HEARTBEAT_S:
                last_beat = end
                self.emit(said(Progress(len(self.log))))
            if self.window_first is not None:
                spread, settled = None, False
                elapsed = end - self.log.end_t[self.window_first]
                batches = len(self.log) - 1 - self.window_first
                unit = window_unit(self.config.num_workers, self._epoch_batches(length), batches, elapsed,
                                   self.trial_s)
                # looked at on a whole round only: batches come in rounds, and the first batch after a check's
                # interval is most often the same one of its round, so a check gated on time alone could miss
                # every round's end
                if elapsed >= min(MIN_WINDOW_S, self.trial_s) and end - last_check >= STEADY_CHECK_S \
                        and batches % unit == 0:
                    last_check = end
                    spread = rate_spread(self.log, self.window_first, max(1, self.config.num_workers))
                    settled = spread is not None and self.rival is not None and \
                        self.rival.settled_by(sum(self.log.size[self.window_first + 1:]) / elapsed, spread)
                if window_done(batches, elapsed, self.trial_s, self.config.num_workers, spread, settled, unit):
                    break
        live.iterator = None  # the window is measured: how its workers end from here is no failure of the trial's
        return self._finish(iterator, backend, first_batch_s)

    def _epoch_batches(self, length: int | None) -> int | None:
        """An epoch's batches: the loader's length, else (an iterable dataset) the first epoch's, once it ended."""
        return length or (self.log.epoch_first[0] if self.log.epoch_first else None)

    def _end_of_first_pass(self) -> None:
        """A cold trial's dataset ended its first pass: its window ends here (what follows would be read warm);
        a pass that ends before the window opened leaves no cold figure."""
        if self.window_first is None or len(self.log) - 1 - self.window_first < 1:
            raise RuntimeError(f"the dataset's first pass ended after {len(self.log)} batches, before a cold "
                               "window could open: too small to measure cold (its data is read once, then cached)")
        self.epoch_samples = sum(self.log.size)
        self.first_pass_end = True

    def _next_epoch(self, loader: Any) -> Any:
        """The iterator of the next epoch, once one ended."""
        if len(self.log) == 0:
            raise RuntimeError("the loader yielded no batch (dataset smaller than one batch with drop_last?)")
        if self.epoch_samples is None:
            self.epoch_samples = sum(self.log.size)
        self.log.epoch_first.append(len(self.log))
        self.epochs += 1
        return self._started(iter(loader))

    def _started(self, iterator: Any) -> Any:
        """``iterator``, its workers told to the host and kept among those whose reads the window counts."""
        self.pids.update(worker_pids(iterator))
        self.pids.update(helper_pids())
        return started(iterator, self.emit)

    def _consume(self, batch: Any, start: float, arrived: float, wait_cpu: float) -> float:
        """Copy and step one batch, record the iteration, open the window after warm-up; when it ended."""
        on_device = self.consumer.to_device(batch)
        copied = self.clock()
        self.consumer.step(on_device)
        end = self.clock()
        self.log.add(arrived - start, wait_cpu, copied - arrived, end - copied, end, batch_size_of(batch))
        if self.iterable and self.window_first is None and self.epoch_samples is None:
            # Fingerprints are taken during warm-up only, so they cost the timed window nothing;
            # unsharded workers repeat each other's batches from the first round.
            mark = fingerprint(batch)
            self.repeats += mark in self.marks
            self.marks.append(mark)
        if self.window_first is None and len(self.log) >= self.warmup:
            self.window_first = len(self.log) - 1
            self.sampler_start = self.recorder.busy_s if self.recorder is not None else 0.0
            self.receive_start = self.receiver.busy_s
            self.log_until = None if self.first_pass else end + LOG_WINDOW_S
            self.reads_start = process_reads(self.pids)
            self.emit(said(WindowStart()))
        elif self.log_until is not None and end >= self.log_until:
            self.log_until = None
            if (paused := pause_installed()) is not None:
                self.emit(said(LogPaused(paused)))
        return end

    def _finish(self, iterator: Any, backend: Backend, first_batch_s: float | None) -> TrialFigures:
        """Close the window (the workers stay a moment for the parent's reading), shut down, summarise."""
        workers_started = 0 if self.config.threads else len(getattr(iterator, "_workers", None) or [])
        sampler_s = self.recorder.busy_s - self.sampler_start if self.recorder is not None else None
        receive_s = self.receiver.busy_s - self.receive_start
        reads = process_reads(self.pids)  # at the window's end; then whether they cover every process below
        read = None if reads is None or self.reads_start is None or not only_children(self.pids) else \
            (reads[0] - self.reads_start[0], reads[1] - self.reads_start[1])
        if workers_started:
            hold_for_the_end_mark(self.emit)  # the parent reads the workers' memory now: they must still be there
        else:
            self.emit(said(WindowEnd()))
        with quiet_worker_ends():
            backend.shutdown(iterator)
        assert self.window_first is not None  # the loop ends only inside the window
        figures = summarize(self.log, self.window_first, self.config.num_workers)
        return TrialFigures(
            **figures,
            first_batch_s=first_batch_s,
            worker_processes=workers_started,
            epochs_started=self.epochs,
            epoch_samples=self.epoch_samples,
            repeat_fraction=self.repeats / len(self.marks) if self.marks else None,
            batch_marks=tuple(self.marks[:BATCH_MARKS]),
            sampler_ms_mean=None if sampler_s is None else 1000.0 * sampler_s / figures["batches"],
            receive_ms_mean=1000.0 * receive_s / figures["batches"]
            if self.config.num_workers and not self.config.threads else None,
            first_pass_end=self.first_pass_end,
            window_read_bytes=None if read is None else read[0],
            window_read_chars=None if read is None else read[1],
        )
