"""How true ``dataprof tune --nproc-per-node``'s figures are: a DDP training timed by hand under torchrun.

The script is ``examples/ddp_train.py`` (gloo DDP on CPU, a latency-bound loader, one rank loading twice as
slowly: ``--slow-rank 1``). ``dataprof tune --nproc-per-node P`` runs it; then, for every config tune tried that
the script has options for, the script is run by hand under ``torchrun --standalone`` in fresh processes, in
alternating order over ``--rounds`` rounds, and the slowest rank's own printed steady iterations/s is the truth
(in synchronous training every rank goes at its pace). Beside each hand run, in the same round, a run as tune
makes it (the ranks launched and watched as tune launches them, the loader's knobs overridden): tune's own
figures came minutes before, and this machine drifts by ±20% over minutes. It prints each figure beside its
truth, then the trial's error at tune's pick (goal: within 10%) and the pick against the best hand-timed config
(goal: within 5%).

    python benchmarks/tune_ranks.py [--ranks 2] [--rounds 2] [--budget 120] [--steps 120]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune import Config, flags, name, tune_document  # noqa: E402

from dataprof.decide.tune import trial_of_ranks  # noqa: E402
from dataprof.distributed import watch_ranks  # noqa: E402
from dataprof.measure.watch.settings import WatchSettings  # noqa: E402
from dataprof.results.run import RunChanges  # noqa: E402

SCRIPT = "examples/ddp_train.py"


def script_flags(config: Config) -> list[str] | None:
    """The script's options for ``config`` (:func:`tune.flags`): within a run's steps no epoch ends, so whether
    its workers persist changes nothing, by hand or in tune's runs."""
    return flags(config, persistence_matters=False)


def by_hand(config: Config, ranks: int, steps: int, script_args: list[str]) -> float:
    """The slowest rank's own steady iterations/s, the script run by hand under torchrun, its warm-up past the
    batches its loader holds ready (``prefetch_factor`` per worker), as tune's window is."""
    knobs = dict(config)
    warmup = 10 + int(knobs.get("num_workers") or 0) * int(knobs.get("prefetch_factor") or 2)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(ranks), SCRIPT, *(script_flags(config) or []), "--steps", str(warmup + steps),
                           "--warmup", str(warmup), *script_args], cwd=ROOT, capture_output=True, text=True)
    rates = [float(rate) for rate in re.findall(r"· ([\d.]+) it/s", done.stdout)]
    if len(rates) != ranks:  # every rank printed its rate: an abort at the interpreter's exit after it is no matter
        raise RuntimeError(f"{name(config)} by hand: exit {done.returncode}\n{done.stderr[-2000:]}")
    return min(rates)


def as_tune_runs_it(config: Config, ranks: int, steps: int, script_args: list[str]) -> float:
    """One run of the training as tune runs it: the ranks launched and watched, the knobs overridden, ended after
    its warm-up and ``steps`` batches more; the run's figure (its slowest rank's iterations/s)."""
    knobs = dict(config)
    warmup = 10 + int(knobs.get("num_workers") or 0) * int(knobs.get("prefetch_factor") or 2)
    runs = watch_ranks(WatchSettings(target=SCRIPT, args=("--epochs", "1000", *script_args), max_steps=warmup + steps,
                                     cwd=str(ROOT), changes=RunChanges(dict(config)) if config else None), ranks)
    assert runs is not None, "interrupted"
    trial = trial_of_ranks(runs, dict(config), "candidate", None)
    if not trial.ok:
        raise RuntimeError(f"{name(config)}: {trial.error}")
    return float(trial.iterations_per_s or 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--steps", type=int, default=150,
                        help="steady batches of each run by hand and interleaved (past the warm-up); tune's runs")
    parser.add_argument("--sleep-ms", type=float, default=2.0)
    args = parser.parse_args()
    script_args = ["--slow-rank", "1", "--sleep-ms", str(args.sleep_ms)]
    doc = tune_document(["--nproc-per-node", str(args.ranks), "--budget", str(args.budget), "--trial-steps",
                         str(args.steps), SCRIPT, "--epochs", "1000", *script_args])
    tried: dict[Config, list[float]] = {}
    for trial in doc["trials"]:
        config = tuple(sorted(trial["config"].items()))
        if trial["status"] == "ok" and trial["role"] != "headspace" and script_flags(config) is not None:
            tried.setdefault(config, []).append(trial["iterations_per_s"])
    picked = tuple(sorted(doc["recommended"]["config"].items()))
    hand: dict[Config, list[float]] = {c: [] for c in tried}
    again: dict[Config, list[float]] = {c: [] for c in tried}
    for number in range(args.rounds):
        order = sorted(tried) if number % 2 == 0 else sorted(tried, reverse=True)
        for config in order:
            for which in ("hand", "trial") if number % 2 == 0 else ("trial", "hand"):
                if which == "hand":
                    hand[config].append(by_hand(config, args.ranks, args.steps, script_args))
                else:
                    again[config].append(as_tune_runs_it(config, args.ranks, args.steps, script_args))
        print(f"round {number + 1}: " + ", ".join(f"{name(c)} {hand[c][-1]:.2f} (trial {again[c][-1]:.2f})"
                                                  for c in order), flush=True)
    print(f"\n| config ({args.ranks} ranks) | tune's search it/s | trial, interleaved it/s | by hand it/s | "
          "trial error |")
    print("|---|---|---|---|---|")
    for config in sorted(tried):
        mine, trial_rate, truth = (statistics.median(v[config]) for v in (tried, again, hand))
        print(f"| {name(config)}{' ★' if config == picked else ''} | {mine:.2f} | {trial_rate:.2f} | {truth:.2f} | "
              f"{trial_rate / truth - 1:+.1%} |")
    best = max(hand, key=lambda c: statistics.median(hand[c]))
    if picked in hand:
        print(f"\npick {name(picked)}: {statistics.median(hand[picked]) / statistics.median(hand[best]) - 1:+.1%} "
              f"against the best by hand ({name(best)})")
    else:
        print(f"\npick {name(picked)}: the script has no option for it; best by hand {name(best)}")


if __name__ == "__main__":
    main()
