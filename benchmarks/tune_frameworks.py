"""How true ``dataprof tune`` is on the trainings people run: the four shapes in ``examples/frameworks/`` (the
PyTorch ImageNet example's, a LightningModule with a DataModule under ``Trainer.fit``, an HF ``Trainer``, a script
whose loaders timm's ``create_loader`` builds), each tuned unchanged, then timed by hand.

For each script: ``dataprof tune`` runs it (each run in its own directory); then every config tune ran that the
script's own options can set (``--workers``/``-j``, ``--prefetch-factor``, its persistence option), and
``num_workers`` 0, 1, 2, 4 and 8, are run by hand, in fresh processes, in alternating order over ``--rounds``
rounds. The truth is the script's own log: each epoch's steps and its training time (data, the workers' start and
stop included, its validation apart), over the epochs after the first, as many as tune's window holds at the
script's own rate (at least three). It prints each config's figure in tune's runs beside its hand-timed rate and
beside the run as tune makes it (the script watched with the knobs set, a window from its first batch), timed right
after the hand run (tune's own runs came minutes before, and this machine drifts by ±20% over minutes); then, per
script: tune's pick against the best hand-timed config (goal: within 5%) and that trial's figure at each config
against its hand-timed rate (within 10%). The best of several noisy configs is picked high by its noise (the
winner's curse): with two rounds or more, the best is also chosen on the even rounds alone and the pick compared
with it on the odd ones, round by round (each ratio from runs minutes apart, not from rounds the drift set apart). A
config the script's options cannot set (threads, pinning) has no hand-timed rate. A hand run keeps the validation
loader's workers as the script's user set them (``--val-workers``), as tune's runs do: tune sets the training
loader's knobs only (the HF script's one ``dataloader_num_workers`` sets both).

Each script runs in ``--variants``: ``plain``; ``eval-first``, evaluating before it trains for longer than a window
(HF's ``eval_on_start``, Lightning's ``trainer.validate`` before ``fit``, the ImageNet shape and timm validating
first), where every run of tune's must leave the evaluation loader's knobs as the script sets them (each script logs
them at each evaluation); ``drift``, each process's speed scaled at random by 0.8-1.25 (``benchmarks/_drift``), hand
runs too. Per script and variant it says whether the answer is right: the pick no slower than the script's own
config beyond 5% by hand and within 10% of the best by hand, or "cannot tell".

    python benchmarks/tune_frameworks.py [--scripts imagenet,lightning,hf,timm] [--rounds 2] [--budget 150]
        [--variants plain,eval-first,drift]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
EPOCH = re.compile(r"^train epoch \S+: (\d+) steps in (\d+\.\d+) s")
"""The scripts' line at each epoch's end: its steps and its whole training time (the workers' start and stop
included, the validation apart): what per-step times leave out at an epoch's end, the training pays."""


@dataclass(frozen=True)
class Script:
    """One training script: how its options set each knob, and the steps in one of its epochs."""

    path: str
    package: str | None
    workers: str
    prefetch: str | None
    persist: tuple[str, bool] | None
    """Its persistence option, and the value the option sets (a flag that turns persistence on or off)."""
    default_persist: bool
    steps_per_epoch: int
    val_workers: str | None = None
    """Its option for the validation loader's workers alone: a hand run keeps that loader as tune's runs have it
    (tune sets the training loader's knobs only), so both time the same training."""


SCRIPTS = {
    "imagenet": Script("examples/frameworks/imagenet_train.py", None, "-j", "--prefetch-factor",
                       ("--persistent-workers", True), False, 8, "--val-workers"),
    "lightning": Script("examples/frameworks/lightning_train.py", "lightning", "--workers", "--prefetch-factor",
                        None, True, 8, "--val-workers"),
    "hf": Script("examples/frameworks/hf_train.py", "transformers", "--workers", "--prefetch-factor",
                 ("--persistent-workers", True), False, 8),
    "timm": Script("examples/frameworks/timm_train.py", "timm", "--workers", None, ("--no-persistent-workers", False),
                   True, 8, "--val-workers"),
}
START_WORKERS = {"imagenet": 4, "lightning": 1, "hf": 0, "timm": 4}
"""Each script's own ``num_workers`` as tuned: what its user set."""
EVAL_FIRST = {"imagenet": ["--eval-first", "3", "--val-images", "256"], "lightning": ["--eval-first", "12"],
              "hf": ["--eval-first", "12"], "timm": ["--eval-first", "4"]}
"""Each script's options to evaluate before it trains, for longer than a window here."""
DRIFT = {"DATAPROF_BENCH_DRIFT": "0.8,1.25"}
"""The ``drift`` variant's environment: each process's speed drawn in 0.8-1.25 (``benchmarks/_drift``)."""
VAL_LINE = re.compile(r"^val loader: (.*)$", re.MULTILINE)
"""What the scripts log of their evaluation loader's knobs at each evaluation."""


def variant_env(variant: str) -> dict[str, str]:
    """The environment the variant's processes run in (this one's, for the drift with its site hook first)."""
    if variant != "drift":
        return dict(os.environ)
    path = os.pathsep.join(p for p in (str(ROOT / "benchmarks" / "_drift"), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **DRIFT, "PYTHONPATH": path}


def variant_args(name: str, variant: str) -> list[str]:
    """The script's own options in the variant."""
    return EVAL_FIRST[name] if variant == "eval-first" else []


def options(script: Script, config: dict[str, Any], settings: dict[str, Any]) -> list[str] | None:
    """The script's options for ``config`` (its effective knobs; those as the script has them, ``settings``, need
    none); None when they cannot set it."""
    workers = int(config.get("num_workers") or 0)
    args = [script.workers, str(workers)]
    for knob, value in config.items():
        if knob == "num_workers" or (settings.get(knob) == value and knob != "persistent_workers"):
            continue
        if knob == "prefetch_factor" and script.prefetch and workers:
            args += [script.prefetch, str(value)]
        elif knob == "persistent_workers" and workers:
            if bool(value) == script.default_persist:
                continue
            if script.persist is None or script.persist[1] != bool(value):
                return None
            args.append(script.persist[0])
        elif knob in ("prefetch_factor", "persistent_workers") and not workers:
            continue
        else:
            return None
    return args


def tune(script: Script, name: str, variant: str, budget: float, seconds: float,
         work: Path) -> tuple[dict[str, Any], list[str]]:
    """``dataprof tune`` of the script; its document, and the evaluation loader's knobs each evaluation logged."""
    out = work / f"{name}.json"
    command = [sys.executable, "-m", "dataprof", "tune", "--budget", str(budget), "--trial-seconds", str(seconds),
               "--workdir", str(work / f"{name}-runs"), "--json", str(out), str(ROOT / script.path), "--epochs",
               "1000", script.workers, str(START_WORKERS[name]), *variant_args(name, variant)]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=3600, env=variant_env(variant))
    if not out.exists():
        raise SystemExit(f"{name}: tune wrote no document (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(out.read_text()), VAL_LINE.findall(done.stdout)


def by_hand(script: Script, args: list[str], epochs: int, work: Path, variant: str = "plain",
            name: str = "") -> float | None:
    """The script run as it is, in a fresh process: its steps per second over the epochs after the first, from
    its own log (each epoch's steps over its training time, its end and the next one's start included)."""
    done = subprocess.run([sys.executable, str(ROOT / script.path), "--epochs", str(epochs), *args,
                           *variant_args(name, variant)], cwd=work, capture_output=True, text=True, timeout=900,
                          env=variant_env(variant))
    epochs = [(int(match.group(1)), float(match.group(2))) for line in done.stdout.splitlines()
              if (match := EPOCH.search(line))][1:]
    steps, took = sum(n for n, _ in epochs), sum(t for _, t in epochs)
    return steps / took if steps and took > 0 else None


def as_tune_runs_it(script: Script, doc: dict[str, Any], config: dict[str, Any], name: str, seconds: float,
                    work: Path, variant: str = "plain") -> float | None:
    """The config as one of tune's runs makes it (the script watched with the knobs set where its tuned loader is
    built, a window of ``seconds`` from its first batch, its options as tune found them), now, beside its
    hand-timed run: tune's own runs came minutes before, and the machine drifts."""
    from dataprof.measure.watch.settings import WatchSettings
    from dataprof.measure.watch.watcher import watch
    from dataprof.results.run import RunChanges

    knobs = {k: v for k, v in config.items() if doc["loader"]["settings"].get(k) != v}
    site, split = doc["loader"]["site"], doc["loader"].get("split")
    os.chdir(work)  # the sites are named from where tune ran, as its document names them
    settings = WatchSettings(target=str(ROOT / script.path), module=False, cwd=str(work), seconds=seconds,
                             seconds_from_first_batch=True, interactive=False, training=(site, split),
                             args=("--epochs", "1000", script.workers, str(START_WORKERS[name]),
                                   *variant_args(name, variant)),
                             changes=RunChanges(knobs, None, site, split=split) if knobs else None,
                             env={k: v for k, v in variant_env(variant).items() if os.environ.get(k) != v})
    run = watch(settings)
    loaders = [loader for loader in run.loaders if loader.site == site and loader.split == split]
    return loaders[0].iterations_per_s if loaders else None


def effective(doc: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    """A run's knobs: the script's own with the run's set on them."""
    return {**doc["loader"]["settings"], **trial["config"]}


def label(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(config.items()) if k in ("num_workers", "prefetch_factor",
                                                                        "persistent_workers", "worker_kind"))


def measure(name: str, script: Script, variant: str, rounds: int, budget: float, seconds: float) -> dict[str, Any]:
    """Tune one script in one variant, time its configs by hand, and print the comparison."""
    work = Path(tempfile.mkdtemp(prefix=f"dataprof-bench-{name}-{variant}-"))
    doc, evaluated = tune(script, name, variant, budget, seconds, work)
    runs: dict[str, list[float]] = {}
    configs: dict[str, dict[str, Any]] = {}
    for trial in doc["trials"]:
        if trial["role"] != "headspace" and trial["status"] == "ok":
            config = effective(doc, trial)
            configs[label(config)] = config
            runs.setdefault(label(config), []).append(trial["iterations_per_s"])
    for workers in (0, 1, 2, 4, 8):
        config = {**doc["loader"]["settings"], "num_workers": workers}
        configs.setdefault(label(config), config)
    current = statistics.median(t["iterations_per_s"] for t in doc["trials"] if t["role"] == "current"
                                and t["status"] == "ok")
    epochs = 1 + max(3, math.ceil(current * seconds / script.steps_per_epoch))
    hand: dict[str, dict[int, float]] = {}
    trial: dict[str, list[float]] = {}
    for round_ in range(rounds):
        order = list(configs.items()) if round_ % 2 == 0 else list(reversed(configs.items()))
        for key, config in order:
            args = options(script, config, doc["loader"]["settings"])
            if args is not None and script.val_workers:
                args += [script.val_workers, str(START_WORKERS[name])]
            rate = by_hand(script, args, epochs, work, variant, name) if args is not None else None
            if rate is not None:
                hand.setdefault(key, {})[round_] = rate
            beside = as_tune_runs_it(script, doc, config, name, seconds, work, variant)
            if beside is not None:
                trial.setdefault(key, []).append(beside)
    pick = None if doc["recommended"] is None else label({**doc["loader"]["settings"], **doc["recommended"]["config"]})
    best = max(hand, key=lambda key: statistics.median(hand[key].values())) if hand else None
    print(f"\n{name} ({variant}): {script.path} (tune: {doc.get('verdict')}, picked {pick or 'nothing'}; {epochs} "
          f"epochs by hand, {rounds} rounds)")
    if variant == "eval-first":
        kinds = sorted(set(evaluated))
        print(f"the evaluation loader in tune's runs, at {len(evaluated)} evaluations: {' | '.join(kinds) or 'none'}"
              f" ({'unchanged' if len(kinds) == 1 else 'CHANGED'})")
    print(f"{'config':<62} {'search':>7} {'trial':>7} {'hand':>7} {'trial error':>11}")
    errors = []
    for key in configs:
        tuned = statistics.median(runs[key]) if key in runs else None
        beside = statistics.median(trial[key]) if key in trial else None
        truth = statistics.median(hand[key].values()) if key in hand else None
        error = beside / truth - 1 if beside and truth else None
        if error is not None:
            errors.append(error)
        mark = " ★" if key == pick else ""
        print(f"{key + mark:<62} {tuned or float('nan'):>7.2f} {beside or float('nan'):>7.2f} "
              f"{truth or float('nan'):>7.2f} {'' if error is None else f'{error:+.1%}':>11}")
    short = held = None
    own = label({**doc["loader"]["settings"]})
    if pick in hand and best is not None:
        short = statistics.median(hand[pick].values()) / statistics.median(hand[best].values()) - 1
        mine = statistics.median(hand[pick].values()) / statistics.median(hand[own].values()) - 1 \
            if own in hand else None
        print(f"pick against the best by hand ({best}): {short:+.1%} (goal: within -10%); against yours: "
              f"{'?' if mine is None else f'{mine:+.1%}'} (goal: within -5%): "
              f"{'right' if short >= -0.10 and (mine is None or mine >= -0.05) else 'WRONG'}")
        held = held_out(hand, pick)
    elif doc.get("verdict") == "cannot_tell":
        print(f"cannot tell: {doc['reason']}")
    if held is not None:
        chosen, ratios = held
        print(f"held out: the best on the even rounds ({chosen}); the pick against it on the odd rounds, round by "
              f"round: {statistics.median(ratios) - 1:+.1%} ({min(ratios) - 1:+.1%} … {max(ratios) - 1:+.1%})")
    if errors:
        print(f"the trial (as tune runs it, beside the hand run) against the hand-timed: {min(errors):+.1%} … "
              f"{max(errors):+.1%} (goal: within 10%)")
    return {"pick": pick, "best": best, "pick_vs_best": short, "errors": errors, "verdict": doc.get("verdict"),
            "held_out": None if held is None else statistics.median(held[1]) - 1}


def held_out(hand: dict[str, dict[int, float]], pick: str) -> tuple[str, list[float]] | None:
    """The best config by its median over the even rounds, and the pick's rate over that config's in each odd
    round where both ran; None without two rounds of both."""
    even = {key: [rate for r, rate in rounds.items() if r % 2 == 0] for key, rounds in hand.items()}
    even = {key: rates for key, rates in even.items() if rates}
    if not even:
        return None
    chosen = max(even, key=lambda key: statistics.median(even[key]))
    ratios = [rate / hand[chosen][r] for r, rate in hand[pick].items() if r % 2 == 1 and r in hand[chosen]]
    return (chosen, ratios) if ratios else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scripts", default="imagenet,lightning,hf,timm")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--budget", type=float, default=150.0)
    parser.add_argument("--trial-seconds", type=float, default=4.0)
    parser.add_argument("--variants", default="plain", help="plain, eval-first, drift (comma-separated)")
    opts = parser.parse_args()
    for name in opts.scripts.split(","):
        script = SCRIPTS[name]
        if script.package and importlib.util.find_spec(script.package) is None:
            print(f"{name}: {script.package} is not installed: skipped")
            continue
        for variant in opts.variants.split(","):
            measure(name, script, variant, opts.rounds, opts.budget, opts.trial_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
