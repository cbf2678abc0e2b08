"""Watching DataLoaders inside this Python process (``dataprof.watch()``), sampled from a process outside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from dataprof.errors import UsageError
from dataprof.measure.protocol import Message, child_env
from dataprof.measure.watch.collector import Collector
from dataprof.measure.watch.events import Device, Event, Exit, WindowEnd, WindowOpen, said
from dataprof.measure.watch.resources import resources_of
from dataprof.measure.watch.watched import Recorder, patch_dataloader
from dataprof.results.run import RunReport

SAMPLER_TIMEOUT_S = 30.0
"""How long the sampler process may take to hand over its summary."""


class ProcessMarks:
    """The watch's marks, sent to the sampler process on its stdin as the watched code's own events."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.started = False

    def _send(self, event: Event) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(said(event)) + "\n")
        self.proc.stdin.flush()

    def mark_window_start(self) -> None:
        """The first batch came: the sampler's window opens."""
        if not self.started:
            self.started = True
            self._send(WindowOpen())

    def mark_window_end(self) -> None:
        """The watched code ended."""
        self._send(WindowEnd())

    def use_gpu(self, device: Device) -> str | None:
        """Have the sampler open NVML for this device (it reports a failure in its summary)."""
        self._send(device)
        return None


class _Sink:
    """The recorder's channel: events go straight to the collector."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def send(self, message: Message) -> None:
        """Hand one event to the collector."""
        self.collector.handle(message)


class InProcessWatch:
    """Times every torch DataLoader iterated between :meth:`start` and :meth:`stop` in this process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        """Seconds, for the watch's wall time."""

    def start(self) -> InProcessWatch:
        """Patch torch's DataLoader and start the sampler process."""
        try:
            import torch.utils.data.dataloader as module
        except ImportError:
            raise UsageError("dataprof.watch() watches torch DataLoaders: torch is not installed") from None
        self.proc = subprocess.Popen([sys.executable, "-m", "dataprof.measure.watch.tree_sampler", str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
        self.collector = Collector(ProcessMarks(self.proc))
        self.recorder = Recorder(_Sink(self.collector), max_steps=None, seconds=None)  # type: ignore[arg-type]
        self.restore = patch_dataloader(module, self.recorder)
        self.started = self.clock()
        return self

    def stop(self, failed: BaseException | None) -> RunReport:
        """Put the DataLoader back, collect the sampler's summary; what was measured (undecided)."""
        self.restore()
        self.recorder.flush()
        self.recorder.report_device()
        self.collector.handle(said(Exit(0 if failed is None else 1)))
        try:
            out, _ = self.proc.communicate(timeout=SAMPLER_TIMEOUT_S)
            figures: dict[str, Any] = json.loads(out)
        except (subprocess.TimeoutExpired, ValueError):
            self.proc.kill()
            figures = {}
        if figures.get("gpu_reason"):
            self.collector.outcome.gpu_reason = figures["gpu_reason"]
        empty = {key: None for key in ("cpu_percent", "main_cpu_percent", "cpu_percent_system", "iowait_percent",
                                       "peak_memory_bytes", "gpu_util_percent", "gpu_memory_bytes")}
        return self.collector.report(("python", "dataprof.watch()"), resources_of({**empty, **figures}),
                                     self.clock() - self.started, None if failed else 0,
                                     "Ctrl-C" if isinstance(failed, KeyboardInterrupt) else None)
