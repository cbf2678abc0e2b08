"""How true ``dataprof tune``'s figures are: the training script timed by hand, in fresh processes, interleaved.

The script is ``examples/train.py`` (a small CNN trained on CPU from decoded, augmented JPEGs: the step and the
workers compete for the CPUs). ``dataprof tune`` runs it; then, for every config tune tried, the script itself is
run by hand in a fresh process (``--workers W --prefetch-factor P``), in alternating order over ``--rounds``
rounds, and its own printed images/s over the epochs after the first (as many as the trial's window holds at
tune's rate, at least three) is the truth; the headspace's truth is a
hand-written copy of the script's training loop (the same model, loader and step, epoch by epoch) that keeps the
loader's first 16 batches and replays them for the rest of each epoch, beside the headspace run as tune makes it
(``dataprof run --replay 16``). Beside each hand run,
in the same round, the run as tune makes it (``dataprof run --override KNOBS --seconds T``, the script's own
options left as tune found them): tune's figures came minutes before the hand runs, and this machine drifts by
±20% over minutes, so the interleaved trial is what says how true the trial's figure is. It prints each figure
beside its truth, then: the trial's figure at tune's pick against the hand-timed rate (goal: within 10%), the
pick against the best hand-timed config (within 5%; where tune could not tell, the best by hand against yours:
what not answering left on the table), the headspace against the hand replay (within 10%), and
what the loader-only sweep's pick trains at by hand.

    python benchmarks/tune.py [--rounds 2] [--images 256] [--budget 300] [--trial-seconds 10]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "examples/train.py"
REPLAY = r'''
import sys, time
sys.path.insert(0, "examples")
import torch
from torch import nn
from train import TinyCNN, make_loader
images, batches, seconds = int(sys.argv[1]), 16, float(sys.argv[2])
loader = make_loader(images, 128, 32, 0, False, None)
model = TinyCNN()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
kept = []
def epoch():
    if len(kept) < batches:
        for batch in loader:
            if len(kept) < batches:
                kept.append(batch)
            yield batch
        return
    for index in range(len(loader)):
        yield kept[index % len(kept)]
started = done = None
while started is None or time.perf_counter() - started < seconds:
    replayed = len(kept) == batches
    if replayed and started is None:
        started, done = time.perf_counter(), 0
    for images, labels in epoch():
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        loss.item()
        done = done + 1 if replayed else done
print(done / (time.perf_counter() - started))
'''


Config = tuple[tuple[str, object], ...]
"""A config tune ran, as the knobs it set on the script's loader (empty: the script as it is)."""


OPTIONS = {"num_workers": "--workers", "prefetch_factor": "--prefetch-factor"}
"""The training scripts' own options for the loader's knobs (examples/train.py's and examples/ddp_train.py's)."""


def flags(config: Config, persistence_matters: bool = True) -> list[str] | None:
    """The script's own options for ``config`` (its loader's knobs, as ``--workers``/``--prefetch-factor`` set
    them; its workers persist whenever it has some; ``--threads`` for thread workers); None when it has no option
    for one of them. ``persistence_matters``: workers that do not persist are a config the script cannot be given
    (not so where a run ends before an epoch does)."""
    threads = ("worker_kind", "thread") in config
    if any(k not in OPTIONS and not (k == "persistent_workers" and v) and not (k == "worker_kind" and threads)
           for k, v in config):
        return None
    if persistence_matters and dict(config).get("num_workers") and not threads \
            and not dict(config).get("persistent_workers"):
        return None
    return [word for k, v in config if k in OPTIONS for word in (OPTIONS[k], str(v))] + (["--threads"] if threads
                                                                                        else [])


def by_hand(config: Config, images: int, epochs: int) -> float:
    """The script's own iterations/s over its epochs after the first (batch 32): its images over their time, the
    harmonic mean of the epochs' rates (each epoch the same images)."""
    out = subprocess.run([sys.executable, SCRIPT, *(flags(config) or []), "--epochs", str(epochs), "--images",
                          str(images)], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    rates = [float(m.replace(",", "")) for m in re.findall(r"· ([\d,]+) images/s", out)][1:]
    return statistics.harmonic_mean(rates) / 32


def hand_epochs(rate: float, seconds: float, images: int) -> int:
    """Epochs of a hand-timed run: the first (left out), then as many as ``seconds`` of training at ``rate``
    iterations/s holds (batches of 32), at least three: a truth as long as the trial it checks."""
    return 1 + max(3, math.ceil(rate * seconds / math.ceil(images / 32)))


def as_tune_runs_it(config: Config, images: int, seconds: float, out: Path) -> float:
    """One run of the training as tune runs it (the script as given to tune, its loader's knobs overridden, ended
    after ``seconds``): the loader's iterations/s, as tune reads it."""
    override = ["--override", ",".join(f"{k}={v}" for k, v in config)] if config else []
    subprocess.run([sys.executable, "-m", "dataprof", "run", *override, "--seconds", str(seconds), "--json",
                    str(out), SCRIPT, "--epochs", "1000", "--images", str(images)],
                   cwd=ROOT, check=True, capture_output=True)
    return float(json.loads(out.read_text())["loaders"][0]["iterations_per_s"])


def replay_as_tune_runs_it(images: int, seconds: float, out: Path) -> float:
    """The headspace run as tune makes it (``dataprof run --replay 16 --seconds T``): iterations/s of its replayed
    batches."""
    subprocess.run([sys.executable, "-m", "dataprof", "run", "--replay", "16", "--seconds", str(seconds), "--json",
                    str(out), SCRIPT, "--epochs", "1000", "--images", str(images)],
                   cwd=ROOT, check=True, capture_output=True)
    return float(json.loads(out.read_text())["loaders"][0]["iterations_per_s"])


def replay_by_hand(images: int, seconds: float) -> float:
    """The script's training loop written out by hand, its loader's first 16 batches kept and replayed for the rest
    of each epoch: iterations/s of the epochs replayed."""
    out = subprocess.run([sys.executable, "-c", REPLAY, str(images), str(seconds)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def tune_document(args: list[str]) -> dict[str, Any]:
    """``dataprof tune`` run with ``args`` (its options, then the script and the script's own): its JSON document,
    its runs printed; exits when tune fails."""
    with tempfile.TemporaryDirectory() as out:
        path = Path(out) / "tune.json"
        done = subprocess.run([sys.executable, "-m", "dataprof", "tune", "--json", str(path), *args], cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode not in (0, 1, 5):  # 5: it could not tell, an answer to hold against the truth too
            sys.exit(f"dataprof tune exited {done.returncode}:\n{done.stderr[-3000:]}")
        doc: dict[str, Any] = json.loads(path.read_text())
    print("tune's runs: " + "; ".join(f"{t['role']} {name(tuple(sorted(t['config'].items())))} "
                                       f"{t['iterations_per_s'] or 0:.2f}" for t in doc["trials"]), flush=True)
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--budget", type=float, default=300.0)
    parser.add_argument("--trial-seconds", type=float, default=10.0)
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs of each hand-timed run, the first left out [default: as many as the trial's "
                             "window holds at tune's rate, at least 3 timed]")
    args = parser.parse_args()
    doc = tune_document(["--budget", str(args.budget), "--trial-seconds", str(args.trial_seconds), SCRIPT,
                         "--epochs", "1000", "--images", str(args.images)])
    tried: dict[Config, list[float]] = {}
    for trial in doc["trials"]:
        if trial["status"] == "ok" and trial["role"] != "headspace":
            tried.setdefault(tuple(sorted(trial["config"].items())), []).append(trial["iterations_per_s"])
    untimed = sorted(c for c in tried if flags(c) is None)
    if untimed:
        print("not timed by hand (examples/train.py has no option for them): " + "; ".join(map(name, untimed)))
    tried = {c: rates for c, rates in tried.items() if flags(c) is not None}
    picked = None if doc["recommended"] is None else tuple(sorted(doc["recommended"]["config"].items()))
    swept = doc.get("loader_sweep") or {}
    sweep_pick = None if swept.get("config") is None else tuple(sorted(swept["config"].items()))
    hand: dict[Config, list[float]] = {c: [] for c in tried}
    trial: dict[Config, list[float]] = {c: [] for c in tried}
    free: list[float] = []
    replayed: list[float] = []
    with tempfile.TemporaryDirectory() as out:
        for number in range(args.rounds):
            order = sorted(tried) if number % 2 == 0 else sorted(tried, reverse=True)
            for config in order:
                for which in ("hand", "trial") if number % 2 == 0 else ("trial", "hand"):
                    if which == "hand":
                        epochs = args.epochs or hand_epochs(statistics.median(tried[config]), args.trial_seconds,
                                                            args.images)
                        hand[config].append(by_hand(config, args.images, epochs))
                    else:
                        trial[config].append(as_tune_runs_it(config, args.images, args.trial_seconds,
                                                             Path(out) / "run.json"))
            for which in ("hand", "trial") if number % 2 == 0 else ("trial", "hand"):
                if which == "hand":
                    free.append(replay_by_hand(args.images, args.trial_seconds))
                else:
                    replayed.append(replay_as_tune_runs_it(args.images, args.trial_seconds, Path(out) / "run.json"))
            print(f"round {number + 1}: " + ", ".join(f"{name(c)} {hand[c][-1]:.2f} (trial {trial[c][-1]:.2f})"
                                                      for c in order)
                  + f", replay {free[-1]:.2f} (headspace run {replayed[-1]:.2f}) it/s", flush=True)
    print("\n| config | tune's search it/s | trial, interleaved it/s | by hand it/s | trial error |")
    print("|---|---|---|---|---|")
    for config in sorted(tried):
        mine, again, truth = (statistics.median(v[config]) for v in (tried, trial, hand))
        marks = (" ★" if config == picked else "") + (" (loader sweep's pick)" if config == sweep_pick else "")
        print(f"| {name(config)}{marks} | {mine:.2f} | {again:.2f} | {truth:.2f} | {again / truth - 1:+.1%} |")
    best = max(hand, key=lambda c: statistics.median(hand[c]))
    truth_free = statistics.median(free)
    errors = [ours / truth - 1 for ours, truth in zip(replayed, free, strict=True)]
    if picked is None:
        print(f"\ntune could not tell ({doc['reason']}); by hand the best ({name(best)}) is "
              f"{statistics.median(hand[best]) / statistics.median(hand[()]) - 1:+.1%} against yours")
    else:
        against = f"{statistics.median(hand[picked]) / statistics.median(hand[best]) - 1:+.1%} against" \
            if picked in hand else "not timed by hand; against"
        print(f"\npick {name(picked)}: {against} the best by hand ({name(best)})")
    searched = doc["headspace"]["iterations_per_s"]
    print(f"headspace run, interleaved, {statistics.median(replayed):.2f} against the hand replay {truth_free:.2f} "
          f"({statistics.median(errors):+.1%}, median of the rounds' errors; {searched:.2f} in tune's search)")
    yours = 1 - statistics.median(hand[()]) / truth_free
    print(f"tune's data cost {doc['data_cost_fraction']:.0%}, by hand {yours:.0%}")
    if sweep_pick is not None:
        print(f"the loader-only sweep picked {swept['label']} ({swept['samples_per_s']:,.0f} samples/s beside a dummy "
              f"model); by hand it trains at {statistics.median(hand[sweep_pick]):.2f} it/s, "
              f"{statistics.median(hand[sweep_pick]) / statistics.median(hand[best]) - 1:+.1%} against the best")


def name(config: Config) -> str:
    """A config as the table names it."""
    return ", ".join(f"{k}={v}" for k, v in config) or "yours"


if __name__ == "__main__":
    main()
