"""Data files on storage: which ones a trial reads, how much of them the page cache holds, and evicting them.

Nothing here needs root. The parent lists the regular files the trial's processes hold open or have mapped
(``/proc/PID/fd``, ``/proc/PID/maps``); the trial logs the files its Python code opens for reading
(:class:`OpenLog`), which catches the many that are opened, read and closed between two samples. Residency
is ``mincore`` on a read-only mapping; eviction is ``posix_fadvise(POSIX_FADV_DONTNEED)`` on a read-only
descriptor: the kernel drops the file's clean pages from the page cache. Pages a writer left dirty (a dataset
generated moments ago) are written back first (``fdatasync``: the file's own pending writes), then dropped.
"""

from __future__ import annotations

import builtins
import ctypes
import io
import mmap
import os
import site
import stat
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

CODE_SUFFIXES = (".py", ".pyc", ".pyi", ".pth", ".so", ".dylib", ".whl", ".egg-link")
"""Files a process opens to run, not to read data."""
SYSTEM_ROOTS = ("/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/share", "/usr/local/lib", "/lib", "/lib64",
                "/etc", "/proc", "/sys", "/dev", "/run", "/var/lib", "/var/cache", "/snap")
"""Directories of the system's own files (libraries, locales, configuration), never a dataset."""
NOT_FILES = ("/dev/", "/proc/", "/sys/", "/memfd:", "/run/")
"""Open descriptors that are never a dataset's files: devices, shared memory (torch's tensors in flight), kernel
files."""
OWN_PREFIX = "dataprof-"
"""dataprof's own temporary files (the trial's end mark, the open logs' directory)."""
NO_EVICTION = ("tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "squashfs")
"""Filesystems whose files live in memory (or are unpacked there): nothing to evict, cold is warm."""


def excluded_roots() -> tuple[str, ...]:
    """The interpreter's and packages' directories, and the system's: their files are code, not data."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *SYSTEM_ROOTS}
    try:
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


def data_file_size(path: str, roots: tuple[str, ...]) -> int | None:
    """The size of ``path`` if it is a regular file outside ``roots`` that is not code (a file a dataset reads),
    else None: one ``stat``."""
    if not path.startswith("/") or path.endswith(" (deleted)"):
        return None
    name = os.path.basename(path)
    if "/" + OWN_PREFIX in path or name.endswith(CODE_SUFFIXES) or ".so." in name:
        return None
    if os.path.join(os.path.realpath(path), "").startswith(roots):
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_size if stat.S_ISREG(found.st_mode) else None


def is_data_file(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` is a file a dataset reads (:func:`data_file_size`)."""
    return data_file_size(path, roots) is not None


def held_paths(pids: Iterable[int], maps: bool, known: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Paths of the files ``pids`` hold open for reading only (``/proc/PID/fd``: a descriptor's link has the
    permissions of its open mode) and, with ``maps``, have mapped without a shared writable mapping: unfiltered.
    A path in ``known`` is taken without checking its mode again."""
    found: set[str] = set()
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            link = f"/proc/{pid}/fd/{name}"
            try:
                target = os.readlink(link)
                if not target.startswith("/") or target.startswith(NOT_FILES) or target.endswith(" (deleted)"):
                    continue  # a pipe, a socket, shared memory (a tensor in flight), a removed file
                if target not in known and os.lstat(link).st_mode & stat.S_IWUSR:
                    continue  # open for writing: the dataset's output, not its data
            except OSError:
                continue
            found.add(target)
        if not maps:
            continue
        try:
            with open(f"/proc/{pid}/maps") as handle:
                for line in handle:
                    fields = line.split(None, 5)
                    written = len(fields) > 1 and fields[1][1:2] == "w" and fields[1][3:4] == "s"
                    if len(fields) == 6 and fields[5].startswith("/") and not written:
                        found.add(fields[5].rstrip("\n"))
        except OSError:
            continue
    return found


class OpenLog:
    """The files a trial's processes open for reading through Python (``open``, ``io.open``, ``os.open``, hence
    numpy, PIL, pathlib), logged with the time, one file per process under ``directory``.

    Installed in the trial before it builds its dataset; the DataLoader's workers, forked from it, inherit the
    wrappers and log to files of their own. Lines are written in bulk, at most :data:`FLUSH_S` after they were
    noted (a worker killed at the trial's end loses what it had not written). Files opened by C code (OpenCV,
    Arrow) are seen only by the parent's sampling of the processes' open files.
    """

    FLUSH_S = 0.05
    FLUSH_LINES = 256
    READ_MODES = frozenset(("r", "rb", "rt", "br", "tr"))
    """The common read-only modes, recognised at once; others are checked for ``w``, ``a``, ``x`` and ``+``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._fd: int | None = None
        self._open = builtins.open
        self._os_open = os.open
        self._noted: list[tuple[float, Any]] = []
        """``(time, path as given)``: the path is made absolute text when written, not on the open's path."""
        self._flushed = 0.0

    def uninstall(self) -> None:
        """Write what is left and put this process's openers back as :meth:`install` found them."""
        builtins.open = io.open = self._open  # type: ignore[assignment]
        os.open = self._os_open  # type: ignore[assignment]
        if self._noted:
            self.flush()

    def _forked(self) -> None:
        """In a worker just forked: a file of its own, without its parent's unwritten lines."""
        self._fd = None
        del self._noted[:]

    def install(self) -> None:
        """Wrap the openers of this process (and of the workers it will fork). An open costs a tuple in a list,
        about a microsecond: the wrapper must not slow the pipeline it measures."""
        real_open, real_os_open, read_modes, note = self._open, self._os_open, self.READ_MODES, self.note

        def logged_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            handle = real_open(file, mode, *args, **kwargs)
            reading = mode in read_modes or not ("w" in mode or "a" in mode or "x" in mode or "+" in mode)
            if reading and not isinstance(file, int):
                note(file)
            return handle

        def logged_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            fd = real_os_open(path, flags, *args, **kwargs)
            if not flags & (os.O_WRONLY | os.O_RDWR):
                note(path)
            return fd

        os.register_at_fork(after_in_child=self._forked)
        builtins.open = io.open = logged_open  # type: ignore[assignment]
        os.open = logged_os_open  # type: ignore[assignment]

    def note(self, file: Any) -> None:
        """Log one opened path with the time (``time.monotonic``, the parent's clock too); write the lines once
        :data:`FLUSH_LINES` wait or :data:`FLUSH_S` has passed since the last write."""
        now = time.monotonic()
        self._noted.append((now, file))
        if len(self._noted) >= self.FLUSH_LINES or now - self._flushed >= self.FLUSH_S:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Write the paths noted so far, absolute, one line each; a path that is not one is left out, a full disk
        leaves them unwritten: the trial goes on."""
        lines = []
        for stamp, file in self._noted:
            try:
                path = file if type(file) is str and file.startswith("/") else os.path.abspath(os.fsdecode(file))
                lines.append(f"{stamp:.6f}\t{path}\n")
            except (TypeError, ValueError):
                continue
        del self._noted[:]
        self._flushed = time.monotonic() if now is None else now
        try:
            if self._fd is None:
                self._fd = self._os_open(os.path.join(self.directory, f"{os.getpid()}.opens"),
                                         os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.write(self._fd, "".join(lines).encode())
        except OSError:
            pass

    @staticmethod
    def read(directory: str) -> list[tuple[float, str]]:
        """Every ``(time, path)`` the processes logged under ``directory``."""
        opened: list[tuple[float, str]] = []
        try:
            names = os.listdir(directory)
        except OSError:
            return opened
        for name in names:
            try:
                with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as handle:
                    for line in handle:
                        stamp, _, path = line.rstrip("\n").partition("\t")
                        try:
                            opened.append((float(stamp), path))
                        except ValueError:
                            continue  # a line cut short by a killed process
            except OSError:
                continue
        return opened


_libc: Any = None


def _mincore_lib() -> Any:
    """libc with ``mmap``, ``mincore`` and ``munmap`` typed, or None where it cannot be loaded."""
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.mmap.restype = ctypes.c_void_p
            lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_long]
            lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
            lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            _libc = lib
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


CHUNK = 1 << 30
"""A file's residency is read this many bytes of mapping at a time."""


def resident_bytes(path: str) -> tuple[int, int] | None:
    """Bytes of ``path`` in the page cache now and its size (``mincore``); None where it cannot be read."""
    lib = _mincore_lib()
    if lib is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        page = mmap.PAGESIZE
        resident = 0
        for offset in range(0, size, CHUNK):
            length = min(CHUNK, size - offset)
            address = lib.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if address in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                pages = (length + page - 1) // page
                vector = (ctypes.c_ubyte * pages)()
                if lib.mincore(address, length, vector) != 0:
                    return None
                resident += sum(1 for v in bytes(vector) if v & 1) * page
            finally:
                lib.munmap(address, length)
        return min(resident, size), size
    finally:
        os.close(fd)


def residency(paths: Iterable[str]) -> tuple[int, int]:
    """Bytes of ``paths`` in the page cache now, and the size of those whose residency could be read."""
    reads = [r for r in map(resident_bytes, paths) if r is not None]
    return sum(r for r, _ in reads), sum(s for _, s in reads)


def filesystem_of(path: str, mounts: str | None = None) -> str | None:
    """The type of the filesystem ``path`` lives on (the longest mount point above it in ``/proc/mounts``)."""
    if mounts is None:
        try:
            with open("/proc/mounts") as handle:
                mounts = handle.read()
        except OSError:
            return None
    real = os.path.realpath(path)
    best, kind = "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (real == point or real.startswith(os.path.join(point, ""))) and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


@dataclass(frozen=True)
class Eviction:
    """What one eviction did: the files and bytes whose pages were dropped, what was still cached after, the files
    skipped and why."""

    files: int
    bytes: int
    resident_before: int | None
    resident_after: int | None
    skipped: tuple[str, ...] = ()
    took_s: float = 0.0

    @property
    def effective(self) -> bool | None:
        """Whether the pages left the page cache (a tmpfs keeps them all); None when residency was not read."""
        if self.resident_after is None or self.bytes == 0:
            return None
        return self.resident_after <= 0.1 * self.bytes


def evict(paths: Iterable[str], check: bool = True) -> Eviction:
    """Drop ``paths``' pages from the page cache (``POSIX_FADV_DONTNEED``; read-only, no root). A file that vanished
    or cannot be opened is skipped with its reason; with ``check``, residency is read before and after."""
    started = time.monotonic()
    files = size = 0
    before = after = 0 if check else None
    skipped: list[str] = []
    for path in sorted(set(paths)):
        if check:
            read = resident_bytes(path)
            if read is not None and before is not None:
                before += read[0]
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            skipped.append(f"{path}: {exc.strerror or exc}")
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            left = resident_bytes(path) if check else None
            if left is not None and left[0]:
                # pages written but not yet on storage stay: write them back (the file's own pending writes,
                # nothing new), then drop them
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                left = resident_bytes(path)
            size += os.fstat(fd).st_size
            files += 1
        except OSError as exc:
            skipped.append(f"{path}: {exc.strerror or exc}")
            continue
        finally:
            os.close(fd)
        if check and after is not None:
            after = None if left is None else after + left[0]
    return Eviction(files, size, before, after, tuple(skipped), time.monotonic() - started)
