"""Accuracy: dataprof vs a bare DataLoader loop vs the analytic W/s, side by side.

The dataset sleeps ``s`` per sample, so ``W`` workers deliver ``W / s``
samples/s (``1 / s`` without workers) while the CPU is not saturated.

    python benchmarks/accuracy.py [--sleep-ms 10] [--seconds 4] [--framework torch|paddle]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bare import bare_rate_fresh, dataprof_rates  # noqa: E402

from dataprof.results.space import SearchSpace  # noqa: E402

TARGETS = {"torch": "examples/latency.py:SleepDataset", "paddle": "examples/paddle_latency.py:SleepDataset"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sleep-ms", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", default="0,4,8")
    parser.add_argument("--framework", choices=sorted(TARGETS), default="torch")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    workers = [int(w) for w in opts.workers.split(",")]
    space = SearchSpace(workers=tuple(workers), framework=opts.framework)
    configs = [space.config(w) for w in workers]
    args = {"sleep_ms": opts.sleep_ms}
    target = TARGETS[opts.framework]
    measured = dataprof_rates(target, args, configs, opts.batch_size, opts.seconds)
    print(f"{'config':<16}{'analytic':>10}{'bare loop':>11}{'dataprof':>10}{'dataprof/bare':>15}{'bare/analytic':>15}")
    worst = 0.0
    for config in configs:
        analytic = max(1, config.num_workers) / (opts.sleep_ms / 1000)
        bare = bare_rate_fresh(target, args, config, opts.batch_size, opts.seconds)
        ours = measured.get(config, 0.0)
        worst = max(worst, abs(ours / bare - 1))
        print(f"{config.label():<16}{analytic:>10.1f}{bare:>11.1f}{ours:>10.1f}{ours / bare:>15.3f}"
              f"{bare / analytic:>15.3f}")
    print(f"worst |dataprof/bare - 1| = {100 * worst:.1f}% (target: within 5%)")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
