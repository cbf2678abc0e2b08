"""The parent's end of the host: start it (a fresh interpreter, or a fork holding the Python API's objects),
send it commands, read its events, stop it."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from dataprof.errors import TargetError
from dataprof.measure.protocol import Channel, LineReader, LoadRequest, Message, child_env
from dataprof.measure.sweep import host
from dataprof.measure.sweep.commands import COMMANDS, Command, Load, Share, Stop
from dataprof.measure.sweep.events import DatasetBuilt, Event, Found, Garbled, HostError, Shared, heard
from dataprof.results.settings import SweepSettings

Awaited = TypeVar("Awaited", Found, Shared)


class HostDied(Exception):
    """The host process ended while we waited for it."""


class ForkedHost:
    """A host forked from this process (for a Dataset object given to the Python API); Popen's interface."""

    def __init__(self, argv: list[str], close_in_child: tuple[int, ...], log_fd: int,
                 objects: Mapping[str, Any]) -> None:
        self.returncode: int | None = None
        self.pid = os.fork()
        if self.pid == 0:  # the host: it holds the caller's dataset object as it was at the fork
            code = 1
            try:
                os.setsid()
                for fd in close_in_child:
                    os.close(fd)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(log_fd, 1)
                os.dup2(log_fd, 2)
                code = host.main(argv, objects)
            finally:
                os._exit(code)

    def poll(self) -> int | None:
        """The exit code once it has exited, else None."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, waiting up to ``timeout`` seconds (``subprocess.TimeoutExpired`` after)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("dataprof host", timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def terminate(self) -> None:
        """Send it SIGTERM (it kills its trial first)."""
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


class Host:
    """The long-lived process that holds the dataset and forks trials."""

    def __init__(self, settings: SweepSettings, objects: Mapping[str, Any],
                 expected_framework: str | None = None, cpus: Sequence[int] | None = None) -> None:
        self.settings = settings
        self.request = LoadRequest.of(settings, expected_framework)
        cmd_read, self.cmd_fd = os.pipe()
        self.evt_fd, evt_write = os.pipe()
        self.log = tempfile.TemporaryFile(prefix="dataprof-host-")  # noqa: SIM115 (closed in close())
        self.proc: subprocess.Popen[bytes] | ForkedHost
        argv = [str(cmd_read), str(evt_write)] + ([",".join(map(str, cpus))] if cpus is not None else [])
        if settings.target in objects:
            self.proc = ForkedHost(argv, (self.cmd_fd, self.evt_fd), self.log.fileno(), objects)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dataprof.measure.sweep.host", *argv],
                pass_fds=(cmd_read, evt_write), stdin=subprocess.DEVNULL, stdout=self.log,
                stderr=subprocess.STDOUT, start_new_session=True, env=child_env(), cwd=settings.cwd,
            )
        os.close(cmd_read)
        os.close(evt_write)
        self.commands = Channel(self.cmd_fd)
        self.events = LineReader(self.evt_fd)
        self._pending: list[Message] = []

    def send(self, command: Command) -> None:
        """Send the host one command."""
        self.commands.send(COMMANDS.said(command))

    def next_event(self, timeout_s: float) -> Event | None:
        """The next event, None on timeout; raise HostDied at EOF."""
        if self._pending:
            return heard(self._pending.pop(0))
        ready, _, _ = select.select([self.evt_fd], [], [], timeout_s)
        if not ready:
            return None
        messages = self.events.read()
        if messages is None:
            raise HostDied(self.log_tail())
        self._pending.extend(messages)
        return heard(self._pending.pop(0)) if self._pending else None

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines the host (and the user's code in it) printed."""
        self.log.seek(0)
        text = self.log.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def load(self) -> Message:
        """Have the host's probe build and check the dataset; what it found."""
        self.send(Load(self.request))
        found = self._await(Found, self.settings.trial_timeout_s)
        return found.fields

    def share(self) -> None:
        """Have the host build the dataset once, for every trial to be forked from it."""
        self.send(Share())
        self._await(Shared)

    def _await(self, kind: type[Awaited], first_batch_s: float | None = None) -> Awaited:
        """The host's next ``kind`` event; TargetError if it reports an error, says a line off the protocol or dies
        first.

        ``first_batch_s``: once the probe has built the dataset, how long its first batch may take.
        """
        deadline: float | None = None
        while True:
            try:
                event = self.next_event(0.25)
            except HostDied as exc:
                raise TargetError(f"the process loading {self.settings.target} died ({self._exit_reason()})") \
                    from exc
            if isinstance(event, DatasetBuilt) and first_batch_s is not None:
                deadline = time.monotonic() + first_batch_s
            if event is None and deadline is not None and time.monotonic() > deadline:
                self.proc.terminate()
                raise TargetError(f"the first batch of {self.settings.batch_size} did not come in {first_batch_s:g} s "
                                  "(--trial-timeout) after the dataset was built: loading it hangs")
            if isinstance(event, HostError):
                raise TargetError(event.message, event.traceback)
            if isinstance(event, Garbled):
                raise TargetError(f"the process loading {self.settings.target} said something off dataprof's "
                                  f"protocol ({event.why}): a bug in dataprof, please report it")
            if isinstance(event, kind):
                return event

    def _exit_reason(self) -> str:
        code = self.proc.wait(timeout=5)
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        tail = self.log_tail(3)
        return f"exit code {code}" + (f": {tail}" if tail else "")

    def close(self) -> None:
        """Stop the host (asked, then terminated after 5 s) and release its pipes and log."""
        if self.proc.poll() is None:
            try:
                self.send(Stop())
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                self.proc.wait()
        for fd in (self.cmd_fd, self.evt_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
