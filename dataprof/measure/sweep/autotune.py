"""Paddle's own dataloader autotune, run for comparison with dataprof's search.

``paddle.incubate.autotune`` makes ``paddle.io.DataLoader`` pick
``num_workers`` itself when it is built: it times ``tuning_steps`` batches of
a subset of the dataset at 0, 2, 4, … workers below ``cpu_count() / 2`` and
keeps a count only when it is at least 25% faster. This module runs that very
code in a forked process and reports what it picked and the costs it logged;
the sweep then measures the pick like any other config.
"""

from __future__ import annotations

import logging
import multiprocessing
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dataprof.backends.target import describe_exception
from dataprof.measure.protocol import AutotuneRequest, error_event
from dataprof.measure.sweep.events import Ready, answer, said
from dataprof.measure.sweep.outcome import SideEnd
from dataprof.results.sweep import AutotuneRun
from dataprof.results.vocabulary import TrialStatus

Emit = Callable[[dict[str, Any]], None]

_COST_RE = re.compile(r"num_workers: (?P<workers>\d+) avg_cost: (?P<cost>[0-9.eE+-]+)")


@dataclass(frozen=True)
class AutotuneAnswer:
    """What Paddle's autotune picked, its ``result`` event: its workers, how long building the loader took, the most
    workers it considered, the cost it logged for each count, and why it did not tune (None: it did)."""

    num_workers: int
    wall_s: float
    max_workers: float
    evaluations: tuple[tuple[int, float], ...] = ()
    skipped: str | None = None


class _Collect(logging.Handler):
    """Keeps the ``num_workers: N avg_cost: S`` lines the autotune logs (at DEBUG level), and whether it began."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.costs: list[tuple[int, float]] = []
        self.started = False

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the cost of each worker count Paddle's autotune logs."""
        message = record.getMessage()
        self.started = self.started or "DataLoader Auto Tune" in message
        match = _COST_RE.search(message)
        if match:
            self.costs.append((int(match.group("workers")), float(match.group("cost"))))


def _why_untuned(paddle: Any, dataset: Any) -> str:
    """Why Paddle's autotune did not start (the conditions of ``paddle.io.reader.AuToTune``)."""
    if sys.platform in ("darwin", "win32"):
        return f"it does not run on {sys.platform}"
    if isinstance(dataset, paddle.io.IterableDataset):
        return "it tunes a map-style dataset's BatchSampler only, not an IterableDataset"
    return "it did not start"


def run_autotune(dataset: Any, collate: Any, request: AutotuneRequest, emit: Emit) -> None:
    """Build a ``paddle.io.DataLoader`` with Paddle's autotune on; emit its pick (or an error). Never raises."""
    from dataprof.backends.frameworks import import_paddle

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    root = logging.getLogger()
    collect = _Collect()
    level = root.level
    try:
        paddle = import_paddle()
        paddle.incubate.autotune.set_config({"dataloader": {"enable": True,
                                                            "tuning_steps": request.steps}})
        root.addHandler(collect)
        root.setLevel(logging.DEBUG)
        emit(said(Ready()))
        start = time.perf_counter()
        loader = paddle.io.DataLoader(dataset, batch_size=request.batch_size,
                                      drop_last=request.drop_last, collate_fn=collate)
        wall_s = time.perf_counter() - start
    except Exception as exc:
        emit(error_event(TrialStatus.FAILED, describe_exception(exc), traceback.format_exc()))
        return
    finally:
        root.removeHandler(collect)
        root.setLevel(level)
    emit(answer(AutotuneAnswer(int(loader.num_workers), wall_s, multiprocessing.cpu_count() / 2, tuple(collect.costs),
                               None if collect.started else _why_untuned(paddle, dataset))))


def autotune_run(steps: int, timeout_s: float, end: SideEnd[AutotuneAnswer]) -> AutotuneRun:
    """What Paddle's autotune picked, from how its forked run ended."""
    if end.status == TrialStatus.TIMEOUT:
        return AutotuneRun(status=TrialStatus.TIMEOUT, tuning_steps=steps,
                           error=f"Paddle's autotune did not finish in {timeout_s:g} s: killed")
    if end.answer is None:
        return AutotuneRun(status=end.status, tuning_steps=steps, error=end.why)
    picked = end.answer
    return AutotuneRun(status=TrialStatus.OK, num_workers=picked.num_workers, tuning_steps=steps,
                       wall_s=picked.wall_s, max_workers=picked.max_workers, evaluations=picked.evaluations,
                       skipped=picked.skipped)
