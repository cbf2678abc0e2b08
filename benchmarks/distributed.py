"""Distributed accuracy: each rank's rate and the aggregate against the analytic W/s, side by side.

The dataset sleeps ``s`` per sample, so with ``P`` ranks of ``W`` workers each
rank delivers ``W / s`` samples/s and the job ``P × W / s`` while the CPUs are
not saturated. The same configs run once on one rank and once with
``--nproc-per-node P`` (torch.distributed's launcher, gloo), in one run.

    python benchmarks/distributed.py [--ranks 2] [--sleep-ms 10] [--workers 0,4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = "examples/latency.py:SleepDataset"


def sweep(opts: argparse.Namespace, ranks: int) -> dict:  # type: ignore[type-arg]
    """A grid sweep's JSON, run as ``ranks`` ranks."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        command = [sys.executable, "-m", "dataprof", "sweep", TARGET, "--arg", f"sleep_ms={opts.sleep_ms}",
                   "--workers", opts.workers, "--prefetch-factor", "2", "--batch-size", str(opts.batch_size),
                   "--strategy", "grid", "--no-rules-of-thumb", "--trial-seconds", str(opts.seconds),
                   "--json", str(out)]
        if ranks > 1:
            command += ["--nproc-per-node", str(ranks)]
        subprocess.run(command, check=True, cwd=ROOT, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sleep-ms", type=float, default=10.0)
    parser.add_argument("--workers", default="0,4")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0)
    opts = parser.parse_args()
    single = {t["config"]["num_workers"]: t["samples_per_s"] for t in sweep(opts, 1)["trials"]}
    many = {t["config"]["num_workers"]: t for t in sweep(opts, opts.ranks)["trials"]}
    print(f"{'workers':<9}{'analytic/rank':>14}{'1 rank':>9}{'each of ' + str(opts.ranks) + ' ranks':>24}"
          f"{'job':>9}{'job/analytic':>14}")
    worst = 0.0
    for workers, trial in sorted(many.items()):
        analytic = max(1, workers) / (opts.sleep_ms / 1000)
        each = " ".join(f"{r['samples_per_s']:.1f}" for r in trial["ranks"])
        ratio = trial["samples_per_s"] / (opts.ranks * analytic)
        worst = max(worst, abs(ratio - 1))
        print(f"w{workers:<8}{analytic:>14.1f}{single.get(workers, 0.0):>9.1f}{each:>24}{trial['samples_per_s']:>9.1f}"
              f"{ratio:>14.3f}")
    print(f"worst |job/analytic - 1| = {100 * worst:.1f}% (the job runs at {opts.ranks} × the slowest rank)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
