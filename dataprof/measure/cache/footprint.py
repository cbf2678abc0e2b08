"""The dataset behind the data files the trials read: its size on storage, how much of it is cached, and the page
cache that could hold it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataprof.measure.cache.files import NO_EVICTION, data_file_size, excluded_roots, filesystem_of, is_own
from dataprof.measure.cache.page_cache import residency
from dataprof.results.cache import DataFootprint


@dataclass
class DataFiles:
    """The data files a sweep's trials read (path → size), gathered trial by trial."""

    sizes: dict[str, int] = field(default_factory=dict)
    roots: tuple[str, ...] = field(default_factory=excluded_roots)
    own: set[str] = field(default_factory=set)
    """dataprof's own files and directories (a directory ends in ``/``), by the exact paths it made them at."""
    walks: dict[tuple[str, frozenset[str]], tuple[dict[str, int], bool]] = field(default_factory=dict)
    """Each data directory's walk, by directory and suffixes: its files of those kinds (path → size), and whether
    the walk was cut short. Walked once a sweep: the footprint and every cold trial's eviction read it."""

    def add(self, paths: Iterable[str]) -> set[str]:
        """Keep the data files among ``paths``; the ones kept."""
        kept = set()
        for path in paths:
            if path in self.sizes:
                kept.add(path)
                continue
            size = data_file_size(path, self.roots, self.own)
            if size is not None:
                self.sizes[path] = size
                kept.add(path)
        return kept


def files_read(files: DataFiles, held: set[str], opened: list[tuple[float, str]],
               window: tuple[float | None, float | None], rate: float | None,
               logged_until: float | None = None) -> dict[str, Any]:
    """What a trial read: ``files_read``, its data files (those its processes ``held`` open or mapped at a reading,
    and those they ``opened`` through Python, kept in ``files``), and ``files_per_sample``, how many they opened
    per sample of the ``window`` at ``rate`` samples/s (of its part before ``logged_until``, when the log was
    paused inside it)."""
    kept = files.add(held | {path for _, path in opened})
    start, end = window
    if end is not None and logged_until is not None:
        end = min(end, logged_until)
    if start is None or end is None or end <= start or not kept or not rate:
        return {"files_read": len(kept) or None}
    in_window = sum(1 for t, path in opened if start <= t <= end and path in kept)
    return {"files_read": len(kept), "files_per_sample": in_window / (end - start) / rate}


WALK_LIMIT = 200_000
WALK_S = 5.0
"""The dataset's directories are walked for at most this many entries, or seconds, in all: beyond, the size is
extrapolated."""


def _broad(directory: str) -> bool:
    """``/``, the home directory or a directory above it: never one dataset's, never walked."""
    return directory == "/" or os.path.join(os.path.expanduser("~"), "").startswith(os.path.join(directory, ""))


def _shallow(directory: str) -> bool:
    """Too broad for two directories meeting there to be one dataset: :func:`_broad`, or a top-level directory."""
    return _broad(directory) or directory.count("/") < 2


def dataset_directories(paths: Iterable[str]) -> dict[str | None, list[str]]:
    """The data files grouped by the directory each group shares: files whose directories meet below a broad one
    (:func:`_shallow`) form one group; files in a broad directory (an annotation file in ``~``) are grouped under
    None (their size is their own: nothing around them is walked)."""
    groups: list[tuple[str, list[str]]] = []
    for path in sorted(paths, key=lambda p: os.path.dirname(p).split("/")):  # a directory, then those under it
        parent = os.path.dirname(path)
        if groups:
            key, members = groups[-1]
            common = os.path.commonpath([key, parent])
            if not _shallow(common) or (common == key and not _broad(key)):
                members.append(path)
                groups[-1] = (common, members)
                continue
        groups.append((parent, [path]))
    found: dict[str | None, list[str]] = {}
    for key, members in groups:
        found.setdefault(None if _broad(key) else key, []).extend(members)
    return found


def files_under(directory: str, suffixes: set[str], clock: Callable[[], float] = time.monotonic,
                budget_s: float = WALK_S, limit: int = WALK_LIMIT) -> tuple[dict[str, int], bool]:
    """Each file under ``directory`` whose suffix is one of ``suffixes`` (path → size); whether the walk was cut
    short (after ``limit`` entries or ``budget_s``, checked entry by entry: a huge directory is never listed
    whole)."""
    found: dict[str, int] = {}
    seen = 0
    deadline = clock() + budget_s
    stack = [directory]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as entries:
                for entry in entries:
                    seen += 1
                    if seen > limit or clock() > deadline:
                        return found, True
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False) and Path(entry.name).suffix in suffixes:
                            found[entry.path] = entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return found, False


def _walked(files: DataFiles, directory: str, suffixes: set[str], clock: Callable[[], float],
            deadline: float) -> tuple[dict[str, int], bool]:
    """``directory``'s walk for ``suffixes`` (:attr:`DataFiles.walks`), walked now if it was not, until
    ``deadline``."""
    key = (directory, frozenset(suffixes))
    if key not in files.walks:
        files.walks[key] = files_under(directory, suffixes, clock, max(0.0, deadline - clock()))
    return files.walks[key]


def dataset_paths(files: DataFiles, clock: Callable[[], float] = time.monotonic) -> dict[str, int]:
    """The dataset's files, path → size: the data files read, and the files of the same kinds under each group's
    directory (:func:`dataset_directories`), within the walk's bounds. What a cold trial evicts and what a sweep
    started uncached reads into the page cache: a warm trial logs only the start of its window, so the files it
    read after are known by their directory, as the dataset's other files it may read."""
    paths = dict(files.sizes)
    deadline = clock() + WALK_S
    for directory, members in dataset_directories(files.sizes).items():
        if directory is not None:
            found, _ = _walked(files, directory, {Path(p).suffix for p in members}, clock, deadline)
            paths.update((path, size) for path, size in found.items() if not is_own(path, files.own))
    return paths


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


def footprint(files: DataFiles, page_cache_bytes: int, clock: Callable[[], float] = time.monotonic) \
        -> DataFootprint | None:
    """The dataset on storage, from the data files the trials read: for each group of them
    (:func:`dataset_directories`), its directory's files of the same kinds (or the files themselves), how much of
    what was read is cached now, the filesystem. None without data files."""
    if not files.sizes:
        return None
    read_bytes = sum(files.sizes.values())
    total = count = 0
    cut = False
    deadline = clock() + WALK_S
    groups = dataset_directories(files.sizes)
    for directory, members in groups.items():
        read = sum(files.sizes[p] for p in members)
        walked = walked_files = 0
        if directory is not None:
            found, short = _walked(files, directory, {Path(p).suffix for p in members}, clock, deadline)
            walked, walked_files = sum(found.values()), len(found)
            cut = cut or short
        if walked >= read:
            total, count = total + walked, count + walked_files
        else:
            total, count = total + read, count + len(members)
    resident, readable = residency(files.sizes)
    system = filesystem_of(next(iter(files.sizes)))
    return DataFootprint(
        bytes=total, files=count, read_files=len(files.sizes), read_bytes=read_bytes,
        resident_fraction=resident / readable if readable else None, page_cache_bytes=page_cache_bytes,
        filesystem=system, walk_cut=cut,
        directory=max((d for d in groups if d), key=lambda d: len(groups[d]), default=None),
        evictable=None if system is None else system not in NO_EVICTION)
