"""The page cache and the data files: how much of a file it holds (``mincore`` on a read-only mapping), evicting
a file from it (``posix_fadvise(POSIX_FADV_DONTNEED)`` on a read-only descriptor: the kernel drops the file's
clean pages), and reading files back into it. Nothing needs root and nothing is ever written: pages a writer left
dirty stay cached, and the eviction says so. Every file is opened so that a FIFO, device or link swapped in for
it is refused (:func:`open_regular`), and every pass over the files is bounded in time.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dataprof.results.cache import Eviction, ReadBack

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
RESIDENT = bytes(v & 1 for v in range(256))
"""``mincore``'s byte per page, to 1 where the page is resident (its other bits are reserved)."""
SAFE_OPEN = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
"""How a data file is opened to read its residency or evict it: read-only; a FIFO or device swapped in for it
does not block the open, and a link swapped in is not followed (the path is resolved first)."""
_os_open = os.open
"""The real opener, whatever wrapper a log has installed in this process."""


def open_regular(path: str) -> int:
    """A read-only descriptor on the regular file at ``path`` (links resolved first, then not followed); OSError
    for anything else, checked on the descriptor itself (what the path named when it was opened)."""
    fd = _os_open(os.path.realpath(path), SAFE_OPEN)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def can_evict() -> str | None:
    """Why this platform cannot evict a file from the page cache or read what it holds (no ``posix_fadvise``,
    as on macOS; no ``mincore``), or None where it can."""
    if not hasattr(os, "posix_fadvise"):
        return "this platform has no posix_fadvise (macOS, Windows): a file cannot be evicted from the page cache"
    if _mincore_lib() is None:
        return "this platform's libc has no mincore: the page cache cannot be read"
    return None


def resident_bytes(path: str) -> tuple[int, int] | None:
    """Bytes of ``path`` in the page cache now and its size (``mincore``); None where it cannot be read."""
    lib = _mincore_lib()
    if lib is None:
        return None
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        return _resident(lib, fd)
    finally:
        os.close(fd)


def _resident(lib: Any, fd: int) -> tuple[int, int] | None:
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
            resident += bytes(vector).translate(RESIDENT).count(1) * page
        finally:
            lib.munmap(address, length)
    return min(resident, size), size


RESIDENCY_S = 5.0
"""Residency is read for at most this long; the files not reached are left out of both figures."""


def residency(paths: Iterable[str], budget_s: float = RESIDENCY_S,
              clock: Callable[[], float] = time.monotonic) -> tuple[int, int]:
    """Bytes of ``paths`` in the page cache now, and the size of those whose residency could be read within
    ``budget_s``."""
    deadline = clock() + budget_s
    resident = size = 0
    for path in paths:
        if clock() > deadline:
            break
        read = resident_bytes(path)
        if read is not None:
            resident, size = resident + read[0], size + read[1]
    return resident, size


EVICT_S = 60.0
"""An eviction takes at most this long; the files not reached are skipped, and said to be."""


def evict(paths: Iterable[str], check: bool = True, budget_s: float = EVICT_S,
          clock: Callable[[], float] = time.monotonic) -> Eviction:
    """Drop ``paths``' clean pages from the page cache (``POSIX_FADV_DONTNEED`` on a read-only descriptor: no
    root, nothing written). A file that vanished, is no longer a regular file, or is not reached within
    ``budget_s`` is skipped with its reason. Pages a writer left dirty stay cached (writing them back would be a
    write to a file others may hold open). With ``check``, residency is read before and after."""
    started = clock()
    files = size = 0
    before = after = 0 if check else None
    skipped: list[str] = []
    cached: list[str] = []
    lib = _mincore_lib() if check else None
    ordered = sorted(set(paths))
    for n, path in enumerate(ordered):
        if clock() - started > budget_s:
            skipped.append(f"{len(ordered) - n:,} files not reached: the eviction's {budget_s:g} s ran out")
            break
        try:
            fd = open_regular(path)
        except OSError as exc:
            skipped.append(f"{path}: {exc.strerror or exc}")
            continue
        try:
            found = _resident(lib, fd) if lib is not None else None
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            left = _resident(lib, fd) if lib is not None else None
            size += os.fstat(fd).st_size
            files += 1
        except OSError as exc:
            skipped.append(f"{path}: {exc.strerror or exc}")
            continue
        finally:
            os.close(fd)
        if found is not None and found[0]:
            cached.append(path)
        if before is not None:
            before = None if found is None else before + found[0]
        if after is not None:
            after = None if left is None else after + left[0]
    return Eviction(files, size, before, after, tuple(skipped), clock() - started, tuple(cached))


READ_BACK_S = 30.0
"""Reading the evicted files back into the page cache takes at most this long."""


def read_back(paths: Sequence[str], budget_s: float = READ_BACK_S,
              clock: Callable[[], float] = time.monotonic) -> ReadBack:
    """Read ``paths`` whole (read-only), so that the page cache holds them again as it did before an eviction;
    within ``budget_s``, the rest left as they are."""
    started = clock()
    files = size = reached = 0
    buffer = bytearray(1 << 20)
    for path in paths:
        if clock() - started > budget_s:
            break
        reached += 1
        try:
            fd = open_regular(path)
        except OSError:
            continue
        try:
            with os.fdopen(fd, "rb", buffering=0, closefd=True) as handle:
                while (got := handle.readinto(buffer)) and clock() - started <= budget_s:
                    size += got
            files += 1
        except OSError:
            continue
    left_bytes = 0
    for path in paths[reached:]:
        with contextlib.suppress(OSError):
            left_bytes += os.stat(path).st_size
    return ReadBack(files, size, len(paths) - reached, left_bytes, clock() - started)
