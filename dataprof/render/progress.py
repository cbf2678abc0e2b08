"""Progress while sweeping: a rich bar on a terminal, plain lines otherwise.

The only place, besides the renderers, that touches rich; the sweep just
calls the observer.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from dataprof.decide.crashes import explained
from dataprof.results.vocabulary import CacheMode, Event, Observer, TrialStatus


def _cold(result: Any) -> str:
    return " cold" if result.cache == CacheMode.COLD else ""


def plain_observer(stream: TextIO) -> Observer:
    """An observer that prints one plain line per event worth a line (not a terminal, or NO_COLOR)."""
    state: dict[str, Any] = {"total": None}

    def observe(event: Event, data: dict[str, Any]) -> None:
        if event == Event.LOADING:
            print(f"loading {data['target']} …", file=stream, flush=True)
        elif event == Event.PLANNED:
            state["total"] = data["total"]
        elif event == Event.AUTOTUNE_START:
            print(f"running Paddle's own dataloader autotune (tuning_steps={data['steps']}) for comparison …",
                  file=stream, flush=True)
        elif event == Event.AUTOTUNE_DONE:
            run = data["autotune"]
            ok = run.status == TrialStatus.OK
            outcome = f"picked num_workers={run.num_workers}" if ok else f"{run.status}: {run.error}"
            print(f"Paddle's autotune: {outcome}", file=stream, flush=True)
        elif event == Event.TRIAL_DONE:
            result = data["result"]
            total = f"/{state['total']}" if state["total"] else ""
            figure = f"{result.samples_per_s:,.1f} samples/s" if result.samples_per_s else explained(result.error)
            print(f"[{data['index'] + 1}{total}] {result.config.label()}{_cold(result)}: {result.status} · {figure}",
                  file=stream, flush=True)

    return observe


def make_observer(console: Any, stream: TextIO | None = None) -> tuple[Observer, Callable[[], None]]:
    """(observer, finish): a live progress bar on a TTY unless NO_COLOR is set."""
    stream = stream or sys.stderr
    if not stream.isatty() or os.environ.get("NO_COLOR"):
        return plain_observer(stream), lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=Console(file=stream), transient=True)
    task = progress.add_task("loading the dataset", total=None)
    progress.start()

    def observe(event: Event, data: dict[str, Any]) -> None:
        if event == Event.PLANNED:
            progress.update(task, total=data["total"], description="sweeping")
        elif event == Event.AUTOTUNE_START:
            progress.update(task, description="Paddle's own autotune, for comparison")
        elif event == Event.TRIAL_START:
            progress.update(task, description=f"{data['config'].label()}: starting workers")
        elif event == Event.WINDOW_START:
            progress.update(task, description=f"{data['config'].label()}: measuring")
        elif event == Event.TRIAL_DONE:
            result = data["result"]
            progress.advance(task)
            figure = f"{result.samples_per_s:,.1f} samples/s" if result.samples_per_s else result.status
            progress.console.print(f"  {result.config.label()}{_cold(result)}: {figure}")

    return observe, progress.stop
