"""The dataset behind the data files the trials read: its size on storage, how much of it is cached, and the page
cache that could hold it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dataprof.measure.storage import NO_EVICTION, data_file_size, excluded_roots, filesystem_of, residency
from dataprof.results.storage import DataFootprint


@dataclass
class DataFiles:
    """The data files a sweep's trials read (path → size), gathered trial by trial."""

    sizes: dict[str, int] = field(default_factory=dict)
    roots: tuple[str, ...] = field(default_factory=excluded_roots)

    def add(self, paths: Iterable[str]) -> set[str]:
        """Keep the data files among ``paths``; the ones kept."""
        kept = set()
        for path in paths:
            if path in self.sizes:
                kept.add(path)
                continue
            size = data_file_size(path, self.roots)
            if size is not None:
                self.sizes[path] = size
                kept.add(path)
        return kept


WALK_LIMIT = 200_000
WALK_S = 5.0
"""The dataset's directory is walked for at most this many entries, or seconds: beyond, the size is extrapolated."""


def dataset_directory(paths: Iterable[str]) -> str | None:
    """The directory the data files share (their common parent), or None when they share only ``/``."""
    dirs = {os.path.dirname(p) for p in paths}
    if not dirs:
        return None
    common = os.path.commonpath(sorted(dirs))
    return None if common in ("/", os.path.expanduser("~")) else common


def walk_size(directory: str, suffixes: set[str], clock: Callable[[], float] = time.monotonic) \
        -> tuple[int, int, bool]:
    """Bytes and files under ``directory`` whose suffix is one of ``suffixes``; whether the walk was cut short."""
    total = files = seen = 0
    deadline = clock() + WALK_S
    stack = [directory]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > WALK_LIMIT or clock() > deadline:
                return total, files, True
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file() and Path(entry.name).suffix in suffixes:
                    total += entry.stat().st_size
                    files += 1
            except OSError:
                continue
    return total, files, False


def page_cache_room(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """Bytes the page cache may hold now: the RAM available (free plus reclaimable cache), within this cgroup's
    memory limit less the memory its processes hold (page cache counts against the limit)."""
    import psutil

    room = int(psutil.virtual_memory().available)
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            used = int((cgroup / "memory.current").read_text())
            stat_text = (cgroup / "memory.stat").read_text()
            cached = next((int(line.split()[1]) for line in stat_text.splitlines() if line.startswith("file ")), 0)
            room = min(room, int(limit) - (used - cached))
    except (OSError, ValueError):
        pass
    return max(0, room)


def footprint(files: DataFiles, page_cache_bytes: int) -> DataFootprint | None:
    """The dataset on storage, from the data files the trials read: its directory's files of the same kinds (or
    the files themselves), how much of what was read is cached now, the filesystem. None without data files."""
    if not files.sizes:
        return None
    read_bytes = sum(files.sizes.values())
    directory = dataset_directory(files.sizes)
    total, count, cut = read_bytes, len(files.sizes), False
    if directory is not None:
        suffixes = {Path(p).suffix for p in files.sizes}
        walked, walked_files, cut = walk_size(directory, suffixes)
        if walked >= read_bytes:
            total, count = walked, walked_files
    resident, readable = residency(files.sizes)
    system = filesystem_of(next(iter(files.sizes)))
    return DataFootprint(
        bytes=total, files=count, read_files=len(files.sizes), read_bytes=read_bytes,
        resident_fraction=resident / readable if readable else None, page_cache_bytes=page_cache_bytes,
        filesystem=system, directory=directory, walk_cut=cut,
        evictable=None if system is None else system not in NO_EVICTION)
