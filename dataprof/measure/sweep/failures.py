"""What ended a trial: a worker's signal, a worker's traceback, a raising index; and the watchers that end
a trial the framework would leave blocked (a reader thread's error, a worker dead unnoticed)."""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dataprof.backends.frameworks import in_package
from dataprof.backends.target import describe_exception
from dataprof.backends.threads import SampleError
from dataprof.measure.protocol import Channel, error_event
from dataprof.measure.sweep.events import died_by
from dataprof.results.vocabulary import TrialStatus

DEAD_WORKER_WAIT_S = 1.0
"""How long a failed trial gives its workers to finish dying, so a crash is named by its signal."""
WORKER_POLL_S = 0.02
"""How often a dying worker's exit is looked for, within that wait."""

_SIGNAL_RE = re.compile(r"killed by signal: (?P<name>[\w ]+)")


@dataclass
class Live:
    """The loader's iterator of the moment (a new one each epoch without persistent workers): what a failure reads
    its workers' signals off."""

    iterator: Any = None


def worker_pids(iterator: Any) -> list[int]:
    """The process ids of a loader iterator's worker processes (none for threads or in the main process)."""
    return [pid for worker in getattr(iterator, "_workers", None) or []
            if isinstance(pid := getattr(worker, "pid", None), int)]


def worker_signals(iterator: Any, wait_s: float = 0.0) -> list[str]:
    """Names of the signals that killed this iterator's worker processes, if any.

    ``wait_s``: how long to give workers to finish dying (a broken pipe from a worker, or the framework's error
    about its missing batch, is seen before the kernel reports that worker's exit); the first death found ends
    the wait.
    """
    workers = list(getattr(iterator, "_workers", None) or [])
    deadline = time.monotonic() + wait_s
    while True:
        names = []
        for worker in workers:
            code = getattr(worker, "exitcode", None)
            if code is not None and code < 0:
                try:
                    names.append(signal.Signals(-code).name)
                except ValueError:
                    names.append(f"signal {-code}")
        running = [worker for worker in workers if getattr(worker, "exitcode", 0) is None]
        left = deadline - time.monotonic()
        if names or not running or left <= 0:
            return names
        for worker in running:
            worker.join(min(WORKER_POLL_S, max(0.0, deadline - time.monotonic())))


@contextlib.contextmanager
def quiet_worker_ends() -> Iterator[None]:
    """SIGCHLD at its default while a trial shuts its workers down after its window (in the main thread), the
    framework's handler put back after.

    A worker told to stop with a batch still in flight (the window ends mid-epoch) can die by a signal on its
    way out: one started by spawn or forkserver ends through the interpreter's exit, and its queue's feeder
    thread, still pickling that batch, aborts it (SIGABRT, ``terminate called without an active exception``).
    The framework's handler would raise that as the trial's failure, its window measured, though nothing of the
    config's made it (a training that ends or breaks mid-epoch ends its workers the same way)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, handler)


def message_of(exc: BaseException) -> str:
    """The exception's message as raised (a KeyError's str() is its repr; the message itself holds a worker's
    traceback lines)."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)


def may_be_a_dead_worker(exc: BaseException, internal: tuple[str, ...]) -> bool:
    """Whether ``exc`` can be the news of a worker's death: a batch that cannot be received (from a pipe, from
    shared memory, unpickled), or an error the framework's own code raised (its last frame in ``internal``) that
    carries no worker's traceback (a worker that raised is alive to say so)."""
    if isinstance(exc, (OSError, EOFError, pickle.UnpicklingError)):
        return True
    text = message_of(exc)
    frames = traceback.extract_tb(exc.__traceback__)
    return ("Traceback (most recent call last)" not in text and bool(frames)
            and any(path in frames[-1].filename for path in internal))


def classify_loader_error(exc: BaseException, killed_by: list[str] | None = None,
                          internal: tuple[str, ...] = ("/torch/", "/paddle/")) -> tuple[TrialStatus, str]:
    """(status, one-line reason) for an exception that ended the loop."""
    if isinstance(exc, SampleError):  # a loader thread's sample: its index and the user's line already
        return TrialStatus.FAILED, str(exc)
    if killed_by:
        return TrialStatus.CRASHED, died_by("a DataLoader worker", killed_by[0])
    text = message_of(exc)
    match = _SIGNAL_RE.search(text)
    if match:
        name = match.group("name").strip()
        signame = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Killed": "SIGKILL",
                   "Aborted": "SIGABRT"}.get(name, name)
        return TrialStatus.CRASHED, died_by("a DataLoader worker", signame)
    if "exited unexpectedly" in text:
        return TrialStatus.CRASHED, "a DataLoader worker exited unexpectedly"
    if "Traceback (most recent call last)" in text:  # a worker's error, re-raised with its traceback as text
        return TrialStatus.FAILED, worker_error_line(type(exc).__name__, text, internal)
    return TrialStatus.FAILED, describe_exception(exc)


_FRAME_RE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def worker_error_line(type_name: str, text: str, internal: tuple[str, ...] = ("/torch/", "/paddle/")) -> str:
    """Summarise a worker error re-raised with its traceback as text (torch's 'Original Traceback',
    Paddle's 'DataLoader worker(N) caught … with message')."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else type_name
    frames = [m for m in _FRAME_RE.finditer(text)
              if not any(path in m.group("file") for path in internal) and not in_package(m.group("file"), "dataprof")]
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
        """``threading.excepthook``: keep the first thread's exception; report it if the main thread does not."""
        if self.exc is not None or args.exc_value is None or isinstance(args.exc_value, SystemExit):
            return
        self.exc = args.exc_value
        self.arrived.set()
        if not self.handled.wait(self.grace_s):
            self.report(self.exc, DEAD_WORKER_WAIT_S)
            os._exit(1)

    def install(self) -> ThreadFailure:
        """Become ``threading.excepthook`` (in this trial process)."""
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

    def __init__(self, live: Live, report: Callable[[BaseException, float], None],
                 handled: threading.Event, interval_s: float = 0.5, grace_s: float = 2.0,
                 end: Callable[[int], None] = os._exit) -> None:
        self.live, self.report, self.handled = live, report, handled
        self.interval_s, self.grace_s, self.end = interval_s, grace_s, end
        self.thread = threading.Thread(target=self._run, name="dataprof-worker-watch", daemon=True)

    def start(self) -> DeadWorkerWatch:
        """Start watching the workers (a daemon thread)."""
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.handled.wait(self.interval_s):
            if worker_signals(self.live.iterator) and not self.handled.wait(self.grace_s):
                self.report(RuntimeError("a DataLoader worker died and the loader did not notice"), 0.0)
                self.end(1)
                return


def report_escape(channel: Channel, exc: BaseException) -> None:
    """Tell the parent what ended the trial when it escaped run_trial (e.g. torch's SIGCHLD handler)."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        status, message = classify_loader_error(exc) if isinstance(exc, Exception) else \
            (TrialStatus.FAILED, type(exc).__name__)
        channel.send(error_event(status, message, "".join(traceback.format_exception(exc))))
    except BaseException:
        pass  # the parent still sees the exit code
