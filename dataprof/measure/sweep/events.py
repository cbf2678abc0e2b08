"""What the sweep's host and the processes it forks (the probe, each trial, each side run) tell the parent, one JSON
line each: a typed record per event, written with its kind (:func:`said`) and read back strictly (:func:`heard`: a
key unknown or missing is no figure silently left out but :class:`Garbled`, which ends what it was read for)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataprof.measure.protocol import Message, ProtocolError, TrialError, Wire
from dataprof.results.codec import encode
from dataprof.results.vocabulary import TrialStatus


def died_by(who: str, signame: str) -> str:
    """``a DataLoader worker died by SIGBUS``: what died, and by which signal (what that usually means is the
    reader's business: ``decide.crashes``)."""
    return f"{who} died by {signame}"


@dataclass(frozen=True)
class TrialStarted:
    """The host forked a trial (or a side run): its process group's leader."""

    pid: int


@dataclass(frozen=True)
class DatasetBuilt:
    """The dataset is built (by the probe, or by a trial building its own), in ``build_s``."""

    build_s: float


@dataclass(frozen=True)
class Shared:
    """The host built the dataset once, for every trial to be forked from it, in ``build_s``."""

    build_s: float


@dataclass(frozen=True)
class Ready:
    """The trial is ready to load: the CUDA device its dummy step uses and what NVML finds it by, where it has one."""

    uuid: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class FirstBatch:
    """The trial's first batch came, ``first_batch_s`` after its loader started."""

    first_batch_s: float


@dataclass(frozen=True)
class Progress:
    """A heartbeat: batches keep coming (how many so far, where the run counts them)."""

    batches: int | None = None


@dataclass(frozen=True)
class WindowStart:
    """The trial's timed window opens."""


@dataclass(frozen=True)
class LogPaused:
    """The trial stopped logging the files it opens, at ``at`` (its clock): the files read after it are not told."""

    at: float


@dataclass(frozen=True)
class WindowEnd:
    """The timed window closed; ``release``: the file the trial waits on to let its workers go, once the parent has
    read them."""

    release: str | None = None


@dataclass(frozen=True)
class Workers:
    """The trial's DataLoader worker processes (the host reaps them, and tells which died by a signal)."""

    pids: tuple[int, ...]


@dataclass(frozen=True)
class HostError:
    """The host could not do what it was asked (build the dataset, probe it): the line to show, the traceback."""

    message: str
    traceback: str = ""


@dataclass(frozen=True)
class TrialExit:
    """How a process the host forked (a trial, a side run) exited: its last event."""

    returncode: int
    signal: str | None = None
    """The signal that ended it (``SIGABRT``); None when it exited."""
    worker_signals: tuple[str, ...] = ()
    """The signals that ended its DataLoader workers, the host's own kill left out."""

    def why(self, who: str) -> tuple[TrialStatus, str]:
        """Its status and one line, where the process ended without a last word: it died by a signal (``who``), a
        worker did first, or it exited."""
        if self.signal:
            return TrialStatus.CRASHED, died_by(who, self.signal)
        if self.worker_signals:  # a worker died by a signal, and the process ended before it could say so
            return TrialStatus.CRASHED, died_by("a DataLoader worker", self.worker_signals[0])
        return TrialStatus.FAILED, f"{who} exited with code {self.returncode} without a result"


@dataclass(frozen=True)
class Found:
    """A word whose type only its reader knows, its fields as sent: a run's answer (``result``: a trial's figures, a
    side run's answer, read by :func:`~dataprof.measure.sweep.outcome.side_end`), or what the probe found
    (``host_ready``)."""

    kind: str
    fields: Message


@dataclass(frozen=True)
class Garbled:
    """A line that does not follow the protocol (a bug in dataprof, or two versions of it talking): why, and
    whether it was a process's exit (nothing more comes from that process)."""

    why: str
    exit: bool = False


Event = (TrialStarted | DatasetBuilt | Shared | Ready | FirstBatch | Progress | WindowStart | LogPaused | WindowEnd
         | Workers | HostError | TrialError | TrialExit | Found | Garbled)

Word = Found | TrialError | Garbled
"""A run's last word: its answer, its error, or a line that does not read."""
WORDS = (Found, TrialError, Garbled)


def ends(event: Event) -> TrialExit | Garbled | None:
    """``event`` where it is a forked process's exit: nothing more comes from that process."""
    return event if isinstance(event, TrialExit) or (isinstance(event, Garbled) and event.exit) else None


EVENTS: Wire[Event] = Wire("ev", "event", {
    "trial_started": TrialStarted, "built": DatasetBuilt, "shared": Shared, "ready": Ready, "first_batch": FirstBatch,
    "progress": Progress, "window_start": WindowStart, "log_paused": LogPaused, "window_end": WindowEnd,
    "workers": Workers, "host_error": HostError, "error": TrialError, "trial_exit": TrialExit,
})
"""The host's events, each by its ``ev`` on the wire (but :class:`Found`'s: :data:`FOUND`)."""
FOUND = ("result", "host_ready")
"""The kinds read as :class:`Found`."""


def said(event: Event) -> Message:
    """``event`` as its line's message: its kind and its fields."""
    return {"ev": event.kind, **event.fields} if isinstance(event, Found) else EVENTS.said(event)


def answer(value: Any) -> Message:
    """A run's answer (a trial's figures, a side run's answer) as its ``result`` line."""
    return said(Found("result", encode(value)))


def heard(message: Message) -> Event:
    """The event ``message`` holds, read strictly; :class:`Garbled` where it does not follow the protocol."""
    name = message.get("ev")
    if name in FOUND:
        return Found(name, {k: v for k, v in message.items() if k != "ev"})
    try:
        return EVENTS.heard(message)
    except ProtocolError as exc:
        return Garbled(str(exc), exit=name == "trial_exit")
