"""The dataset on storage, and which case the training is in: data only. Stdlib only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

FITS_SHARE = 0.9
"""A dataset fits in the page cache when it takes at most this share of it: the training's own memory grows, and
a file read in a cycle slightly larger than the cache is evicted just before it is read again."""


@dataclass(frozen=True)
class DataFootprint:
    """The data files the trials read, the dataset they belong to, and the page cache that could hold it."""

    bytes: int
    """Size of the dataset on storage: the files of the kinds the trials read under the directory they share
    (``directory``), or the files read when they share none or the walk found less."""
    files: int
    read_files: int
    """Distinct data files the trials read."""
    read_bytes: int
    """Their total size."""
    resident_fraction: float | None
    """Share of the files read that sat in the page cache when the sweep ended (``mincore``)."""
    page_cache_bytes: int
    """RAM the page cache may use: available memory, within the cgroup's limit."""
    filesystem: str | None = None
    directory: str | None = None
    walk_cut: bool = False
    """The directory held more than dataprof walks: ``bytes`` counts the part walked."""
    evictable: bool | None = None
    """Whether eviction can make the files cold (not on tmpfs, whose files live in memory)."""
    JSON_DERIVED: ClassVar[tuple[str, ...]] = ("fits_in_page_cache", "cache_ratio")

    @property
    def cache_ratio(self) -> float | None:
        """The dataset's size over the page cache's."""
        return self.bytes / self.page_cache_bytes if self.page_cache_bytes else None

    @property
    def fits_in_page_cache(self) -> bool:
        """Whether the whole dataset stays cached after its first pass (:data:`FITS_SHARE`)."""
        return self.bytes <= FITS_SHARE * self.page_cache_bytes


@dataclass(frozen=True)
class StorageOutlook:
    """Which case the training is in, from the footprint and the trials: the figure that is its steady state,
    and how long an epoch takes cold and warm."""

    steady: str
    """``cold`` (every epoch reads from storage) or ``warm`` (only the first does)."""
    reason: str
    samples_per_epoch: int | None = None
    cold_samples_per_s: float | None = None
    warm_samples_per_s: float | None = None
    first_epoch_s: float | None = None
    later_epoch_s: float | None = None


@dataclass(frozen=True)
class PassReads:
    """``dataprof inspect``: one pass over some samples, fetched one by one, and what they read."""

    samples: int
    wall_ms_mean: float
    read_bytes_per_sample: float | None
    """From storage (``/proc/self/io`` ``read_bytes``: the page cache's misses)."""
    read_chars_per_sample: float | None
    """Through ``read()``, cached or not (``rchar``)."""
    files_per_sample: float | None
    """Data files opened per sample (through Python's ``open``)."""


@dataclass(frozen=True)
class StorageReads:
    """``dataprof inspect``: what the samples read, as the page cache first found them, then cold (the data files
    they read evicted first) and warm (the same samples again, cached), and the dataset against the page cache."""

    first: PassReads | None
    cold: PassReads | None = None
    warm: PassReads | None = None
    footprint: DataFootprint | None = None
    note: str | None = None
    """Why there is no cold pass, when there is none."""


@dataclass(frozen=True)
class Eviction:
    """What one eviction did: the files and bytes whose pages were dropped, what was still cached after, the files
    skipped and why, and the files that were cached before it (to read back once the cold trials are done)."""

    files: int
    bytes: int
    resident_before: int | None
    resident_after: int | None
    skipped: tuple[str, ...] = ()
    took_s: float = 0.0
    cached_before: tuple[str, ...] = ()
    """The files that had pages in the page cache before the eviction."""

    @property
    def effective(self) -> bool | None:
        """Whether the pages left the page cache (a tmpfs keeps them all); None when residency was not read."""
        if self.resident_after is None or self.bytes == 0:
            return None
        return self.resident_after <= 0.1 * self.bytes


@dataclass(frozen=True)
class ReadBack:
    """What reading files back into the page cache did: the files and bytes read, those left cold."""

    files: int
    bytes: int
    left_files: int
    left_bytes: int
    took_s: float
