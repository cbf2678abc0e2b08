"""A training loop with known costs, timing itself: each sample sleeps ``--sleep-ms``, each step ``--step-ms``.

It prints one JSON line with its own steady-state figures (each epoch's first batches left out, as dataprof
does): the reference ``run_accuracy.py`` and ``run_overhead.py`` hold ``dataprof run`` against.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Sleepy(Dataset):
    """Sample ``i`` after ``sleep_ms``."""

    def __init__(self, length: int, sleep_ms: float) -> None:
        self.length, self.sleep_s = length, sleep_ms / 1000.0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.zeros(4)


def main() -> None:
    """Train, timing ``next()`` and the step of every batch itself."""
    parser = argparse.ArgumentParser()
    for name, default in (("--workers", 0), ("--batch-size", 16), ("--epochs", 2), ("--length", 1600)):
        parser.add_argument(name, type=int, default=default)
    parser.add_argument("--sleep-ms", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=5.0)
    opts = parser.parse_args()
    loader = DataLoader(Sleepy(opts.length, opts.sleep_ms), batch_size=opts.batch_size, num_workers=opts.workers,
                        persistent_workers=opts.workers > 0)
    warmup = 2 if opts.workers == 0 else 3 * opts.workers
    waits, steps, samples = [], [], 0
    for _ in range(opts.epochs):
        iterator = iter(loader)
        index = 0
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            arrived = time.perf_counter()
            time.sleep(opts.step_ms / 1000.0)
            if index >= warmup:
                waits.append(arrived - start)
                steps.append(time.perf_counter() - arrived)
                samples += len(batch)
            index += 1
    total = sum(waits) + sum(steps)
    print(json.dumps({"samples_per_s": samples / total, "wait_share": sum(waits) / total,
                      "step_ms_mean": 1000 * sum(steps) / len(steps), "wait_ms_mean": 1000 * sum(waits) / len(waits)}))


if __name__ == "__main__":
    main()
