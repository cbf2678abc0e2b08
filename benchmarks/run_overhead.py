"""Overhead of ``dataprof run``: the same training script's samples/s with and without it, in one run.

Runs alternate (plain, watched, watched, plain, …) so the machine's drift cancels; the script times its own
steady state. ``--pipeline sleep`` (``_sleep_train.py``: each sample sleeps) is the analytic case;
``--pipeline jpeg`` is PyTorch's ImageNet example's shape (``examples/frameworks/imagenet_train.py``: PIL decodes
and augments JPEGs in ``--workers`` workers started afresh each epoch, a validation loader beside), timed by its
own epoch log over the epochs after the first: a real pipeline, whose forked workers pay for whatever the watch
leaves in the training's heap (a script parsed there once cost it 30%; dataprof's objects left in the
garbage collector's books, which each forked worker inherits, cost it 31%). Target: watched / plain ≥ 0.99 for
``sleep``, ≥ 0.95 for ``jpeg`` (its epochs are short, so noisier; median of the pairs).

    python benchmarks/run_overhead.py [--pipeline sleep|jpeg] [--pairs 4] [--workers 2] [--sleep-ms 1] [--step-ms 2]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {"sleep": "benchmarks/_sleep_train.py", "jpeg": "examples/frameworks/imagenet_train.py"}
TARGETS = {"sleep": 0.99, "jpeg": 0.95}
EPOCH = re.compile(r"^train epoch \S+: (\d+) steps in (\d+\.\d+) s", re.MULTILINE)


def rate(watched: bool, pipeline: str, args: list[str]) -> float:
    """The script's own steady-state rate (samples/s, or steps/s over the epochs after the first for ``jpeg``),
    run plain or under ``dataprof run``."""
    prefix = [sys.executable, "-m", "dataprof", "run"] if watched else [sys.executable]
    with tempfile.TemporaryDirectory() as work:  # the ImageNet shape writes its checkpoints where it runs
        done = subprocess.run([*prefix, str(ROOT / SCRIPTS[pipeline]), *args], cwd=work, capture_output=True,
                              text=True, check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if pipeline == "jpeg":
        epochs = [(int(steps), float(took)) for steps, took in EPOCH.findall(done.stdout)][1:]
        return sum(steps for steps, _ in epochs) / sum(took for _, took in epochs)
    return float(json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))["samples_per_s"])


def main() -> int:
    """Print each pair and the median ratio; exit 1 under 0.99."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", choices=sorted(SCRIPTS), default="sleep")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sleep-ms", type=float, default=1.0)
    parser.add_argument("--step-ms", type=float, default=2.0)
    opts = parser.parse_args()
    args = ["--workers", str(opts.workers), "--sleep-ms", str(opts.sleep_ms), "--step-ms", str(opts.step_ms),
            "--epochs", "3"] if opts.pipeline == "sleep" else ["-j", str(opts.workers), "--epochs", "12"]
    ratios = []
    print(f"{'pair':<6}{'order':<8}{'plain':>10}{'watched':>10}{'ratio':>8}")
    for pair in range(opts.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)
        rates = {watched: rate(watched, opts.pipeline, args) for watched in order}
        ratios.append(rates[True] / rates[False])
        print(f"{pair + 1:<6}{'P W' if pair % 2 == 0 else 'W P':<8}{rates[False]:>10.1f}{rates[True]:>10.1f}"
              f"{ratios[-1]:>8.3f}", flush=True)
    median, target = statistics.median(ratios), TARGETS[opts.pipeline]
    print(f"median watched/plain = {median:.3f} (target: ≥ {target})")
    return 0 if median >= target else 1


if __name__ == "__main__":
    sys.exit(main())
