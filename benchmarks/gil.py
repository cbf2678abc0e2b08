"""How true dataprof's GIL share is, on work whose answer is known, on a quiet machine and on a busy one.

Three pieces of work: a sleep (releases the GIL throughout: truth 1), a Python loop (holds it throughout: truth 0)
and a numpy sort (C code that releases it: near 1). Each round measures every piece with
``dataprof.measure.gil.release_share`` as the sweep's probe and ``inspect`` do, quiet, then with ``--burners``
CPU-bound processes beside it (half of them in bursts: a few ms on, a few off, as another job's loader is),
in alternating order (quiet then busy, then busy then quiet). It prints each round, then per piece and load the
median, the least and the most read, how many reads the measure said it could not tell (``GilShare.settled``
None: the most the share can be lies far above it), how many it told on the wrong side of one half (a held
piece read as released, or the reverse): the goal is none, and how many reads the sweep's rule takes as held
(``decide.search.evidence.gil_held``: even the most a round read is under 20%), the one reading that rules thread
trials out: never for a piece that releases the GIL, as often as it can for one that holds it. A CPU taken away may
lower a released piece's share (the pair cannot overlap without two CPUs) or leave it untold; it must never raise a
held piece's.

    python benchmarks/gil.py [--rounds 10] [--burners 3] [--budget 0.2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from dataprof.decide.search.evidence import GIL_HELD  # noqa: E402
from dataprof.measure.gil import release_share  # noqa: E402
from dataprof.results.threads import GilShare  # noqa: E402


def _python_loop(_: Any) -> int:
    total = 0
    for i in range(20_000):
        total += i * i
    return total


DATA = np.random.default_rng(0).random(200_000)
WORK: dict[str, tuple[Callable[[Any], Any], float]] = {
    "sleep": (lambda _: time.sleep(0.005), 1.0),
    "python loop": (_python_loop, 0.0),
    "numpy sort": (lambda _: np.sort(DATA), 1.0),
}
"""Each piece of work and its true share."""


def _burn(bursts: bool, stop: Any) -> None:
    """A CPU-bound process until ``stop`` is set: steady, or in bursts of 2–30 ms on and off."""
    rng = random.Random()
    while not stop.is_set():
        until = time.perf_counter() + (rng.uniform(0.002, 0.03) if bursts else 0.05)
        while time.perf_counter() < until:
            pass
        if bursts:
            time.sleep(rng.uniform(0.002, 0.03))


def ruled_held(share: GilShare) -> bool:
    """Whether the sweep would take ``share`` as held (``gil_held``: the most a round read is under 20%)."""
    high = share.release_high if share.release_high is not None else share.release
    return high is not None and high < GIL_HELD


def measure(busy: int, budget_s: float) -> dict[str, tuple[float, float | None, bool]]:
    """Each piece's share with ``busy`` burners beside it, the share told (None: not told), and whether the
    sweep's rule takes it as held."""
    stop = multiprocessing.Event()
    burners = [multiprocessing.Process(target=_burn, args=(n % 2 == 1, stop), daemon=True) for n in range(busy)]
    for burner in burners:
        burner.start()
    try:
        time.sleep(0.2 if busy else 0.0)
        shares = {name: release_share(call, range(64), budget_s=budget_s) for name, (call, _) in WORK.items()}
        return {name: (share.release or 0.0, share.settled, ruled_held(share)) for name, share in shares.items()}
    finally:
        stop.set()
        for burner in burners:
            burner.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--burners", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.2, help="release_share's budget_s")
    opts = parser.parse_args()
    reads: dict[str, dict[str, list[tuple[float, float | None, bool]]]] = {load: {n: [] for n in WORK}
                                                                          for load in ("quiet", "busy")}
    for number in range(opts.rounds):
        order = ("quiet", "busy") if number % 2 == 0 else ("busy", "quiet")
        for load in order:
            found = measure(opts.burners if load == "busy" else 0, opts.budget)
            for name, share in found.items():
                reads[load][name].append(share)
            print(f"round {number + 1} {load}: " + ", ".join(
                f"{n} {s:.0%}{'' if told is not None else ' (not told)'}{' (held by the rule)' if held else ''}"
                for n, (s, told, held) in found.items()),
                flush=True)
    print("\n| work | truth | load | median | least | most | not told | told on the wrong side of 50% | "
          "held by the sweep's rule |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (_, truth) in WORK.items():
        for load in ("quiet", "busy"):
            got = [share for share, _, _ in reads[load][name]]
            told = [share for _, share, _ in reads[load][name] if share is not None]
            wrong = sum(1 for share in told if (share >= 0.5) != (truth >= 0.5))
            held = sum(1 for _, _, ruled in reads[load][name] if ruled)
            print(f"| {name} | {truth:.0%} | {load} | {statistics.median(got):.0%} | {min(got):.0%} | "
                  f"{max(got):.0%} | {len(got) - len(told)} | {wrong} of {len(got)} | {held} of {len(got)} |")


if __name__ == "__main__":
    main()
