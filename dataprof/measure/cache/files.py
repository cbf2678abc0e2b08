"""Data files on storage: which files a trial reads (not code, not the system's, not dataprof's own), and the
filesystem they live on.

Nothing here needs root. The parent lists the regular files the trial's processes hold open or have mapped
(``/proc/PID/fd``, ``/proc/PID/maps``); the trial logs the files its Python code opens for reading
(:mod:`.open_log`), which catches the many that are opened, read and closed between two samples. What the page
cache holds of them, and evicting them, is :mod:`.page_cache`.
"""

from __future__ import annotations

import functools
import os
import site
import stat
import sys
from collections.abc import Iterable

CODE_SUFFIXES = (".py", ".pyc", ".pyi", ".pth", ".so", ".dylib", ".whl", ".egg-link")
"""Files a process opens to run, not to read data."""
METADATA_DIRS = (".dist-info/", ".egg-info/")
"""Directories of an installed distribution's metadata, read by ``importlib.metadata`` (a library asking which
packages are installed reads every one on the path, an editable install's in its source tree too)."""
SYSTEM_ROOTS = ("/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/share", "/usr/local/lib", "/lib", "/lib64",
                "/etc", "/proc", "/sys", "/dev", "/run", "/var/lib", "/var/cache", "/snap")
"""Directories of the system's own files (libraries, locales, configuration), never a dataset."""
NOT_FILES = ("/dev/", "/proc/", "/sys/", "/memfd:", "/run/")
"""Open descriptors that are never a dataset's files: devices, shared memory (torch's tensors in flight), kernel
files."""
OWN_PREFIX = "dataprof-"
"""The prefix of dataprof's own temporary files' names (a readable name only: they are known by their paths)."""
NO_EVICTION = ("tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "squashfs")
"""Filesystems whose files live in memory (or are unpacked there): nothing to evict, cold is warm."""


def excluded_roots() -> tuple[str, ...]:
    """The interpreter's and packages' directories, and the system's: their files are code, not data. Packages
    installed outside the interpreter's prefix count too: a ``sys.path`` entry that holds installed distributions
    (``pip install --target``, a shared directory on ``PYTHONPATH``, as clusters' modules give them)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *SYSTEM_ROOTS, *installed_dirs()}
    try:
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


def installed_dirs() -> tuple[str, ...]:
    """The ``sys.path`` entries that hold installed distributions: the packages directories, wherever pip put
    them (site-packages, ``pip install --target``, a shared directory on ``PYTHONPATH``)."""
    return tuple(os.path.join(os.path.realpath(entry), "") for entry in sys.path if entry and _installed_into(entry))


@functools.cache
def _installed_once() -> tuple[str, ...]:
    return installed_dirs()


def installed_file(path: str) -> bool:
    """Whether the file at ``path`` lies in a packages directory (:func:`installed_dirs`, as ``sys.path`` was at
    the first call): an installed library's, never the user's own."""
    dirs = _installed_once()
    return path.startswith(dirs) or os.path.join(os.path.realpath(path), "").startswith(dirs)


def _installed_into(directory: str) -> bool:
    """Whether ``directory`` holds a distribution pip installed (its ``*.dist-info``): a packages directory, not a
    project's (a source tree has none, whatever it installs in editable mode)."""
    try:
        with os.scandir(directory) as entries:
            return any(entry.name.endswith(".dist-info") and entry.is_dir() for entry in entries)
    except OSError:
        return False


def data_file_size(path: str, roots: tuple[str, ...], own: Iterable[str] = ()) -> int | None:
    """The size of ``path`` if it is a regular file outside ``roots`` that is not code (a file a dataset reads),
    else None: one ``stat``. ``own``: dataprof's own files, by their exact paths (a directory's path ending in
    ``/`` stands for everything under it): a user's file is never left out for its name."""
    if not path.startswith("/") or path.endswith(" (deleted)"):
        return None
    name = os.path.basename(path)
    if name.endswith(CODE_SUFFIXES) or ".so." in name or is_own(path, own) or any(d in path for d in METADATA_DIRS):
        return None
    if os.path.join(os.path.realpath(path), "").startswith(roots):
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_size if stat.S_ISREG(found.st_mode) else None


def is_own(path: str, own: Iterable[str]) -> bool:
    """Whether ``path`` is one of dataprof's ``own`` files, or under one of its directories (ending in ``/``)."""
    return any(path == mine or (mine.endswith("/") and path.startswith(mine)) for mine in own)


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
