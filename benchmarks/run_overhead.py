"""Overhead of ``dataprof run``: the same training script's samples/s with and without it, in one run.

Runs alternate (plain, watched, watched, plain, …) so the machine's drift cancels; the script times its own
steady state (``_sleep_train.py``). Target: watched / plain ≥ 0.99 (median of the pairs).

    python benchmarks/run_overhead.py [--pairs 4] [--workers 2] [--sleep-ms 1] [--step-ms 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "benchmarks/_sleep_train.py"


def rate(watched: bool, args: list[str]) -> float:
    """The script's own steady-state samples/s, run plain or under ``dataprof run``."""
    prefix = [sys.executable, "-m", "dataprof", "run"] if watched else [sys.executable]
    done = subprocess.run([*prefix, SCRIPT, *args], cwd=ROOT, capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return float(json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))["samples_per_s"])


def main() -> int:
    """Print each pair and the median ratio; exit 1 under 0.99."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sleep-ms", type=float, default=1.0)
    parser.add_argument("--step-ms", type=float, default=2.0)
    opts = parser.parse_args()
    args = ["--workers", str(opts.workers), "--sleep-ms", str(opts.sleep_ms), "--step-ms", str(opts.step_ms),
            "--epochs", "3"]
    ratios = []
    print(f"{'pair':<6}{'order':<8}{'plain':>10}{'watched':>10}{'ratio':>8}")
    for pair in range(opts.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)
        rates = {watched: rate(watched, args) for watched in order}
        ratios.append(rates[True] / rates[False])
        print(f"{pair + 1:<6}{'P W' if pair % 2 == 0 else 'W P':<8}{rates[False]:>10.1f}{rates[True]:>10.1f}"
              f"{ratios[-1]:>8.3f}", flush=True)
    median = statistics.median(ratios)
    print(f"median watched/plain = {median:.3f} (target: ≥ 0.99)")
    return 0 if median >= 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())
