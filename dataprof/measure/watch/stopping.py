"""Ending a watched script that overstays its limit, as a user at the terminal would: SIGINT (the script's
``finally:`` and ``except KeyboardInterrupt`` run), then SIGTERM, then SIGKILL; the SIGKILL waits, within a
bound, while the script is still writing files (a checkpoint cut in half is worse than a late end)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

GRACE_S = 5.0
"""Seconds between SIGINT and SIGTERM, and between SIGTERM and SIGKILL."""
WRITE_GRACE_S = 30.0
"""How much longer SIGKILL waits at most while the script's processes are still writing."""
POLL_S = 0.2


def tree_write_bytes(pid: int) -> int | None:
    """Bytes the process ``pid`` and its descendants have written so far (``/proc/PID/io``); None where the
    system does not say (macOS), or once the process is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        total = 0
        for proc in (root, *root.children(recursive=True)):
            try:
                total += proc.io_counters().write_bytes
            except (psutil.Error, AttributeError):
                continue
        return total
    except psutil.Error:
        return None


class Stopper:
    """The steps that end one process (``proc``, a ``Popen``) that overstays, taken as time passes (:meth:`poll`),
    so the caller goes on reading what the process says meanwhile."""

    def __init__(self, proc: Any, clock: Callable[[], float] = time.monotonic, grace_s: float = GRACE_S,
                 write_grace_s: float = WRITE_GRACE_S,
                 written: Callable[[int], int | None] = tree_write_bytes) -> None:
        self.proc = proc
        self.clock = clock
        self.grace_s = grace_s
        self.write_grace_s = write_grace_s
        self.written = written
        self.signals: list[str] = []
        """The signals sent, in order (``SIGINT``, ``SIGTERM``, ``SIGKILL``)."""
        self._next_at: float | None = None
        self._kill_by: float | None = None
        self._last_written: int | None = None

    @property
    def started(self) -> bool:
        """Whether the process has been told to end."""
        return bool(self.signals)

    def start(self) -> None:
        """Send SIGINT now; the next signals follow in :meth:`poll`."""
        if not self.started:
            self._send(signal.SIGINT)
            self._next_at = self.clock() + self.grace_s

    def poll(self) -> None:
        """Take the next step when it is due: SIGTERM a grace after SIGINT; SIGKILL a grace after SIGTERM, later
        while the process tree is still writing (at most :attr:`write_grace_s` later)."""
        if not self.started or self.proc.poll() is not None or self._next_at is None:
            return
        now = self.clock()
        if now < self._next_at:
            return
        if len(self.signals) == 1:
            self._send(signal.SIGTERM)
            self._next_at = now + self.grace_s
            self._kill_by = self._next_at + self.write_grace_s
            self._last_written = self.written(self.proc.pid)
            return
        written = self.written(self.proc.pid)
        if written is not None and self._last_written is not None and written > self._last_written \
                and self._kill_by is not None and now < self._kill_by:
            self._last_written, self._next_at = written, now + 1.0  # still writing: a checkpoint, a log
            return
        self._send(signal.SIGKILL)
        self._next_at = None

    def wait(self) -> int:
        """Take every step until the process has ended; its return code."""
        while self.proc.poll() is None:
            self.poll()
            time.sleep(POLL_S)
        return int(self.proc.returncode)

    def _send(self, sig: signal.Signals) -> None:
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            return
        self.signals.append(sig.name)
