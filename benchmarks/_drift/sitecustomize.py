"""A busy machine for ``benchmarks/tune_frameworks.py --variants drift``: on ``PYTHONPATH`` with
``DATAPROF_BENCH_DRIFT=LOW,HIGH`` set, each Python process draws a speed at random in ``[LOW, HIGH]`` and holds
each optimizer step's time (from the step before, data included; twice the recent median at most, so that a
validation between epochs is not held) for ``HIGH / speed`` of it: every run's speed scaled by its own draw, as
other jobs on the machine would. Nothing happens without the variable."""

from __future__ import annotations

import os
import random
import sys
import time


def _install(low: float, high: float) -> None:
    import torch.optim.optimizer as optimizer

    speed = random.Random(os.getpid() ^ time.time_ns()).uniform(low, high)
    stretch = high / speed - 1.0
    last = [time.perf_counter()]
    recent: list[float] = []

    def hold(*_: object) -> None:
        took = time.perf_counter() - last[0]
        recent[:] = [*recent[-15:], took]
        typical = sorted(recent)[len(recent) // 2]
        time.sleep(stretch * min(took, 2 * typical))  # a validation between epochs is not a step
        last[0] = time.perf_counter()

    optimizer.register_optimizer_step_post_hook(hold)
    print(f"drift: this process at {speed:.2f}x", file=sys.stderr, flush=True)


if os.environ.get("DATAPROF_BENCH_DRIFT"):
    _install(*(float(part) for part in os.environ["DATAPROF_BENCH_DRIFT"].split(",")))
