"""What ``dataprof inspect`` measures and of which target (:class:`InspectSettings`), and what the measurement
produced (:class:`InspectionData`, the transform tree's :class:`StageTiming`): the raw data
``decide.inspect.analyse`` turns into the :class:`~dataprof.results.inspect.Inspection` document. Stdlib only."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dataprof.results.cache import StorageReads
from dataprof.results.codec import AS_TEXT, HIDDEN, named
from dataprof.results.environment import DatasetInfo, Environment
from dataprof.results.knobs import DEFAULT_BATCH_SIZE, DEFAULT_PREFETCH_FACTOR
from dataprof.results.threads import GilShare


@dataclass(frozen=True)
class StageTiming:
    """One node of the transform tree: leaves are timed; a composite costs what its children cost."""

    name: str
    path: str
    seconds: float
    calls: int
    composite: bool = False
    children: tuple[StageTiming, ...] = ()
    gil_release: float | None = None
    """Share of the stage's time that releases the GIL (``measure.gil``); None: not measured."""

    def total_seconds(self) -> float:
        """Seconds spent in this stage: its own, or its children's for a composite."""
        return sum(child.total_seconds() for child in self.children) if self.composite else self.seconds

    def leaves(self) -> list[StageTiming]:
        """The timed stages under this one (itself, if it is timed)."""
        if not self.composite:
            return [self]
        return [leaf for child in self.children for leaf in child.leaves()]


@dataclass(frozen=True)
class InspectSettings:
    """What ``dataprof inspect`` measures, and of which target."""

    target: str = field(metadata=HIDDEN)
    framework: str = "auto"
    """Whose default collate and thread settings apply: ``auto`` (from the dataset), ``torch`` or ``paddle``."""
    samples: int = 200
    seed: int = 0
    batch_size: int | None = None
    """Samples a batch holds, for the collate, /dev/shm and open-file figures; None: a DataLoader target's own,
    else 64 (an inspection's document holds the one it used)."""
    prefetch_factor: int | None = None
    """For the /dev/shm and open-file checks: batches each worker keeps in flight; None: a DataLoader target's
    own, else 2."""
    max_seconds: float = 60.0
    """Stop fetching samples after this long."""
    collate_fn: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict, metadata=named("target_kwargs", **AS_TEXT))
    """Keyword arguments for a class or factory target (in the JSON: their ``repr``, read back as that text)."""
    cpus: int | None = None
    """Measure pinned to this many of the usable CPUs (``--cpus``), for the CPU ceiling of that many."""
    cwd: str = field(default_factory=os.getcwd, metadata=HIDDEN)
    dataset: Any = field(default=None, metadata=HIDDEN)
    """A Dataset object (Python API); ``target`` is then only its name."""
    collate: Any = field(default=None, metadata=HIDDEN)
    """A collate callable (Python API), instead of ``collate_fn``."""

    @property
    def batch(self) -> int:
        """:attr:`batch_size`, 64 where none was given."""
        return self.batch_size or DEFAULT_BATCH_SIZE

    @property
    def prefetch(self) -> int:
        """:attr:`prefetch_factor`, 2 where none was given."""
        return self.prefetch_factor or DEFAULT_PREFETCH_FACTOR


@dataclass(frozen=True)
class InspectionData:
    """Raw measurements of one ``dataprof inspect`` run (seconds and bytes)."""

    target: str
    tool_version: str
    settings: InspectSettings
    environment: Environment
    dataset: DatasetInfo
    indices: tuple[int, ...]
    """Indices measured, in order (positions in the stream for an IterableDataset)."""
    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    """Process CPU time of each sample (every thread of this process)."""
    sample_bytes: tuple[int, ...]
    first_s: float | None = None
    """The warm-up fetch (lazy opens, caches), not counted in the statistics."""
    errors: tuple[tuple[int, str], ...] = ()
    repeat_s: dict[int, float] = field(default_factory=dict)
    """Second fetch of the slowest indices: a slow *index* repeats, a slow *moment* does not."""
    stages: tuple[StageTiming, ...] = ()
    pipeline_notes: tuple[str, ...] = ()
    collate_s: tuple[float, ...] = ()
    collate_cpu_s: tuple[float, ...] = ()
    collate_error: str | None = None
    getitems_s: tuple[float, ...] = ()
    getitems_cpu_s: tuple[float, ...] = ()
    """Wall and CPU time per sample of each batch fetched at once (``__getitems__``, as a DataLoader fetches them),
    for a dataset that has it."""
    pickle_bytes: int | None = None
    pickle_s: float | None = None
    pickle_error: str | None = None
    stopped: str | None = None
    """Why fewer samples than asked were measured, if so."""
    nofile_soft: int | None = None
    nofile_hard: int | None = None
    sharing_strategy: str | None = None
    """torch.multiprocessing's strategy: ``file_descriptor`` keeps one open file per tensor in flight."""
    storage: StorageReads | None = None
    """What the samples read from storage and the page cache, cold and warm; None when they read no data file."""
    gil: GilShare | None = None
    """How much of a whole sample's fetch releases the GIL (map-style datasets)."""


def to_ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds, None kept."""
    return None if seconds is None else seconds * 1000.0


SLOWEST = 10
"""Slowest samples kept (and fetched a second time)."""


def slowest_positions(wall_s: tuple[float, ...], count: int = SLOWEST) -> list[int]:
    """Positions of the slowest samples, slowest first."""
    return sorted(range(len(wall_s)), key=lambda i: -wall_s[i])[:count]
