"""Errors a user can act on, and the exit codes the CLI maps them to."""

from __future__ import annotations

import contextlib
import enum
import signal
import threading
from collections.abc import Iterator
from typing import Any


class ExitCode(enum.IntEnum):
    """Process exit codes; part of the CI contract (docs/exit-codes.md)."""

    OK = 0
    GATE_FAILED = 1
    USAGE = 2
    TARGET = 3
    NO_COMPARISON = 4
    """``dataprof tune`` compared nothing: no config other than the script's own completed."""
    CANNOT_TELL = 5
    """``dataprof tune``'s runs cannot show an answer right on this machine (their noise is too large), or the data
    cost's band straddles ``--max-data-cost``."""
    INTERRUPTED = 130


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job's time limit, a cancelled CI run), raised as Ctrl-C is: the command stops the same way,
    keeps what it measured and exits 130."""


@contextlib.contextmanager
def terminated_as_interrupted() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread, where the default would end the process at once
    (the trial's temporary files left, nothing said); a handler already set is left as it is."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class DataprofError(Exception):
    """An error whose message tells the user what was wrong and what to do."""

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        """Longer context (a traceback from the user's code), shown with --debug."""

    def __str__(self) -> str:
        return self.message


class UsageError(DataprofError):
    """The command line or a setting is invalid (exit 2)."""

    exit_code = ExitCode.USAGE


class TargetError(DataprofError):
    """The dataset cannot be loaded, built, indexed or batched (exit 3)."""

    exit_code = ExitCode.TARGET
