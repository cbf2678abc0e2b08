"""Probes read the process tree from outside the measured processes (the machine's: measure.system; the GPU's:
measure.gpu); but :func:`process_reads`, two readings a trial takes of its own tree's read counters at its
window's ends, where the samples it counts begin and end.

Each probe returns plain numbers or ``None``; a missing GPU or NVML library is
data, never an exception.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dataprof.measure.cache.files import held_paths

FILES_EVERY_S = 1.0
"""The tree's open files are listed at most this often (and at the window's marks)."""


@dataclass(frozen=True)
class TreeSample:
    """One reading of the trial's process tree (main + DataLoader workers)."""

    t: float
    cpu_s: float
    """CPU seconds used so far by the tree, exited workers included."""
    main_cpu_s: float | None
    """CPU seconds of the root process's own threads."""
    main_thread_cpu_s: float | None
    """CPU seconds of the root process's main thread."""
    pss_bytes: int | None
    """Proportional set size of the tree: shared pages counted once."""
    main_uss_bytes: int | None
    workers_uss_bytes: int | None
    processes: int
    workers_private: PrivatePages | None = None
    """Where the workers' private pages lie (read at the window's marks only: it is costly)."""
    read_bytes: int | None = None
    """Bytes the tree had read from storage so far (``/proc/PID/io`` ``read_bytes``: page-cache misses), workers
    already exited and reaped included (the kernel adds them to their parent's)."""
    read_chars: int | None = None
    """Bytes the tree had read through ``read()`` so far, from the page cache or not (``rchar``; pipes too)."""
    thread_cpu_s: tuple[tuple[int, float], ...] = ()
    """CPU seconds of each thread of the root process but its main one, by thread id (loader threads, torch's
    own, a prefetcher's)."""


def process_reads(pids: Iterable[int]) -> tuple[int, int] | None:
    """This process's storage reads and all reads so far (``read_bytes``, ``rchar`` of ``/proc/PID/io``), with
    those of its children ``pids`` (a child already reaped is in this process's own count: the kernel adds it);
    None where ``/proc`` has no such file (not Linux) or one cannot be read."""
    storage = chars = 0
    for pid in ["self", *pids]:
        try:
            with open(f"/proc/{pid}/io") as io:
                fields = dict(line.split(": ", 1) for line in io.read().splitlines() if ": " in line)
            storage += int(fields["read_bytes"])
            chars += int(fields["rchar"])
        except FileNotFoundError:
            if pid == "self":
                return None
        except (OSError, KeyError, ValueError):
            return None
    return storage, chars


def helper_pids() -> set[int]:
    """The process ids of this process's multiprocessing helpers, where they run: the forkserver (it forks and
    reaps the workers of a loader started by ``forkserver``, so their reads once reaped are in its count) and the
    resource tracker (``spawn`` and ``forkserver`` start it)."""
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    found = (getattr(getattr(multiprocessing.forkserver, "_forkserver", None), "_forkserver_pid", None),
             getattr(getattr(multiprocessing.resource_tracker, "_resource_tracker", None), "_pid", None))
    return {pid for pid in found if isinstance(pid, int)}


def only_children(pids: Collection[int]) -> bool:
    """Whether every process below this one is among ``pids`` (False where that cannot be told): a sum of their
    reads leaves out no process alive (a child of a worker, a pipeline's own processes)."""
    try:
        import psutil

        return all(child.pid in pids for child in psutil.Process().children(recursive=True))
    except Exception:
        return False


@dataclass(frozen=True)
class PrivatePages:
    """A breakdown of processes' private memory, summed over the processes, from ``/proc/PID/smaps``.

    ``inherited``: dirty private pages of the mappings the process shares with
    its parent (it inherited them at fork): the parent's pages, copied when
    written, e.g. as reading a Python object writes its reference count.
    ``file``: clean private pages of memory-mapped files (an Arrow table, a numpy
    memmap), read from the file, not copied from the parent. ``new``: the
    rest of the private pages (memory the process allocated itself).
    """

    inherited: int
    file: int
    new: int


def mapping_ranges(maps_text: str) -> list[tuple[int, int]]:
    """Address ranges of a ``/proc/PID/maps`` (or smaps) text, sorted."""
    ranges = []
    for line in maps_text.splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and not head.endswith(":"):
            start, _, end = head.partition("-")
            try:
                ranges.append((int(start, 16), int(end, 16)))
            except ValueError:
                continue
    return sorted(ranges)


_SHARED_MEMORY = ("/dev/shm/", "/memfd:", "/SYSV")
"""Paths of shared mappings that hold memory, not files (torch's shared-memory tensors, for one)."""


def smaps_memory(smaps_text: str, parent_ranges: list[tuple[int, int]]) -> tuple[int, int, PrivatePages]:
    """One process's USS and PSS from its ``/proc/PID/smaps`` (as psutil reads them from ``smaps_rollup``: all
    ``Private_*`` pages, all ``Pss``), and its private pages split by where they come from.

    A shared mapping of a file holds the file's pages, clean or dirty; a private
    mapping holds the file's pages while clean and copies once written; a
    dirty private page copies the parent's when its mapping is the parent's.
    """
    import bisect

    starts = [start for start, _ in parent_ranges]
    totals = {"inherited": 0, "file": 0, "new": 0}
    uss = pss = clean = dirty = 0
    kinds = ("new", "new")  # where this mapping's clean and dirty pages go
    for line in smaps_text.splitlines() + [""]:
        if line.startswith("Private_"):
            kb = int(line.split()[1])
            uss += kb * 1024
            if line.startswith("Private_Clean:"):
                clean = kb * 1024
            elif line.startswith("Private_Dirty:"):
                dirty = kb * 1024
        elif line.startswith("Pss:"):
            pss += int(line.split()[1]) * 1024
        elif not line or not line[0].isupper():  # a mapping header (start-end perms offset dev inode path), or the end
            totals[kinds[0]] += clean
            totals[kinds[1]] += dirty
            clean = dirty = 0
            fields = line.split(None, 5)
            if len(fields) < 5:
                continue
            start = int(fields[0].partition("-")[0], 16)
            where = bisect.bisect_right(starts, start) - 1
            in_parent = where >= 0 and start < parent_ranges[where][1]
            path = fields[5].strip() if len(fields) > 5 else ""
            is_file = fields[4] != "0" and not path.startswith(_SHARED_MEMORY) and not path.endswith("(deleted)")
            if fields[1].endswith("s"):
                kinds = ("file", "file") if is_file else ("new", "new")
            else:
                kinds = ("file" if is_file else "new", "inherited" if in_parent else "new")
    return uss, pss, PrivatePages(**totals)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def _descends(proc: Any, ancestor: int) -> bool:
    """Whether ``ancestor`` is among ``proc``'s parents."""
    try:
        return any(parent.pid == ancestor for parent in proc.parents())
    except Exception:
        return False


class ProcessTreeProbe:
    """psutil reader for one process and its descendants."""

    def __init__(self, pid: int, with_memory: bool = True, exclude: int | None = None,
                 files: bool = False, files_every_s: float = FILES_EVERY_S) -> None:
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.with_memory = with_memory
        self.exclude = exclude
        """A descendant left out, with its own descendants: the sampler's process when it samples its parent."""
        self.files = files
        self.files_every_s = files_every_s
        """With ``files``: how often a reading lists the open files too (``math.inf``: only :meth:`list_files`, as a
        trial does once its window has closed, so that the listing costs the window nothing)."""
        self._files_at = -math.inf
        self.held: set[str] = set()
        """With ``files``: every path the tree's processes held open at a listing, or had mapped at
        :meth:`list_files`, unfiltered (``cache.files.held_paths``). A data file a dataset holds (a shard, a mapped
        table) stays open for long; a pipeline with thousands of tensors in flight holds as many descriptors,
        which are not read every time."""

    def sample(self, now: float, memory: bool = True, breakdown: bool = False, deadline: float | None = None,
               threads: int = 1) -> TreeSample | None:
        """CPU times of every process, then their PSS/USS unless ``memory`` is False (the costly part).

        All CPU times are read before any memory, so they stay one instant however long memory takes.
        Memory is read for every process of the tree or not at all: one that exits meanwhile (its USS
        gone, or 0 as a zombie's), or a reading still going at ``deadline`` (``time.monotonic``),
        leaves the reading's memory fields None, never a partial sum. ``breakdown`` (with ``memory``)
        also splits the workers' private pages (:class:`PrivatePages`), or None past ``deadline``.
        ``threads`` > 1 reads the memory of that many processes at once (once the window has closed).
        """
        psutil = self.psutil
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        if self.exclude is not None:
            procs = [p for p in procs if p.pid != self.exclude and not _descends(p, self.exclude)]
        cpu_s = 0.0
        main_cpu: float | None = None
        main_thread: float | None = None
        others: tuple[tuple[int, float], ...] = ()
        io = self._io(procs)
        if self.files and now - self._files_at >= self.files_every_s:
            self._files_at = now
            self.held |= held_paths([p.pid for p in procs], maps=False, known=self.held)
        for proc in procs:
            try:
                times = proc.cpu_times()
                # children_* holds workers already exited and reaped (respawned per epoch).
                cpu_s += times.user + times.system + times.children_user + times.children_system
                if proc is self.root:
                    main_cpu = times.user + times.system
                    each = {t.id: t.user_time + t.system_time for t in proc.threads()}
                    main_thread = each.pop(proc.pid, None)
                    others = tuple(each.items())
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
        read = self._memory(procs, breakdown, deadline, threads) if self.with_memory and memory else None
        pss, main_uss, workers_uss, pages = read if read is not None else (None, None, None, None)
        return TreeSample(t=now, cpu_s=cpu_s, main_cpu_s=main_cpu, main_thread_cpu_s=main_thread, pss_bytes=pss,
                          main_uss_bytes=main_uss, workers_uss_bytes=workers_uss, processes=len(procs),
                          workers_private=pages, read_bytes=None if io is None else io[0], thread_cpu_s=others,
                          read_chars=None if io is None else io[1])

    def list_files(self) -> None:
        """With ``files``: add the files the tree holds open or has mapped now to :attr:`held`."""
        if not self.files:
            return
        try:
            pids = [self.root.pid] + [p.pid for p in self.root.children(recursive=True)]
        except (self.psutil.NoSuchProcess, self.psutil.ZombieProcess):
            return
        self.held |= held_paths([pid for pid in pids if pid != self.exclude], maps=True, known=self.held)

    def _io(self, procs: list[Any]) -> tuple[int, int] | None:
        """The tree's storage reads and all reads so far (``read_bytes``, ``rchar``); None unless every process
        was read (a sum without one would be a number nobody measured)."""
        storage = chars = 0
        for proc in procs:
            try:
                counters = proc.io_counters()
            except (self.psutil.NoSuchProcess, self.psutil.ZombieProcess, self.psutil.AccessDenied,
                    AttributeError, NotImplementedError):
                return None
            storage += counters.read_bytes
            chars += getattr(counters, "read_chars", 0)
        return storage, chars

    def _memory(self, procs: list[Any], breakdown: bool, deadline: float | None, threads: int) \
            -> tuple[int, int, int, PrivatePages | None] | None:
        """The tree's PSS, the root's USS, the workers' USS and (``breakdown``) their private pages; None unless
        every process was read by ``deadline``. ``threads`` > 1 reads that many processes at once."""
        parent = self._parent_ranges() if breakdown and len(procs) > 1 else None

        def one(proc: Any) -> tuple[int, int, PrivatePages | None]:
            read = _smaps(proc.pid, parent) if parent is not None and proc is not self.root else None
            if read is not None:  # a worker's smaps, read for its breakdown, gives its USS and PSS too
                return read
            try:
                info = proc.memory_full_info()
            except (self.psutil.NoSuchProcess, self.psutil.ZombieProcess, self.psutil.AccessDenied):
                return 0, 0, None
            return info.uss, getattr(info, "pss", info.uss), None

        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                readings: Iterable[tuple[int, int, PrivatePages | None]] = list(pool.map(one, procs))
        else:
            readings = map(one, procs)
        pss = main_uss = workers_uss = 0
        pages: PrivatePages | None = PrivatePages(0, 0, 0) if parent is not None else None
        for proc, (uss, proc_pss, own) in zip(procs, readings, strict=True):
            if not uss or _past(deadline):  # gone, exiting (a zombie maps nothing), not ours, or out of time:
                return None                 # a sum without it would be a number nobody measured
            pss += proc_pss
            if proc is self.root:
                main_uss = uss
                continue
            workers_uss += uss
            # a worker without smaps (not Linux, not ours) leaves the reading without the breakdown
            pages = None if pages is None or own is None else \
                PrivatePages(pages.inherited + own.inherited, pages.file + own.file, pages.new + own.new)
        return pss, main_uss, workers_uss, pages

    def _parent_ranges(self) -> list[tuple[int, int]] | None:
        """The address ranges of the tree's root, which its workers' mappings are matched against; None where
        ``/proc`` cannot be read."""
        try:
            with open(f"/proc/{self.root.pid}/maps") as handle:
                return mapping_ranges(handle.read())
        except OSError:
            return None


def _smaps(pid: int, parent: list[tuple[int, int]]) -> tuple[int, int, PrivatePages] | None:
    """:func:`smaps_memory` of one process; None where its smaps cannot be read; zero USS for one exiting (a
    zombie maps nothing)."""
    try:
        with open(f"/proc/{pid}/smaps") as handle:
            text = handle.read()
    except FileNotFoundError:
        return 0, 0, PrivatePages(0, 0, 0)  # gone
    except OSError:
        return None
    return smaps_memory(text, parent)
