"""The files a trial's processes open for reading through Python, logged with the time: the many that are opened,
read and closed between two of the parent's samples of its open files."""

from __future__ import annotations

import collections
import mmap
import os
import sys
import time
from typing import Any


class OpenLog:
    """The files a trial's processes open for reading through Python (every open that raises Python's ``open``
    audit event: ``open``, ``io.open``, ``os.open``, ``io.open_code``, however the caller came by them, hence
    numpy, PIL, pathlib), logged with the time, one file per process under ``directory``.

    Installed in the trial before it builds its dataset: one audit hook per process (:func:`sys.addaudithook`;
    a hook cannot be removed, so uninstalled it notes nothing) notes each open for reading, a tuple in a deque
    (its cost: ``benchmarks/open_log.py``). Worker processes log to files of their own: a forked worker inherits
    the hook (one handler at fork, however many logs were installed, starts its own file), and a worker started
    by spawn or forkserver installs the log itself (:class:`LoggingWorkerInit`, its ``worker_init_fn``). Lines
    are written in bulk, at most :data:`FLUSH_S` after they were noted (a worker killed at the trial's end loses
    what it had not written). Files opened by C code (OpenCV, Arrow) are seen only by the parent's sampling of the
    processes' open files.

    Every process of one log shares a switch (:data:`SWITCH`, one byte mapped from the log's directory): once the
    trial knows what it needs, :meth:`pause` stops the noting in all of them at once, forked or not, so the rest
    of its window pays only the hook's call.
    """

    FLUSH_S = 0.05
    FLUSH_LINES = 256

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._fd: int | None = None
        self._noted: collections.deque[tuple[float, Any]] = collections.deque()
        """``(time, path as given)``: the path is made absolute text when written, not on the open's path. A
        deque: a loader thread's note while another thread flushes is kept for the next write."""
        self._flushed = 0.0
        self._switch: mmap.mmap | None = None
        """The shared switch: its byte is 0 once the log is paused (None where it could not be mapped)."""

    def uninstall(self) -> None:
        """Write what is left and stop noting opens in this process."""
        global _installed
        if _installed is self:
            _installed = None
        if self._noted:
            self.flush()

    def _forked(self) -> None:
        """In a worker just forked: a file of its own, without its parent's unwritten lines."""
        self._fd = None
        self._noted.clear()

    def install(self) -> None:
        """Note this process's (and the workers it will fork) opens for reading in this log from now on."""
        global _installed
        _on_fork_once()
        _hook_once()
        self._switch = _map_switch(self.directory)
        _installed = self

    def pause(self) -> float:
        """Stop noting opens in every process of this log (a forked worker, a worker that installed it itself);
        when (``time.monotonic``). Without the switch, in this process only."""
        global _installed
        if self._switch is not None:
            self._switch[0] = 0
        elif _installed is self:
            _installed = None
        return time.monotonic()

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
        self._flushed = time.monotonic() if now is None else now
        while True:
            try:
                stamp, file = self._noted.popleft()
            except IndexError:
                break
            try:
                path = file if type(file) is str and file.startswith("/") else os.path.abspath(os.fsdecode(file))
                lines.append(f"{stamp:.6f}\t{path}\n")
            except (TypeError, ValueError):
                continue
        try:
            if self._fd is None:
                self._fd = os.open(os.path.join(self.directory, f"{os.getpid()}.opens"),
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
            if not name.endswith(".opens"):
                continue  # the switch
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


_installed: OpenLog | None = None
"""The log this process's opens go to, if any."""
SWITCH = "switch"
"""The file, in a log's directory, whose one byte says whether the log's processes note opens (1) or not (0)."""


def _map_switch(directory: str) -> mmap.mmap | None:
    """The log's switch, mapped shared (made, on, by the first process to map it); None where it cannot be."""
    try:
        fd = os.open(os.path.join(directory, SWITCH), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size == 0:
            os.write(fd, b"\1")
        return mmap.mmap(fd, 1)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def pause_installed() -> float | None:
    """Pause this process's log (:meth:`OpenLog.pause`), if one is installed; when."""
    return None if _installed is None else _installed.pause()
_fork_handler = False
"""Whether this process registered the one at-fork handler (``os.register_at_fork`` handlers cannot be removed:
one per install would pile up)."""


_hooked = False
"""Whether this process has the audit hook (it stays for the process's life: a hook cannot be removed)."""
WRITING = os.O_WRONLY | os.O_RDWR
"""An open with either flag writes: a log, an output, not data (``r+`` included)."""


def _hook_once() -> None:
    global _hooked
    if not _hooked:
        try:
            sys.addaudithook(_audit)
        except Exception:
            return  # an audit hook of the program's own refused ours: files are found by sampling alone
        _hooked = True


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Every audited event of this process: an open for reading, by path, goes to the installed log. Raises
    nothing (an exception here would fail the open)."""
    if event == "open":
        log = _installed
        if log is None or (log._switch is not None and not log._switch[0]):
            return  # no log, or paused
        if len(args) == 3 and type(args[2]) is int and not args[2] & WRITING and type(args[0]) is not int:
            log.note(args[0])


def _on_fork_once() -> None:
    global _fork_handler
    if not _fork_handler and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forked_child)
        _fork_handler = True


def _forked_child() -> None:
    if _installed is not None:
        _installed._forked()


class LoggingWorkerInit:
    """A DataLoader's ``worker_init_fn`` that installs the trial's open log in the worker, then calls the user's
    own. Needed where workers are not forked (spawn, forkserver): they start without the trial's log; a forked
    worker already has it and installs nothing. Picklable, as spawn needs."""

    def __init__(self, directory: str, user_init: Any = None) -> None:
        self.directory = directory
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        if _installed is None or _installed.directory != self.directory:
            OpenLog(self.directory).install()
        if self.user_init is not None:
            self.user_init(worker_id)


def log_workers(loader: Any, directory: str) -> None:
    """Have ``loader``'s worker processes log their opens under ``directory`` however they start (its
    ``worker_init_fn`` wrapped in :class:`LoggingWorkerInit`); a loader without worker processes is left as it
    is (threads run the hook of the process they share)."""
    if getattr(loader, "num_workers", 0) and hasattr(loader, "worker_init_fn") \
            and not isinstance(loader.worker_init_fn, LoggingWorkerInit):
        loader.worker_init_fn = LoggingWorkerInit(directory, loader.worker_init_fn)
