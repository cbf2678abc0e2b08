"""The parent ↔ host ↔ trial messages: JSON lines over pipes, and the typed requests they carry.

Commands go to the host as ``{"cmd": ..., ...}`` lines (``measure/sweep/commands.py``); events come back as
``{"ev": ..., ...}`` lines (``measure/sweep/events.py``), each family a :class:`Wire`. Pipes of their own carry
them, so whatever the user's code prints cannot corrupt the protocol. The requests that cross the process boundary
are the frozen dataclasses below, written and read in one place.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dataprof.measure.timing import Rival
from dataprof.results.codec import decode, encode
from dataprof.results.settings import SweepSettings
from dataprof.results.vocabulary import TrialStatus, WorkerKind


def child_env() -> dict[str, str]:
    """This process's environment, with dataprof's own root first on ``PYTHONPATH``: what a fresh interpreter
    dataprof starts (``python -m dataprof.measure.…``) needs to import dataprof, installed or not."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))


Message = dict[str, Any]
"""One decoded line: a command (``cmd`` key) or an event (``ev`` key)."""


def line_of(message: Message) -> bytes:
    """One JSON line (objects JSON cannot hold are written as their ``str``)."""
    return (json.dumps(message, default=str) + "\n").encode()


class Channel:
    """The writing end of a pipe: one message per line, written whole."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, message: Message) -> None:
        """Write ``message`` as one line, looping over partial writes."""
        data = line_of(message)
        while data:
            written = os.write(self.fd, data)
            data = data[written:]


class QueuedChannel(Channel):
    """A channel whose :meth:`send` never waits on the reader: a thread of its own writes the lines, in order, so a
    reader that stalls (the watch descheduled, stopped) stalls that thread, not the training that sends.
    :meth:`close` waits until every line is written (or the reader is gone)."""

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self._lines: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write, name="dataprof-channel", daemon=True)
        self._writer.start()

    def send(self, message: Message) -> None:
        """Queue ``message`` for the writer."""
        self._lines.put(message)

    def _write(self) -> None:
        while (message := self._lines.get()) is not None:
            try:
                Channel.send(self, message)
            except OSError:  # the reader is gone: nothing more can be said
                return

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._lines.put(None)
        self._writer.join()


class LineReader:
    """The reading end of a pipe: the complete messages each read brings (a partial line waits for the next)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def read(self) -> list[Message] | None:
        """Messages completed by one ``os.read`` (blocks until data comes); None at end of file."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            return None
        self._buffer.extend(chunk)
        *lines, rest = bytes(self._buffer).split(b"\n")
        self._buffer[:] = rest
        return [json.loads(line) for line in lines if line.strip()]


_Message = TypeVar("_Message")


class ProtocolError(Exception):
    """A message between dataprof's own processes does not match its type: a key unknown or missing, a word
    unknown (a bug, or two versions of dataprof talking)."""


ROUTING = ("cmd", "ev")
"""The keys that say what a message is; the typed payload is the rest."""


def read(kind: type[_Message], data: Message) -> _Message:
    """The message of type ``kind`` in ``data`` (``cmd``/``ev`` aside), read strictly: ProtocolError for a key
    unknown or missing, or a word (a status) this dataprof does not know."""
    try:
        return decode(kind, {k: v for k, v in data.items() if k not in ROUTING}, strict=True)
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None


class Wire(Generic[_Message]):
    """A family of typed messages on one pipe (``noun``: what one is called), each written with its kind under
    ``key`` (``ev``, ``cmd``) and read back strictly (:func:`read`; a kind unknown is a ProtocolError too)."""

    def __init__(self, key: str, noun: str, kinds: dict[str, type[Any]]) -> None:
        self.key, self.noun, self.kinds = key, noun, kinds
        self._kind_of = {cls: kind for kind, cls in kinds.items()}

    def said(self, message: _Message) -> Message:
        """``message`` as its line: its kind and its fields."""
        return {self.key: self._kind_of[type(message)], **encode(message)}

    def heard(self, data: Message) -> _Message:
        """The message ``data`` holds, read strictly."""
        kind = self.kinds.get(data.get(self.key, ""))
        if kind is None:
            raise ProtocolError(f"unknown {self.noun} in {data!r}")
        message: _Message = read(kind, data)
        return message


@dataclass(frozen=True)
class LoadRequest:
    """How to build the dataset: what the probe, the host (when shared) and each trial do."""

    target: str
    """Import path, or the name of an object handed over by the Python API."""
    args: tuple[str, ...]
    """Keyword arguments for a class or factory target, as ``KEY=repr(value)`` (``backends.target.parse_kwarg``
    reads them back: a Python literal, else the string)."""
    cwd: str
    """Directory put first on ``sys.path`` for the import."""
    collate_fn: str | None
    batch_size: int
    framework: str
    """``auto``, ``torch`` or ``paddle``."""
    split: str = "train"
    """A DataModule target: which ``<split>_dataloader()``."""
    batch_size_given: bool = True
    """Whether ``batch_size`` was given (``--batch-size``): a DataLoader target's own batch size yields to it."""
    expected_framework: str | None = None
    """The framework the host imports before it forks the probe (the one given, else the likely one), so that
    the probe inherits it instead of importing it a second time; None: the one the probe finds, imported after
    it. When the probe finds another, the runner starts a fresh host expecting that one (``TrialRunner.start``)."""
    gil: bool = True
    """Whether the probe measures how much of a sample releases the GIL: only thread workers need it, so not
    when ``--worker-kind`` leaves threads out."""

    @property
    def given_batch_size(self) -> int | None:
        """The batch size the user gave, or None (a DataLoader target then keeps its own)."""
        return self.batch_size if self.batch_size_given else None

    @classmethod
    def of(cls, settings: SweepSettings, expected_framework: str | None = None) -> LoadRequest:
        """The request for a sweep's target."""
        return cls(target=settings.target, args=tuple(f"{k}={v!r}" for k, v in settings.target_kwargs.items()),
                   cwd=settings.cwd, collate_fn=settings.collate_fn,
                   batch_size=settings.batch_size, framework=settings.framework, split=settings.split,
                   batch_size_given=settings.batch_size_given, expected_framework=expected_framework,
                   gil=not settings.space.worker_kinds or WorkerKind.THREAD in settings.space.worker_kinds)


@dataclass(frozen=True)
class TrialSettings:
    """What a trial needs besides its LoaderConfig."""

    device: str
    """``cpu`` (simulated device) or ``cuda:N``."""
    step_ms: float
    """Model step the consumer is calibrated to, per batch."""
    batch_size: int
    shuffle: bool
    drop_last: bool
    trial_seconds: float
    """Longest steady-state window."""
    rank: int = 0
    world_size: int = 1
    """A distributed trial loads its rank's shard of a map-style dataset."""
    batch_size_given: bool = True
    """Whether ``batch_size`` replaces a DataLoader target's own (else the loader batches as it did)."""
    rival_rate: float | None = None
    rival_spread: float = 0.0
    rival_either_way: bool = False
    """The :class:`~dataprof.measure.timing.Rival` the decision this trial serves weighs it against: its window
    may end, once it has lasted its minimum, as soon as its rate settles that. None: the window runs to
    :data:`~dataprof.measure.timing.STEADY_SPREAD` or ``trial_seconds``."""
    first_pass: bool = False
    """A cold trial: the window ends when the dataset's first pass does (after it, the data read is cached)."""
    opens_dir: str | None = None
    """Where the trial's processes log the files they open (``cache.open_log.OpenLog``); None: not logged."""

    @classmethod
    def of(cls, settings: SweepSettings, rival: Rival | None = None, first_pass: bool = False,
           opens_dir: str | None = None) -> TrialSettings:
        """The trial settings of a sweep; ``rival``: what the decision this trial serves weighs it against;
        ``first_pass`` and ``opens_dir`` as the fields say."""
        return cls(device=settings.device, step_ms=settings.step_ms, batch_size=settings.batch_size,
                   shuffle=settings.shuffle, drop_last=settings.drop_last, trial_seconds=settings.trial_seconds,
                   rank=settings.rank, world_size=settings.world_size, batch_size_given=settings.batch_size_given,
                   rival_rate=rival.rate if rival else None, rival_spread=rival.spread if rival else 0.0,
                   rival_either_way=rival.either_way if rival else False, first_pass=first_pass,
                   opens_dir=opens_dir)

    @property
    def rival(self) -> Rival | None:
        """The rival these settings carry, if any."""
        return Rival(self.rival_rate, self.rival_spread, self.rival_either_way) if self.rival_rate else None


@dataclass(frozen=True)
class AutotuneRequest:
    """Paddle's own dataloader autotune, run for comparison."""

    steps: int
    """Its ``tuning_steps``: batches timed per worker count it tries."""
    batch_size: int
    drop_last: bool


@dataclass(frozen=True)
class TrialFigures:
    """What a trial measured in its own process: its ``result`` event (``timing.summarize``'s window figures and
    the loop's own), every key required and no other allowed."""

    samples_per_s: float
    samples_per_s_spread: float | None
    wait_fraction: float
    wait_ms: dict[str, float]
    wait_cpu_ms_mean: float
    copy_ms_mean: float
    step_ms_mean: float
    batches: int
    samples: int
    window_s: float
    epoch_starts_in_window: int
    epoch_start_wait_s: float
    first_batch_s: float | None
    worker_processes: int
    epochs_started: int
    epoch_samples: int | None
    repeat_fraction: float | None
    batch_marks: tuple[int, ...]
    sampler_ms_mean: float | None
    receive_ms_mean: float | None
    first_pass_end: bool
    window_read_bytes: int | None = None
    """What the trial's processes read from storage in its window, counted by the trial at the window's ends (the
    parent's readings come a relay late: one that falls after the window's end divides by time with no reading)."""
    window_read_chars: int | None = None


@dataclass(frozen=True)
class TrialError:
    """Why a trial (or a request run like one) could not measure: its ``error`` event."""

    status: TrialStatus
    message: str
    traceback: str | None = None


def error_event(status: TrialStatus, message: str, traceback: str | None = None) -> Message:
    """The ``error`` event that ends a trial: its status, the one line to show, the traceback for --debug."""
    return {"ev": "error", **encode(TrialError(status, message, traceback))}
