"""Overhead: dataprof's number vs a bare loop on a CPU-bound loader with every core busy.

The JPEG decode + augmentation example keeps all usable CPUs busy, so any CPU
dataprof takes for itself (sampling, bookkeeping) would show as lost
throughput. Each config runs dataprof and the bare loop in alternating order
(A B, then B A, ``--repeats`` pairs), so the machine's drift over minutes
weighs on each alike; each pair's ratio is printed, then their median. The
default counts are the usable CPUs,
twice them, and 32 times them: the parent's reading of many workers' memory
is what costs most (PSS of 64 workers with CUDA PyTorch imported takes about
a second of CPU).

    python benchmarks/overhead.py [--seconds 4] [--workers 2,4,64] [--repeats 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bare import bare_rate_fresh, dataprof_rates  # noqa: E402

from dataprof.measure.environment import cpu_budget  # noqa: E402
from dataprof.results.knobs import LoaderConfig  # noqa: E402
from examples.images import JpegDataset  # noqa: E402

TARGET = "examples/images.py:JpegDataset"


def _rate(side: str, config: LoaderConfig, args: dict[str, int], opts: argparse.Namespace) -> float:
    """Samples/s of ``config``: dataprof's (``A``, a one-config sweep) or a bare loop's in a fresh process (``B``)."""
    if side == "A":
        return dataprof_rates(TARGET, args, [config], opts.batch_size, opts.seconds)[config]
    return bare_rate_fresh(TARGET, args, config, opts.batch_size, opts.seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=4, help="pairs per config")
    parser.add_argument("--workers", default="", help="worker counts (default: the usable CPUs, ×2, ×32)")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    usable = cpu_budget().usable
    counts = [int(w) for w in opts.workers.split(",")] if opts.workers else [usable, 2 * usable, 32 * usable]
    args = {"count": 128, "size": 256, "out_size": 160}
    JpegDataset(**args)  # writes the JPEG cache before anything is timed
    print(f"CPU-bound JPEG pipeline, {usable} usable CPUs")
    print(f"{'config':<16}{'pair':>5}{'order':>7}{'bare loop':>11}{'dataprof':>10}{'dataprof/bare':>15}")
    worst = float("inf")
    for workers in counts:
        config = LoaderConfig(workers, False, 2, True)
        ratios = []
        for pair in range(opts.repeats):
            order = "AB" if pair % 2 == 0 else "BA"
            rates = {side: _rate(side, config, args, opts) for side in order}
            ratios.append(rates["A"] / rates["B"])
            print(f"{config.label():<16}{pair + 1:>5}{' '.join(order):>7}{rates['B']:>11.1f}{rates['A']:>10.1f}"
                  f"{ratios[-1]:>15.3f}")
        ratio = statistics.median(ratios)
        worst = min(worst, ratio)
        print(f"{config.label():<16} median dataprof/bare = {ratio:.3f}")
    print(f"lowest median dataprof/bare = {worst:.3f} (target: at least 0.95)")
    return 0 if worst >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
