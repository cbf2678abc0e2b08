"""Accuracy of ``dataprof run``: the step time and data-wait share it reports against the truth, side by side.

The script (``_sleep_train.py``) sleeps ``s`` per sample and ``t`` per step, and times itself. Analytically
a batch of ``B`` costs ``B·s`` to load: without workers the loop waits ``B·s`` per step; with ``W``
workers a batch comes every ``B·s/W``, so the loop waits ``max(0, B·s/W − t)``. The script's own timing
(sleeps overshoot a little) is the reference dataprof must hit within 5%.

    python benchmarks/run_accuracy.py [--sleep-ms 2] [--step-ms 5] [--batch-size 16] [--workers 0,4]
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
SCRIPT = "benchmarks/_sleep_train.py"


def measure(workers: int, opts: argparse.Namespace) -> tuple[dict[str, float], dict[str, float]]:
    """(the script's own figures, dataprof run's) for one run watched by dataprof."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        done = subprocess.run([sys.executable, "-m", "dataprof", "run", "--json", str(out), SCRIPT,
                               "--workers", str(workers), "--sleep-ms", str(opts.sleep_ms), "--step-ms",
                               str(opts.step_ms), "--batch-size", str(opts.batch_size)],
                              cwd=ROOT, capture_output=True, text=True, check=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
        own = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
        loader = json.loads(out.read_text())["loaders"][0]
    return own, {"wait_share": loader["data_wait_fraction"], "step_ms_mean": loader["step_ms"]["mean"],
                 "samples_per_s": loader["samples_per_s"]}


def main() -> int:
    """Print analytic, the script's own and dataprof's figures per worker count; exit 1 past 5%."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sleep-ms", type=float, default=2.0)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", default="0,4")
    opts = parser.parse_args()
    print(f"{'workers':<8}{'figure':<14}{'analytic':>10}{'script':>10}{'dataprof':>10}{'dataprof/script':>17}")
    worst = 0.0
    for workers in (int(w) for w in opts.workers.split(",")):
        load = opts.batch_size * opts.sleep_ms
        wait = load if workers == 0 else max(0.0, load / workers - opts.step_ms)
        analytic = {"wait_share": wait / (wait + opts.step_ms), "step_ms_mean": opts.step_ms}
        own, seen = measure(workers, opts)
        for figure in ("step_ms_mean", "wait_share", "samples_per_s"):
            ratio = seen[figure] / own[figure]
            if figure != "samples_per_s":
                worst = max(worst, abs(ratio - 1))
            truth = f"{analytic[figure]:.3f}" if figure in analytic else "–"
            print(f"{workers:<8}{figure:<14}{truth:>10}{own[figure]:>10.3f}{seen[figure]:>10.3f}{ratio:>17.3f}")
    print(f"worst |dataprof/script - 1| for step and wait share = {100 * worst:.1f}% (target: within 5%)")
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
