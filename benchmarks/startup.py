"""A sweep's fixed cost: starting the host (its probe checks the dataset) and closing it.

The host imports the framework's DataLoader before it forks the probe when it
knows which framework to expect (the one given, else torch when installed), so
the probe inherits it: one import instead of the probe's and then the host's
own. Both orders run here, interleaved (A B, B A, …), on the latency example;
the medians and their ratio are printed, and the time to close the host.

    python benchmarks/startup.py [--pairs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dataprof.measure.sweep.runner import TrialRunner  # noqa: E402
from dataprof.results.settings import SweepSettings  # noqa: E402
from dataprof.results.space import SearchSpace  # noqa: E402

ARGS = {"sleep_ms": 4.0}


def start_and_close(expect: bool) -> tuple[float, float]:
    """Seconds to start the host (its probe included) and to close it, expecting the framework or not."""
    settings = SweepSettings(target="examples/latency.py:SleepDataset", space=SearchSpace(workers=(2,)),
                             batch_size=16, target_kwargs=ARGS, cwd=str(ROOT))
    runner = TrialRunner(settings)
    if not expect:
        runner.expected_framework = None  # the probe imports it, then the host does
    started = time.monotonic()
    runner.start()
    ready = time.monotonic()
    runner.close()
    return ready - started, time.monotonic() - ready


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    opts = parser.parse_args()
    starts: dict[bool, list[float]] = {True: [], False: []}
    closes: list[float] = []
    for pair in range(opts.pairs):
        for expect in (True, False) if pair % 2 == 0 else (False, True):
            start_s, close_s = start_and_close(expect)
            starts[expect].append(start_s)
            closes.append(close_s)
        print(f"pair {pair + 1}: framework imported before the probe {starts[True][-1]:.2f} s, "
              f"after it {starts[False][-1]:.2f} s", flush=True)
    before, after = statistics.median(starts[True]), statistics.median(starts[False])
    print(f"host start, median: imported before the probe {before:.2f} s, after it {after:.2f} s "
          f"(ratio {before / after:.2f}); closing the host, median {statistics.median(closes):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
