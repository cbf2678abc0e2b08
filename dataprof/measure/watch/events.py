"""What the watched script's process tells ``dataprof run``'s parent, one JSON line each on a pipe of their own: a
typed record per event, written with its kind (:func:`said`) and read back strictly (:func:`heard`: a key unknown
or missing is a :class:`~dataprof.measure.protocol.ProtocolError`, not a figure silently left out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataprof.measure.protocol import Wire


@dataclass(frozen=True)
class Factory:
    """The importable function (or DataModule) that built a loader, as a sweep target (``LoaderRun``'s fields of
    the same names); all None when none did."""

    factory: str | None = None
    factory_args: tuple[str, ...] | None = None
    """Its arguments as ``KEY=VALUE`` items (those left at their defaults omitted)."""
    factory_blocked: str | None = None
    """Why ``--arg`` cannot give them; None when it can."""
    factory_split: str | None = None
    """A DataModule: the ``<split>_dataloader()`` that built the loader."""


@dataclass(frozen=True)
class BuiltLoader:
    """A loader as built: where, its dataset and class, its knobs as read off it, the split it serves, the
    functions that built it (each a field of a run's loader record, ``LoaderRun``, of the same name)."""

    site: str
    dataset: str
    dataset_module: str
    dataset_file: str | None
    loader_class: str
    framework: str
    batch_size: int | None
    num_workers: int | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    pin_memory: bool | None
    worker_kind: str = "process"
    other_knobs: dict[str, Any] = field(default_factory=dict)
    dataset_library: bool = False
    iterable: bool = False
    start_method: str | None = None
    start_method_chosen: bool = False
    split: str | None = None
    built_by: tuple[str, ...] = ()
    factory: Factory = field(default_factory=Factory)


@dataclass(frozen=True)
class LoaderBuilt:
    """A loader was built: its number and what it is."""

    loader: int
    info: BuiltLoader


@dataclass(frozen=True)
class Batches:
    """Batches delivered since the last flush: (epoch, index, wait s, step s or -1, samples, arrival s, grad)."""

    loader: int
    rows: list[list[float]]


@dataclass(frozen=True)
class EpochStarted:
    """A loader's epoch delivered its first batch."""

    loader: int
    epoch: int
    first_batch_s: float
    workers: tuple[int, ...] = ()
    """Its worker processes' pids (killed at the end, they are no news)."""
    batch_bytes: int | None = None
    """A batch's size, told at the first epoch."""


@dataclass(frozen=True)
class EpochEnded:
    """A loader's epoch ran out, at ``at`` (s on the script's clock)."""

    loader: int
    epoch: int
    at: float


@dataclass(frozen=True)
class WindowOpen:
    """The training's first counted batch: the start-up allowance is spent."""


@dataclass(frozen=True)
class WindowEnd:
    """The window is over (``--max-steps``, ``--seconds``): the parent times how long the script takes to end."""


@dataclass(frozen=True)
class Device:
    """The CUDA device the script uses, and what NVML finds it by."""

    device: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Ended:
    """Why the watch ended the script before it ended by itself."""

    why: str


@dataclass(frozen=True)
class RanksStarted:
    """The script started ranks of its own: how, where, and how many processes."""

    how: str
    processes: int
    site: str


@dataclass(frozen=True)
class Replayed:
    """A loader's replay began after ``after`` batches (those were loaded, not free)."""

    loader: int
    after: int


@dataclass(frozen=True)
class Overridden:
    """The loaders built with the watch's knobs, and per loader number the knobs it no longer had when first
    iterated (the script set them back)."""

    loaders: int
    lost: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Exit:
    """The script's last word: its exit code and, when it failed, what its stderr said."""

    code: int
    stderr_tail: tuple[str, ...] = ()
    stderr_causes: tuple[str, ...] = ()


Event = (LoaderBuilt | Batches | EpochStarted | EpochEnded | WindowOpen | WindowEnd | Device | Ended | RanksStarted
         | Replayed | Overridden | Exit)

EVENTS: Wire[Event] = Wire("ev", "event", {
    "loader": LoaderBuilt, "batches": Batches, "epoch": EpochStarted, "epoch_end": EpochEnded,
    "window_open": WindowOpen, "window_end": WindowEnd, "device": Device, "ended": Ended, "own_ranks": RanksStarted,
    "replayed": Replayed, "overridden": Overridden, "exit": Exit,
})
"""The watched script's events, each by its ``ev`` on the wire."""
said, heard = EVENTS.said, EVENTS.heard
