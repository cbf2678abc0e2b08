"""Ending a watched script that overstays its limit, as a user at the terminal would: SIGINT (the script's
``finally:`` and ``except KeyboardInterrupt`` run), then SIGTERM, then SIGKILL; no signal lands while a file the
script's processes opened for writing is still growing (a checkpoint cut in half is worse than a late end), within
a stated bound."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

GRACE_S = 5.0
"""Seconds between SIGINT and SIGTERM, and between SIGTERM and SIGKILL."""
WRITE_GRACE_S = 120.0
"""How long the signals wait at most, in all, while the script's processes are still writing a file."""
WRITE_POLL_S = 1.0
"""How often a write that holds the signals is looked at again."""
POLL_S = 0.2
WRITE_MODES = ("w", "a", "r+", "w+", "a+")
"""The modes (``psutil``'s) of a file opened for writing."""

Files = dict[str, int]
"""The regular files a process tree holds open for writing, by path, with their sizes (bytes)."""


def files_being_written(pid: int) -> Files | None:
    """The regular files the process ``pid`` and its descendants hold open for writing (not as their stdout or
    stderr), with their sizes now; None where the system does not say, or once the process is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        found: Files = {}
        for proc in (root, *root.children(recursive=True)):
            try:
                opened = proc.open_files()
            except (psutil.Error, NotImplementedError):
                continue
            for item in opened:  # its stdout and stderr (a log file under nohup, Slurm) are not a save
                if getattr(item, "mode", "w") in WRITE_MODES and getattr(item, "fd", -1) not in (0, 1, 2):
                    try:
                        found[item.path] = os.stat(item.path).st_size
                    except OSError:
                        continue
        return found
    except psutil.Error:
        return None


class Stopper:
    """The steps that end one process (``proc``, a ``Popen``) that overstays, taken as time passes (:meth:`poll`),
    so the caller goes on reading what the process says meanwhile. Each signal waits while a file the process
    tree opened for writing grows (looked at every :data:`WRITE_POLL_S`), :attr:`write_grace_s` at most in all,
    and a grace more once the write is done (the script ends as it would after it)."""

    def __init__(self, proc: Any, clock: Callable[[], float] = time.monotonic, grace_s: float = GRACE_S,
                 write_grace_s: float = WRITE_GRACE_S,
                 written: Callable[[int], Files | None] = files_being_written) -> None:
        self.proc = proc
        self.clock = clock
        self.grace_s = grace_s
        self.write_grace_s = write_grace_s
        self.written = written
        self.signals: list[str] = []
        """The signals sent, in order (``SIGINT``, ``SIGTERM``, ``SIGKILL``)."""
        self.held_s = 0.0
        """How long the signals waited for the script's writes."""
        self.cut: str | None = None
        """A file still growing when the write bound ran out (a signal then landed on its write)."""
        self._asked = False
        self._next_at = 0.0
        self._held_from: float | None = None
        self._files: Files | None = None

    @property
    def started(self) -> bool:
        """Whether the process has been told to end (or will be, once its writes are done)."""
        return self._asked

    def start(self) -> None:
        """End the process: SIGINT now, unless it holds a file open for writing (then once it stops growing);
        the next signals follow in :meth:`poll`."""
        if not self._asked:
            self._asked = True
            self._next_at = self.clock()
            self.poll()

    def poll(self) -> None:
        """Take the next step when it is due: the next signal a grace after the last, while no write holds it."""
        if not self._asked or self.proc.poll() is not None or len(self.signals) == 3:
            return
        now = self.clock()
        if now < self._next_at:
            return
        if self._writing(now):
            self._next_at = now + WRITE_POLL_S
            return
        if self._held_from is not None and self.cut is None:  # its write is done: a grace to end after it
            self.held_s += now - self._held_from
            self._held_from = None
            self._next_at = now + self.grace_s
            return
        self._send((signal.SIGINT, signal.SIGTERM, signal.SIGKILL)[len(self.signals)])
        self._next_at = now + self.grace_s

    def _writing(self, now: float) -> bool:
        """Whether a signal due now waits: a file open for writing grew since it was last looked at (or, looked at
        first, is open at all), within the bound; the bound spent with a file growing is noted (:attr:`cut`)."""
        files = self.written(self.proc.pid)
        before, self._files = self._files, files
        if not files:
            return False
        if before is None:  # open for writing: whether it grows, the next look tells
            return True
        growing = [path for path, size in files.items() if before.get(path) != size]
        if not growing:
            return False
        if self._held_from is None:
            self._held_from = now
        if now - self._held_from + self.held_s >= self.write_grace_s:
            self.cut = growing[0]
            return False
        return True

    def wait(self) -> int:
        """Take every step until the process has ended; its return code."""
        while self.proc.poll() is None:
            self.poll()
            time.sleep(POLL_S)
        return int(self.proc.returncode)

    def said(self) -> str:
        """How the process was ended, in words: the signals sent, and a write they waited for or cut."""
        said = f"ended by {', then '.join(self.signals)}" if self.signals else "ended by itself"
        if self.cut is not None:
            return said + (f" (a signal landed while {self.cut} was still being written: the {self.write_grace_s:.0f} "
                           "s the signals wait for a write ran out)")
        return said

    def _send(self, sig: signal.Signals) -> None:
        if self._held_from is not None:
            self.held_s += self.clock() - self._held_from
            self._held_from = None
        self._files = None  # after a signal, what is open is looked at afresh
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            return
        self.signals.append(sig.name)
