"""Runs a host forks like a trial but that measure nothing: Paddle's own autotune, the epoch check of persistent
workers on a stream, and the thread check. Each is killed on its timeout or stall, and says how it ended."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from dataprof.measure.protocol import AutotuneRequest
from dataprof.measure.sweep.autotune import AutotuneAnswer, autotune_run
from dataprof.measure.sweep.commands import Command, EpochCheck, ThreadCheckRequest
from dataprof.measure.sweep.epoch_check import EpochAnswer
from dataprof.measure.sweep.events import WORDS, Progress, TrialStarted, Word, ends
from dataprof.measure.sweep.link import Host, HostDied
from dataprof.measure.sweep.outcome import Answer, SideEnd, side_end
from dataprof.measure.sweep.thread_check import ThreadAnswer, checked
from dataprof.results.knobs import LoaderConfig
from dataprof.results.settings import SweepSettings
from dataprof.results.sweep import AutotuneRun
from dataprof.results.threads import ThreadCheck
from dataprof.results.vocabulary import TrialStatus


class Running(Protocol):
    """What the side runs use of the runner: its settings and clock, its live host, the run in flight."""

    settings: SweepSettings
    clock: Callable[[], float]
    current_pid: int | None

    def live_host(self) -> Host:
        """The host, started again if it died."""

    def kill_current(self) -> None:
        """Kill the run in flight with its process group."""


class SideRuns:
    """The side runs of a :class:`~dataprof.measure.sweep.runner.TrialRunner`, on its host."""

    def __init__(self, runner: Running) -> None:
        self.runner = runner

    def _side_run(self, request: Command, kind: type[Answer], timeout_s: float,
                  stall_s: float | None = None) -> SideEnd[Answer]:
        """Run a request the host forks like a trial but that measures nothing: how it ended, its answer of
        ``kind`` when ``ok`` (else ``timeout``, ``crashed`` or ``failed``). It is killed after ``timeout_s``, or
        ``stall_s`` after a ``progress`` event with none since.
        """
        runner = self.runner
        host = runner.live_host()
        host.send(request)
        overall = deadline = runner.clock() + timeout_s
        word: Word | None = None
        timed_out = False
        try:
            while True:
                event = host.next_event(0.25)
                if event is None:
                    if runner.clock() > deadline and not timed_out:
                        timed_out = True
                        runner.kill_current()
                    continue
                if isinstance(event, Progress) and stall_s is not None:
                    deadline = min(overall, runner.clock() + stall_s)
                elif isinstance(event, TrialStarted):
                    runner.current_pid = event.pid
                elif (end := ends(event)) is not None:
                    break
                elif word is None and isinstance(event, WORDS):
                    word = event
        except HostDied as exc:
            return SideEnd(TrialStatus.CRASHED, why=f"the host process died: {exc}".strip())
        finally:
            runner.current_pid = None
        if timed_out:
            return SideEnd(TrialStatus.TIMEOUT, stalled=deadline < overall)
        return side_end(kind, word, end)

    def autotune(self, steps: int, timeout_s: float) -> AutotuneRun:
        """Run Paddle's own dataloader autotune in a process forked by the host; what it picked."""
        s = self.runner.settings
        request = AutotuneRequest(steps=steps, batch_size=s.batch_size, drop_last=s.drop_last)
        return autotune_run(steps, timeout_s, self._side_run(request, AutotuneAnswer, timeout_s))

    def epoch_check(self, config: LoaderConfig, timeout_s: float, stall_s: float) -> str | None:
        """Why ``config``'s DataLoader fails across an IterableDataset's epoch end, or None when it does not.

        ``timeout_s`` bounds the whole check; ``stall_s``, the wait for a batch once batches flow.
        """
        end = self._side_run(EpochCheck(config), EpochAnswer, timeout_s, stall_s)
        if end.status == TrialStatus.TIMEOUT:
            return f"it hung: no batch for {stall_s:g} s" if end.stalled else f"no end in {timeout_s:g} s"
        if end.answer is None:
            return str(end.why)
        counted = end.answer
        if any(batches != counted.expected for batches in counted.batches):
            return (f"its epochs gave {' and '.join(map(str, counted.batches))} batches where the stream "
                    f"holds {counted.expected}")
        return None

    def thread_check(self, config: LoaderConfig, timeout_s: float) -> ThreadCheck:
        """Whether ``config``'s threads return the samples a worker process would (:mod:`.thread_check`)."""
        request = ThreadCheckRequest(config, self.runner.settings.batch_size)
        return checked(config, self._side_run(request, ThreadAnswer, timeout_s))
