"""What the open log costs a file pipeline: ``np.load`` of cached ``.npy`` files with the log on (as in a trial's
warm-up and the first half second of its window), paused (the rest of a warm trial's window) and off, side by side
in one process, over ``--rounds`` fresh processes.

The trial logs the files its processes open for reading (``measure/cache/open_log.py``: an audit hook); a
pipeline that opens a small file per sample pays it on every sample it logs. Each round, in a fresh process:
passes over the files before any hook exists (``none``), then, the hook added, passes with the log on, paused and
off in turn (on, paused, off, off, paused, on, …), each timed in CPU time, the best pass of each kind kept. It
prints the log's cost (on against off: the noting and writing, measured alternately), the paused log's (the
hook's call and the switch read) and the hook's presence (off against none: passes before and after it was
added, so drift weighs on it). Target: paused and the hook's presence under 1% of a 256 KiB ``np.load``
(medians of the rounds).

    python benchmarks/open_log.py [--rounds 6] [--files 512] [--kib 256] [--passes 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dataprof.measure.sweep.trial import LOG_WINDOW_S  # noqa: E402

LOOP = r'''
import json, os, sys, tempfile, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from dataprof.measure.cache.open_log import OpenLog
folder, passes = sys.argv[2], int(sys.argv[3])
paths = sorted(os.path.join(folder, name) for name in os.listdir(folder))
for path in paths:
    np.load(path)  # cached, and numpy warmed
def one_pass():
    start = time.process_time()
    for path in paths:
        np.load(path)
    return (time.process_time() - start) / len(paths) * 1e6
best = {"none": min(one_pass() for _ in range(passes)), "on": float("inf"), "paused": float("inf"),
        "off": float("inf")}
cycle = ("on", "paused", "off", "off", "paused", "on")
for number in range(3 * passes):
    mode = cycle[number % len(cycle)]
    log = OpenLog(tempfile.mkdtemp(prefix="open-log-bench-"))
    if mode != "off":
        log.install()
    if mode == "paused":
        log.pause()
    best[mode] = min(best[mode], one_pass())
    log.uninstall()
print(json.dumps(best))
'''


def round_of(folder: str, passes: int) -> dict[str, float]:
    """CPU microseconds per ``np.load`` with no hook, with the log on, paused and off, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", LOOP, str(ROOT), folder, str(passes)], check=True,
                         capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--files", type=int, default=512)
    parser.add_argument("--kib", type=int, default=256)
    parser.add_argument("--passes", type=int, default=8)
    args = parser.parse_args()
    import numpy as np

    with tempfile.TemporaryDirectory() as folder:
        for index in range(args.files):
            np.save(Path(folder) / f"{index:05d}.npy", np.random.rand(args.kib * 1024 // 8))
        costs, paused, presences = [], [], []
        for number in range(args.rounds):
            got = round_of(folder, args.passes)
            costs.append(got["on"] / got["off"] - 1)
            paused.append(got["paused"] / got["off"] - 1)
            presences.append(got["off"] / got["none"] - 1)
            print(f"round {number + 1}: np.load {got['none']:.1f} µs before the hook, {got['off']:.1f} with it and the "
                  f"log off, {got['on']:.1f} with the log on, {got['paused']:.1f} paused: the log {costs[-1]:+.2%}, "
                  f"paused {paused[-1]:+.2%}, the hook {presences[-1]:+.2%}", flush=True)
    print(f"medians: the log on {statistics.median(costs):+.2%}, paused {statistics.median(paused):+.2%} (a warm "
          f"window after its first {LOG_WINDOW_S:g} s), the hook's presence {statistics.median(presences):+.2%} of a "
          f"{args.kib} KiB np.load (target: paused and the hook each under 1%)")


if __name__ == "__main__":
    main()
