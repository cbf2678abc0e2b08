"""The trial: runs in its own process, builds one DataLoader and times it.

It reports through ``emit`` (JSON events relayed to the parent): ``ready``,
``first_batch``, ``window_start``, ``progress`` heartbeats, and finally
``result`` or ``error``. Resource sampling is not done here: the parent
samples this process tree from outside so the measurement does not compete
for this process's GIL.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import threading
import time
import traceback
import zlib
from collections.abc import Callable
from typing import Any

from dataprof.backends import Backend
from dataprof.config import LoaderConfig
from dataprof.measure.consumer import SimulatedDevice, make_cuda_consumer
from dataprof.measure.timing import (
    MIN_WINDOW_S,
    STEADY_CHECK_S,
    BatchLog,
    rate_spread,
    summarize,
    warmup_batches,
    window_done,
)
from dataprof.target import describe_exception

Emit = Callable[[dict[str, Any]], None]

HEARTBEAT_S = 0.5
END_MARK_GRACE_S = 0.25
"""At the window's end the parent reads the workers' memory; the trial shuts them down only this long after."""
DEAD_WORKER_WAIT_S = 1.0
"""How long a failed trial gives its workers to finish dying, so a crash is named by its signal."""


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first collated field, else its length.

    ``default_collate`` gives tensors (or tuples/dicts of them) whose first
    dimension is the batch; a custom collate may return a plain list of samples.
    """
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict) and batch:
        return batch_size_of(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        collated_field = (hasattr(first, "shape") and len(first.shape) > 0) or isinstance(first, dict)
        return batch_size_of(first) if collated_field else len(batch)
    return 1


_SIGNAL_RE = re.compile(r"killed by signal: (?P<name>[\w ]+)")
_HINTS = {
    "SIGBUS": "a bus error in a worker usually means /dev/shm is too small for the batches in flight "
    "(in Docker: --shm-size); fewer workers or a lower prefetch_factor need less",
    "SIGKILL": "SIGKILL usually comes from the kernel's OOM killer: fewer workers, or less memory per worker",
    "SIGSEGV": "a segmentation fault in native code (a C extension, OpenCV/OpenMP after fork)",
}


def died_by(who: str, signame: str) -> str:
    """``a DataLoader worker died by SIGBUS: <what it usually means>``."""
    hint = _HINTS.get(signame, "")
    return f"{who} died by {signame}" + (f": {hint}" if hint else "")


def worker_signals(iterator: Any, wait_s: float = 0.0) -> list[str]:
    """Names of the signals that killed this iterator's worker processes, if any.

    ``wait_s``: how long to give workers to finish dying. A broken pipe from a
    worker is seen before the kernel reports that worker's exit.
    """
    names = []
    deadline = time.monotonic() + wait_s
    for worker in getattr(iterator, "_workers", None) or []:
        if getattr(worker, "exitcode", 0) is None and wait_s > 0:
            worker.join(max(0.0, deadline - time.monotonic()))
        code = getattr(worker, "exitcode", None)
        if code is not None and code < 0:
            try:
                names.append(signal.Signals(-code).name)
            except ValueError:
                names.append(f"signal {-code}")
    return names


def classify_loader_error(exc: BaseException, killed_by: list[str] | None = None,
                          internal: tuple[str, ...] = ("/torch/", "/paddle/")) -> tuple[str, str]:
    """(status, one-line reason) for an exception that ended the loop."""
    if killed_by:
        return "crashed", died_by("a DataLoader worker", killed_by[0])
    # KeyError's str() is the repr of its message; the message itself holds the worker's traceback lines
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    match = _SIGNAL_RE.search(text)
    if match:
        name = match.group("name").strip()
        signame = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Killed": "SIGKILL",
                   "Aborted": "SIGABRT"}.get(name, name)
        return "crashed", died_by("a DataLoader worker", signame)
    if "exited unexpectedly" in text:
        return "crashed", "a DataLoader worker exited unexpectedly"
    if "Traceback (most recent call last)" in text:  # a worker's error, re-raised with its traceback as text
        return "failed", worker_error_line(type(exc).__name__, text, internal)
    return "failed", describe_exception(exc)


_FRAME_RE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def worker_error_line(type_name: str, text: str, internal: tuple[str, ...] = ("/torch/", "/paddle/")) -> str:
    """Summarise a worker error re-raised with its traceback as text (torch's 'Original Traceback',
    Paddle's 'DataLoader worker(N) caught … with message')."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else type_name
    frames = [m for m in _FRAME_RE.finditer(text)
              if not any(path in m.group("file") for path in (*internal, "/dataprof/measure"))]
    where = f" (at {frames[-1].group('file')}:{frames[-1].group('line')})" if frames else ""
    worker = re.search(r"worker process (\d+)|DataLoader worker\((\d+)\)", text)
    prefix = f"in worker {worker.group(1) or worker.group(2)}: " if worker else ""
    return f"{prefix}{last}{where}"


def locate_failure(dataset: Any, indices: list[int]) -> str | None:
    """Re-fetch the last batch's indices one by one; describe the first that raises."""
    for index in indices:
        try:
            dataset[index]
        except Exception as exc:
            return f"dataset[{index}] raised {describe_exception(exc)}"
    return None


class ThreadFailure:
    """The first exception raised in a thread of the trial other than the main one.

    Paddle loads batches in a reader thread of the main process: when it
    raises, the main thread may stay blocked for good (num_workers=0) or
    raise a generic "blocking queue is killed" error. The thread's own
    exception is the news; if the main thread does not take it up within
    ``grace_s``, the hook reports it and ends the trial itself.
    """

    def __init__(self, report: Callable[[BaseException, float], None], grace_s: float = 1.0) -> None:
        self.report = report
        self.grace_s = grace_s
        self.exc: BaseException | None = None
        self.arrived = threading.Event()
        self.handled = threading.Event()
        """Set once the main thread reports the trial's end (a result or an error)."""

    def hook(self, args: Any) -> None:
        if self.exc is not None or args.exc_value is None or isinstance(args.exc_value, SystemExit):
            return
        self.exc = args.exc_value
        self.arrived.set()
        if not self.handled.wait(self.grace_s):
            self.report(self.exc, DEAD_WORKER_WAIT_S)
            os._exit(1)

    def install(self) -> ThreadFailure:
        threading.excepthook = self.hook
        return self

    def end(self, exc: BaseException, dead_peer: bool) -> None:
        """Report what broke the main thread's loader loop: a reader thread's own error if that is the cause.

        ``dead_peer``: the error suggests a worker died, whose signal needs a moment to be known.
        """
        self.handled.set()
        # The framework's SIGCHLD handler raises again as each remaining worker dies; the first death is the news.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.arrived.wait(0.5)
        self.report(self.exc or exc, DEAD_WORKER_WAIT_S if dead_peer or self.exc is not None else 0.0)


class DeadWorkerWatch:
    """Ends a trial whose DataLoader worker died by a signal while the main thread stays blocked.

    The framework usually notices a dead worker and raises; Paddle's loader
    sometimes does not, and the main thread then waits for a batch that never
    comes until the trial timeout. Every ``interval_s`` this thread looks at
    the workers' exit codes; a worker killed by a signal and no end reported
    within ``grace_s`` ends the trial as crashed, naming the signal.
    """

    def __init__(self, live: dict[str, Any], report: Callable[[BaseException, float], None],
                 handled: threading.Event, interval_s: float = 0.5, grace_s: float = 2.0,
                 end: Callable[[int], None] = os._exit) -> None:
        self.live, self.report, self.handled = live, report, handled
        self.interval_s, self.grace_s, self.end = interval_s, grace_s, end
        self.thread = threading.Thread(target=self._run, name="dataprof-worker-watch", daemon=True)

    def start(self) -> DeadWorkerWatch:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.handled.wait(self.interval_s):
            if worker_signals(self.live.get("iterator")) and not self.handled.wait(self.grace_s):
                self.report(RuntimeError("a DataLoader worker died and the loader did not notice"), 0.0)
                self.end(1)
                return


def run_trial(
    backend: Backend,
    dataset: Any,
    collate_fn: Callable[[list[Any]], Any] | None,
    config: LoaderConfig,
    settings: dict[str, Any],
    emit: Emit,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Measure one config and emit its result (or error). Never raises."""
    # The trial runs in its own process group; Ctrl-C is the parent's to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        device = settings["device"]
        step_ms = float(settings["step_ms"])
        consumer: Any
        ids: dict[str, Any] = {}
        if device.startswith("cuda"):
            consumer = make_cuda_consumer(backend.name, device, step_ms)
            ids = consumer.device_ids()
        else:
            consumer = SimulatedDevice(step_ms)
        emit({"ev": "ready", **ids})
        loader, recorder = backend.build_loader(
            dataset, config, int(settings["batch_size"]), collate_fn,
            bool(settings["shuffle"]), bool(settings["drop_last"]),
            (int(settings.get("rank", 0)), int(settings.get("world_size", 1))),
        )
    except Exception as exc:
        emit({"ev": "error", "status": "failed", "message": describe_exception(exc),
              "traceback": traceback.format_exc()})
        return
    live: dict[str, Any] = {}

    def report(exc: BaseException, wait_s: float = 0.0) -> None:
        status, message = classify_loader_error(exc, worker_signals(live.get("iterator"), wait_s),
                                                backend.internal_paths)
        if recorder is not None and config.num_workers == 0:
            message = locate_failure(dataset, recorder.last) or message
        emit({"ev": "error", "status": status, "message": message,
              "traceback": "".join(traceback.format_exception(exc))})

    failure = ThreadFailure(report).install()
    DeadWorkerWatch(live, report, failure.handled).start()
    try:
        figures = _timed_loop(loader, config, float(settings["trial_seconds"]), emit, consumer, clock, live,
                              recorder, ReceiveTimer.install(), backend.dataset_kind(dataset) == "iterable",
                              backend)
    except Exception as exc:
        # A batch that cannot be received, from a pipe or from shared memory, often means its worker died.
        failure.end(exc, dead_peer=isinstance(exc, (OSError, EOFError, pickle.UnpicklingError)))
        return
    failure.handled.set()
    emit({"ev": "result", **figures})


EPOCH_CHECK_ITEMS = 32
EPOCH_CHECK_BATCH = 2
EPOCH_CHECK_EPOCHS = 4
"""Every epoch's end is a chance for a racy failure to show (paddle 3.3's shows at most of them)."""


def run_epoch_check(backend: Backend, config: LoaderConfig, emit: Emit) -> None:
    """Epochs of a tiny IterableDataset through ``config``'s DataLoader: does it survive an epoch's end?

    Persistent workers each meet the end of their share of a stream and must
    start the next epoch; a trial's window seldom reaches an epoch's end, so
    this checks the installed DataLoader itself. Emits the batches of each
    epoch, or the error. Never raises.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    live: dict[str, Any] = {}

    def report(exc: BaseException, wait_s: float = 0.0) -> None:
        status, message = classify_loader_error(exc, worker_signals(live.get("iterator"), wait_s),
                                                backend.internal_paths)
        emit({"ev": "error", "status": status, "message": message,
              "traceback": "".join(traceback.format_exception(exc))})

    try:
        loader, _ = backend.build_loader(backend.counting_stream(EPOCH_CHECK_ITEMS), config, EPOCH_CHECK_BATCH,
                                         None, False, False)
    except Exception as exc:
        emit({"ev": "error", "status": "failed", "message": describe_exception(exc),
              "traceback": traceback.format_exc()})
        return
    failure = ThreadFailure(report).install()
    batches = []
    try:
        for _ in range(EPOCH_CHECK_EPOCHS):
            live["iterator"] = iter(loader)
            batches.append(0)
            for _ in live["iterator"]:
                batches[-1] += 1
                emit({"ev": "progress"})
    except Exception as exc:
        failure.end(exc, dead_peer=True)
        return
    failure.handled.set()
    emit({"ev": "result", "batches": batches, "expected": EPOCH_CHECK_ITEMS // EPOCH_CHECK_BATCH})


class ReceiveTimer:
    """Times the main process's unpickling of worker results (``multiprocessing.queues`` loads).

    Rebuilding a batch's tensors (a file descriptor fetched from the worker
    for each) and its Python objects happens there, in the main process,
    whatever the number of workers: a serial cost that can cap throughput.
    """

    def __init__(self, inner: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        self.inner = inner
        self.clock = clock
        self.busy_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def loads(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        start = self.clock()
        try:
            return self.inner.loads(data, *args, **kwargs)
        finally:
            self.busy_s += self.clock() - start

    @classmethod
    def install(cls) -> ReceiveTimer:
        """Wrap the pickler the DataLoader's result queue uses (in this trial process only)."""
        import multiprocessing.queues

        timer = cls(multiprocessing.queues._ForkingPickler)  # type: ignore[attr-defined]
        multiprocessing.queues._ForkingPickler = timer  # type: ignore[attr-defined]
        return timer


BATCH_MARKS = 32
"""Fingerprints of a stream's first batches kept in the result, to compare ranks' streams."""


def fingerprint(batch: Any) -> int:
    """A cheap identity for a batch: shapes and the leading bytes of its arrays."""
    parts: list[bytes] = []

    def walk(obj: Any, depth: int) -> None:
        if len(parts) >= 16 or depth > 8:
            return
        if hasattr(obj, "reshape") and hasattr(obj, "shape"):
            flat = obj.reshape(-1)[:64]
            flat = flat.numpy() if hasattr(flat, "numpy") else flat
            parts.append(repr(tuple(obj.shape)).encode() + bytes(memoryview(flat.tobytes())))
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for value in obj[:16]:
                walk(value, depth + 1)
        else:
            parts.append(repr(obj)[:256].encode())

    walk(batch, 0)
    return zlib.crc32(b"\0".join(parts))


def _timed_loop(loader: Any, config: LoaderConfig, trial_s: float, emit: Emit, consumer: Any,
                clock: Callable[[], float], live: dict[str, Any], recorder: Any, receiver: ReceiveTimer,
                iterable: bool, backend: Backend) -> dict[str, Any]:
    """Run warm-up then the window; ``live["iterator"]`` lets the caller inspect workers on failure."""
    log = BatchLog()
    warmup = warmup_batches(config.num_workers, config.prefetch_factor)
    created = clock()
    iterator = live["iterator"] = iter(loader)
    epochs = 1
    epoch_samples: int | None = None
    marks: list[int] = []
    repeats = 0
    sampler_start = receive_start = 0.0
    first_batch_s: float | None = None
    window_first: int | None = None
    last_beat = last_check = created
    end = created
    while True:
        start = end
        cpu_start = time.thread_time()
        try:
            batch = next(iterator)
        except StopIteration:
            if len(log) == 0:
                raise RuntimeError(
                    "the loader yielded no batch (dataset smaller than one batch with drop_last?)") from None
            if epoch_samples is None:
                epoch_samples = sum(log.size)
            log.epoch_first.append(len(log))
            iterator = live["iterator"] = iter(loader)
            epochs += 1
            batch = next(iterator)
        wait_cpu = time.thread_time() - cpu_start
        arrived = clock()
        if first_batch_s is None:
            first_batch_s = arrived - created
            emit({"ev": "first_batch", "first_batch_s": first_batch_s})
        on_device = consumer.to_device(batch)
        copied = clock()
        consumer.step(on_device)
        end = clock()
        log.add(arrived - start, wait_cpu, copied - arrived, end - copied, end, batch_size_of(batch))
        if iterable and window_first is None and epoch_samples is None:
            # Fingerprints are taken during warm-up only, so they cost the timed window nothing;
            # unsharded workers repeat each other's batches from the first round.
            mark = fingerprint(batch)
            repeats += mark in marks
            marks.append(mark)
        if window_first is None and len(log) >= warmup:
            window_first = len(log) - 1
            sampler_start = recorder.busy_s if recorder is not None else 0.0
            receive_start = receiver.busy_s
            emit({"ev": "window_start"})
        if end - last_beat >= HEARTBEAT_S:
            last_beat = end
            emit({"ev": "progress", "batches": len(log)})
        if window_first is not None:
            in_window, elapsed = len(log) - 1 - window_first, end - log.end_t[window_first]
            spread = None
            if elapsed >= min(MIN_WINDOW_S, trial_s) and end - last_check >= STEADY_CHECK_S:
                last_check = end
                spread = rate_spread(log, window_first, max(1, config.num_workers))
            if window_done(in_window, elapsed, trial_s, config.num_workers, spread):
                break
    workers_started = len(getattr(iterator, "_workers", None) or [])
    sampler_s = recorder.busy_s - sampler_start if recorder is not None else None
    receive_s = receiver.busy_s - receive_start
    emit({"ev": "window_end"})
    if workers_started:
        time.sleep(END_MARK_GRACE_S)  # the parent reads the workers' memory now: they must still be there
    backend.shutdown(iterator)
    figures = summarize(log, window_first, config.num_workers)
    figures.update(
        first_batch_s=first_batch_s,
        worker_processes=workers_started,
        epochs_started=epochs,
        epoch_samples=epoch_samples,
        repeat_fraction=repeats / len(marks) if marks else None,
        batch_marks=marks[:BATCH_MARKS],
        sampler_ms_mean=None if sampler_s is None else 1000.0 * sampler_s / figures["batches"],
        receive_ms_mean=1000.0 * receive_s / figures["batches"] if config.num_workers else None,
    )
    return figures
