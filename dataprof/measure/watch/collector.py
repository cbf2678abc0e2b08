"""What ``dataprof run``'s parent gathers of the watched script: its loaders' events and the rest of what its
events say (:class:`Outcome`), then the RunReport (undecided) they make with the resources sampled."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from dataprof.measure.environment import probe_environment
from dataprof.measure.gpu import NvmlProbe
from dataprof.measure.protocol import Message
from dataprof.measure.sampler import Sampler
from dataprof.measure.watch.events import (
    Batches,
    Device,
    Ended,
    EpochEnded,
    EpochStarted,
    Exit,
    LoaderBuilt,
    Overridden,
    RanksStarted,
    Replayed,
    WindowEnd,
    WindowOpen,
    heard,
)
from dataprof.measure.watch.loader_figures import WatchedLoader, loader_run
from dataprof.results.run import RunReport, RunResources
from dataprof.results.vocabulary import StopCause
from dataprof.version import __version__

Stop = tuple[StopCause, str]
"""Why the watch ends a script itself: the cause, and the words the report says it in."""


class Marks(Protocol):
    """Where the resources are sampled: told when the first batch came, which GPU is used, when it ended."""

    def mark_window_start(self) -> None:
        """The first batch arrived: resources count from here."""

    def mark_window_end(self) -> None:
        """The watched code ended."""

    def use_gpu(self, device: Device) -> str | None:
        """Sample this CUDA device through NVML; why not, if it cannot be."""


class SamplerMarks:
    """:class:`Marks` for a Sampler running in this (the parent) process."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def mark_window_start(self) -> None:
        """Resources count from the first batch, not the imports."""
        if self.sampler.samples.window_start is None:
            self.sampler.mark_window_start()

    def mark_window_end(self) -> None:
        """The script is ending: the last reading."""
        self.sampler.mark_window_end()

    def use_gpu(self, device: Device) -> str | None:
        """Open NVML for the script's device."""
        self.sampler.gpu_probe = NvmlProbe.open(device.uuid, device.pci_bus_id)
        return getattr(self.sampler.gpu_probe, "reason", None)


@dataclass
class Outcome:
    """What the watched code's events said of its run besides its loaders: its workers, its window's marks, its
    device, how it ended (each None until an event says it)."""

    workers: set[int] = field(default_factory=set)
    window_open: float | None = None
    window_end: float | None = None
    device: str | None = None
    gpu_reason: str | None = None
    ended: str | None = None
    """Why the watch ended it (``--max-steps``, ``--seconds``)."""
    own_ranks: str | None = None
    """How it started ranks of its own, where, and how many processes."""
    own_ranks_at: float | None = None
    overridden: int = 0
    code: int | None = None
    """Its exit code, once it said it."""
    stderr_tail: tuple[str, ...] = ()
    stderr_causes: tuple[str, ...] = ()


class Collector:
    """The watched code's events, gathered: its loaders, its device, how it ended."""

    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.loaders: dict[int, WatchedLoader] = {}
        self.outcome = Outcome()

    def handle(self, message: Message) -> None:
        """Take one event of ``measure.watch.watched`` (:mod:`~dataprof.measure.watch.events`)."""
        event = heard(message)
        outcome = self.outcome
        match event:
            case LoaderBuilt():
                self.loaders[event.loader] = WatchedLoader(event.info)
            case Batches():
                self.loaders[event.loader].rows.extend(event.rows)
            case EpochStarted():
                self.loaders[event.loader].first_batch_s[event.epoch] = event.first_batch_s
                outcome.workers.update(event.workers)
                if event.batch_bytes is not None:
                    self.loaders[event.loader].batch_bytes = event.batch_bytes
                self.marks.mark_window_start()
            case WindowEnd():
                if outcome.window_end is None:
                    outcome.window_end = time.monotonic()
            case WindowOpen():
                outcome.window_open = time.monotonic()
            case EpochEnded():
                self.loaders[event.loader].ended_at[event.epoch] = event.at
            case Device():
                outcome.device = event.device
                outcome.gpu_reason = self.marks.use_gpu(event)
            case Ended():
                outcome.ended = event.why
            case RanksStarted():
                if outcome.own_ranks is None:
                    outcome.own_ranks_at = time.monotonic()
                    outcome.own_ranks = (f"{event.how} at {event.site}, {event.processes} "
                                         f"process{'es' if event.processes > 1 else ''}")
            case Replayed():
                self.loaders[event.loader].replayed_after = event.after
            case Overridden():
                outcome.overridden = event.loaders
                for number, knobs in event.lost.items():
                    if int(number) in self.loaders:
                        self.loaders[int(number)].knobs_lost = knobs
            case Exit():
                outcome.code = event.code
                outcome.stderr_tail, outcome.stderr_causes = event.stderr_tail, event.stderr_causes
                self.marks.mark_window_end()

    def _framework(self) -> str:
        """The busiest loader's framework (torch when none ran)."""
        busiest = max(self.loaders.values(), key=lambda loader: len(loader.rows), default=None)
        return "torch" if busiest is None else busiest.info.framework

    def report(self, command: tuple[str, ...], resources: RunResources, wall_s: float, exit_code: int | None,
               interrupted: str | None, stopped: Stop | None = None, killed: tuple[str, ...] = ()) -> RunReport:
        """The RunReport of what was gathered (undecided); ``interrupted``: by what (``Ctrl-C``, ``SIGTERM``);
        ``stopped``: why the watch ended the script itself; ``killed``: the processes it left that were killed,
        DataLoader workers apart."""
        return RunReport(
            tool_version=__version__, command=command,
            environment=probe_environment(self.outcome.device or "cpu", framework=self._framework()),
            loaders=tuple(sorted((loader_run(loader, [other for other in self.loaders.values() if other is not loader])
                                  for loader in self.loaders.values()),
                                 key=lambda r: -r.batches)),
            resources=resources, wall_s=wall_s, exit_code=exit_code if self.outcome.code is None else self.outcome.code,
            ended_by=interrupted or self.outcome.ended, complete=interrupted is None,
            notes=gpu_note(self.outcome) + ((f"killed what the script left running: {', '.join(killed)}",)
                                             if killed else ()),
            stderr_tail=self.outcome.stderr_tail, stderr_causes=self.outcome.stderr_causes,
            stopped=None if stopped is None else stopped[1], stop_cause=None if stopped is None else stopped[0],
            own_ranks=self.outcome.own_ranks)


def gpu_note(outcome: Outcome) -> tuple[str, ...]:
    """Why the GPU fields are null, when they are."""
    if outcome.device is None:
        return ("the script used no CUDA device while watched: GPU utilisation not measured",)
    reason = outcome.gpu_reason
    return (f"GPU utilisation not measured: {reason}",) if reason else ()
