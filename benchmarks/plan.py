"""How wrong ``dataprof plan`` is: predictions for another CPU count, checked by measuring there.

For each pipeline and each direction (measured on ``FROM`` CPUs, planned for ``TO``), every round:

1. sweeps ``--workers`` on ``FROM`` CPUs (``--cpus``), then plans for ``TO`` CPUs (``dataprof.plan``): the
   planned ``num_workers`` and its predicted samples/s;
2. measures on ``TO`` CPUs, in alternating order (A B, then B A), a dataprof sweep pinned with ``--cpus`` over
   the same worker counts, the planned one and twice that, and a bare ``for batch in DataLoader(...)`` loop in a fresh
   process pinned by ``taskset`` to the same CPUs, at the planned config.

Each round's prediction and its checks are a minute apart at most, so the machine's drift over minutes does
not pass for an error. It prints, per round, the predicted rate against both measurements, and the planned
config's rate against the fastest the check sweep found (when that is another count, the two are measured
again by bare loops, side by side, A B B A: the fastest of several noisy readings reads high); then per
pipeline and direction the medians: the goal is the prediction within 15% of the bare loop, and the planned
``num_workers`` within 5% of the best measured there. The last column is a worker's CPU per sample as the
source sweep and the check sweep read it: where they differ, the samples cost another CPU time there.

Pipelines: ``cpu`` (a pure-Python loop a sample), ``latency`` (``examples/latency.py``'s
SleepDataset, 5 ms a sample), ``mixed`` (half that loop and 3 ms of sleep) and ``decode`` (JPEG decode and
torchvision's augmentation, ``benchmarks/pipelines.py:JpegDecode``; without torchvision, its PIL stand-in).

    python benchmarks/plan.py [--pipelines cpu,latency,mixed,decode] [--directions 2:1,1:2] [--rounds 3]
                              [--seconds 2] [--workers 0,1,2,4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bare import bare_rate_fresh  # noqa: E402

import dataprof  # noqa: E402
from dataprof.measure.environment import pinned_cpus  # noqa: E402
from dataprof.results.space import SearchSpace  # noqa: E402


def _work(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i * i
    return total


class Busy(Dataset):
    """CPU-bound: ``iterations`` of a pure-Python loop a sample, a small tensor out."""

    def __init__(self, length: int = 100_000, iterations: int = 40_000) -> None:
        self.length, self.iterations = length, iterations

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((64,), float(_work(self.iterations) % 7 + index))


class Mixed(Busy):
    """Part computing, part waiting: half of :class:`Busy`'s work, then ``sleep_ms`` of waiting."""

    def __init__(self, length: int = 100_000, iterations: int = 20_000, sleep_ms: float = 3.0) -> None:
        super().__init__(length, iterations)
        self.sleep_s = sleep_ms / 1000

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return super().__getitem__(index)


PIPELINES: dict[str, tuple[str, dict[str, Any], int]] = {
    "cpu": ("benchmarks/plan.py:Busy", {}, 32),
    "latency": ("examples/latency.py:SleepDataset", {"sleep_ms": 5.0}, 32),
    "mixed": ("benchmarks/plan.py:Mixed", {}, 32),
    "decode": ("benchmarks/pipelines.py:JpegDecode", {}, 32),
}
"""Each pipeline's target, its arguments and its batch size."""


@dataclass(frozen=True)
class Round:
    """One prediction and what measuring it gave."""

    workers: int
    predicted: float
    low: float
    high: float
    extrapolated: bool
    dataprof: float
    bare: float
    best_workers: int
    best: float
    share: float
    """The planned config's rate over the best's, re-measured side by side by bare loops when the check sweep
    found another count fastest (the fastest of several noisy readings is biased upward)."""
    curve_error: float
    """The largest |measured / predicted - 1| over the check sweep's worker counts."""
    cpu_source: float | None
    cpu_check: float | None
    """A worker's CPU per sample (ms) as the source sweep's model and the check sweep's read it: where they
    differ, the samples cost another CPU time there (the machine's drift, or CPUs that are not alike)."""


def sweep(target: str, args: dict[str, Any], batch: int, workers: list[int], cpus: int, seconds: float) -> Any:
    return dataprof.sweep(target, batch_size=batch, workers=workers, cpus=cpus, trial_seconds=seconds,
                          strategy="grid", rules_of_thumb=False, args=args)


def bare(target: str, args: dict[str, Any], batch: int, workers: int, cpus: int, seconds: float) -> float:
    """A bare loop's samples/s at ``workers`` (as dataprof's config), pinned by taskset to ``cpus`` CPUs."""
    config = SearchSpace(workers=(workers,)).config(workers, prefetch=2)
    pinned = pinned_cpus(cpus) or []
    return bare_rate_fresh(target, args, config, batch, seconds,
                           prefix=("taskset", "-c", ",".join(map(str, pinned))))


def one_round(name: str, source_cpus: int, target_cpus: int, workers: list[int], seconds: float,
              flip: bool) -> Round:
    target, args, batch = PIPELINES[name]
    source = sweep(target, args, batch, workers, source_cpus, seconds)
    planned = dataprof.plan(source, cpus=target_cpus, step_ms=0)
    rec = planned.recommended
    grid = sorted({*workers, rec.num_workers, 2 * rec.num_workers})  # would more workers than planned help?
    checks: dict[str, Any] = {}
    for side in (("bare", "dataprof") if flip else ("dataprof", "bare")):
        checks[side] = bare(target, args, batch, rec.num_workers, target_cpus, seconds) if side == "bare" else \
            sweep(target, args, batch, grid, target_cpus, seconds)
    measured = {t.config.num_workers: t.samples_per_s or 0.0 for t in checks["dataprof"].trials if t.status == "ok"}
    predicted = {p.num_workers: p.samples_per_s for p in planned.curve}
    best = max(measured, key=lambda w: measured[w])
    error = max(abs(measured[w] / predicted[w] - 1) for w in measured if w in predicted and predicted[w])
    ratios = [1.0]
    if best != rec.num_workers:
        ratios = []
        for order in ((rec.num_workers, best), (best, rec.num_workers)):
            rates = {w: bare(target, args, batch, w, target_cpus, seconds) for w in order}
            ratios.append(rates[rec.num_workers] / rates[best])
    return Round(rec.num_workers, rec.samples_per_s, rec.samples_per_s_low, rec.samples_per_s_high,
                 bool(planned.extrapolations), measured.get(rec.num_workers, 0.0), checks["bare"], best,
                 measured[best], statistics.median(ratios), error, _worker_cpu_ms(source),
                 _worker_cpu_ms(checks["dataprof"]))


def _worker_cpu_ms(report: Any) -> float | None:
    figure = report.model.worker_cpu_s_per_sample if report.model is not None else None
    return None if figure is None else 1000 * figure.value


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipelines", default=",".join(PIPELINES))
    parser.add_argument("--directions", default="2:1,1:2", help="FROM:TO CPU counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--workers", default="0,1,2,4")
    opts = parser.parse_args()
    if shutil.which("taskset") is None:
        print("taskset (util-linux) is needed to pin the bare loop", file=sys.stderr)
        return 2
    usable = len(os.sched_getaffinity(0))
    directions = [tuple(int(c) for c in d.split(":")) for d in opts.directions.split(",")]
    if any(c > usable for d in directions for c in d):
        print(f"--directions {opts.directions}: this machine has {usable} usable CPUs", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    workers = [int(w) for w in opts.workers.split(",")]
    summary = []
    print(f"{'pipeline':<9}{'CPUs':>6}{'round':>6}{'plan':>6}{'predicted (range)':>24}{'dataprof':>10}"
          f"{'bare':>9}{'err':>8}{'best':>12}{'plan/best':>10}{'curve err':>10}{'CPU/sample ms':>16}")
    for name in opts.pipelines.split(","):
        for source_cpus, target_cpus in directions:
            rounds = []
            for index in range(opts.rounds):
                r = one_round(name, source_cpus, target_cpus, workers, opts.seconds, flip=index % 2 == 1)
                rounds.append(r)
                predicted = f"{r.predicted:,.0f} ({r.low:,.0f}–{r.high:,.0f})"
                cells = [f"{name:<9}", f"{source_cpus}→{target_cpus}".rjust(6), f"{index + 1:>6}",
                         f"w{r.workers}{'*' if r.extrapolated else ''}".rjust(6), predicted.rjust(24),
                         f"{r.dataprof:>10,.0f}", f"{r.bare:>9,.0f}", f"{r.bare / r.predicted - 1:>+8.1%}",
                         f"w{r.best_workers} {r.best:,.0f}".rjust(12), f"{r.share:>10.2f}",
                         f"{r.curve_error:>10.1%}", f"{_ms(r.cpu_source)} → {_ms(r.cpu_check)}".rjust(16)]
                print("".join(cells), flush=True)
            error = statistics.median(r.bare / r.predicted - 1 for r in rounds)
            share = statistics.median(r.share for r in rounds)
            summary.append((name, source_cpus, target_cpus, error, share))
    print("\nmedian over rounds: the bare loop against the prediction; the planned config against the best")
    worst = 0.0
    for name, source_cpus, target_cpus, error, share in summary:
        print(f"  {name:<9}{source_cpus}→{target_cpus} CPUs  prediction error {error:+.1%}  "
              f"planned/best {share:.2f}")
        worst = max(worst, abs(error))
    print(f"worst median prediction error {worst:.1%} (goal: within 15%); * marks an extrapolated plan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
