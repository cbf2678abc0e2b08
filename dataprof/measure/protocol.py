"""The parent ↔ host ↔ trial messages: JSON lines over pipes, and the typed requests they carry.

Commands go to the host as ``{"cmd": ..., ...}`` lines; events come back as
``{"ev": ..., ...}`` lines. Pipes of their own carry them, so whatever the
user's code prints cannot corrupt the protocol. The requests that cross the
process boundary are the frozen dataclasses below, written and read in one place.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, TypeVar

from dataprof.measure.timing import Rival
from dataprof.results.settings import SweepSettings


def child_env() -> dict[str, str]:
    """This process's environment, with dataprof's own root first on ``PYTHONPATH``: what a fresh interpreter
    dataprof starts (``python -m dataprof.measure.…``) needs to import dataprof, installed or not."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))


Message = dict[str, Any]
"""One decoded line: a command (``cmd`` key) or an event (``ev`` key)."""


def encode(message: Message) -> bytes:
    """One JSON line (objects JSON cannot hold are written as their ``str``)."""
    return (json.dumps(message, default=str) + "\n").encode()


class Channel:
    """The writing end of a pipe: one message per line, written whole."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, message: Message) -> None:
        """Write ``message`` as one line, looping over partial writes."""
        data = encode(message)
        while data:
            written = os.write(self.fd, data)
            data = data[written:]


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


_Request = TypeVar("_Request", bound="_Typed")


class _Typed:
    """A frozen request that crosses the process boundary as a JSON object."""

    def to_dict(self) -> Message:
        """Its fields, by name."""
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]

    @classmethod
    def from_dict(cls: type[_Request], data: Message) -> _Request:
        """Read :meth:`to_dict` back (unknown keys are ignored)."""
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class LoadRequest(_Typed):
    """How to build the dataset: what the probe, the host (when shared) and each trial do."""

    target: str
    """Import path, or the name of an object handed over by the Python API."""
    args: tuple[str, ...]
    """``KEY=VALUE`` keyword arguments for a class or factory target."""
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

    @property
    def given_batch_size(self) -> int | None:
        """The batch size the user gave, or None (a DataLoader target then keeps its own)."""
        return self.batch_size if self.batch_size_given else None

    @classmethod
    def of(cls, settings: SweepSettings, args: list[str], expected_framework: str | None = None) -> LoadRequest:
        """The request for a sweep's target."""
        return cls(target=settings.target, args=tuple(args), cwd=settings.cwd, collate_fn=settings.collate_fn,
                   batch_size=settings.batch_size, framework=settings.framework, split=settings.split,
                   batch_size_given=settings.batch_size_given, expected_framework=expected_framework)


@dataclass(frozen=True)
class TrialSettings(_Typed):
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

    @classmethod
    def of(cls, settings: SweepSettings, rival: Rival | None = None) -> TrialSettings:
        """The trial settings of a sweep; ``rival``: what the decision this trial serves weighs it against."""
        return cls(device=settings.device, step_ms=settings.step_ms, batch_size=settings.batch_size,
                   shuffle=settings.shuffle, drop_last=settings.drop_last, trial_seconds=settings.trial_seconds,
                   rank=settings.rank, world_size=settings.world_size, batch_size_given=settings.batch_size_given,
                   rival_rate=rival.rate if rival else None, rival_spread=rival.spread if rival else 0.0,
                   rival_either_way=rival.either_way if rival else False)

    @property
    def rival(self) -> Rival | None:
        """The rival these settings carry, if any."""
        return Rival(self.rival_rate, self.rival_spread, self.rival_either_way) if self.rival_rate else None


@dataclass(frozen=True)
class AutotuneRequest(_Typed):
    """Paddle's own dataloader autotune, run for comparison."""

    steps: int
    """Its ``tuning_steps``: batches timed per worker count it tries."""
    batch_size: int
    drop_last: bool
